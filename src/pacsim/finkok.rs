//! The sandbox PAC in Finkok's SOAP shape (docs/pac-apis.md §3), over the same [`Sim`] as the
//! SW shape: one journal, one dedup by content, the same checks and faults.
//!
//! | Route (`POST`) | Operations |
//! |---|---|
//! | `/servicios/soap/stamp` | `stamp`, `quick_stamp`, `stamped` (params `xml` in base64, `username`, `password`) |
//! | `/servicios/soap/cancel` | `cancel` (`UUIDS/UUID@UUID,Motivo,FolioSustitucion`, `taxpayer_id`, `cer`, `key`), `get_sat_status` (`taxpayer_id`, `rtaxpayer_id`, `uuid`, `total`) |
//! | `/servicios/soap/utilities` | `get_xml` (`uuid`, `taxpayer_id`) |
//!
//! Finkok has no idempotency key, so stamps carry none. What Finkok does differently from SW:
//!
//! - A repeated `stamp` answers incidencia `307` "El CFDI contiene un timbre previo", with the
//!   previous `xml` and `UUID`, or with both empty when the `empty_307` fault draws (Finkok
//!   "may or may not" return them; `quick_stamp` never does).
//! - `stamped` answers `603` "El CFDI no contiene un timbre previo" until the stamp's
//!   `stamped_lag` has passed (Finkok's took 4–8 s).
//! - Rejections are incidencias whose `CodigoError` is the sandbox's code (`301`, `303`,
//!   `CFDI40102`, …); the cancellation codes are the per-folio `EstatusUUID`s, and a request
//!   that is wrong as a whole answers `CodEstatus`.
//! - Wrong `username`/`password`: a SOAP fault (Finkok's exact answer is not published).

use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, Data};
use actix_web::{HttpResponse, web::Path};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use quick_xml::escape::escape;

use super::faults::{After, LoseMode};
use super::server::{AppState, dropped, gate, internal};
use super::state::StampRecord;
use super::{CancelAnswer, StampAnswer, clock};
use crate::cfdi::Tfd;
use crate::cfdi::dom::Element;
use crate::pac::finkok::{NS_CANCEL, NS_STAMP, NS_UTILITIES};
use crate::pac::sat::{find, text_of};

const NS_SOAP: &str = "http://schemas.xmlsoap.org/soap/envelope/";
/// The namespace of Finkok's stamp and utilities result fields.
const NS_VIEWS: &str = "apps.services.soap.core.views";
const NS_CANCELLATION: &str = "http://facturacion.finkok.com/cancellation";

pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/servicios/soap/{service}", web::post().to(service));
}

fn e(s: &str) -> String {
    escape(s).into_owned()
}

fn envelope(tns: &str, s0: &str, body: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/xml; charset=utf-8")
        .body(format!(
            r#"<?xml version='1.0' encoding='UTF-8'?><senv:Envelope xmlns:senv="{NS_SOAP}" xmlns:tns="{tns}" xmlns:s0="{s0}"><senv:Body>{body}</senv:Body></senv:Envelope>"#
        ))
}

fn fault(code: &str, message: &str) -> HttpResponse {
    HttpResponse::build(StatusCode::INTERNAL_SERVER_ERROR)
        .content_type("text/xml; charset=utf-8")
        .body(format!(
            r#"<?xml version='1.0' encoding='UTF-8'?><senv:Envelope xmlns:senv="{NS_SOAP}"><senv:Body><senv:Fault><faultcode>senv:{code}</faultcode><faultstring>{}</faultstring></senv:Fault></senv:Body></senv:Envelope>"#,
            e(message)
        ))
}

fn unavailable(what: &str) -> HttpResponse {
    HttpResponse::ServiceUnavailable()
        .content_type("text/plain")
        .body(format!("sandbox fault: {what} unavailable"))
}

