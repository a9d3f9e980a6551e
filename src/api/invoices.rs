//! `POST /v1/invoices` (create, then wait a bounded time for the worker's outcome),
//! `GET /v1/invoices/{id}` (with the payments of a PPD invoice) and `GET /v1/invoices`.

use crate::domain::PaymentStatus;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::idempotency::{KeyState, key_answer, key_state, stored_201};
use super::keys::{self, Caller, RequestKey};
use super::request::{CreateBody, CreateInvoice, freeze, read_create_body};
use super::view::{invoice_json, json_response};
use crate::cfdi::TipoComprobante;
use crate::domain::StampKey;
use crate::domain::{DocumentKind, DocumentState};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::api::{ApiInvoiceRow, ApiKeyRow, CreateOutcome, NewApiInvoice, NewIdem};
use crate::store::{NewPayment, OutboxDraft};

/// `POST /v1/invoices`.
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Bytes,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let CreateBody {
        value,
        explicit,
        input,
    } = read_create_body(&body, header_key(&req)?)?;
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
    let rate = rate_of(&state, &input).await?;
    let (request, total) = freeze(settings, &input, &serie, rate)?;
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
            customer_json: serde_json::json!({
                "rfc": input.receptor.rfc,
                "nombre": input.receptor.nombre,
                "email": input.receptor.email.as_deref().map(str::trim).filter(|e| !e.is_empty()),
            })
            .to_string(),
            paid_at: now,
            livemode: true,
            status: PaymentStatus::InvoicePending,
            reason: None,
            references: Vec::new(),
            lines_json: None,
            tipo_cambio: request.tipo_cambio.map(|t| t.to_string()),
            arca: None,
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
        CreateOutcome::Created { invoice_id } => invoice_id,
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

/// The TipoCambio `[fx]` gives an invoice in another currency that was sent without one
/// (looked up before anything is written). A source that did not answer is a 503 to retry;
/// one that has no rate leaves it to [`freeze`], which says the TipoCambio is needed.
async fn rate_of(state: &AppState, input: &CreateInvoice) -> Result<Option<Decimal>, ApiError> {
    let moneda = input.moneda.as_deref().unwrap_or("MXN");
    if input.tipo_cambio.is_some() || !state.settings.invoice.invoices(moneda) {
        return Ok(None);
    }
    match state.fx.tipo_cambio(moneda, None, Utc::now()).await {
        Some(Ok(rate)) => Ok(Some(rate)),
        Some(Err(e)) if e.outage => Err(ApiError::RateUnavailable(e.reason)),
        _ => Ok(None),
    }
}

/// The `Idempotency-Key` header, if any (400 when it is not text).
pub(super) fn header_key(req: &HttpRequest) -> Result<Option<&str>, ApiError> {
    match req.headers().get("Idempotency-Key") {
        Some(h) => Ok(Some(h.to_str().map_err(|_| {
            ApiError::BadRequest(
                "the idempotency key must be printable ASCII without spaces".into(),
            )
        })?)),
        None => Ok(None),
    }
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
                // A PAC call is in flight and has not answered within our wait: retries get
                // this 503 too until the outcome is known.
                if let Some(k) = key {
                    state
                        .db
                        .mark_idempotency_unknown(&caller.rfc_emisor, k.as_str(), invoice_id)
                        .await?;
                }
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

/// `GET /v1/invoices/{id}`.
pub async fn get(
    state: web::Data<AppState>,
    id: web::Path<String>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let inv = invoice_of(&state, &caller, &id).await?;
    let mut view = invoice_json(&inv, None);
    // A PPD invoice shows its payments (each with its REP) and what it still owes.
    if let (Some(extra), Some(o)) = (
        super::payments::summary(&state, &inv).await?,
        view.as_object_mut(),
    ) && let Some(e) = extra.as_object()
    {
        o.extend(e.clone());
    }
    Ok(HttpResponse::Ok().json(view))
}

/// The caller's invoice `id` (its public id), or a 404.
pub(super) async fn invoice_of(
    state: &AppState,
    caller: &ApiKeyRow,
    id: &str,
) -> Result<ApiInvoiceRow, ApiError> {
    state
        .db
        .api_invoice(id, &caller.rfc_emisor)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no invoice {id}")))
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
    q: web::Query<ListQuery>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
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
