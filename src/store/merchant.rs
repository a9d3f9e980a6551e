//! The merchant's events (`invoice.stamped`, `invoice.failed`, `invoice.canceled`): one row per
//! event of any document — a Stripe or Mercado Pago sale, an API invoice, an egreso, a global,
//! a REP — written in the transaction that records the state change (the settle's write, a
//! cancellation, an adopted stamp), so that no crash loses one; drained by `notify::Sender`.

use chrono::{DateTime, Utc};

use super::exec::{Dialect, Dialected, Tx, stmt};
pub use super::rows::ClaimedWebhook;
use super::{Db, StoreError};

/// Queues the merchant event `$1` of outbox row `$3` (`$2` now). The settle's script appends
/// a condition (that its UPDATE wrote the row), hence the bare `WHERE`.
pub(super) const MERCHANT_EVENT: &str = "INSERT INTO merchant_events (outbox_id, event_type, state, attempts, run_at, created_at) \
     SELECT id, $1, 'pending', 0, $2, $2 FROM outbox WHERE id = $3";

/// In `tx`, with the outbox change that causes it: the merchant event `event` of document
/// `outbox_id`.
pub(super) async fn queue_merchant_event_in(
    tx: &mut Tx<'_>,
    event: &str,
    outbox_id: i64,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    stmt(MERCHANT_EVENT)
        .bind(event)
        .bind(now)
        .bind(outbox_id)
        .execute_in(tx, "queue the merchant event")
        .await?;
    Ok(())
}

/// Claims the next due merchant event.
static CLAIM_WEBHOOK: Dialected = Dialected::new(
    "UPDATE merchant_events SET run_at = $1, attempts = attempts + 1 \
     WHERE id = (SELECT id FROM merchant_events WHERE state = 'pending' AND run_at <= $2 \
     ORDER BY run_at, id LIMIT 1{LOCK}) \
     RETURNING id, outbox_id, event_type, payload, created_at, attempts",
    &[Dialect::SKIP_LOCKED],
);

impl Db {
    /// Claims the next due merchant event, hidden from other senders until `lease_until`.
    pub async fn claim_api_webhook(
        &self,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<ClaimedWebhook>, StoreError> {
        stmt(CLAIM_WEBHOOK.text(self.dialect()))
            .bind(lease_until)
            .bind(now)
            .writes()
            .fetch_optional(self, "claim a merchant event")
            .await
    }

    /// Fixes an event's payload before its first delivery; returns the payload now stored.
    pub async fn fix_webhook_payload(&self, id: i64, payload: &str) -> Result<String, StoreError> {
        stmt("UPDATE merchant_events SET payload = $1 WHERE id = $2 AND payload IS NULL")
            .bind(payload)
            .bind(id)
            .execute(self, "fix a merchant event's payload")
            .await?;
        let got: Option<(Option<String>,)> =
            stmt("SELECT payload FROM merchant_events WHERE id = $1")
                .bind(id)
                .fetch_optional(self, "read a merchant event's payload")
                .await?;
        Ok(got.and_then(|g| g.0).unwrap_or_else(|| payload.to_owned()))
    }

    /// Records a delivery attempt: `state` `delivered`, `failed` (given up) or `pending` again
    /// at `run_at`.
    pub async fn settle_api_webhook(
        &self,
        id: i64,
        state: &str,
        run_at: DateTime<Utc>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let delivered = (state == "delivered").then_some(now);
        stmt(
            "UPDATE merchant_events SET state = $1, run_at = $2, last_error = $3, \
             delivered_at = COALESCE($4, delivered_at) WHERE id = $5",
        )
        .bind(state)
        .bind(run_at)
        .bind(error)
        .bind(delivered)
        .bind(id)
        .execute(self, "record a merchant event's delivery")
        .await?;
        Ok(())
    }
}
