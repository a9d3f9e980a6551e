//! Verifying any CFDI 4.0: structure, sums, Sello against the embedded certificate, and the
//! TFD when stamped. Used by `autofactura cfdi verify` and by the sandbox PAC.

use chrono::NaiveDateTime;

use super::cadena::{cadena_comprobante, cadena_tfd, find_tfd};
use super::dom::{Element, NS_CFDI};
use super::sello::Certificate;
use super::validate::{Problem, check_amounts};

/// What to check besides the document itself.
#[derive(Debug, Default)]
pub struct VerifyOptions<'a> {
    /// Certificates that may have signed a TFD (`SelloSAT`), by NoCertificadoSAT.
    pub tfd_certs: &'a [Certificate],
}

/// The outcome of a verification: valid when `problems` is empty.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub problems: Vec<Problem>,
    /// Facts worth showing that are not problems (e.g. a TFD certificate we cannot check).
    pub notes: Vec<String>,
    pub cadena: Option<String>,
    pub uuid: Option<String>,
    pub fecha_timbrado: Option<String>,
    pub no_certificado: Option<String>,
    pub rfc_emisor: Option<String>,
    pub fecha: Option<String>,
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
    fn problem(&mut self, code: Option<&'static str>, msg: impl Into<String>) {
        self.problems.push(Problem::new(code, msg));
    }
}

const REQUIRED_ROOT: &[&str] = &[
    "Version",
    "Fecha",
    "Sello",
    "NoCertificado",
    "Certificado",
    "SubTotal",
    "Moneda",
    "Total",
    "TipoDeComprobante",
    "Exportacion",
    "LugarExpedicion",
];

/// Parses a `Fecha`-style local timestamp.
pub fn parse_fecha(s: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").ok()
}

fn structure(root: &Element, r: &mut Report) {
    for a in REQUIRED_ROOT {
        if root.attr(a).is_none_or(str::is_empty) {
            r.problem(None, format!("Comprobante@{a} is missing"));
        }
    }
    if let Some(v) = root.attr("Version")
        && v != "4.0"
    {
        r.problem(None, format!("Comprobante@Version is {v}, expected 4.0"));
    }
    if let Some(f) = root.attr("Fecha")
        && parse_fecha(f).is_none()
    {
        r.problem(None, format!("Fecha `{f}` is not YYYY-MM-DDThh:mm:ss"));
    }
    let required = [
        ("Emisor", &["Rfc", "Nombre", "RegimenFiscal"][..]),
        (
            "Receptor",
            &[
                "Rfc",
                "Nombre",
                "DomicilioFiscalReceptor",
                "RegimenFiscalReceptor",
                "UsoCFDI",
            ][..],
        ),
    ];
    for (el, attrs) in required {
        match root.child(NS_CFDI, el) {
            None => r.problem(None, format!("cfdi:{el} is missing")),
            Some(e) => {
                for a in attrs {
                    if e.attr(a).is_none() {
                        r.problem(None, format!("{el}@{a} is missing"));
                    }
                }
            }
        }
    }
    let conceptos = root.path(NS_CFDI, &["Conceptos", "Concepto"]);
    if conceptos.is_empty() {
        r.problem(None, "cfdi:Conceptos has no cfdi:Concepto");
    }
    for (i, c) in conceptos.iter().enumerate() {
        for a in [
            "ClaveProdServ",
            "Cantidad",
            "ClaveUnidad",
            "Descripcion",
            "ValorUnitario",
            "Importe",
            "ObjetoImp",
        ] {
            if c.attr(a).is_none() {
                r.problem(None, format!("concepto {}: @{a} is missing", i + 1));
            }
        }
    }
}

/// Verifies `xml`. Never fails: every reason it is not valid is a problem in the report.
pub fn verify(xml: &[u8], opts: &VerifyOptions<'_>) -> Report {
    match Element::parse(xml) {
        Ok(root) => verify_parsed(&root, opts),
        Err(e) => {
            let mut r = Report::default();
            r.problem(None, e.to_string());
            r
        }
    }
}

