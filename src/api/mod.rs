//! The invoicing API (`/v1`): ERPs, POS systems and scripts ask for an invoice directly, on the
//! same outbox and worker pool as the webhook payments, with idempotency keys that make every
//! retry safe.
//!
//! # Idempotency
//!
//! - A request is keyed by its `Idempotency-Key` header or `idempotency_key` field (same
//!   effect; both with different values → 400), else by its explicit folio (RFC emisor + tipo +
//!   serie + folio), else not at all (every call is a new invoice).
//! - The invoice, its frozen outbox row and the key are written in one transaction; the worker
//!   pool stamps it; the request waits (bounded) for the outcome:
//!   stamped → 201, stored and replayed byte for byte to every retry (`Idempotency-Replayed:
//!   true`); PAC rejection → 422, the key is released; PAC timeout (or a PAC call still in
//!   flight when the wait ends) → 503 `STAMPING_OUTCOME_UNKNOWN`, the key stays taken while the
//!   worker asks the PAC (however long that takes: the window closing changes nothing),
//!   retries get the same 503 until then and the 201 after; still queued at the deadline →
//!   202, the key stays taken.
//! - A key is released only when the PAC definitely did not stamp its invoice (a rejection, or
//!   the PAC confirming no stamp). A key whose invoice was stamped is never released nor
//!   purged: a retry, however late, replays the 201 (or 422 with another body).
//! - The same key with another body → 422 `IDEMPOTENCY_KEY_REUSED`; while the first is running →
//!   409 `DUPLICATE_IN_PROGRESS`. Nothing else (401, 403, any other 5xx) is stored, so those
//!   retries really run.

pub mod keys;
pub mod webhooks;

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use rust_decimal::Decimal;
use serde::Deserialize;

use crate::cancel::{self, Refusal};
use crate::cfdi::{
    self, InvoiceRequest, LineData, ReceptorData, Rfc, TaxTreatment, TipoComprobante, money,
};
use crate::domain::cancellation::{CancelFacts, Refused};
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::error::ApiError;
use crate::startup::AppState;
use crate::store::api::{ApiInvoiceRow, ApiKeyRow, CreateOutcome, NewApiInvoice, NewIdem};
use crate::store::{NewPayment, OutboxDraft};
use keys::RequestKey;

/// The OpenAPI document served at `/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

pub fn routes(cfg: &mut web::ServiceConfig, body_limit: usize) {
    cfg.service(
        web::scope("/v1")
            .app_data(web::PayloadConfig::new(body_limit))
            .route("/openapi.json", web::get().to(openapi))
            .route("/invoices", web::post().to(create))
            .route("/invoices", web::get().to(list))
            .route("/invoices/{id}", web::get().to(get))
            .route("/invoices/{id}/cancel", web::post().to(cancel)),
    );
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(OPENAPI)
}

/// The body of `POST /v1/invoices`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateInvoice {
    #[serde(default)]
    pub idempotency_key: Option<serde_json::Value>,
    /// When given, must be the key's emisor.
    #[serde(default)]
    pub rfc_emisor: Option<String>,
    #[serde(default)]
    pub serie: Option<String>,
    #[serde(default)]
    pub folio: Option<String>,
    pub receptor: ReceptorInput,
    pub conceptos: Vec<ConceptoInput>,
    pub forma_pago: String,
    pub metodo_pago: String,
    #[serde(default)]
    pub moneda: Option<String>,
    #[serde(default)]
    pub tipo_cambio: Option<AmountInput>,
    #[serde(default)]
    pub condiciones_de_pago: Option<String>,
    /// Whether `valor_unitario` and `descuento` include the traslado (default false).
    #[serde(default)]
    pub precios_incluyen_impuestos: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceptorInput {
    pub rfc: String,
    pub nombre: String,
    pub regimen_fiscal: String,
    pub codigo_postal: String,
    pub uso_cfdi: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConceptoInput {
    pub clave_prod_serv: String,
    #[serde(default)]
    pub no_identificacion: Option<String>,
    pub cantidad: AmountInput,
    pub clave_unidad: String,
    #[serde(default)]
    pub unidad: Option<String>,
    pub descripcion: String,
    pub valor_unitario: AmountInput,
    #[serde(default)]
    pub descuento: Option<AmountInput>,
    /// `iva16`, `iva8`, `iva0`, `exento` or `no_objeto`.
    pub impuesto: TaxTreatment,
}

/// An amount as the body gives it: a JSON string (as documented) or a number. Kept as text until
/// [`AmountInput::parse`], so that one beyond what a `Decimal` holds is still a 422 naming its
/// field rather than a malformed body.
#[derive(Debug, Clone)]
pub struct AmountInput(String);

impl<'de> Deserialize<'de> for AmountInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Self(s)),
            serde_json::Value::Number(n) => Ok(Self(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "an amount must be a decimal string like \"499.00\", not {other}"
            ))),
        }
    }
}

