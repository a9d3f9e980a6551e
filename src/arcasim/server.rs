//! The sandbox ARCA over HTTP.
//!
//! | Route | What |
//! |---|---|
//! | `POST /ws/services/LoginCms` | WSAA `loginCms` (see [`super::wsaa`]) |
//! | `POST /wsfev1/service.asmx` | WSFEv1 SOAP 1.1: `FECAESolicitar` (`CantReg` up to `FECompTotXRequest`'s), `FECompUltimoAutorizado`, `FECompConsultar`, `FECompTotXRequest`, `FEParamGetPtosVenta`, `FEDummy` |
//! | `GET /_sim/vouchers` | every authorized voucher with its number and CAE |
//! | `GET /_sim/stats` | `{"solicits": N, "logins": N, "login_attempts": N, "faults": N}`: `FECAESolicitar` requests received, tickets handed out, `loginCms` requests received, faults injected (since this process started) |
//! | `GET`/`PUT /_sim/faults` | read or change the fault spec (body: a spec of [`super::faults`], or `none`) |

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix_web::web::{self, Bytes, Data};
use actix_web::{App, HttpResponse};
use serde_json::json;

use super::faults::{Fate, Gate};
use super::wsaa::LoginFault;
use super::{ArcaSim, DetAnswer, SimError, SimVoucher};
use crate::arca::model::{Message, codes};
use crate::arca::wsaa::WSAA_NS;
use crate::arca::wsfe::{NS, find, find_all, number, text};
use crate::cfdi::dom::Element;
use crate::pacsim::server::{SandboxHandle, dropped};

/// A running sandbox ARCA.
pub type ArcaSimHandle = SandboxHandle<ArcaSim>;

impl SandboxHandle<ArcaSim> {
    /// The WSFEv1 endpoint.
    pub fn wsfe_url(&self) -> String {
        format!("{}/wsfev1/service.asmx", self.url())
    }

    /// The WSAA endpoint.
    pub fn wsaa_url(&self) -> String {
        format!("{}/ws/services/LoginCms", self.url())
    }
}

/// Starts the sandbox on `addr` (the caller's tokio runtime drives it).
pub fn start(sim: Arc<ArcaSim>, addr: &str) -> Result<ArcaSimHandle, SimError> {
    let data = Data::from(sim.clone());
    SandboxHandle::serve(sim, addr, move || {
        App::new()
            .app_data(data.clone())
            .route("/ws/services/LoginCms", web::post().to(login_cms))
            .route("/wsfev1/service.asmx", web::post().to(wsfe))
            .route("/_sim/vouchers", web::get().to(vouchers))
            .route("/_sim/stats", web::get().to(stats))
            .route("/_sim/faults", web::put().to(faults))
            .route("/_sim/faults", web::get().to(faults_get))
    })
    .map_err(SimError::Listen)
}

async fn vouchers(sim: Data<ArcaSim>) -> HttpResponse {
    HttpResponse::Ok().json(sim.vouchers())
}

async fn stats(sim: Data<ArcaSim>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "solicits": sim.solicits.load(Ordering::SeqCst),
        "logins": sim.logins.load(Ordering::SeqCst),
        "login_attempts": sim.login_attempts.load(Ordering::SeqCst),
        "faults": sim.injected.load(Ordering::SeqCst),
    }))
}

async fn faults_get(sim: Data<ArcaSim>) -> HttpResponse {
    HttpResponse::Ok().body(sim.fault_text())
}

async fn faults(sim: Data<ArcaSim>, body: Bytes) -> HttpResponse {
    match sim.set_faults(&String::from_utf8_lossy(&body)) {
        Ok(()) => HttpResponse::NoContent().finish(),
        Err(e) => HttpResponse::BadRequest().body(e),
    }
}

fn soap(op: &str, result: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/xml; charset=utf-8")
        .body(format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>\
             <{op}Response xmlns=\"{NS}\"><{op}Result>{result}</{op}Result></{op}Response>\
             </soap:Body></soap:Envelope>"
        ))
}

fn fault(message: &str) -> HttpResponse {
    HttpResponse::InternalServerError()
        .content_type("text/xml; charset=utf-8")
        .body(format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <soap:Envelope xmlns:soap=\"http://schemas.xmlsoap.org/soap/envelope/\"><soap:Body>\
             <soap:Fault><faultcode>soap:Client</faultcode><faultstring>{message}</faultstring>\
             </soap:Fault></soap:Body></soap:Envelope>"
        ))
}

