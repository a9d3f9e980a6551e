//! The sandbox PAC over HTTP, in SW's wire shape (docs/pac-apis.md §2) and Finkok's
//! ([`super::finkok`], §3), plus the SAT status service and the `/_sim/` control endpoints.
//!
//! | Route | What |
//! |---|---|
//! | `POST /security/authenticate` | headers `user`, `password` → `data.token`, `expires_in` (Unix time) |
//! | `POST /v4/cfdi33/stamp/v4` | multipart field `xml`, header `customid`, `Authorization: Bearer` |
//! | `GET /datawarehouse/v1/live/{uuid}` | the stamped XML in `data.cfdi` |
//! | `POST /cfdi33/cancel/{rfc}/{uuid}/{motivo}[/{folio}]` | `data.acuse`, `data.uuid.{UUID}` = code |
//! | `POST /ConsultaCFDIService.svc` | SAT `Consulta` (SOAP 1.1) |
//! | `POST /servicios/soap/{stamp,cancel,utilities}` | Finkok's SOAP shape ([`super::finkok`]) |
//! | `GET /_sim/stamps` | every stamp: `uuid`, `customid`, `cadena_sha256`, `stamped_at` |
//! | `GET /_sim/stamps/full` | the same with the stamped XML |
//! | `GET`/`PUT /_sim/faults` | read or replace the fault spec (body: the spec text) |
//! | `POST /_sim/clock/advance?seconds=N` | move the sandbox clock forward |
//! | `POST /_sim/cancellations/{uuid}/accept` or `/reject` | the receptor's answer |

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use actix_web::body::{BodySize, MessageBody};
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes, Data};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::faults::{After, Before, FaultSpec, LoseMode};
use super::state::StampRecord;
use super::{CancelAnswer, Sim, SimError, StampAnswer};
use crate::cfdi::Tfd;
use crate::cfdi::dom::{Element, NS_TFD};

/// Issued tokens and when they expire (sandbox time); lost on restart, like a session.
#[derive(Default)]
struct Tokens(Mutex<HashMap<String, DateTime<Utc>>>);

pub(super) struct AppState {
    pub(super) sim: Arc<Sim>,
    tokens: Tokens,
}

/// A running sandbox server (the PAC's, or another sandbox's: `S` is its state).
pub struct SandboxHandle<S = Sim> {
    url: String,
    server: actix_web::dev::ServerHandle,
    sim: Arc<S>,
}

/// Shown by where it listens (its journal and server are no one's business in a log line).
impl<S> std::fmt::Debug for SandboxHandle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SandboxHandle").field(&self.url).finish()
    }
}

