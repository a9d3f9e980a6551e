//! The SAT status service (Consulta CFDI): `Estado`, `EsCancelable`, `EstatusCancelacion`.
//!
//! SOAP 1.1 `Consulta(expresionImpresa)` at `ConsultaCFDIService.svc`. `CodigoEstatus` is read
//! first: with a bad expression SAT has answered `N - 601` next to `Estado: Vigente`.

use quick_xml::escape::escape;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::http_status;
use crate::cfdi::dom::{Element, NS_CFDI, Node};
use crate::cfdi::money::parse_amount;

/// SAT production; the test service is `https://pruebacfdiconsultaqr.cloudapp.net/...`.
pub const SAT_STATUS_PRODUCTION: &str =
    "https://consultaqr.facturaelectronica.sat.gob.mx/ConsultaCFDIService.svc";
pub const SOAP_ACTION: &str = "http://tempuri.org/IConsultaCFDIService/Consulta";

/// What identifies a CFDI to the status service (the QR's expresión impresa).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusQuery {
    pub uuid: String,
    pub rfc_emisor: String,
    pub rfc_receptor: String,
    /// `Total` as written in the XML.
    pub total: String,
    /// The last 8 characters of the comprobante's `Sello`.
    pub sello_tail: String,
}

impl StatusQuery {
    /// Reads the query out of a stamped comprobante.
    pub fn from_stamped_xml(xml: &[u8]) -> Result<StatusQuery, String> {
        let root = Element::parse(xml).map_err(|e| e.to_string())?;
        let tfd = crate::cfdi::Tfd::from_comprobante(&root).ok_or("the CFDI is not stamped")?;
        let rfc = |el: &str| {
            root.child_attr(NS_CFDI, el, "Rfc")
                .map(str::to_owned)
                .ok_or_else(|| format!("cfdi:{el}@Rfc is missing"))
        };
        let sello = root.attr("Sello").unwrap_or_default();
        Ok(StatusQuery {
            uuid: tfd.uuid,
            rfc_emisor: rfc("Emisor")?,
            rfc_receptor: rfc("Receptor")?,
            total: root.attr("Total").unwrap_or_default().to_owned(),
            sello_tail: sello[sello.len().saturating_sub(8)..].to_owned(),
        })
    }

    /// The expresión impresa (docs/cfdi-rules.md §8).
    pub fn expression(&self) -> String {
        format!(
            "https://verificacfdi.facturaelectronica.sat.gob.mx/default.aspx?id={}&re={}&rr={}&tt={}&fe={}",
            self.uuid,
            escape(&self.rfc_emisor),
            escape(&self.rfc_receptor),
            format_tt(&self.total),
            self.sello_tail
        )
    }
}

/// `tt`: up to 6 decimals, trailing zeros removed, at least one digit after the point.
pub fn format_tt(total: &str) -> String {
    let Some(d) = parse_amount(total) else {
        return total.to_owned();
    };
    let s = d.round_dp(6).normalize().to_string();
    if s.contains('.') { s } else { format!("{s}.0") }
}

/// Parses the `tt` of an expression back into an amount.
pub fn parse_tt(tt: &str) -> Option<Decimal> {
    parse_amount(tt)
}

/// The four fields of the SAT answer, verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SatStatus {
    pub codigo_estatus: String,
    pub estado: String,
    pub es_cancelable: String,
    pub estatus_cancelacion: String,
    pub validacion_efos: Option<String>,
}

impl SatStatus {
    pub fn is_cancelled(&self) -> bool {
        self.estado == "Cancelado"
    }
}

/// The result of a status query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusOutcome {
    /// `CodigoEstatus` starts with `S - `: the other fields mean something.
    Found(SatStatus),
    /// `N - 601` (bad expression) or `N - 602` (not found); the other fields are noise. A CFDI
    /// stamped minutes ago can read `N - 602` until SAT ingests it.
    NotFound { codigo_estatus: String },
    /// The service did not answer; say "indeterminado", cache nothing. `http_status`: the
    /// answer's, when one came, for the attempt log.
    Unavailable {
        reason: String,
        http_status: Option<u16>,
    },
}

impl StatusOutcome {
    pub(crate) fn unavailable(reason: impl Into<String>, http_status: Option<u16>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            http_status,
        }
    }
}