fn list(outer: &str, inner: &str, items: &[Message]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut x = format!("<{outer}>");
    for m in items {
        let msg = m.msg.replace('&', "&amp;").replace('<', "&lt;");
        let _ = write!(
            x,
            "<{inner}><Code>{}</Code><Msg>{msg}</Msg></{inner}>",
            m.code
        );
    }
    let _ = write!(x, "</{outer}>");
    x
}

/// The represented CUIT when Token, Sign and Cuit are all there and, with `strict_auth`,
/// Token and Sign are a valid ticket of this sandbox.
fn auth(sim: &ArcaSim, op: &Element) -> Option<i64> {
    let a = find(op, "Auth")?;
    let (token, sign) = (text(a, "Token")?, text(a, "Sign")?);
    if sim.strict_auth.load(Ordering::SeqCst)
        && !sim.valid_ticket(&token, &sign, chrono::Utc::now())
    {
        return None;
    }
    number(a, "Cuit").ok()
}

/// `loginCms`: the ticket as an escaped `loginTicketResponse`, or the WSAA fault.
async fn login_cms(sim: Data<ArcaSim>, body: Bytes) -> HttpResponse {
    sim.login_attempts.fetch_add(1, Ordering::SeqCst);
    let cms = Element::parse(&body)
        .ok()
        .and_then(|root| text(&root, "in0"))
        .unwrap_or_default();
    let now = chrono::Utc::now();
    match sim.login(&cms, now) {
        // Handed out and written down; the answer never arrives.
        Ok(_) if sim.take_login_loss() => dropped(),
        Ok(t) => {
            let at = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.3f%:z");
            let inner = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\
                 <loginTicketResponse version=\"1.0\"><header><source>CN=arcasim</source>\
                 <uniqueId>{}</uniqueId><generationTime>{}</generationTime>\
                 <expirationTime>{}</expirationTime></header><credentials><token>{}</token>\
                 <sign>{}</sign></credentials></loginTicketResponse>",
                now.timestamp(),
                at(now),
                at(t.expires_at),
                t.token,
                t.sign
            );
            let escaped = inner
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            HttpResponse::Ok()
                .content_type("text/xml; charset=utf-8")
                .body(format!(
                    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
                     <soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
                     <soapenv:Body><loginCmsResponse xmlns=\"{WSAA_NS}\"><loginCmsReturn>{escaped}\
                     </loginCmsReturn></loginCmsResponse></soapenv:Body></soapenv:Envelope>"
                ))
        }
        Err(LoginFault(code, msg)) => HttpResponse::InternalServerError()
            .content_type("text/xml; charset=utf-8")
            .body(format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
                 <soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
                 <soapenv:Body><soapenv:Fault><faultcode xmlns:ns1=\"http://xml.apache.org/axis/\">\
                 ns1:{code}</faultcode><faultstring>{msg}</faultstring></soapenv:Fault>\
                 </soapenv:Body></soapenv:Envelope>"
            )),
    }
}

/// A WSFEv1 call under the faults in force when it arrived: its answer leaves their latency
/// after it arrived, however long the sandbox took meanwhile.
async fn wsfe(sim: Data<ArcaSim>, body: Bytes) -> HttpResponse {
    let faults = sim.faults();
    let answer_at = tokio::time::Instant::now() + faults.latency();
    let answer = wsfe_call(&sim, &faults, &body).await;
    tokio::time::sleep_until(answer_at).await;
    answer
}