impl<S> SandboxHandle<S> {
    /// Binds `addr` and serves the app `app` makes, on the caller's tokio runtime.
    pub fn serve<F, A, B>(sim: Arc<S>, addr: &str, app: F) -> std::io::Result<Self>
    where
        F: Fn() -> App<A> + Send + Clone + 'static,
        A: actix_web::dev::ServiceFactory<
                actix_web::dev::ServiceRequest,
                Config = (),
                Response = actix_web::dev::ServiceResponse<B>,
                Error = actix_web::Error,
                InitError = (),
            > + 'static,
        B: MessageBody + 'static,
    {
        let listener = std::net::TcpListener::bind(addr)?;
        let local = listener.local_addr()?;
        let server = HttpServer::new(app)
            .workers(2)
            .disable_signals()
            .shutdown_timeout(1)
            .listen(listener)?
            .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(SandboxHandle {
            url: format!("http://{local}"),
            server: handle,
            sim,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn sim(&self) -> &Arc<S> {
        &self.sim
    }

    /// Stops accepting requests and waits for the server to finish.
    pub async fn stop(self) {
        self.server.stop(false).await;
    }
}

/// Starts the server on `addr` (the caller's tokio runtime drives it).
pub fn start(sim: Arc<Sim>, addr: &str) -> Result<SandboxHandle, SimError> {
    let data = Data::new(AppState {
        sim: sim.clone(),
        tokens: Tokens::default(),
    });
    SandboxHandle::serve(sim, addr, move || {
        App::new()
            .app_data(data.clone())
            .wrap_fn(|req, srv| hold_answer(actix_web::dev::Service::call(srv, req)))
            .configure(routes)
    })
    .map_err(SimError::Listen)
}

fn routes(cfg: &mut web::ServiceConfig) {
    cfg.app_data(web::PayloadConfig::new(16 * 1024 * 1024))
        .route("/security/authenticate", web::post().to(authenticate))
        .route("/v4/cfdi33/stamp/v4", web::post().to(stamp))
        .route(
            "/datawarehouse/v1/live/{uuid}",
            web::get().to(datawarehouse),
        )
        .route(
            "/cfdi33/cancel/{rfc}/{uuid}/{motivo}",
            web::post().to(cancel),
        )
        .route(
            "/cfdi33/cancel/{rfc}/{uuid}/{motivo}/{folio}",
            web::post().to(cancel),
        )
        .route("/ConsultaCFDIService.svc", web::post().to(consulta))
        .configure(super::finkok::routes)
        .route("/_sim/stamps", web::get().to(sim_stamps))
        .route("/_sim/stamps/full", web::get().to(sim_stamps_full))
        .route("/_sim/faults", web::get().to(sim_faults_get))
        .route("/_sim/faults", web::put().to(sim_faults_put))
        .route("/_sim/clock/advance", web::post().to(sim_clock_advance))
        .route(
            "/_sim/cancellations/{uuid}/{decision}",
            web::post().to(sim_decide),
        );
}

/// An error answer with nothing but its message.
fn error(status: StatusCode, message: &str) -> HttpResponse {
    error_json(status, message, Value::Null, Value::Null)
}

fn error_json(status: StatusCode, message: &str, detail: Value, data: Value) -> HttpResponse {
    HttpResponse::build(status).json(json!({
        "status": "error",
        "message": message,
        "messageDetail": detail,
        "data": data,
    }))
}

pub(super) fn internal(e: impl std::fmt::Display) -> HttpResponse {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        &format!("sandbox failure: {e}"),
    )
}

/// A body that fails at once: the client got (at most) the head, then a dropped connection.
struct Dropped;

impl MessageBody for Dropped {
    type Error = std::io::Error;
    fn size(&self) -> BodySize {
        BodySize::Sized(64)
    }
    fn poll_next(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "sandbox fault: connection dropped",
        ))))
    }
}

pub fn dropped() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(Dropped)
}

tokio::task_local! {
    /// When the answer to the request being handled may leave (the `latency` fault).
    static ANSWER_AT: std::cell::Cell<Option<tokio::time::Instant>>;
}

/// Runs a handler, then holds its answer until the time [`gate`] set: a PAC answer leaves the
/// fault's latency after its request arrived, however long the sandbox took to check and
/// stamp it meanwhile.
async fn hold_answer<F, T>(handler: F) -> T
where
    F: std::future::Future<Output = T>,
{
    ANSWER_AT
        .scope(std::cell::Cell::new(None), async move {
            let out = handler.await;
            if let Some(at) = ANSWER_AT.with(std::cell::Cell::get) {
                tokio::time::sleep_until(at).await;
            }
            out
        })
        .await
}

/// Outage, then the latency (see [`hold_answer`]), then the before-processing faults; `None`
/// to go on.
pub(super) async fn gate(st: &AppState, with_before: bool) -> Option<HttpResponse> {
    let faults = st.sim.faults();
    if faults.in_outage() {
        return Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable (sandbox outage)",
        ));
    }
    let latency = faults.latency();
    if !latency.is_zero() {
        let at = tokio::time::Instant::now() + latency;
        // Inside the server, the answer is held until `at` by [`hold_answer`], so the
        // sandbox's own work is part of the latency, as at a real PAC; elsewhere, wait here.
        if ANSWER_AT.try_with(|c| c.set(Some(at))).is_err() {
            tokio::time::sleep_until(at).await;
        }
    }
    if !with_before {
        return None;
    }
    match faults.before() {
        Before::Proceed => None,
        Before::Reset => Some(dropped()),
        Before::Status(code, retry_after) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut r = error(status, &format!("sandbox fault: HTTP {code}"));
            if let Some(s) = retry_after
                && let Ok(v) = actix_web::http::header::HeaderValue::from_str(&s.to_string())
            {
                r.headers_mut()
                    .insert(actix_web::http::header::RETRY_AFTER, v);
            }
            Some(r)
        }
    }
}