impl AmountInput {
    /// The amount, if it can be in a CFDI (not negative, at most 14 integer digits and 6
    /// decimals); otherwise a 422 naming `field`.
    pub fn parse(&self, field: &str) -> Result<Decimal, ApiError> {
        let text = self.0.trim();
        let invalid = |why: String| ApiError::invalid(field, format!("{:?} {why}", self.0));
        let d = text
            .parse::<Decimal>()
            .or_else(|_| Decimal::from_scientific(text))
            .map_err(|_| {
                invalid(format!(
                    "is not an amount: digits with an optional point, at most {} integer digits and {} decimals",
                    money::MAX_INTEGER_DIGITS,
                    money::MAX_DECIMALS
                ))
            })?;
        if d.is_sign_negative() && !d.is_zero() {
            return Err(invalid("must not be negative".into()));
        }
        money::check_limits(d).map_err(invalid)?;
        Ok(d)
    }
}

/// The invoice as the API shows it. `status` overrides the row's (a replayed 201 and a webhook
/// show the invoice as the event saw it).
pub fn invoice_json(inv: &ApiInvoiceRow, status: Option<&str>) -> serde_json::Value {
    let req: Option<InvoiceRequest> = serde_json::from_str(&inv.request_json).ok();
    // A stamped view (the stored 201, invoice.stamped) is the invoice at its stamp: no
    // cancellation yet, whatever happened since.
    let show_cancellation = status.is_none_or(|s| s == "canceled");
    let status = status.unwrap_or_else(|| api_status(inv.state));
    let rfc_receptor = req.as_ref().and_then(|r| match &r.receptor {
        ReceptorData::Nominativo { rfc, .. } => Some(rfc.as_str().to_owned()),
        ReceptorData::PublicoEnGeneral => None,
    });
    let total = req
        .as_ref()
        .and_then(|r| cfdi::build(r, "00000000000000000000").ok())
        .map(|c| c.total.to_string());
    let error = match (status, &inv.last_error_code, &inv.last_error_message) {
        ("failed", code, message) => serde_json::json!({ "code": code, "message": message }),
        _ => serde_json::Value::Null,
    };
    let stamped = matches!(status, "stamped" | "canceled");
    serde_json::json!({
        "id": inv.public_id,
        "status": status,
        "uuid": if stamped { inv.uuid.clone() } else { None },
        "serie": inv.serie,
        "folio": inv.folio,
        "rfc_emisor": inv.rfc_emisor,
        "rfc_receptor": rfc_receptor,
        "fecha": req.as_ref().map(|r| r.fecha.format("%Y-%m-%dT%H:%M:%S").to_string()),
        "moneda": req.as_ref().map(|r| r.moneda.clone()),
        "total": total,
        "created_at": inv.created_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "stamped_at": if stamped { inv.stamped_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) } else { None },
        "error": error,
        "cancellation": if show_cancellation && stamped { inv.cancellation } else { None },
    })
}

/// Outbox state → API status (`failed` only for a definite non-stamp).
pub fn api_status(state: DocumentState) -> &'static str {
    match state {
        DocumentState::Stamped => "stamped",
        DocumentState::Canceled => "canceled",
        DocumentState::Unknown => "unknown",
        s if s.released() || s == DocumentState::NeedsAttention => "failed",
        _ => "pending",
    }
}

