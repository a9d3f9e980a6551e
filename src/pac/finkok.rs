//! Finkok: SOAP 1.1 over HTTP. No idempotency key; Finkok deduplicates by content.
//!
//! A repeated `stamp` answers incidencia `307` with `xml` and `UUID` that may be empty, and
//! `stamped` may answer `603` for some seconds after a stamp, so after a `307` without XML the
//! adapter polls `stamped` with backoff for `stamped_wait` seconds before giving up (`Unknown`:
//! the document *is* stamped, the XML is just not reachable yet).

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use quick_xml::escape::escape;

use super::sat::{StatusOutcome, StatusQuery, find, parse_status, text_of};
use super::{
    CancelOutcome, CancelRequest, Failure, PacConfig, PacError, Recovery, Stamp, StampOutcome,
    Transport, base_url, http_client, http_status, refused_status, retry_after, transport_error,
};
use crate::cfdi::dom::{Element, Node};

pub const NS_STAMP: &str = "http://facturacion.finkok.com/stamp";
pub const NS_CANCEL: &str = "http://facturacion.finkok.com/cancel";
pub const NS_UTILITIES: &str = "http://facturacion.finkok.com/utilities";

/// The emisor's CSD in PEM, base64-encoded, as Finkok's `cancel` takes it.
#[derive(Clone)]
pub struct CancelCsd {
    pub cer_pem_b64: String,
    pub key_pem_b64: String,
}

pub struct FinkokClient {
    http: reqwest::Client,
    base: String,
    user: String,
    password: String,
    stamped_wait: Duration,
    cancel_csd: Option<CancelCsd>,
}

enum Soap {
    /// The parsed SOAP body of a 200 answer.
    Body(Element),
    /// `http_status` in both: the answer's, when one came, for the attempt log.
    Refused {
        reason: String,
        retry_after: Option<Duration>,
        http_status: Option<u16>,
    },
    Lost {
        reason: String,
        http_status: Option<u16>,
    },
}

impl Soap {
    fn lost(reason: String, http_status: Option<u16>) -> Self {
        Self::Lost {
            reason,
            http_status,
        }
    }

    /// The body, or the outcome of an operation that got none: refused is retryable, lost is
    /// unknown.
    fn body_or<T: Failure>(self) -> Result<Element, T> {
        match self {
            Soap::Body(r) => Ok(r),
            Soap::Refused {
                reason,
                retry_after,
                http_status,
            } => Err(T::refused(reason, retry_after, http_status)),
            Soap::Lost {
                reason,
                http_status,
            } => Err(T::lost(reason, http_status)),
        }
    }

    /// The body, or why there is none (for lookups, where refused and lost are both just
    /// "no answer").
    fn body(self) -> Result<Element, (String, Option<u16>)> {
        match self {
            Soap::Body(r) => Ok(r),
            Soap::Refused {
                reason,
                http_status,
                ..
            }
            | Soap::Lost {
                reason,
                http_status,
            } => Err((reason, http_status)),
        }
    }
}

/// One incidencia: `CodigoError` and `MensajeIncidencia`.
fn incidencia(result: &Element) -> Option<(String, String)> {
    let inc = find(result, "Incidencia")?;
    Some((
        text_of(inc, "CodigoError").unwrap_or_default(),
        text_of(inc, "MensajeIncidencia").unwrap_or_default(),
    ))
}

fn all_named<'a>(e: &'a Element, name: &str, out: &mut Vec<&'a Element>) {
    if e.name == name {
        out.push(e);
    }
    for n in &e.children {
        if let Node::Element(c) = n {
            all_named(c, name, out);
        }
    }
}

impl FinkokClient {
    pub fn new(cfg: &PacConfig) -> Result<FinkokClient, PacError> {
        let base = base_url(cfg, "finkok")?;
        let (Some(user), Some(password)) = (&cfg.user, &cfg.password) else {
            return Err(PacError::Config(
                "Finkok needs `user` and `password`".into(),
            ));
        };
        Ok(FinkokClient {
            http: http_client(cfg)?,
            base,
            user: user.clone(),
            password: password.clone(),
            stamped_wait: Duration::from_secs(cfg.stamped_wait),
            cancel_csd: None,
        })
    }

