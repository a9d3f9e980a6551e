//! Inbound payment webhooks: raw bytes in, a verified and deduplicated payment out, written with
//! its frozen outbox row in one transaction (`docs/webhooks.md` §8).
//!
//! Routes read `web::Bytes` (never a JSON extractor) so the signature is checked over the exact
//! bytes received. A 2xx is sent only once the delivery is durably stored.

mod api_get;
pub mod mercadopago;
pub mod refunds;
pub mod replay;
pub mod signature;
pub mod stripe;
pub mod stripe_api;
pub mod stripe_fetch;

use std::collections::BTreeMap;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use sha2::{Digest, Sha256};

use crate::error::WebhookError;
use crate::state::AppState;
use crate::store::{Completion, EventRow, IngestOutcome, NewEvent, PendingFetch, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Routes under `/webhooks`.
pub fn routes(cfg: &mut web::ServiceConfig, body_limit: usize) {
    cfg.service(
        web::scope("/webhooks")
            .app_data(web::PayloadConfig::new(body_limit))
            .route("/stripe", web::post().to(stripe_route))
            .route("/mercadopago", web::post().to(mercadopago_route)),
    );
}

async fn stripe_route(
    req: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, WebhookError> {
    let t = std::time::Instant::now();
    counted(stripe::PROVIDER, t, stripe_webhook(req, body, state).await)
}

async fn mercadopago_route(
    req: HttpRequest,
    body: web::Bytes,
    query: web::Query<MpQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, WebhookError> {
    let t = std::time::Instant::now();
    let answer = mercadopago_webhook(req, body, query, state).await;
    counted(mercadopago::PROVIDER, t, answer)
}

/// Counts a webhook's answer in the metrics: accepted (2xx), rejected (4xx: signature, replay,
/// malformed) or failed (5xx: stored nothing, the provider retries).
fn counted(
    provider: &str,
    since: std::time::Instant,
    answer: Result<HttpResponse, WebhookError>,
) -> Result<HttpResponse, WebhookError> {
    let status = match &answer {
        Ok(r) => r.status(),
        Err(e) => actix_web::ResponseError::status_code(e),
    };
    let outcome = match status.as_u16() {
        200..=299 => "accepted",
        400..=499 => "rejected",
        _ => "failed",
    };
    crate::metrics::webhook(provider, outcome, since.elapsed());
    answer
}

/// The stamp key of a payment's document, for its log line (`""` when it gets none: a sale
/// for the factura global has no document of its own).
fn key_of(draft: Option<&crate::store::OutboxDraft>) -> String {
    draft.map(|d| d.stamp_key.to_string()).unwrap_or_default()
}

/// The span of a sale's recording: in its document's trace when traces are exported, so the
/// webhook that recorded it and the worker that stamps it show as one.
fn recording_span(payment_id: &str, stamp_key: &str) -> tracing::Span {
    let span = tracing::info_span!("webhook.record", payment_id, stamp_key);
    if !stamp_key.is_empty() {
        crate::telemetry::in_document_trace(&span, stamp_key);
    }
    span
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The headers and query worth keeping with the raw body (signatures are not secrets).
fn audit_headers(req: &HttpRequest) -> String {
    let mut m = BTreeMap::new();
    for name in [
        "stripe-signature",
        "x-signature",
        "x-request-id",
        "content-type",
        "user-agent",
    ] {
        if let Some(v) = header(req, name) {
            m.insert(name.to_owned(), v.to_owned());
        }
    }
    if !req.query_string().is_empty() {
        m.insert("query".to_owned(), req.query_string().to_owned());
    }
    serde_json::to_string(&m).unwrap_or_else(|_| "{}".into())
}

fn event(
    provider: &str,
    event_id: String,
    event_type: String,
    status: &str,
    req: &HttpRequest,
    body: &[u8],
) -> NewEvent {
    NewEvent {
        provider: provider.to_owned(),
        event_id,
        event_type,
        status: status.to_owned(),
        reason: None,
        payment_ref: None,
        livemode: None,
        api_version: None,
        account: None,
        headers_json: audit_headers(req),
        raw_body: body.to_vec(),
        next_attempt_at: None,
    }
}

/// Keeps a signed but unreadable body for audit, then refuses it with 400.
async fn malformed(
    state: &AppState,
    provider: &str,
    req: &HttpRequest,
    body: &[u8],
    reason: String,
) -> WebhookError {
    let digest = hex::encode(Sha256::digest(body));
    let mut ev = event(
        provider,
        format!("malformed:{}", &digest[..32]),
        String::new(),
        "malformed",
        req,
        body,
    );
    ev.reason = Some(reason.clone());
    match state.db.record_event(&ev).await {
        Ok(_) => WebhookError::Malformed(reason),
        Err(e) => WebhookError::Unavailable(e),
    }
}

fn ack(outcome: &str, extra: serde_json::Value) -> HttpResponse {
    let mut body = serde_json::json!({ "received": true, "outcome": outcome });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    HttpResponse::Ok().json(body)
}

pub(crate) fn outcome_name(o: &IngestOutcome) -> &'static str {
    match o {
        IngestOutcome::DuplicateEvent => "duplicate",
        IngestOutcome::DuplicatePayment => "duplicate_payment",
        IngestOutcome::Completed { .. } => "fiscal_data_completed",
        IngestOutcome::Recorded {
            outbox_row: Some(_),
            ..
        } => "invoice_queued",
        IngestOutcome::Recorded { .. } => "payment_recorded",
    }
}

/// `POST /webhooks/stripe`.
#[tracing::instrument(skip_all, fields(event_id = tracing::field::Empty, event_type = tracing::field::Empty))]
async fn stripe_webhook(
    req: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, WebhookError> {
    let secrets: Vec<&str> = state
        .settings
        .stripe
        .webhook_secrets
        .iter()
        .map(|s| s.expose())
        .collect();
    signature::verify_stripe(
        header(&req, "stripe-signature"),
        &body,
        &secrets,
        state.settings.stripe.tolerance_seconds,
        Utc::now().timestamp(),
    )?;
    let ev = match stripe::parse(&body) {
        Ok(ev) => ev,
        Err(reason) => return Err(malformed(&state, stripe::PROVIDER, &req, &body, reason).await),
    };
    let span = tracing::Span::current();
    span.record("event_id", ev.id.as_str());
    span.record("event_type", ev.kind.as_str());
    let mut row = event(
        stripe::PROVIDER,
        ev.id.clone(),
        ev.kind.clone(),
        "processed",
        &req,
        &body,
    );
    row.livemode = Some(ev.livemode);
    row.api_version = ev.api_version.clone();
    row.account = ev.account.clone();
    let (status, reason, payment_ref) = match stripe::classify(&ev) {
        // With [stripe] api_key, what the event does not carry (line items, the exchange
        // rate) is read from the API first; the event is stored before any call.
        stripe::Meaning::Paid(facts) if state.stripe.is_some() => {
            let outcome = stripe_fetch::store_and_resolve(&state, row, &facts.payment_id).await?;
            return Ok(ack(outcome, serde_json::json!({})));
        }
        stripe::Meaning::Paid(facts) => {
            row.payment_ref = Some(facts.payment_id.clone());
            let (payment, draft, outage) = plan(&state, &facts).await;
            if let Some(why) = outage {
                tracing::warn!(payment_id = %facts.payment_id, currency = %facts.currency, reason = %why, "exchange rate source down: the sale is held");
            }
            let stamp_key = key_of(draft.as_ref());
            // A Checkout Session and its PaymentIntent arrive in either order; whichever
            // carries the customer's RFC completes the sale the other recorded first.
            let completion = if facts.customer.rfc.is_some() {
                Completion::FiscalData
            } else {
                Completion::None
            };
            let span = recording_span(&facts.payment_id, &stamp_key);
            let out = state
                .db
                .ingest(
                    &EventRow::Insert(Box::new(row)),
                    &payment,
                    draft,
                    completion,
                )
                .instrument(span.clone())
                .await?;
            span.in_scope(|| tracing::info!(payment_id = %facts.payment_id, %stamp_key, outcome = outcome_name(&out), status = %payment.status, "stripe payment"));
            // No folio: it is assigned when the worker seals the comprobante.
            return Ok(ack(
                outcome_name(&out),
                serde_json::json!({ "payment_status": payment.status, "reason": payment.reason }),
            ));
        }
        stripe::Meaning::Record {
            payment_ref,
            reason,
        } => {
            let facts = refunds::stripe_refunds(&ev.kind, ev.created, &ev.data.object);
            if !facts.is_empty() {
                row.status = "recorded".into();
                row.reason = Some(format!("{reason}: {} refund(s) credited", facts.len()));
                row.payment_ref = payment_ref;
                let out = refunds::credit(&state, Some(&row), &ev.id, &facts).await?;
                let outcome = match out {
                    crate::store::RefundOutcome::DuplicateEvent => "duplicate",
                    crate::store::RefundOutcome::Recorded(_) => "refund_recorded",
                };
                let statuses = out.said();
                return Ok(ack(outcome, serde_json::json!({ "refunds": statuses })));
            }
            ("recorded", reason, payment_ref)
        }
        stripe::Meaning::Ignore(reason) => ("ignored", reason, None),
        stripe::Meaning::Attention {
            payment_ref,
            reason,
        } => ("needs_attention", reason, payment_ref),
    };
    row.status = status.to_owned();
    row.reason = Some(reason.clone());
    row.payment_ref = payment_ref;
    let inserted = state.db.record_event(&row).await?;
    let outcome = if inserted.is_some() {
        status
    } else {
        "duplicate"
    };
    tracing::info!(outcome, %reason, "stripe event");
    Ok(ack(outcome, serde_json::json!({ "reason": reason })))
}

#[derive(Debug, serde::Deserialize)]
struct MpQuery {
    #[serde(rename = "data.id")]
    data_id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `POST /webhooks/mercadopago?data.id=…&type=payment`.
#[tracing::instrument(skip_all, fields(event_id = tracing::field::Empty, data_id = tracing::field::Empty))]
async fn mercadopago_webhook(
    req: HttpRequest,
    body: web::Bytes,
    query: web::Query<MpQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, WebhookError> {
    let mp = &state.settings.mercadopago;
    let request_id = header(&req, "x-request-id");
    // The query's data.id is the signed part of the manifest; the body is not signed, so its
    // data.id is never used in its place.
    let Some(data_id) = query.data_id.clone().filter(|d| !d.is_empty()) else {
        return Err(WebhookError::MissingDataId);
    };
    let now = Utc::now().timestamp();
    let ts = signature::verify_mercadopago(
        header(&req, "x-signature"),
        request_id,
        Some(&data_id),
        mp.webhook_secret.as_ref().map(|s| s.expose()),
        mp.tolerance_seconds,
        now,
    )?;
    let manifest = signature::mp_manifest(Some(&data_id), request_id, &ts.to_string());
    let Some(claim) = state.mp_replay.claim(manifest, ts, now) else {
        return Err(WebhookError::Replayed {
            request_id: request_id.unwrap_or("").to_owned(),
            ts,
        });
    };
    let outcome = mercadopago_notification(&req, &body, &query, &state, request_id, data_id).await;
    if outcome.is_ok() {
        claim.keep();
    }
    outcome
}

/// A verified, first-seen Mercado Pago notification: stored, then its payment fetched.
async fn mercadopago_notification(
    req: &HttpRequest,
    body: &[u8],
    query: &MpQuery,
    state: &AppState,
    request_id: Option<&str>,
    data_id: String,
) -> Result<HttpResponse, WebhookError> {
    let n = match mercadopago::Notification::parse(body) {
        Ok(n) => n,
        Err(reason) => {
            return Err(malformed(state, mercadopago::PROVIDER, req, body, reason).await);
        }
    };
    let kind = query.kind.clone().unwrap_or_else(|| n.kind().to_owned());
    let key = n.event_key(Some(&data_id), request_id);
    tracing::Span::current()
        .record("event_id", key.as_str())
        .record("data_id", data_id.as_str());
    let mut row = event(
        mercadopago::PROVIDER,
        key.clone(),
        kind.clone(),
        "ignored",
        req,
        body,
    );
    row.livemode = n.live_mode;
    row.api_version = n.api_version.clone();
    row.account = n.user_id.as_ref().map(ToString::to_string);
    row.payment_ref = Some(data_id.clone());
    if kind != "payment" {
        row.reason = Some(format!("notification type {kind:?} is not invoiced"));
        let inserted = state.db.record_event(&row).await?;
        return Ok(ack(
            if inserted.is_some() {
                "ignored"
            } else {
                "duplicate"
            },
            serde_json::json!({}),
        ));
    }
    // Stored first: from here on the notification cannot be lost, whatever the API does.
    row.status = "pending_fetch".into();
    row.next_attempt_at = Some(
        Utc::now()
            + chrono::Duration::seconds(retry_delay_seconds(
                state.settings.mercadopago.retry_interval_seconds,
                0,
            )),
    );
    let id = match state.db.record_event(&row).await? {
        Some(id) => id,
        None => match state.db.event_status(mercadopago::PROVIDER, &key).await? {
            Some((id, status)) if status == "pending_fetch" => id,
            _ => return Ok(ack("duplicate", serde_json::json!({}))),
        },
    };
    let pending = PendingFetch {
        id,
        provider: mercadopago::PROVIDER.into(),
        event_id: key,
        payment_ref: Some(data_id),
        livemode: n.live_mode,
        attempts: 0,
    };
    let outcome = resolve_mercadopago(state, &pending).await?;
    Ok(ack(outcome, serde_json::json!({})))
}

/// The payment row and draft of `facts`, its TipoCambio looked up first (outside any
/// transaction: Banxico may be asked). A sale without a rate is held; the third part says
/// the rate source did not answer, so a stored event can wait and ask again instead (see
/// [`wait_for_rate`]).
async fn plan(
    state: &AppState,
    facts: &crate::ingest::PaymentFacts,
) -> (
    crate::store::NewPayment,
    Option<crate::store::OutboxDraft>,
    Option<String>,
) {
    // An ARCA sale is invoiced in pesos: no rate is looked up (nor waited for).
    let rated = match state.ingestor.for_arca(facts) {
        true => None,
        false => {
            state
                .fx
                .tipo_cambio(&facts.currency, facts.provider_rate, facts.paid_at)
                .await
        }
    };
    let outage = match &rated {
        Some(Err(e)) if e.outage => Some(e.reason.clone()),
        Some(Err(e)) => {
            tracing::warn!(payment_id = %facts.payment_id, currency = %facts.currency, reason = %e.reason, "no exchange rate: the sale is held");
            None
        }
        _ => None,
    };
    let (payment, draft) = state
        .ingestor
        .plan_rated(facts, rated.map(|r| r.map_err(|e| e.reason)));
    (payment, draft, outage)
}

/// When the rate source did not answer (`outage`) and stored event `p` has waited fewer than
/// `[fx] outage_retries` times, reschedules it after `base` seconds, backing off, and says so:
/// the sale is planned again when the source answers, nobody has to retry it by hand. After
/// that the sale is held for a TipoCambio given in the admin.
async fn wait_for_rate(
    state: &AppState,
    p: &PendingFetch,
    outage: Option<String>,
    base: u64,
) -> Result<Option<&'static str>, StoreError> {
    let Some(why) = outage else {
        return Ok(None);
    };
    if p.attempts >= state.settings.fx.outage_retries {
        tracing::warn!(event_id = %p.event_id, payment_id = ?p.payment_ref, reason = %why, waits = p.attempts, "exchange rate source still down: the sale is held");
        return Ok(None);
    }
    let at = Utc::now() + chrono::Duration::seconds(retry_delay_seconds(base, p.attempts));
    tracing::warn!(event_id = %p.event_id, payment_id = ?p.payment_ref, reason = %why, next_attempt = %at, attempt = p.attempts + 1, "exchange rate source down; event kept for retry");
    state.db.reschedule_fetch(p.id, at, &why).await?;
    Ok(Some("stored_pending_fetch"))
}

/// Seconds before the next fetch after `attempts` failures: the configured interval `base`,
/// doubling, at most an hour.
pub(crate) fn retry_delay_seconds(base: u64, attempts: i32) -> i64 {
    let base = base.max(1);
    let factor = 1u64 << attempts.clamp(0, 6);
    i64::try_from((base * factor).min(3600)).unwrap_or(3600)
}

/// Completes a stored delivery (a Mercado Pago notification, a Stripe event waiting for the
/// Stripe API) and records what it means. A failed fetch only reschedules it.
pub async fn resolve(state: &AppState, p: &PendingFetch) -> Result<&'static str, StoreError> {
    if p.provider == stripe::PROVIDER {
        stripe_fetch::resolve(state, p).await
    } else {
        resolve_mercadopago(state, p).await
    }
}

/// Fetches the payment a stored notification points to and records what it means. A failed
/// fetch only reschedules: the notification stays stored as `pending_fetch`.
async fn resolve_mercadopago(
    state: &AppState,
    p: &PendingFetch,
) -> Result<&'static str, StoreError> {
    let data_id = p.payment_ref.clone().unwrap_or_default();
    let payment = match state.mp.payment(&data_id).await {
        Ok(payment) => payment,
        Err(e) => {
            let base = state.settings.mercadopago.retry_interval_seconds;
            let at = Utc::now() + chrono::Duration::seconds(retry_delay_seconds(base, p.attempts));
            tracing::warn!(event_id = %p.event_id, error = %e, next_attempt = %at, "payment fetch failed; kept for retry");
            state.db.reschedule_fetch(p.id, at, &e.to_string()).await?;
            return Ok("stored_pending_fetch");
        }
    };
    let payment_ref = payment.id_text();
    // The refunds it lists are recorded after the sale (a payment seen for the first time
    // already refunded is invoiced first), and only then is the notification done, whatever
    // the payment meant: a kill between the two fetches it again (the sale is a duplicate by
    // then, and each refund is recorded once by its id) instead of losing the refunds.
    let facts = refunds::mercadopago_refunds(&payment);
    let (outcome, ending) =
        resolved(state, p, &payment, payment_ref.clone(), facts.is_empty()).await?;
    if let Some(end) = ending {
        refunds::credit(state, None, &p.event_id, &facts).await?;
        state
            .db
            .finish_pending_event(
                p.id,
                end.status,
                end.reason.as_deref(),
                Some(&payment_ref),
                payment.live_mode,
            )
            .await?;
    }
    Ok(outcome)
}

/// How a stored notification ends, once what it means has been recorded.
struct Ending {
    status: &'static str,
    reason: Option<String>,
}

/// Records what the fetched `payment` means for the stored notification `p`, and ends `p` when
/// `finish` (the sale's own transaction does). Otherwise it returns how `p` is to end, which
/// the caller writes after the payment's refunds; `None` when `p` stays stored (it waits for
/// an exchange rate).
async fn resolved(
    state: &AppState,
    p: &PendingFetch,
    payment: &mercadopago::Payment,
    payment_ref: String,
    finish: bool,
) -> Result<(&'static str, Option<Ending>), StoreError> {
    let (status, reason) = match payment.meaning(&p.event_id, p.livemode) {
        mercadopago::Meaning::Paid(facts) => {
            let (row, draft, outage) = plan(state, &facts).await;
            let base = state.settings.mercadopago.retry_interval_seconds;
            if let Some(waiting) = wait_for_rate(state, p, outage, base).await? {
                return Ok((waiting, None));
            }
            let stamp_key = key_of(draft.as_ref());
            let span = recording_span(&facts.payment_id, &stamp_key);
            let out = state
                .db
                .ingest(
                    &EventRow::Stored {
                        id: p.id,
                        payment_ref,
                        livemode: facts.livemode,
                        finish,
                    },
                    &row,
                    draft,
                    Completion::None,
                )
                .instrument(span.clone())
                .await?;
            span.in_scope(|| tracing::info!(payment_id = %facts.payment_id, %stamp_key, outcome = outcome_name(&out), status = %row.status, "mercadopago payment"));
            let ending = (!finish).then_some(Ending {
                status: "processed",
                reason: None,
            });
            return Ok((outcome_name(&out), ending));
        }
        mercadopago::Meaning::Record(reason) => ("recorded", reason),
        mercadopago::Meaning::Attention(reason) => ("needs_attention", reason),
    };
    if !finish {
        let reason = Some(reason);
        return Ok((status, Some(Ending { status, reason })));
    }
    state
        .db
        .finish_pending_event(
            p.id,
            status,
            Some(&reason),
            Some(&payment_ref),
            payment.live_mode,
        )
        .await?;
    Ok((status, None))
}

/// Background retry of stored deliveries whose data could not be fetched (Mercado Pago
/// payments, the Stripe API). Runs until `token` is cancelled; beats the `mp_fetch_retry`
/// heartbeat each round.
pub async fn fetch_retry_loop(state: web::Data<AppState>, token: CancellationToken) {
    let s = &state.settings;
    let interval = Duration::from_secs(
        s.mercadopago
            .retry_interval_seconds
            .min(s.stripe.retry_interval_seconds)
            .max(1),
    );
    // A Stripe event may take several reads (line items pages, charge, balance transaction).
    let slowest = s
        .mercadopago
        .fetch_timeout_seconds
        .max(s.stripe.fetch_timeout_seconds * 4);
    let lease = Duration::from_secs(slowest * 2 + 30);
    // Each round races the token, so a stop ends the loop wherever it is.
    while token
        .run_until_cancelled(fetch_retry_round(&state, lease, interval))
        .await
        .is_some()
    {}
}

/// One round of [`fetch_retry_loop`]: a batch of stored notifications, or a sleep when none
/// is due.
async fn fetch_retry_round(state: &AppState, lease: Duration, interval: Duration) {
    state.health.beat(crate::health::MP_FETCH_RETRY);
    match state.db.claim_pending_fetches(lease, 20).await {
        Ok(batch) => {
            for p in &batch {
                if let Err(e) = resolve(state, p).await {
                    tracing::warn!(event_id = %p.event_id, error = %e, "stored notification not resolved");
                }
            }
            if !batch.is_empty() {
                return;
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot claim stored notifications"),
    }
    tokio::time::sleep(interval).await;
}
