//! The outbox: the frozen comprobante of a payment, written with its folio before any PAC call.

use chrono::{DateTime, Utc};

use super::StoreError;
use super::exec::{Tx, stmt};
use super::payments::next_folio_in;
use crate::cfdi::InvoiceRequest;
use crate::domain::StampKey;

/// The comprobante to freeze with the payment. The folio is allocated in the transaction and
/// written into `request` before it is serialized.
#[derive(Debug, Clone)]
pub struct OutboxDraft {
    pub kind: String,
    pub stamp_key: StampKey,
    pub request: InvoiceRequest,
    /// `pending`, or `needs_attention` when it must not be stamped as it is.
    pub state: String,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub test_mode: bool,
}

const INSERT_OUTBOX: &str = "INSERT INTO outbox \
    (payment_id, kind, stamp_key, request_json, state, attempts, run_at, last_error_code, last_error_message, \
     test_mode, fecha, serie, folio, created_at, updated_at) \
    VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
    ON CONFLICT (stamp_key) DO NOTHING RETURNING id";

/// In `tx`, for the payment `payment_row` (webhook ingest and the API alike): the folio
/// (`explicit`, or the next of the draft's serie), written into the request, and the outbox
/// row with the frozen comprobante. Returns the row (`None` when its stamp key exists) and
/// the folio.
pub(super) async fn enqueue_in_tx(
    tx: &mut Tx<'_>,
    payment_row: i64,
    draft: &mut OutboxDraft,
    explicit: Option<String>,
    now: DateTime<Utc>,
) -> Result<(Option<i64>, String), StoreError> {
    let folio = match explicit {
        Some(f) => f,
        None => {
            let serie = draft.request.serie.clone().unwrap_or_default();
            next_folio_in(tx, &serie).await?.to_string()
        }
    };
    draft.request.folio = Some(folio.clone());
    let request_json = serde_json::to_string(&draft.request)
        .map_err(|e| StoreError::Other(format!("cannot serialize the invoice request: {e}")))?;
    let row: Option<(i64,)> = stmt(INSERT_OUTBOX)
        .bind(payment_row)
        .bind(&draft.kind)
        .bind(draft.stamp_key.as_str())
        .bind(&request_json)
        .bind(&draft.state)
        .bind(now)
        .bind(&draft.error_code)
        .bind(&draft.error_message)
        .bind(draft.test_mode)
        .bind(draft.request.fecha)
        .bind(draft.request.serie.as_deref())
        .bind(&folio)
        .bind(now)
        .bind(now)
        .fetch_optional_in(tx, "insert the outbox row")
        .await?;
    Ok((row.map(|r| r.0), folio))
}
