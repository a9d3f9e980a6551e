//! Idempotency keys at work: what a key says about a new request with it, the 201 fixed once
//! and replayed to every retry, and the purge of expired keys.

use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::keys::RequestKey;
use super::view::{invoice_json, json_response};
use crate::domain::DocumentState;
use crate::error::ApiError;
use crate::store::Db;
use crate::store::api::ApiInvoiceRow;

/// What an idempotency key says about a new request with it.
pub(super) enum KeyState {
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

pub(super) async fn key_state(
    db: &Db,
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
    // Unknown, or still in flight after the first request was answered 503 for it.
    let answered_unknown = rec.response_status == Some(503);
    if inv.state == DocumentState::Unknown
        || (answered_unknown && inv.state == DocumentState::Stamping)
    {
        return Ok(KeyState::OutcomeUnknown(inv.public_id));
    }
    Ok(KeyState::InProgress(inv.public_id))
}

/// Fixes the 201 of a stamped invoice under its key; whoever stores first wins and every
/// caller returns what is stored.
pub(super) async fn stored_201(
    db: &Db,
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

pub(super) fn key_answer(state: KeyState, key: &RequestKey) -> Result<HttpResponse, ApiError> {
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

/// Purges expired idempotency keys every `every` until `token` is cancelled.
pub async fn purge_loop(db: Db, every: Duration, token: CancellationToken) {
    let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        match db.purge_idempotency(Utc::now()).await {
            Ok(0) => {}
            Ok(n) => info!(keys = n, "expired idempotency keys purged"),
            Err(e) => warn!(error = %e, "idempotency keys could not be purged"),
        }
    }
}