/// Checks `Authorization: Bearer`; SW answers 401 with an `AU41xx` message.
/// A request header as text; none when absent or not text.
fn header<'r>(req: &'r HttpRequest, name: &str) -> Option<&'r str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn authorize(st: &AppState, req: &HttpRequest) -> Option<HttpResponse> {
    let auth = header(req, "Authorization").unwrap_or_default();
    let token = auth.strip_prefix("Bearer ").unwrap_or(auth).trim();
    if token.is_empty() {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "AU4101 - El token proporcionado viene vacio.",
        ));
    }
    let now = st.sim.now();
    let tokens = st
        .tokens
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match tokens.get(token) {
        Some(exp) if *exp > now => None,
        // Sandbox wording: SW's message for an expired token is not published.
        _ => Some(error(
            StatusCode::UNAUTHORIZED,
            "AU4103 - El token proporcionado expiró o no es válido.",
        )),
    }
}

async fn authenticate(st: Data<AppState>, req: HttpRequest) -> HttpResponse {
    if let Some(r) = gate(&st, false).await {
        return r;
    }
    let h = |k: &str| header(&req, k).unwrap_or_default();
    if h("user") != st.sim.user || h("password") != st.sim.password {
        return error(
            StatusCode::UNAUTHORIZED,
            "AU2000 - El usuario o la contraseña son incorrectos.",
        );
    }
    let ttl = chrono::Duration::from_std(st.sim.faults().spec().token_ttl)
        .unwrap_or(chrono::Duration::hours(2));
    let expires = st.sim.now() + ttl;
    // Three dot-separated parts, like the JWTs SW issues.
    let token = format!(
        "sim.{}.{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    st.tokens
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(token.clone(), expires);
    HttpResponse::Ok().json(json!({
        "status": "success",
        "data": {"token": token, "expires_in": expires.timestamp(), "tokeny_type": "bearer"},
    }))
}

/// The `xml` field of a `multipart/form-data` body.
fn multipart_field(req: &HttpRequest, body: &[u8], name: &str) -> Option<Vec<u8>> {
    let ct = header(req, "Content-Type")?;
    let boundary = ct
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))?
        .trim_matches('"');
    let delim = format!("--{boundary}");
    let text = body;
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(i) = find_bytes(rest, delim.as_bytes()) {
        rest = &rest[i + delim.len()..];
        if let Some(j) = find_bytes(rest, delim.as_bytes()) {
            parts.push(&rest[..j]);
        }
    }
    for p in parts {
        let p = p.strip_prefix(b"\r\n").unwrap_or(p);
        let split = find_bytes(p, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&p[..split]).to_ascii_lowercase();
        let content = &p[split + 4..];
        let content = content.strip_suffix(b"\r\n").unwrap_or(content);
        if head.contains(&format!("name=\"{name}\"")) {
            return Some(content.to_vec());
        }
    }
    None
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// SW's v4 `data` for a stamp.
fn stamp_data(s: &StampRecord, with_cfdi: bool) -> Value {
    // Only the root tag and the TFD are needed: no tree for the whole document.
    let root = Element::parse_root(s.xml.as_bytes()).ok();
    let tfd = Element::find_in(s.xml.as_bytes(), NS_TFD, "TimbreFiscalDigital")
        .ok()
        .flatten()
        .map(|e| Tfd::from_element(&e));
    let (sello_sat, sello_cfd, no_sat) = tfd.as_ref().map_or_else(Default::default, |t| {
        (
            t.sello_sat.clone(),
            t.sello_cfd.clone(),
            t.no_certificado_sat.clone(),
        )
    });
    let cadena = if with_cfdi {
        tfd.as_ref().and_then(|t| t.cadena().ok())
    } else {
        None
    };
    let no_cfdi = root
        .as_ref()
        .and_then(|r| r.attr("NoCertificado").map(str::to_owned));
    json!({
        "uuid": s.uuid,
        "fechaTimbrado": s.fecha_timbrado,
        "selloSAT": sello_sat,
        "selloCFDI": sello_cfd,
        "noCertificadoSAT": no_sat,
        "noCertificadoCFDI": no_cfdi,
        "qrCode": "",
        "cfdi": if with_cfdi { s.xml.clone() } else { String::new() },
        "cadenaOriginalSAT": if with_cfdi { cadena.map_or(Value::Null, Value::String) } else { Value::Null },
    })
}