    /// Finkok's `cancel` signs with the emisor's CSD sent along; without it, cancel is refused.
    pub fn with_cancel_csd(mut self, csd: CancelCsd) -> Self {
        self.cancel_csd = Some(csd);
        self
    }

    fn envelope(&self, ns: &str, op: &str, params: &str) -> String {
        format!(
            concat!(
                r#"<?xml version="1.0" encoding="UTF-8"?>"#,
                r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:f="{ns}">"#,
                r#"<soapenv:Header/><soapenv:Body><f:{op}>{params}<f:username>{u}</f:username><f:password>{p}</f:password></f:{op}>"#,
                r#"</soapenv:Body></soapenv:Envelope>"#
            ),
            ns = ns,
            op = op,
            params = params,
            u = escape(&self.user),
            p = escape(&self.password),
        )
    }

    async fn call(&self, service: &str, ns: &str, op: &str, params: &str) -> Soap {
        let res = self
            .http
            .post(format!("{}/servicios/soap/{service}", self.base))
            .header("Content-Type", "text/xml; charset=utf-8")
            .header("SOAPAction", format!("{ns}/{op}"))
            .body(self.envelope(ns, op, params))
            .send()
            .await;
        let res = match res {
            Ok(r) => r,
            Err(e) => {
                return match transport_error(&e) {
                    Transport::Refused {
                        reason,
                        http_status,
                    } => Soap::Refused {
                        reason,
                        retry_after: None,
                        http_status,
                    },
                    Transport::Lost(reason) => Soap::lost(reason, None),
                };
            }
        };
        let status = res.status();
        let headers = res.headers().clone();
        let body = match res.bytes().await {
            Ok(b) => b,
            Err(e) => return Soap::lost(format!("the answer was cut off: {e}"), None),
        };
        if refused_status(status) {
            return Soap::Refused {
                reason: format!("HTTP {status}"),
                retry_after: retry_after(&headers),
                http_status: http_status(status),
            };
        }
        let root = match Element::parse(&body) {
            Ok(r) => r,
            Err(e) => {
                let reason = format!("HTTP {status} with an unreadable body: {e}");
                return Soap::lost(reason, http_status(status));
            }
        };
        if let Some(fault) = find(&root, "Fault") {
            // The fault's text is Finkok's; the status is not in it (nor in the log).
            let reason = format!("SOAP fault: {}", fault.text_content().trim());
            return Soap::lost(reason, None);
        }
        if !status.is_success() {
            return Soap::lost(format!("HTTP {status}"), http_status(status));
        }
        Soap::Body(root)
    }

    fn xml_param(xml: &[u8]) -> String {
        format!("<f:xml>{}</f:xml>", B64.encode(xml))
    }

    /// `stamp(xml)`.
    pub async fn stamp(&self, xml: &[u8]) -> StampOutcome {
        let root = match self
            .call("stamp", NS_STAMP, "stamp", &Self::xml_param(xml))
            .await
            .body_or()
        {
            Ok(r) => r,
            Err(out) => return out,
        };
        let Some(result) = find(&root, "stampResult") else {
            return StampOutcome::unknown("the answer has no stampResult", None);
        };
        let stamped_xml = text_of(result, "xml").unwrap_or_default();
        match incidencia(result) {
            Some((code, message)) if code == "307" => {
                if !stamped_xml.is_empty()
                    && let Ok(stamp) = Stamp::from_xml(stamped_xml.into_bytes())
                {
                    let same_content = stamp.belongs_to(xml);
                    return StampOutcome::AlreadyStamped {
                        stamp,
                        same_content,
                    };
                }
                // 307 with an empty body: the stamp exists; `stamped` catches up within seconds.
                match self.poll_stamped(xml).await {
                    Recovery::Found(stamp) => StampOutcome::AlreadyStamped {
                        same_content: stamp.belongs_to(xml),
                        stamp,
                    },
                    Recovery::NotFound => StampOutcome::unknown(
                        format!("{code} {message}, and `stamped` still answers 603"),
                        None,
                    ),
                    Recovery::Unresolved {
                        reason,
                        http_status,
                    } => StampOutcome::unknown(
                        format!("{code} {message}; stamped: {reason}"),
                        http_status,
                    ),
                }
            }
            Some((code, message)) if !code.is_empty() => StampOutcome::rejected(code, message),
            _ => match Stamp::from_xml(stamped_xml.into_bytes()) {
                Ok(s) => StampOutcome::Stamped(s),
                Err(e) => StampOutcome::unknown(format!("no incidencia and no stamp: {e}"), None),
            },
        }
    }