async fn wsfe_call(
    sim: &ArcaSim,
    faults: &crate::pacsim::faults::Faults,
    body: &[u8],
) -> HttpResponse {
    let Ok(root) = Element::parse(body) else {
        return fault("Server was unable to read request: malformed XML");
    };
    let Some(op) = find(&root, "Body").and_then(|b| b.elements().next()) else {
        return fault("no SOAP Body");
    };
    let name = op.name.clone();
    if name == "FECAESolicitar" {
        sim.solicits.fetch_add(1, Ordering::SeqCst);
    }
    match sim.gate(faults) {
        Gate::Proceed => {}
        Gate::Reset => return dropped(),
        Gate::Status(code) => {
            let status = actix_web::http::StatusCode::from_u16(code)
                .unwrap_or(actix_web::http::StatusCode::SERVICE_UNAVAILABLE);
            return HttpResponse::build(status).body(format!("sandbox fault: HTTP {code}"));
        }
    }
    let asks_for_issued = matches!(name.as_str(), "FECompConsultar" | "FECompUltimoAutorizado");
    if asks_for_issued && sim.recover_unavailable(faults) {
        return HttpResponse::ServiceUnavailable().body("sandbox fault: recover outage");
    }
    if name == "FEDummy" {
        return soap(
            &name,
            "<AppServer>OK</AppServer><DbServer>OK</DbServer><AuthServer>OK</AuthServer>",
        );
    }
    let Some(cuit) = auth(sim, op) else {
        let err = Message::new(
            codes::AUTH,
            "ValidacionDeToken: No validaron las credenciales",
        );
        return soap(&name, &list("Errors", "Err", &[err]));
    };
    match name.as_str() {
        "FECompUltimoAutorizado" => {
            let (Ok(pv), Ok(tipo)) = (number::<i32>(op, "PtoVta"), number::<i32>(op, "CbteTipo"))
            else {
                return fault("PtoVta and CbteTipo are required");
            };
            let last = sim.last_authorized(cuit, pv, tipo);
            soap(
                &name,
                &format!(
                    "<PtoVta>{pv}</PtoVta><CbteTipo>{tipo}</CbteTipo><CbteNro>{last}</CbteNro>"
                ),
            )
        }
        "FECompConsultar" => consultar(sim, cuit, op),
        "FECompTotXRequest" => soap(
            &name,
            &format!(
                "<RegXReq>{}</RegXReq>",
                sim.max_records.load(Ordering::SeqCst)
            ),
        ),
        "FEParamGetPtosVenta" => {
            sim.ptos_venta_asked.fetch_add(1, Ordering::SeqCst);
            let points = sim
                .ptos_venta
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if points.is_empty() {
                let err = Message::new(codes::NOT_FOUND, "Sin Resultados");
                return soap(&name, &list("Errors", "Err", &[err]));
            }
            let items: String = points
                .iter()
                .map(|n| {
                    format!(
                        "<PtoVenta><Nro>{n}</Nro><EmisionTipo>CAE - RECE</EmisionTipo>\
                         <Bloqueado>N</Bloqueado><FchBaja>NULL</FchBaja></PtoVenta>"
                    )
                })
                .collect();
            soap(&name, &format!("<ResultGet>{items}</ResultGet>"))
        }
        "FECAESolicitar" => {
            let (answer, approved) = solicitar(sim, cuit, op);
            if approved == 0 {
                return answer;
            }
            // Authorized and written down: the answer may still never arrive.
            match sim.fate(faults) {
                Fate::Answer => answer,
                Fate::Drop => dropped(),
                Fate::Hold(d) => {
                    // Held while its sender times out or dies.
                    tokio::time::sleep(d).await;
                    answer
                }
                Fate::Malformed => HttpResponse::Ok()
                    .content_type("text/xml; charset=utf-8")
                    .body("<?xml version=\"1.0\"?><soap:Envelope><soap:Body><FECAESolic"),
            }
        }
        _ => fault(&format!("unknown operation {name}")),
    }
}

fn consultar(sim: &ArcaSim, cuit: i64, op: &Element) -> HttpResponse {
    let (Ok(pv), Ok(tipo), Ok(nro)) = (
        number::<i32>(op, "PtoVta"),
        number::<i32>(op, "CbteTipo"),
        number::<i64>(op, "CbteNro"),
    ) else {
        return fault("PtoVta, CbteTipo and CbteNro are required");
    };
    let Some(v) = sim.consult(cuit, pv, tipo, nro) else {
        let err = Message::new(
            codes::NOT_FOUND,
            "No existen datos en nuestros registros para los parametros ingresados.",
        );
        return soap("FECompConsultar", &list("Errors", "Err", &[err]));
    };
    let i = &v.input;
    // Amounts unformatted, as ARCA echoes them (`122`, not `122.00`).
    let r = format!(
        "<ResultGet><Concepto>{}</Concepto><DocTipo>{}</DocTipo><DocNro>{}</DocNro>\
         <CbteDesde>{n}</CbteDesde><CbteHasta>{n}</CbteHasta><CbteFch>{}</CbteFch>\
         <ImpTotal>{}</ImpTotal><ImpTotConc>{}</ImpTotConc><ImpNeto>{}</ImpNeto>\
         <ImpOpEx>{}</ImpOpEx><ImpTrib>{}</ImpTrib><ImpIVA>{}</ImpIVA><MonId>{}</MonId>\
         <MonCotiz>{}</MonCotiz><Resultado>A</Resultado><CodAutorizacion>{}</CodAutorizacion>\
         <EmisionTipo>CAE</EmisionTipo><FchVto>{}</FchVto><FchProceso>{}</FchProceso>\
         <PtoVta>{}</PtoVta><CbteTipo>{}</CbteTipo></ResultGet>",
        i.concepto.code(),
        i.doc_tipo.code(),
        i.doc_nro,
        v.cbte_fch,
        i.imp_total.normalize(),
        i.imp_tot_conc.normalize(),
        i.imp_neto.normalize(),
        i.imp_op_ex.normalize(),
        i.imp_trib.normalize(),
        i.imp_iva.normalize(),
        i.mon_id,
        i.mon_cotiz.normalize(),
        v.cae,
        v.cae_due,
        v.fch_proceso,
        v.pto_vta,
        v.cbte_tipo,
        n = v.number,
    );
    soap("FECompConsultar", &r)
}