async fn stamp(st: Data<AppState>, req: HttpRequest, body: Bytes) -> HttpResponse {
    // The faults in force when the request arrived decide its answer too, even when they are
    // changed while it is being stamped (as a test does once it sees the stamp committed).
    let faults = st.sim.faults();
    if let Some(r) = authorize(&st, &req) {
        return r;
    }
    if let Some(r) = gate(&st, true).await {
        return r;
    }
    let Some(xml) = multipart_field(&req, &body, "xml") else {
        return error_json(
            StatusCode::BAD_REQUEST,
            "301 - XML mal formado",
            json!("no multipart field `xml`"),
            Value::Null,
        );
    };
    let customid = header(&req, "customid").map(str::to_owned);
    let sim = st.sim.clone();
    let answer = match web::block(move || sim.stamp(&xml, customid.as_deref())).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return internal(e),
        Err(e) => return internal(e),
    };
    match answer {
        StampAnswer::Stamped(s) => match faults.after_stamp(st.sim.window_left(&s)) {
            After::Answer => {
                HttpResponse::Ok().json(json!({"status": "success", "data": stamp_data(&s, true)}))
            }
            After::Lose(LoseMode::Drop) => dropped(),
            After::Lose(LoseMode::Hang(d)) => {
                tokio::time::sleep(d).await;
                HttpResponse::Ok().json(json!({"status": "success", "data": stamp_data(&s, true)}))
            }
            After::Malformed => HttpResponse::Ok()
                .content_type("application/json")
                .body("{\"status\":\"success\",\"data\":{\"uu"),
        },
        // A resend of what was stamped is SW's way to ask for it: down with the lookups.
        StampAnswer::Duplicate(_) | StampAnswer::CustomIdReused(_)
            if st.sim.faults().recover_unavailable() =>
        {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "sandbox fault: earlier stamps cannot be looked up",
            )
        }
        StampAnswer::Duplicate(s) => error_json(
            StatusCode::BAD_REQUEST,
            "307. El comprobante contiene un timbre previo.",
            Value::Null,
            stamp_data(&s, true),
        ),
        StampAnswer::CustomIdReused(s) => error_json(
            StatusCode::BAD_REQUEST,
            "CFDI3307 - Timbre duplicado. El customId proporcionado está duplicado.",
            Value::Null,
            stamp_data(&s, false),
        ),
        StampAnswer::Rejected {
            message, detail, ..
        } => error_json(
            StatusCode::BAD_REQUEST,
            &message,
            json!(detail.join("; ")),
            Value::Null,
        ),
    }
}

async fn datawarehouse(
    st: Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    if let Some(r) = authorize(&st, &req) {
        return r;
    }
    if let Some(r) = gate(&st, false).await {
        return r;
    }
    if st.sim.faults().recover_unavailable() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "sandbox fault: datawarehouse unavailable",
        );
    }
    match st.sim.stamp_by_uuid(&path) {
        Some(s) => HttpResponse::Ok().json(json!({
            "status": "success",
            "data": {"uuid": s.uuid, "cfdi": s.xml, "records": [{"uuid": s.uuid, "cfdi": s.xml}]},
        })),
        None => error(StatusCode::NOT_FOUND, "No se encontró el UUID."),
    }
}