/// One `Incidencia` (`times` copies: Finkok has been seen repeating the `307` one).
fn incidencias(st: &AppState, code: &str, message: &str, extra: &str, times: usize) -> String {
    let fecha = clock::to_local(st.sim.now()).format("%Y-%m-%dT%H:%M:%S");
    let one = format!(
        "<s0:Incidencia><s0:IdIncidencia>{}</s0:IdIncidencia><s0:Uuid/><s0:CodigoError>{}</s0:CodigoError><s0:WorkProcessId>{}</s0:WorkProcessId><s0:MensajeIncidencia>{}</s0:MensajeIncidencia><s0:ExtraInfo>{}</s0:ExtraInfo><s0:NoCertificadoPac/><s0:FechaRegistro>{fecha}</s0:FechaRegistro></s0:Incidencia>",
        uuid::Uuid::new_v4().simple(),
        e(code),
        uuid::Uuid::new_v4(),
        e(message),
        e(extra),
    );
    format!("<s0:Incidencias>{}</s0:Incidencias>", one.repeat(times))
}

/// The result fields of a stamp (`stampResult`, `stampedResult`): the stamped XML, `UUID`,
/// `Fecha` (FechaTimbrado), `SatSeal`, `NoCertificadoSAT`.
fn stamp_fields(s: &StampRecord) -> String {
    let tfd = Element::parse(s.xml.as_bytes())
        .ok()
        .and_then(|r| Tfd::from_comprobante(&r));
    let (seal, no_sat) = tfd.map_or_else(Default::default, |t| (t.sello_sat, t.no_certificado_sat));
    format!(
        "<s0:xml>{}</s0:xml><s0:UUID>{}</s0:UUID><s0:Fecha>{}</s0:Fecha><s0:SatSeal>{}</s0:SatSeal><s0:NoCertificadoSAT>{}</s0:NoCertificadoSAT>",
        e(&s.xml),
        s.uuid,
        s.fecha_timbrado,
        seal,
        no_sat
    )
}

fn stamp_envelope(op: &str, result: &str) -> HttpResponse {
    envelope(
        NS_STAMP,
        NS_VIEWS,
        &format!("<tns:{op}Response><tns:{op}Result>{result}</tns:{op}Result></tns:{op}Response>"),
    )
}

/// The operation element inside the SOAP body, after checking the credentials; else the
/// fault string.
fn operation(st: &AppState, body: &[u8]) -> Result<Element, String> {
    let root = Element::parse(body).map_err(|e| e.to_string())?;
    let op = find(&root, "Body")
        .and_then(|b| b.elements().next())
        .cloned()
        .ok_or("the SOAP body names no operation")?;
    let user = text_of(&op, "username").unwrap_or_default();
    let password = text_of(&op, "password").unwrap_or_default();
    if user != st.sim.user || password != st.sim.password {
        return Err("sandbox: invalid username or password".into());
    }
    Ok(op)
}

async fn service(st: Data<AppState>, path: Path<String>, body: Bytes) -> HttpResponse {
    let op = match operation(&st, &body) {
        Ok(op) => op,
        Err(message) => return fault("Client", &message),
    };
    match (path.as_str(), op.name.as_str()) {
        ("stamp", "stamp") => stamp(&st, &op, false).await,
        ("stamp", "quick_stamp") => stamp(&st, &op, true).await,
        ("stamp", "stamped") => stamped(&st, &op).await,
        ("cancel", "cancel") => cancel(&st, &op).await,
        ("cancel", "get_sat_status") => sat_status(&st, &op).await,
        ("utilities", "get_xml") => get_xml(&st, &op).await,
        (service, op) => fault(
            "Client",
            &format!("sandbox: no operation `{op}` in service `{service}`"),
        ),
    }
}

fn xml_param(op: &Element) -> Option<Vec<u8>> {
    let b64: String = text_of(op, "xml")?
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    B64.decode(b64).ok()
}