fn json_response(status: StatusCode, body: String, replayed: bool) -> HttpResponse {
    let mut r = HttpResponse::build(status);
    r.content_type("application/json");
    if replayed {
        r.insert_header(("Idempotency-Replayed", "true"));
    }
    r.body(body)
}

/// What an idempotency key says about a new request with it.
enum KeyState {
    /// Never used, expired, or purged.
    Free,
    /// Its invoice ended without a stamp: a new invoice may take it over.
    Released(i64),
    Replay(StatusCode, String),
    InProgress(String),
    /// Its invoice's outcome at the PAC is unknown (the first answer was 503): the same 503
    /// until the PAC answers, however long that takes.
    OutcomeUnknown(String),
    Reused,
}

async fn key_state(
    db: &crate::store::Db,
    rfc: &str,
    key: &str,
    hash: &str,
) -> Result<KeyState, ApiError> {
    let Some(rec) = db.idempotency_record(rfc, key).await? else {
        return Ok(KeyState::Free);
    };
    // A completed key (its invoice was stamped) is never free again, however old.
    if rec.state == "in_progress" && rec.outbox_state.released() {
        return Ok(KeyState::Released(rec.invoice_id));
    }
    if rec.request_hash != hash {
        return Ok(KeyState::Reused);
    }
    if let (Some(status), Some(body)) = (rec.response_status, rec.response_body) {
        let status = u16::try_from(status)
            .ok()
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::CREATED);
        return Ok(KeyState::Replay(status, body));
    }
    let inv = db
        .api_invoice_by_id(rec.invoice_id)
        .await?
        .ok_or_else(|| ApiError::NotFound("the key's invoice is gone".into()))?;
    if matches!(inv.state, DocumentState::Stamped | DocumentState::Canceled) {
        // Settled after its request answered (PAC timeout, or still queued at the deadline):
        // the 201 is fixed now, once, and replayed from here on.
        let (status, body) = stored_201(db, rfc, key, &inv).await?;
        return Ok(KeyState::Replay(status, body));
    }
    if inv.state == DocumentState::Unknown {
        return Ok(KeyState::OutcomeUnknown(inv.public_id));
    }
    Ok(KeyState::InProgress(inv.public_id))
}

/// Fixes the 201 of a stamped invoice under its key; whoever stores first wins and every
/// caller returns what is stored.
async fn stored_201(
    db: &crate::store::Db,
    rfc: &str,
    key: &str,
    inv: &ApiInvoiceRow,
) -> Result<(StatusCode, String), ApiError> {
    let body = invoice_json(inv, Some("stamped")).to_string();
    if db
        .complete_idempotency(rfc, key, inv.id, 201, &body)
        .await?
    {
        return Ok((StatusCode::CREATED, body));
    }
    match db.idempotency_record(rfc, key).await? {
        Some(rec) if rec.invoice_id == inv.id => {
            Ok((StatusCode::CREATED, rec.response_body.unwrap_or(body)))
        }
        _ => Ok((StatusCode::CREATED, body)),
    }
}

fn key_answer(state: KeyState, key: &RequestKey) -> Result<HttpResponse, ApiError> {
    match (state, key) {
        (KeyState::Replay(status, body), _) => Ok(json_response(status, body, true)),
        // The same request: whether by explicit key or by folio, its outcome is what is unknown.
        (KeyState::OutcomeUnknown(invoice), _) => Err(ApiError::OutcomeUnknown { invoice }),
        (KeyState::Reused, RequestKey::Explicit(_)) => Err(ApiError::KeyReused),
        (KeyState::InProgress(invoice), RequestKey::Explicit(_)) => Err(ApiError::InProgress {
            invoice: Some(invoice),
        }),
        (KeyState::Reused | KeyState::InProgress(_), RequestKey::Derived(_)) => {
            Err(ApiError::FolioConflict(
                "this serie and folio belong to another invoice, or one is being issued with them"
                    .into(),
            ))
        }
        // A free or released key after losing a race: the winner is running.
        (KeyState::Free | KeyState::Released(_), _) => Err(ApiError::InProgress { invoice: None }),
    }
}