/// [`verify`] on a document already parsed (the caller needs the tree too).
pub fn verify_parsed(root: &Element, opts: &VerifyOptions<'_>) -> Report {
    let mut r = Report::default();
    if !root.is(NS_CFDI, "Comprobante") {
        r.problem(
            None,
            "the root element is not cfdi:Comprobante of CFDI 4.0 (http://www.sat.gob.mx/cfd/4)",
        );
        return r;
    }
    r.fecha = root.attr("Fecha").map(str::to_owned);
    r.no_certificado = root.attr("NoCertificado").map(str::to_owned);
    r.rfc_emisor = root.child_attr(NS_CFDI, "Emisor", "Rfc").map(str::to_owned);
    structure(root, &mut r);
    r.problems.extend(check_amounts(root));
    check_sello(root, &mut r);
    check_tfd(root, opts, &mut r);
    r
}

fn check_sello(root: &Element, r: &mut Report) {
    let cadena = match cadena_comprobante(root) {
        Ok(c) => c,
        Err(e) => {
            r.problem(None, e.to_string());
            return;
        }
    };
    r.cadena = Some(cadena.clone());
    let Some(cert_b64) = root.attr("Certificado") else {
        return;
    };
    let cert = match Certificate::from_base64(cert_b64) {
        Ok(c) => c,
        Err(e) => {
            r.problem(None, format!("Certificado: {e}"));
            return;
        }
    };
    if let Some(no) = root.attr("NoCertificado")
        && no != cert.no_certificado()
    {
        r.problem(
            None,
            format!(
                "NoCertificado {no} is not the serial of the embedded certificate, {}",
                cert.no_certificado()
            ),
        );
    }
    if let (Some(rfc), Some(cert_rfc)) = (r.rfc_emisor.clone(), cert.rfc())
        && rfc != cert_rfc
    {
        r.problem(
            None,
            format!("Emisor Rfc {rfc} is not the certificate holder's RFC, {cert_rfc}"),
        );
    }
    if let Some(f) = root.attr("Fecha").and_then(parse_fecha)
        && !cert.valid_at_local(f)
    {
        r.problem(
            None,
            format!(
                "certificate {} was not valid at Fecha {f} (valid {} to {})",
                cert.no_certificado(),
                cert.not_before(),
                cert.not_after()
            ),
        );
    }
    let sello = root.attr("Sello").unwrap_or_default();
    match cert.verify(&cadena, sello) {
        Ok(true) => {}
        Ok(false) => r.problem(
            Some("CFDI40102"),
            "the Sello does not verify against the embedded certificate over the cadena original (the document was altered or sealed with another key)",
        ),
        Err(e) => r.problem(None, format!("cannot verify the Sello: {e}")),
    }
}

fn check_tfd(root: &Element, opts: &VerifyOptions<'_>, r: &mut Report) {
    let Some(tfd) = find_tfd(root) else { return };
    r.uuid = tfd.attr("UUID").map(str::to_owned);
    r.fecha_timbrado = tfd.attr("FechaTimbrado").map(str::to_owned);
    if tfd.attr("Version") != Some("1.1") {
        r.problem(None, "TimbreFiscalDigital@Version is not 1.1");
    }
    if tfd.attr("SelloCFD") != root.attr("Sello") {
        r.problem(None, "the TFD's SelloCFD is not the comprobante's Sello: the stamp belongs to another document");
    }
    let no = tfd.attr("NoCertificadoSAT").unwrap_or_default();
    match opts.tfd_certs.iter().find(|c| c.no_certificado() == no) {
        Some(cert) => {
            let cadena = cadena_tfd(tfd);
            if !cert
                .verify(&cadena, tfd.attr("SelloSAT").unwrap_or_default())
                .unwrap_or(false)
            {
                r.problem(
                    None,
                    format!("the TFD's SelloSAT does not verify with certificate {no}"),
                );
            }
        }
        None => r.notes.push(format!(
            "SelloSAT not checked: certificate {no} is not among the known PAC/SAT certificates"
        )),
    }
}