async fn stamp(st: &AppState, op: &Element, quick: bool) -> HttpResponse {
    // The faults in force when the request arrived decide its answer (see the SW handler).
    let faults = st.sim.faults();
    if let Some(r) = gate(st, true).await {
        return r;
    }
    let name = op.name.as_str();
    let Some(xml) = xml_param(op) else {
        let inc = incidencias(st, "301", "XML mal formado", "xml is not base64", 1);
        return stamp_envelope(name, &format!("<s0:xml/>{inc}"));
    };
    let sim = st.sim.clone();
    let answer = match web::block(move || sim.stamp(&xml, None)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return internal(e),
        Err(e) => return internal(e),
    };
    match answer {
        StampAnswer::Stamped(s) => {
            let ok = || {
                stamp_envelope(
                    name,
                    &format!(
                        "{}<s0:CodEstatus>Comprobante timbrado satisfactoriamente</s0:CodEstatus><s0:Incidencias/>",
                        stamp_fields(&s)
                    ),
                )
            };
            match faults.after_stamp(st.sim.window_left(&s)) {
                After::Answer => ok(),
                After::Lose(LoseMode::Drop) => dropped(),
                After::Lose(LoseMode::Hang(d)) => {
                    tokio::time::sleep(d).await;
                    ok()
                }
                After::Malformed => HttpResponse::Ok()
                    .content_type("text/xml; charset=utf-8")
                    .body(format!(
                        r#"<?xml version='1.0' encoding='UTF-8'?><senv:Envelope xmlns:senv="{NS_SOAP}"><senv:Body><tns:stampRes"#
                    )),
            }
        }
        StampAnswer::Duplicate(_) | StampAnswer::CustomIdReused(_)
            if st.sim.faults().recover_unavailable() =>
        {
            unavailable("the lookup of earlier stamps")
        }
        // No customid reaches this path, so a repeat is always a content duplicate.
        StampAnswer::Duplicate(s) | StampAnswer::CustomIdReused(s) => {
            let msg = "El CFDI contiene un timbre previo";
            if quick || st.sim.faults().empty_307() {
                let inc = incidencias(st, "307", msg, "", 2);
                stamp_envelope(name, &format!("<s0:xml></s0:xml><s0:UUID></s0:UUID>{inc}"))
            } else {
                let inc = incidencias(st, "307", msg, "", 1);
                stamp_envelope(name, &format!("{}{inc}", stamp_fields(&s)))
            }
        }
        StampAnswer::Rejected {
            code,
            message,
            detail,
        } => {
            let text = message
                .strip_prefix(&format!("{code} - "))
                .unwrap_or(&message);
            let inc = incidencias(st, &code, text, &detail.join("; "), 1);
            stamp_envelope(name, &format!("<s0:xml></s0:xml>{inc}"))
        }
    }
}

async fn stamped(st: &AppState, op: &Element) -> HttpResponse {
    if let Some(r) = gate(st, false).await {
        return r;
    }
    if st.sim.faults().recover_unavailable() {
        return unavailable("stamped");
    }
    let found = xml_param(op).and_then(|xml| st.sim.stamped_by_content(&xml));
    match found {
        Some(s) => stamp_envelope("stamped", &format!("{}<s0:Incidencias/>", stamp_fields(&s))),
        None => {
            let inc = incidencias(st, "603", "El CFDI no contiene un timbre previo", "", 1);
            stamp_envelope(
                "stamped",
                &format!("<s0:xml></s0:xml><s0:UUID></s0:UUID>{inc}"),
            )
        }
    }
}

fn cancel_envelope(result: &str) -> HttpResponse {
    envelope(
        NS_CANCEL,
        NS_CANCELLATION,
        &format!(
            "<tns:cancelResponse><tns:cancelResult>{result}</tns:cancelResult></tns:cancelResponse>"
        ),
    )
}