/// The SOAP request body for `q`.
pub fn consulta_envelope(q: &StatusQuery) -> String {
    format!(
        concat!(
            r#"<?xml version="1.0" encoding="utf-8"?>"#,
            r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:tem="http://tempuri.org/">"#,
            r#"<soapenv:Header/><soapenv:Body><tem:Consulta><tem:expresionImpresa><![CDATA[{}]]></tem:expresionImpresa>"#,
            r#"</tem:Consulta></soapenv:Body></soapenv:Envelope>"#
        ),
        q.expression()
    )
}

/// The first descendant named `name`, any namespace.
pub(crate) fn find<'a>(e: &'a Element, name: &str) -> Option<&'a Element> {
    if e.name == name {
        return Some(e);
    }
    e.children.iter().find_map(|n| match n {
        Node::Element(c) => find(c, name),
        Node::Text(_) => None,
    })
}

pub(crate) fn text_of(e: &Element, name: &str) -> Option<String> {
    find(e, name).map(|x| x.text_content().trim().to_owned())
}

/// Reads a status out of any XML answer that carries the SAT fields (the Consulta response,
/// Finkok's `get_sat_status`). `CodigoEstatus` decides before anything else.
pub fn parse_status(xml: &[u8]) -> StatusOutcome {
    let root = match Element::parse(xml) {
        Ok(r) => r,
        Err(e) => {
            return StatusOutcome::unavailable(format!("unreadable answer: {e}"), None);
        }
    };
    if let Some(fault) = find(&root, "Fault") {
        let reason = format!("SOAP fault: {}", fault.text_content().trim());
        return StatusOutcome::unavailable(reason, None);
    }
    let Some(codigo) = text_of(&root, "CodigoEstatus") else {
        return StatusOutcome::unavailable("the answer has no CodigoEstatus", None);
    };
    if !codigo.starts_with("S - ") {
        return StatusOutcome::NotFound {
            codigo_estatus: codigo,
        };
    }
    StatusOutcome::Found(SatStatus {
        codigo_estatus: codigo,
        estado: text_of(&root, "Estado").unwrap_or_default(),
        es_cancelable: text_of(&root, "EsCancelable").unwrap_or_default(),
        estatus_cancelacion: text_of(&root, "EstatusCancelacion").unwrap_or_default(),
        validacion_efos: text_of(&root, "ValidacionEFOS")
            .or_else(|| text_of(&root, "VerificacionEFOS")),
    })
}

/// A client of the SAT status service.
#[derive(Debug, Clone)]
pub struct SatStatusClient {
    http: reqwest::Client,
    url: String,
}

impl SatStatusClient {
    pub fn new(http: reqwest::Client, url: String) -> Self {
        Self { http, url }
    }

    pub async fn query(&self, q: &StatusQuery) -> StatusOutcome {
        let res = self
            .http
            .post(&self.url)
            .header("Content-Type", "text/xml; charset=utf-8")
            .header("SOAPAction", SOAP_ACTION)
            .body(consulta_envelope(q))
            .send()
            .await;
        let res = match res {
            Ok(r) => r,
            Err(e) => return StatusOutcome::unavailable(e.to_string(), None),
        };
        let status = res.status();
        match res.bytes().await {
            Ok(body) if status.is_success() => parse_status(&body),
            Ok(_) => StatusOutcome::unavailable(format!("HTTP {status}"), http_status(status)),
            Err(e) => StatusOutcome::unavailable(e.to_string(), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tt_keeps_one_decimal_at_least() {
        assert_eq!(format_tt("0.990000"), "0.99");
        assert_eq!(format_tt("1.00"), "1.0");
        assert_eq!(format_tt("1160.00"), "1160.0");
        assert_eq!(format_tt("578.84"), "578.84");
    }

    #[test]
    fn codigo_estatus_is_read_before_estado() {
        let xml = r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><ConsultaResponse xmlns="http://tempuri.org/"><ConsultaResult xmlns:a="http://schemas.datacontract.org/2004/07/Sat.Cfdi.Negocio.ConsultaCfdi.Servicio"><a:CodigoEstatus>N - 601: La expresión impresa proporcionada no es válida.</a:CodigoEstatus><a:EsCancelable>Cancelable sin aceptación</a:EsCancelable><a:Estado>Vigente</a:Estado><a:EstatusCancelacion/></ConsultaResult></ConsultaResponse></s:Body></s:Envelope>"#;
        assert_eq!(
            parse_status(xml.as_bytes()),
            StatusOutcome::NotFound {
                codigo_estatus: "N - 601: La expresión impresa proporcionada no es válida.".into()
            }
        );
    }
}