async fn cancel(
    st: Data<AppState>,
    req: HttpRequest,
    path: web::Path<Vec<String>>,
) -> HttpResponse {
    if let Some(r) = authorize(&st, &req) {
        return r;
    }
    if let Some(r) = gate(&st, true).await {
        return r;
    }
    let slow = st.sim.faults().spec().slow_cancel;
    if !slow.is_zero() {
        tokio::time::sleep(slow).await;
    }
    let p = path.into_inner();
    let (rfc, uuid, motivo) = (p[0].clone(), p[1].clone(), p[2].clone());
    let folio = p.get(3).cloned();
    let sim = st.sim.clone();
    let answer = match web::block(move || sim.cancel(&rfc, &uuid, &motivo, folio.as_deref())).await
    {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return internal(e),
        Err(e) => return internal(e),
    };
    match answer {
        CancelAnswer::Folio { code, acuse } => {
            let uuid = p[1].to_uppercase();
            HttpResponse::Ok()
                .json(json!({"status": "success", "data": {"acuse": acuse, "uuid": {uuid: code}}}))
        }
        CancelAnswer::Invalid { message } => error(StatusCode::BAD_REQUEST, &message),
    }
}

async fn consulta(st: Data<AppState>, body: Bytes) -> HttpResponse {
    if let Some(r) = gate(&st, false).await {
        return r;
    }
    if st.sim.faults().status_unavailable() {
        return HttpResponse::ServiceUnavailable()
            .body("sandbox fault: SAT status service unavailable");
    }
    let expression = Element::parse(&body)
        .ok()
        .and_then(|r| crate::pac::sat::text_of(&r, "expresionImpresa"))
        .unwrap_or_default();
    let a = st.sim.status(&expression);
    let e = |s: &str| quick_xml::escape::escape(s).into_owned();
    let xml = format!(
        concat!(
            r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><ConsultaResponse xmlns="http://tempuri.org/">"#,
            r#"<ConsultaResult xmlns:a="http://schemas.datacontract.org/2004/07/Sat.Cfdi.Negocio.ConsultaCfdi.Servicio" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">"#,
            r#"<a:CodigoEstatus>{}</a:CodigoEstatus><a:EsCancelable>{}</a:EsCancelable><a:Estado>{}</a:Estado>"#,
            r#"<a:EstatusCancelacion>{}</a:EstatusCancelacion><a:ValidacionEFOS>200</a:ValidacionEFOS>"#,
            r#"</ConsultaResult></ConsultaResponse></s:Body></s:Envelope>"#
        ),
        e(&a.codigo_estatus),
        e(&a.es_cancelable),
        e(&a.estado),
        e(&a.estatus_cancelacion)
    );
    HttpResponse::Ok()
        .content_type("text/xml; charset=utf-8")
        .body(xml)
}

async fn sim_stamps(st: Data<AppState>) -> HttpResponse {
    let list: Vec<Value> = st
        .sim
        .stamps()
        .iter()
        .map(|s| json!({"uuid": s.uuid, "customid": s.customid, "cadena_sha256": s.cadena_sha256, "stamped_at": s.stamped_at}))
        .collect();
    HttpResponse::Ok().json(list)
}

async fn sim_stamps_full(st: Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(st.sim.stamps())
}

async fn sim_faults_get(st: Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().body(st.sim.faults().spec().to_string())
}

async fn sim_faults_put(st: Data<AppState>, body: String) -> HttpResponse {
    match FaultSpec::parse(&body) {
        Ok(spec) => {
            st.sim.set_faults(spec);
            HttpResponse::NoContent().finish()
        }
        Err(e) => HttpResponse::BadRequest().body(e),
    }
}

async fn sim_clock_advance(
    st: Data<AppState>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let secs = q.get("seconds").and_then(|s| s.parse::<i64>().ok());
    let Some(secs) = secs.filter(|s| *s >= 0) else {
        return HttpResponse::BadRequest().body("?seconds=N (N ≥ 0) is required");
    };
    match st.sim.advance_clock(secs) {
        Ok(()) => HttpResponse::Ok().json(json!({"now": st.sim.now()})),
        Err(e) => internal(e),
    }
}

async fn sim_decide(st: Data<AppState>, path: web::Path<(String, String)>) -> HttpResponse {
    let (uuid, decision) = path.into_inner();
    let accepted = match decision.as_str() {
        "accept" => true,
        "reject" => false,
        _ => return HttpResponse::NotFound().body("use /accept or /reject"),
    };
    match st.sim.decide_cancellation(&uuid, accepted) {
        Ok(Ok(())) => HttpResponse::NoContent().finish(),
        Ok(Err(msg)) => HttpResponse::Conflict().body(msg),
        Err(e) => internal(e),
    }
}
