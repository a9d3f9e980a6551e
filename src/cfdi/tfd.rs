//! Timbre Fiscal Digital 1.1: the PAC's stamp.

use super::CfdiError;
use super::cadena::{cadena_tfd, find_tfd};
use super::dom::Element;
use super::sello::Csd;
use super::xml;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tfd {
    /// The folio fiscal, upper case.
    pub uuid: String,
    /// `YYYY-MM-DDThh:mm:ss`.
    pub fecha_timbrado: String,
    pub rfc_prov_certif: String,
    pub leyenda: Option<String>,
    /// The comprobante's Sello, copied.
    pub sello_cfd: String,
    pub no_certificado_sat: String,
    pub sello_sat: String,
}

impl Tfd {
    /// Reads the TFD of a parsed stamped comprobante.
    pub fn from_comprobante(root: &Element) -> Option<Tfd> {
        find_tfd(root).map(Self::from_element)
    }

    pub fn from_element(e: &Element) -> Tfd {
        let a = |k: &str| e.attr(k).unwrap_or_default().to_owned();
        Tfd {
            uuid: a("UUID"),
            fecha_timbrado: a("FechaTimbrado"),
            rfc_prov_certif: a("RfcProvCertif"),
            leyenda: e.attr("Leyenda").map(str::to_owned),
            sello_cfd: a("SelloCFD"),
            no_certificado_sat: a("NoCertificadoSAT"),
            sello_sat: a("SelloSAT"),
        }
    }

    /// The TFD cadena original, from this TFD's own serialization (so it is exactly what the
    /// SAT stylesheet would read).
    pub fn cadena(&self) -> Result<String, CfdiError> {
        let root = Element::parse(&xml::tfd_to_xml(self))?;
        Ok(cadena_tfd(&root))
    }

    /// Issues a TFD for a sealed comprobante: fills `SelloCFD` from the document and signs the
    /// TFD cadena with the PAC's certificate. Used by the sandbox PAC.
    pub fn issue(
        sealed: &Element,
        uuid: &str,
        fecha_timbrado: &str,
        rfc_prov_certif: &str,
        pac: &Csd,
    ) -> Result<Tfd, CfdiError> {
        let sello_cfd = sealed
            .attr("Sello")
            .ok_or_else(|| CfdiError::Request("the comprobante has no Sello".into()))?;
        let mut tfd = Tfd {
            uuid: uuid.to_uppercase(),
            fecha_timbrado: fecha_timbrado.to_owned(),
            rfc_prov_certif: rfc_prov_certif.to_owned(),
            leyenda: None,
            sello_cfd: sello_cfd.to_owned(),
            no_certificado_sat: pac.no_certificado().to_owned(),
            sello_sat: String::new(),
        };
        tfd.sello_sat = pac.sign(&tfd.cadena()?)?;
        Ok(tfd)
    }
}

/// Splices `tfd` into the sealed XML as `cfdi:Complemento/tfd:TimbreFiscalDigital`, leaving every
/// other byte untouched (the cadena original does not change).
pub fn attach(sealed_xml: &[u8], tfd: &Tfd) -> Result<Vec<u8>, CfdiError> {
    let text = std::str::from_utf8(sealed_xml)
        .map_err(|_| CfdiError::Request("the XML is not UTF-8".into()))?;
    let root = Element::parse(sealed_xml)?;
    if find_tfd(&root).is_some() {
        return Err(CfdiError::Request(
            "the comprobante is already stamped".into(),
        ));
    }
    // The root's prefix as written (`cfdi` in everything we emit).
    let prefix = root_prefix(text)
        .ok_or_else(|| CfdiError::Request("cannot find the root element".into()))?;
    let p = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}:")
    };
    let tfd_xml = String::from_utf8(xml::tfd_element(tfd)).unwrap_or_default();
    let close_root = format!("</{p}Comprobante>");
    let close_comp = format!("</{p}Complemento>");
    let out = if let Some(pos) = text.rfind(&close_comp) {
        format!("{}  {tfd_xml}\n  {}", &text[..pos], &text[pos..])
    } else if let Some(pos) = text.rfind(&close_root) {
        format!(
            "{}  <{p}Complemento>\n    {tfd_xml}\n  </{p}Complemento>\n{}",
            text[..pos].trim_end_matches(['\n', ' ']).to_owned() + "\n",
            &text[pos..]
        )
    } else {
        return Err(CfdiError::Request(
            "the comprobante has no closing tag".into(),
        ));
    };
    Ok(out.into_bytes())
}

fn root_prefix(text: &str) -> Option<&str> {
    let mut rest = text;
    loop {
        let i = rest.find('<')?;
        rest = &rest[i + 1..];
        if rest.starts_with('?') || rest.starts_with('!') {
            continue;
        }
        let end = rest.find(|c: char| c.is_whitespace() || c == '>' || c == '/')?;
        let qname = &rest[..end];
        return Some(qname.rsplit_once(':').map_or("", |(p, _)| p));
    }
}