/// A `POST /v1/invoices` body, read.
pub struct CreateBody {
    /// The JSON, for the request hash.
    pub value: serde_json::Value,
    /// The caller's idempotency key (header or field).
    pub explicit: Option<keys::IdempotencyKey>,
    pub input: CreateInvoice,
}

/// Reads a `POST /v1/invoices` body with the `Idempotency-Key` header's value: what is not JSON,
/// not an invoice request, or carries a bad key is a 400. No database, no caller: the fuzz
/// target `api_invoice_body` runs it as the route does.
pub fn read_create_body(body: &[u8], header_key: Option<&str>) -> Result<CreateBody, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))?;
    let explicit = keys::explicit_key(header_key, value.get("idempotency_key"))?;
    let input: CreateInvoice = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::BadRequest(format!("the body is not an invoice request: {e}")))?;
    Ok(CreateBody {
        value,
        explicit,
        input,
    })
}

impl CreateInvoice {
    /// The serie asked for, else the configured one.
    pub fn serie(&self, settings: &crate::config::Settings) -> String {
        self.serie
            .clone()
            .unwrap_or_else(|| settings.emisor.serie.clone())
    }
}

/// The frozen comprobante of a request and its total. Every problem is a 422
/// `VALIDATION_ERROR` (naming the field when it is one) and nothing is written.
pub fn freeze(
    settings: &crate::config::Settings,
    input: &CreateInvoice,
    serie: &str,
) -> Result<(InvoiceRequest, Decimal), ApiError> {
    let request = build_request(settings, input, serie)?;
    let total = cfdi::build(&request, "00000000000000000000")
        .map_err(|e| ApiError::Validation(format!("the invoice cannot be built: {e}")))?
        .total;
    Ok((request, total))
}

/// `POST /v1/invoices`.
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let caller = keys::authenticate(&state.db, &req).await?;
    let header_key = match req.headers().get("Idempotency-Key") {
        Some(h) => Some(h.to_str().map_err(|_| {
            ApiError::BadRequest(
                "the idempotency key must be printable ASCII without spaces".into(),
            )
        })?),
        None => None,
    };
    let CreateBody {
        value,
        explicit,
        input,
    } = read_create_body(&body, header_key)?;
    if let Some(rfc) = &input.rfc_emisor
        && !rfc.eq_ignore_ascii_case(&caller.rfc_emisor)
    {
        return Err(ApiError::Forbidden(format!(
            "this API key issues for {}, not {rfc}",
            caller.rfc_emisor
        )));
    }
    let settings = &state.settings;
    let serie = input.serie(settings);
    let key = match (explicit, &input.folio) {
        (Some(k), _) => Some(RequestKey::Explicit(k)),
        (None, Some(folio)) => Some(RequestKey::derived(
            TipoComprobante::Ingreso.code(),
            &serie,
            folio,
        )),
        (None, None) => None,
    };
    let hash = keys::request_hash(&value);
    let mut releases = None;
    if let Some(k) = &key {
        match key_state(&state.db, &caller.rfc_emisor, k.as_str(), &hash).await? {
            KeyState::Free => {}
            KeyState::Released(old) => releases = Some(old),
            other => return key_answer(other, k),
        }
    }
    let (request, total) = freeze(settings, &input, &serie)?;
    let public_id = format!("inv_{}", uuid::Uuid::new_v4().simple());
    let now = Utc::now();
    let retention =
        chrono::Duration::hours(i64::try_from(settings.api.key_retention_hours).unwrap_or(96));
    let new = NewApiInvoice {
        public_id: public_id.clone(),
        rfc_emisor: caller.rfc_emisor.clone(),
        api_key_id: caller.id,
        idem: key.as_ref().map(|k| NewIdem {
            key: k.as_str().to_owned(),
            request_hash: hash.clone(),
            expires_at: now + retention,
            releases,
        }),
        payment: NewPayment {
            provider: "api".into(),
            payment_id: public_id.clone(),
            event_id: public_id.clone(),
            amount: total.to_string(),
            currency: request.moneda.clone(),
            method: format!("api:{}", caller.name),
            forma_pago: Some(request.forma_pago.clone()),
            customer_json:
                serde_json::json!({ "rfc": input.receptor.rfc, "nombre": input.receptor.nombre })
                    .to_string(),
            paid_at: now,
            livemode: true,
            status: "invoice_pending".into(),
            reason: None,
        },
        draft: OutboxDraft {
            kind: DocumentKind::Ingreso,
            stamp_key: StampKey::derive("api", &public_id, DocumentKind::Ingreso.as_str()),
            request,
            state: DocumentState::Pending,
            error_code: None,
            error_message: None,
            test_mode: false,
        },
    };
    let invoice_id = match state.db.create_api_invoice(&new).await? {
        CreateOutcome::Created { invoice_id, .. } => invoice_id,
        CreateOutcome::FolioTaken => {
            return Err(ApiError::FolioConflict(format!(
                "folio {serie}-{} belongs to another invoice",
                input.folio.as_deref().unwrap_or_default()
            )));
        }
        CreateOutcome::KeyTaken => {
            // Another request took the key between our look and our write: answer as for it.
            let k = key.as_ref().ok_or_else(|| {
                ApiError::Conflict("the invoice could not be recorded; retry".into())
            })?;
            let st = key_state(&state.db, &caller.rfc_emisor, k.as_str(), &hash).await?;
            return key_answer(st, k);
        }
    };
    tracing::info!(invoice = %public_id, keyed = key.is_some(), "api invoice queued");
    wait_and_answer(&state, &caller, key.as_ref(), invoice_id).await
}