    /// One `stamped(xml)` call.
    async fn stamped_once(&self, xml: &[u8]) -> Recovery {
        let root = match self
            .call("stamp", NS_STAMP, "stamped", &Self::xml_param(xml))
            .await
            .body()
        {
            Ok(r) => r,
            Err((reason, http_status)) => return Recovery::unresolved(reason, http_status),
        };
        let Some(result) = find(&root, "stampedResult") else {
            return Recovery::unresolved("the answer has no stampedResult", None);
        };
        let stamped_xml = text_of(result, "xml").unwrap_or_default();
        if !stamped_xml.is_empty() {
            return match Stamp::from_xml(stamped_xml.into_bytes()) {
                Ok(s) => Recovery::Found(s),
                Err(reason) => Recovery::unresolved(reason, None),
            };
        }
        match incidencia(result) {
            Some((code, _)) if code == "603" => Recovery::NotFound,
            Some((code, message)) => Recovery::unresolved(format!("{code} {message}"), None),
            None => Recovery::unresolved("neither a stamp nor an incidencia", None),
        }
    }

    /// Polls `stamped` with backoff until it answers or `stamped_wait` passes.
    async fn poll_stamped(&self, xml: &[u8]) -> Recovery {
        let deadline = Instant::now() + self.stamped_wait;
        let mut pause = Duration::from_millis(500);
        loop {
            let r = self.stamped_once(xml).await;
            if matches!(r, Recovery::Found(_)) || Instant::now() + pause > deadline {
                return r;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(4));
        }
    }

    /// Finkok's lookup by content: `stamped`, polled through its lag. `NotFound` only once the
    /// lag has passed.
    pub async fn recover_by_content(&self, xml: &[u8]) -> Recovery {
        self.poll_stamped(xml).await
    }

    /// `get_xml(uuid, taxpayer_id)` (utilities; the last 3 months only).
    pub async fn recover_by_uuid(&self, uuid: &str, rfc_emisor: &str) -> Recovery {
        let params = format!(
            "<f:uuid>{}</f:uuid><f:taxpayer_id>{}</f:taxpayer_id>",
            escape(uuid),
            escape(rfc_emisor)
        );
        let root = match self
            .call("utilities", NS_UTILITIES, "get_xml", &params)
            .await
            .body()
        {
            Ok(r) => r,
            Err((reason, http_status)) => return Recovery::unresolved(reason, http_status),
        };
        match text_of(&root, "xml").filter(|x| !x.is_empty()) {
            Some(x) => match Stamp::from_xml(x.into_bytes()) {
                Ok(s) => Recovery::Found(s),
                Err(reason) => Recovery::unresolved(reason, None),
            },
            None => Recovery::NotFound,
        }
    }