async fn cancel(st: &AppState, op: &Element) -> HttpResponse {
    if let Some(r) = gate(st, true).await {
        return r;
    }
    let slow = st.sim.faults().spec().slow_cancel;
    if !slow.is_zero() {
        tokio::time::sleep(slow).await;
    }
    let rfc = text_of(op, "taxpayer_id").unwrap_or_default();
    let csd_given = ["cer", "key"]
        .iter()
        .all(|k| text_of(op, k).is_some_and(|v| !v.is_empty()));
    if !csd_given {
        // Finkok signs the request with the emisor's CSD sent along (sandbox wording).
        return cancel_envelope(
            "<s0:CodEstatus>711 - Error con el certificado al cancelar: cer y key son requeridos</s0:CodEstatus>",
        );
    }
    let folio = find(op, "UUIDS").and_then(|u| u.elements().next());
    let Some(folio) = folio else {
        return cancel_envelope(
            "<s0:CodEstatus>301 - XML mal formado: UUIDS no tiene UUID</s0:CodEstatus>",
        );
    };
    let uuid = folio.attr("UUID").unwrap_or_default().to_uppercase();
    let motivo = folio.attr("Motivo").unwrap_or_default().to_owned();
    let sustitucion = folio
        .attr("FolioSustitucion")
        .filter(|f| !f.is_empty())
        .map(str::to_owned);
    let sim = st.sim.clone();
    let (r, u) = (rfc.clone(), uuid.clone());
    let answer = match web::block(move || sim.cancel(&r, &u, &motivo, sustitucion.as_deref())).await
    {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return internal(e),
        Err(e) => return internal(e),
    };
    let fecha = clock::to_local(st.sim.now()).format("%Y-%m-%dT%H:%M:%S");
    match answer {
        CancelAnswer::Folio { code, acuse } => {
            // Finkok keeps and returns only positive acuses.
            let positive = code == "201" || code == "202";
            let estatus = if positive {
                st.sim.cancel_estatus(&uuid).unwrap_or_default()
            } else {
                String::new()
            };
            let acuse = if positive {
                format!("<s0:Acuse>{}</s0:Acuse>", e(&acuse))
            } else {
                String::new()
            };
            cancel_envelope(&format!(
                "<s0:Folios><s0:Folio><s0:EstatusUUID>{}</s0:EstatusUUID><s0:UUID>{uuid}</s0:UUID><s0:EstatusCancelacion>{}</s0:EstatusCancelacion></s0:Folio></s0:Folios>{acuse}<s0:Fecha>{fecha}</s0:Fecha><s0:RfcEmisor>{}</s0:RfcEmisor>",
                e(&code),
                e(&estatus),
                e(&rfc)
            ))
        }
        CancelAnswer::Invalid { message } => {
            cancel_envelope(&format!("<s0:CodEstatus>{}</s0:CodEstatus>", e(&message)))
        }
    }
}

async fn sat_status(st: &AppState, op: &Element) -> HttpResponse {
    if let Some(r) = gate(st, false).await {
        return r;
    }
    if st.sim.faults().status_unavailable() {
        return unavailable("SAT status service");
    }
    let p = |k: &str| text_of(op, k).unwrap_or_default();
    let expression = format!(
        "?re={}&rr={}&tt={}&id={}",
        p("taxpayer_id"),
        p("rtaxpayer_id"),
        p("total"),
        p("uuid")
    );
    let a = st.sim.status(&expression);
    envelope(
        NS_CANCEL,
        NS_CANCELLATION,
        &format!(
            "<tns:get_sat_statusResponse><tns:get_sat_statusResult><s0:sat><s0:CodigoEstatus>{}</s0:CodigoEstatus><s0:Estado>{}</s0:Estado><s0:EsCancelable>{}</s0:EsCancelable><s0:EstatusCancelacion>{}</s0:EstatusCancelacion><s0:ValidacionEFOS>200</s0:ValidacionEFOS></s0:sat></tns:get_sat_statusResult></tns:get_sat_statusResponse>",
            e(&a.codigo_estatus),
            e(&a.estado),
            e(&a.es_cancelable),
            e(&a.estatus_cancelacion)
        ),
    )
}

async fn get_xml(st: &AppState, op: &Element) -> HttpResponse {
    if let Some(r) = gate(st, false).await {
        return r;
    }
    if st.sim.faults().recover_unavailable() {
        return unavailable("get_xml");
    }
    let rfc = text_of(op, "taxpayer_id").unwrap_or_default();
    let found = text_of(op, "uuid")
        .and_then(|u| st.sim.stamp_by_uuid(&u))
        .filter(|s| s.rfc_emisor.eq_ignore_ascii_case(&rfc));
    let result = match found {
        Some(s) => format!("<s0:xml>{}</s0:xml><s0:error/>", e(&s.xml)),
        None => "<s0:xml></s0:xml><s0:error>UUID no encontrado</s0:error>".to_owned(),
    };
    envelope(
        NS_UTILITIES,
        NS_VIEWS,
        &format!(
            "<tns:get_xmlResponse><tns:get_xmlResult>{result}</tns:get_xmlResult></tns:get_xmlResponse>"
        ),
    )
}
