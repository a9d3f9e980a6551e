//! CFDI 4.0: the document model, amounts, XML, cadena original, Sello and verification.
//!
//! No database and no HTTP here. The pipeline is `InvoiceRequest` → [`build`] (every amount
//! computed once) → [`xml::to_xml`] → parse → [`validate::check_amounts`] (what a PAC would
//! reject) → [`cadena::cadena_comprobante`] → [`Csd::sign`] → sealed XML. [`seal`] runs it all.
//! A tipo P (complemento de pago) takes the same path; [`pagos`] computes its Pagos 2.0 amounts
//! and [`validate_pagos`] checks them.

pub mod build;
pub mod cadena;
pub mod catalogs;
mod checks;
pub mod dom;
pub mod fiscal;
mod lines;
pub mod model;
pub mod money;
pub mod pagos;
pub mod request;
pub mod rfc;
pub mod sello;
pub mod tfd;
pub mod validate;
pub mod validate_pagos;
pub mod verify;
pub mod xml;

use rust_decimal::Decimal;

pub use build::build;
pub use pagos::{DocTraslado, DoctoData, PagoData};
pub use request::{
    EmisorData, InformacionGlobalData, InvoiceRequest, LineData, ReceptorData, RelacionadosData,
    RetencionData, TaxTreatment, TipoComprobante,
};
pub use rfc::Rfc;
pub use sello::{Certificate, Csd};
pub use tfd::Tfd;
pub use validate::Problem;

/// Why a comprobante could not be built, sealed or read.
#[derive(Debug, thiserror::Error)]
pub enum CfdiError {
    /// The request itself is wrong: the message says which field and why.
    #[error("invalid invoice request: {0}")]
    Request(String),
    /// The built document breaks a rule a PAC checks (never expected from our builder; kept as a
    /// guard so no stamp is spent on a sure rejection).
    #[error("the document would be rejected: {}", join(.0))]
    Rejected(Vec<Problem>),
    #[error(transparent)]
    Xml(#[from] dom::XmlError),
    #[error(transparent)]
    Cadena(#[from] cadena::CadenaError),
    /// The CSD cannot be used: unreadable, wrong password, mismatched pair, expired.
    #[error("CSD: {0}")]
    Csd(String),
}

fn join(p: &[Problem]) -> String {
    p.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A sealed comprobante: the exact bytes to send to the PAC.
#[derive(Debug, Clone)]
pub struct Sealed {
    pub xml: Vec<u8>,
    pub cadena: String,
    pub sello: String,
    pub total: Decimal,
    pub moneda: String,
}

/// Builds, validates and seals `req` with `csd`.
pub fn seal(req: &InvoiceRequest, csd: &Csd) -> Result<Sealed, CfdiError> {
    let cert = csd.certificate();
    if let Some(holder) = csd.rfc()
        && holder != req.emisor.rfc.as_str()
    {
        return Err(CfdiError::Csd(format!(
            "certificate {} belongs to {holder}, not to the emisor {}",
            cert.no_certificado(),
            req.emisor.rfc
        )));
    }
    if !cert.valid_at_local(req.fecha) {
        return Err(CfdiError::Csd(format!(
            "certificate {} is not valid at Fecha {} (valid {} to {})",
            cert.no_certificado(),
            req.fecha,
            cert.not_before(),
            cert.not_after()
        )));
    }
    let mut c = build(req, csd.no_certificado())?;
    c.certificado = Some(cert.base64().to_owned());
    // The Sello is not part of the cadena: write the document once with a placeholder, derive
    // the cadena from those bytes, then put the signature in the placeholder's place.
    c.sello = Some(SELLO_PLACEHOLDER.to_owned());
    let mut xml = xml::to_xml(&c);
    let root = dom::Element::parse(&xml)?;
    let problems = validate::check_amounts(&root);
    if !problems.is_empty() {
        return Err(CfdiError::Rejected(problems));
    }
    let cadena = cadena::cadena_comprobante(&root)?;
    let sello = csd.sign(&cadena)?;
    let marker = format!("Sello=\"{SELLO_PLACEHOLDER}\"");
    let at = find(&xml, marker.as_bytes())
        .ok_or_else(|| CfdiError::Request("internal: Sello placeholder not found".into()))?;
    // Base64 needs no XML escaping.
    xml.splice(at + 7..at + marker.len() - 1, sello.bytes());
    Ok(Sealed {
        xml,
        cadena,
        sello,
        total: c.total,
        moneda: c.moneda,
    })
}

/// Stands in for the Sello while the cadena is derived; it is the first `Sello="` in the
/// document (the root element's), and user text cannot forge it because quotes are escaped.
const SELLO_PLACEHOLDER: &str = "SELLO";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