    /// `cancel(UUIDS, taxpayer_id, cer, key, store_pending)`.
    pub async fn cancel(&self, req: &CancelRequest) -> CancelOutcome {
        let Some(csd) = &self.cancel_csd else {
            return CancelOutcome::rejected(
                "config".into(),
                "Finkok cancels with the emisor's CSD; none is configured for this client".into(),
            );
        };
        let folio = req.folio_sustitucion.as_deref().unwrap_or_default();
        let params = format!(
            concat!(
                r#"<f:UUIDS><f:UUID UUID="{}" Motivo="{}" FolioSustitucion="{}"/></f:UUIDS>"#,
                "<f:taxpayer_id>{}</f:taxpayer_id><f:cer>{}</f:cer><f:key>{}</f:key><f:store_pending>false</f:store_pending>"
            ),
            escape(&req.uuid),
            req.motivo.code(),
            escape(folio),
            escape(&req.rfc_emisor),
            csd.cer_pem_b64,
            csd.key_pem_b64
        );
        let root = match self
            .call("cancel", NS_CANCEL, "cancel", &params)
            .await
            .body_or()
        {
            Ok(r) => r,
            Err(out) => return out,
        };
        parse_cancel(&root, &req.uuid)
    }

    /// `get_sat_status(taxpayer_id, rtaxpayer_id, uuid, total)`.
    pub async fn sat_status(&self, q: &StatusQuery) -> StatusOutcome {
        let params = format!(
            "<f:taxpayer_id>{}</f:taxpayer_id><f:rtaxpayer_id>{}</f:rtaxpayer_id><f:uuid>{}</f:uuid><f:total>{}</f:total>",
            escape(&q.rfc_emisor),
            escape(&q.rfc_receptor),
            escape(&q.uuid),
            escape(&q.total)
        );
        match self
            .call("cancel", NS_CANCEL, "get_sat_status", &params)
            .await
            .body()
        {
            Ok(root) => match find(&root, "get_sat_statusResult") {
                Some(_) => parse_status(serialize_for_status(&root).as_bytes()),
                None => StatusOutcome::unavailable("the answer has no get_sat_statusResult", None),
            },
            Err((reason, http_status)) => StatusOutcome::unavailable(reason, http_status),
        }
    }
}

/// Re-serializes the fields `parse_status` reads (it parses bytes).
fn serialize_for_status(root: &Element) -> String {
    let f = |n: &str| {
        text_of(root, n)
            .map(|v| format!("<{n}>{}</{n}>", escape(&v)))
            .unwrap_or_default()
    };
    format!(
        "<s>{}{}{}{}{}</s>",
        f("CodigoEstatus"),
        f("Estado"),
        f("EsCancelable"),
        f("EstatusCancelacion"),
        f("ValidacionEFOS")
    )
}

/// Reads a `cancelResult`: per-folio `EstatusUUID` first; a whole-request `CodEstatus` (`708`:
/// SAT unreachable) when there are no folios.
pub fn parse_cancel(root: &Element, uuid: &str) -> CancelOutcome {
    let Some(result) = find(root, "cancelResult") else {
        return CancelOutcome::unknown("the answer has no cancelResult", None);
    };
    let acuse = text_of(result, "Acuse").unwrap_or_default();
    let mut folios = Vec::new();
    all_named(result, "Folio", &mut folios);
    let folio = folios
        .iter()
        .find(|f| text_of(f, "UUID").is_some_and(|u| u.eq_ignore_ascii_case(uuid)))
        .or(folios.first());
    if let Some(f) = folio {
        let code = text_of(f, "EstatusUUID").unwrap_or_default();
        let estatus = text_of(f, "EstatusCancelacion").filter(|s| !s.is_empty());
        return match code.as_str() {
            "201" | "202" => CancelOutcome::Requested {
                code,
                acuse,
                estatus_cancelacion: estatus,
            },
            _ => {
                let message = super::sw::cancel_code_text(&code).to_owned();
                CancelOutcome::rejected(code, message)
            }
        };
    }
    let cod = text_of(result, "CodEstatus").unwrap_or_default();
    if cod.starts_with("708") {
        // SAT could not be reached: the request was not filed.
        return CancelOutcome::retryable(format!("Finkok: {cod}"), None);
    }
    if cod.is_empty() {
        return CancelOutcome::unknown("neither folios nor CodEstatus", None);
    }
    CancelOutcome::rejected(super::message_code(&cod), cod)
}