fn det_response(
    number: i64,
    fch: &str,
    resultado: char,
    v: Option<&SimVoucher>,
    obs: &str,
) -> String {
    let (cae, due) = v.map_or((String::new(), String::new()), |v| {
        (v.cae.clone(), v.cae_due.clone())
    });
    format!(
        "<FECAEDetResponse><CbteDesde>{number}</CbteDesde><CbteHasta>{number}</CbteHasta>\
         <CbteFch>{fch}</CbteFch><Resultado>{resultado}</Resultado>{obs}<CAE>{cae}</CAE>\
         <CAEFchVto>{due}</CAEFchVto></FECAEDetResponse>"
    )
}

/// The answer, and how many vouchers it authorized.
fn solicitar(sim: &ArcaSim, cuit: i64, op: &Element) -> (HttpResponse, usize) {
    let Some(cab) = find(op, "FeCabReq") else {
        return (fault("FeCabReq is required"), 0);
    };
    let (Ok(cant), Ok(pv), Ok(tipo)) = (
        number::<usize>(cab, "CantReg"),
        number::<i32>(cab, "PtoVta"),
        number::<i32>(cab, "CbteTipo"),
    ) else {
        return (fault("CantReg, PtoVta and CbteTipo are required"), 0);
    };
    let mut dets = Vec::new();
    if let Some(d) = find(op, "FeDetReq") {
        find_all(d, "FECAEDetRequest", &mut dets);
    }
    let mut details = String::new();
    let mut errors = Vec::new();
    let (mut approved, mut rejected) = (0, 0);
    let max = usize::try_from(sim.max_records.load(Ordering::SeqCst)).unwrap_or(usize::MAX);
    if !(1..=9998).contains(&cant) {
        errors.push(Message::new(
            codes::CANT_REG,
            "Campo CantReg debe estar comprendido entre 1 y 9998",
        ));
    } else if dets.len() != cant {
        errors.push(Message::new(
            codes::CANT_REG_DETAILS,
            "La cantidad de registros del detalle debe ser igual a lo informado en CantReg",
        ));
    } else if cant > max {
        errors.push(Message::new(
            codes::CANT_REG_MAX,
            format!(
                "La cantidad de registros en detalle debe ser menor igual a {max}. Consultar \
                 metodo FECompTotXRequest"
            ),
        ));
    } else {
        for d in dets {
            let fch = text(d, "CbteFch").unwrap_or_default();
            if rejected > 0 {
                // ARCA processes a batch in order and stops at its first refusal: the rest
                // come back R, not processed, with no observation of their own.
                let number = number::<i64>(d, "CbteDesde").unwrap_or(0);
                details.push_str(&det_response(number, &fch, 'R', None, ""));
                continue;
            }
            match sim.authorize(cuit, pv, tipo, d) {
                Ok(DetAnswer::Approved(v)) => {
                    approved += 1;
                    details.push_str(&det_response(v.number, &fch, 'A', Some(&v), ""));
                }
                // Numbering is the request's error (as recorded from ARCA), the rest the
                // record's observations.
                Ok(DetAnswer::Rejected { number, errors: e }) => {
                    rejected += 1;
                    let (seq, obs): (Vec<_>, Vec<_>) =
                        e.into_iter().partition(|m| m.code == codes::NOT_NEXT);
                    let obs = list("Observaciones", "Obs", &obs);
                    details.push_str(&det_response(number, &fch, 'R', None, &obs));
                    errors.extend(seq);
                }
                // What was authorized before is written down: its answer is lost.
                Err(e) => return (fault(&format!("sandbox failure: {e}")), approved),
            }
        }
    }
    let resultado = match (approved, rejected) {
        (0, _) => 'R',
        (_, 0) => 'A',
        _ => 'P',
    };
    let now = chrono::Utc::now().format("%Y%m%d%H%M%S");
    let answer = soap(
        "FECAESolicitar",
        &format!(
            "<FeCabResp><Cuit>{cuit}</Cuit><PtoVta>{pv}</PtoVta><CbteTipo>{tipo}</CbteTipo>\
             <FchProceso>{now}</FchProceso><CantReg>{cant}</CantReg>\
             <Resultado>{resultado}</Resultado><Reproceso>N</Reproceso></FeCabResp>\
             <FeDetResp>{details}</FeDetResp>{}",
            list("Errors", "Err", &errors)
        ),
    );
    (answer, approved)
}