/// Waits (bounded) for the worker's outcome and answers with it.
async fn wait_and_answer(
    state: &AppState,
    caller: &ApiKeyRow,
    key: Option<&RequestKey>,
    invoice_id: i64,
) -> Result<HttpResponse, ApiError> {
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(state.settings.api.wait_for_stamp_ms);
    let mut pause = Duration::from_millis(20);
    loop {
        let inv = state
            .db
            .api_invoice_by_id(invoice_id)
            .await?
            .ok_or_else(|| ApiError::NotFound("the invoice is gone".into()))?;
        match inv.state {
            DocumentState::Stamped | DocumentState::Canceled => {
                let (status, body) = match key {
                    Some(k) => stored_201(&state.db, &caller.rfc_emisor, k.as_str(), &inv).await?,
                    None => (
                        StatusCode::CREATED,
                        invoice_json(&inv, Some("stamped")).to_string(),
                    ),
                };
                return Ok(json_response(status, body, false).customize_location(&inv.public_id));
            }
            s if s.released() => {
                return Err(ApiError::PacRejected {
                    invoice: inv.public_id,
                    code: inv.last_error_code.unwrap_or_else(|| "FAILED".into()),
                    message: inv.last_error_message.unwrap_or_default(),
                });
            }
            // The PAC may hold a stamp.
            DocumentState::Unknown => {
                return Err(ApiError::OutcomeUnknown {
                    invoice: inv.public_id,
                });
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            if inv.state == DocumentState::Stamping {
                // A PAC call is in flight and has not answered within our wait.
                return Err(ApiError::OutcomeUnknown {
                    invoice: inv.public_id,
                });
            }
            // Still queued or being retried: nothing is known to have reached the PAC.
            let body = invoice_json(&inv, None).to_string();
            return Ok(HttpResponse::Accepted()
                .content_type("application/json")
                .insert_header(("Retry-After", "2"))
                .insert_header(("Location", format!("/v1/invoices/{}", inv.public_id)))
                .body(body));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

trait WithLocation {
    fn customize_location(self, public_id: &str) -> Self;
}

impl WithLocation for HttpResponse {
    fn customize_location(mut self, public_id: &str) -> Self {
        if let Ok(v) =
            actix_web::http::header::HeaderValue::from_str(&format!("/v1/invoices/{public_id}"))
        {
            self.headers_mut()
                .insert(actix_web::http::header::LOCATION, v);
        }
        self
    }
}

/// The frozen comprobante of a request; every problem is a 422 `VALIDATION_ERROR` and nothing
/// is written.
fn build_request(
    settings: &crate::config::Settings,
    input: &CreateInvoice,
    serie: &str,
) -> Result<InvoiceRequest, ApiError> {
    let invalid = |m: String| ApiError::Validation(m);
    let text_ok = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_alphanumeric())
    };
    if !text_ok(serie, 25) {
        return Err(invalid(format!(
            "serie {serie:?} must be 1 to 25 letters or digits"
        )));
    }
    if let Some(f) = &input.folio
        && !text_ok(f, 40)
    {
        return Err(invalid(format!(
            "folio {f:?} must be 1 to 40 letters or digits"
        )));
    }
    let r = &input.receptor;
    let rfc =
        Rfc::parse(&r.rfc.trim().to_uppercase()).map_err(|e| invalid(format!("receptor: {e}")))?;
    if rfc.as_str() == cfdi::rfc::RFC_PUBLICO_EN_GENERAL {
        return Err(invalid(
            "receptor: público en general (XAXX010101000) is invoiced in the factura global, not here"
                .into(),
        ));
    }
    if !cfdi::catalogs::is_regimen(&r.regimen_fiscal) {
        return Err(invalid(format!(
            "receptor: régimen fiscal {:?} is not in c_RegimenFiscal",
            r.regimen_fiscal
        )));
    }
    if !(r.codigo_postal.len() == 5 && r.codigo_postal.chars().all(|c| c.is_ascii_digit())) {
        return Err(invalid(format!(
            "receptor: código postal {:?} is not 5 digits",
            r.codigo_postal
        )));
    }
    match cfdi::catalogs::uso_allows(&r.uso_cfdi, &r.regimen_fiscal) {
        Some(true) => {}
        Some(false) => {
            return Err(invalid(format!(
                "receptor: UsoCFDI {} is not allowed for régimen {}",
                r.uso_cfdi, r.regimen_fiscal
            )));
        }
        None => {
            return Err(invalid(format!(
                "receptor: UsoCFDI {:?} is not in c_UsoCFDI",
                r.uso_cfdi
            )));
        }
    }
    if r.nombre.trim().is_empty() {
        return Err(invalid("receptor: nombre is required".into()));
    }
    if !cfdi::catalogs::is_forma_pago(&input.forma_pago) {
        return Err(invalid(format!(
            "forma_pago {:?} is not in c_FormaPago",
            input.forma_pago
        )));
    }
    match input.metodo_pago.as_str() {
        "PUE" => {}
        "PPD" if input.forma_pago == "99" => {}
        "PPD" => return Err(invalid("metodo_pago PPD needs forma_pago 99".into())),
        other => return Err(invalid(format!("metodo_pago {other:?} must be PUE or PPD"))),
    }
    if input.conceptos.is_empty() {
        return Err(invalid("conceptos: at least one is required".into()));
    }
    let moneda = input.moneda.clone().unwrap_or_else(|| "MXN".into());
    if !settings.invoice.currencies.iter().any(|c| c == &moneda) {
        return Err(invalid(format!(
            "moneda {moneda} is not invoiced here (configured: {})",
            settings.invoice.currencies.join(", ")
        )));
    }
    let tipo_cambio = input
        .tipo_cambio
        .as_ref()
        .map(|t| t.parse("tipo_cambio"))
        .transpose()?;
    let mut lines = Vec::with_capacity(input.conceptos.len());
    for (i, c) in input.conceptos.iter().enumerate() {
        let at = |f: &str| format!("conceptos[{i}].{f}");
        let cantidad = c.cantidad.parse(&at("cantidad"))?;
        let unit_price = c.valor_unitario.parse(&at("valor_unitario"))?;
        let discount = c
            .descuento
            .as_ref()
            .map(|d| d.parse(&at("descuento")))
            .transpose()?;
        // Both factors within the limits, their product (the line's Importe) may not be.
        if !cantidad
            .checked_mul(unit_price)
            .is_some_and(money::in_range)
        {
            return Err(ApiError::invalid(
                &format!("conceptos[{i}]"),
                format!(
                    "cantidad × valor_unitario ({cantidad} × {unit_price}) is out of range: at most {} integer digits",
                    money::MAX_INTEGER_DIGITS
                ),
            ));
        }
        lines.push(LineData {
            clave_prod_serv: c.clave_prod_serv.clone(),
            no_identificacion: c.no_identificacion.clone(),
            cantidad,
            clave_unidad: c.clave_unidad.clone(),
            unidad: c.unidad.clone(),
            descripcion: c.descripcion.trim().to_owned(),
            unit_price,
            discount,
            tax: c.impuesto,
            retenciones: Vec::new(),
        });
    }
    let emisor = &settings.emisor;
    let request = InvoiceRequest {
        tipo: TipoComprobante::Ingreso,
        serie: Some(serie.to_owned()),
        folio: input.folio.clone(),
        fecha: crate::ingest::fecha_of(Utc::now()),
        moneda,
        tipo_cambio,
        forma_pago: input.forma_pago.clone(),
        metodo_pago: input.metodo_pago.clone(),
        condiciones_de_pago: input.condiciones_de_pago.clone(),
        exportacion: "01".into(),
        prices_include_tax: input.precios_incluyen_impuestos,
        emisor: cfdi::EmisorData {
            rfc: Rfc::parse(&emisor.rfc).map_err(|e| invalid(format!("[emisor] {e}")))?,
            nombre: emisor.nombre.clone(),
            regimen_fiscal: emisor.regimen_fiscal.clone(),
            lugar_expedicion: emisor.lugar_expedicion.clone(),
        },
        receptor: ReceptorData::Nominativo {
            rfc,
            nombre: r.nombre.trim().to_uppercase(),
            domicilio_fiscal: r.codigo_postal.clone(),
            regimen_fiscal: r.regimen_fiscal.clone(),
            uso_cfdi: r.uso_cfdi.clone(),
        },
        informacion_global: None,
        relacionados: Vec::new(),
        lines,
    };
    Ok(request)
}

/// `GET /v1/invoices/{id}`.
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let caller = keys::authenticate(&state.db, &req).await?;
    let inv = state
        .db
        .api_invoice(&id, &caller.rfc_emisor)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no invoice {id}")))?;
    Ok(HttpResponse::Ok().json(invoice_json(&inv, None)))
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub rfc_emisor: Option<String>,
}

/// `GET /v1/invoices?serie=&folio=&rfc_emisor=`.
pub async fn list(
    state: web::Data<AppState>,
    req: HttpRequest,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let caller = keys::authenticate(&state.db, &req).await?;
    if let Some(rfc) = q.rfc_emisor.as_deref().filter(|r| !r.is_empty())
        && !rfc.eq_ignore_ascii_case(&caller.rfc_emisor)
    {
        return Err(ApiError::Forbidden(format!(
            "this API key reads invoices of {}, not {rfc}",
            caller.rfc_emisor
        )));
    }
    let blank = |s: &Option<String>| s.clone().filter(|v| !v.is_empty());
    let rows = state
        .db
        .find_api_invoices(
            &caller.rfc_emisor,
            blank(&q.serie).as_deref(),
            blank(&q.folio).as_deref(),
        )
        .await?;
    let data: Vec<_> = rows.iter().map(|r| invoice_json(r, None)).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "data": data })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelInput {
    /// c_Motivo: `01` (with `folio_sustitucion`), `02`, `03` or `04`.
    pub motivo: String,
    #[serde(default)]
    pub folio_sustitucion: Option<String>,
}

/// `POST /v1/invoices/{id}/cancel`: freezes the cancellation for the worker; 202 with the
/// invoice. `invoice.canceled` is sent when SAT confirms it.
pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let caller = keys::authenticate(&state.db, &req).await?;
    let input: CancelInput = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not a cancellation: {e}")))?;
    let inv = state
        .db
        .api_invoice(&id, &caller.rfc_emisor)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no invoice {id}")))?;
    if inv.state != DocumentState::Stamped {
        return Err(ApiError::Conflict(format!(
            "invoice {} is {}: only a stamped invoice can be cancelled",
            inv.public_id,
            api_status(inv.state)
        )));
    }
    let facts = inv
        .stamped_xml
        .as_deref()
        .and_then(CancelFacts::from_stamped)
        .ok_or_else(|| ApiError::Conflict("the stamped XML cannot be read".into()))?;
    let actor = format!("api:{}", caller.name);
    let folio = input.folio_sustitucion.as_deref();
    let done = cancel::request(
        &state.db,
        inv.outbox_id,
        &facts,
        &input.motivo,
        folio,
        &actor,
    );
    match done.await? {
        Ok(()) => {}
        Err(Refusal::Request(Refused::NotAMotivo(m))) => {
            return Err(ApiError::Validation(format!(
                "`{m}` is not a motivo: 01, 02, 03 or 04"
            )));
        }
        Err(Refusal::Request(Refused::Motivo(e))) => {
            return Err(ApiError::Validation(e.to_string()));
        }
        Err(Refusal::Related(related)) => {
            return Err(ApiError::Conflict(format!(
                "No cancelable: live documents relate to {}: {}",
                facts.uuid,
                related.join(", ")
            )));
        }
        Err(Refusal::AlreadyRequested(s)) => {
            return Err(ApiError::Conflict(format!(
                "a cancellation of {} was already requested ({s})",
                facts.uuid
            )));
        }
    }
    let inv = state
        .db
        .api_invoice(&id, &caller.rfc_emisor)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no invoice {id}")))?;
    Ok(HttpResponse::Accepted().json(invoice_json(&inv, None)))
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    #[test]
    fn amounts_are_read_as_sent_and_kept_within_the_cfdi_limits() {
        let parse = |json: &str| {
            serde_json::from_str::<super::AmountInput>(json)
                .expect("an amount")
                .parse("x")
                .map(|d| d.to_string())
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(r#""499.00""#).as_deref(), Ok("499.00"));
        assert_eq!(parse(r#"" 499 ""#).as_deref(), Ok("499"));
        assert_eq!(parse("12.5").as_deref(), Ok("12.5"));
        assert_eq!(parse(r#""1e3""#).as_deref(), Ok("1000"));
        assert_eq!(
            parse(r#""99999999999999.999999""#).as_deref(),
            Ok("99999999999999.999999")
        );
        for bad in [
            r#""100000000000000""#,
            r#""1.0000001""#,
            r#""-1""#,
            r#""""#,
            r#""NaN""#,
            r#""1e-7""#,
            r#""1e99999999999""#,
            r#""1e-99999999999""#,
            "1e300",
            r#""79228162514264337593543950336""#,
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.starts_with("x: "), "{bad}: {e}");
        }
        assert!(serde_json::from_str::<super::AmountInput>("true").is_err());
    }

    #[test]
    fn api_settings_default_to_96_hour_keys_and_keep_the_webhook_secret_out_of_logs() {
        let s = Settings::defaults().expect("defaults");
        assert_eq!(s.api.key_retention_hours, 96);
        let text = "[api]\nkey_retention_hours = 24\nwebhook_url = \"https://erp.example/hooks\"\n\
                    webhook_secret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"\n";
        let s = Settings::from_parts(Some(text), &[]).expect("settings");
        assert_eq!(s.api.key_retention_hours, 24);
        let dump = format!("{s:?}");
        assert!(!dump.contains("C2FVsBQIhrscChlQIMV"), "{dump}");
        let err = Settings::from_parts(
            Some("[api]\nwebhook_url = \"https://erp.example/hooks\"\n"),
            &[],
        )
        .expect_err("a webhook URL needs its secret");
        assert!(err.to_string().contains("webhook_secret"), "{err}");
    }
}
