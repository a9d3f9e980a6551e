//! The outbox's ARCA rows (kind `arca`), its third part beside `outbox.rs` and `settle.rs`:
//! an ARS sale's voucher frozen in the transaction that records the payment (an
//! [`crate::arca::order::Order`] as its `request_json`, under the sale's ARCA key); a
//! refund's nota de crédito frozen once its sale's voucher is authorized (as an egreso waits
//! for its ingreso's stamp), with a payment row of its own as an egreso has, under
//! `refund:{provider}:{refund id}`; the ARCA lane's list of those due, and every change of
//! their state: `arca_pending` → `arca_authorized`,
//! or `arca_held` for a human, and back to `arca_pending` when the human corrects the sale
//! (a new order under a new key) or re-issues a conflict. The payment's own status moves in
//! the same transactions (`arca_pending`, `arca_authorized`, `needs_attention`): the dashboard
//! counts a sale by its voucher's state, spelled as the sale's.
//!
//! A row has no folio, no sealed bytes and no UUID: ARCA numbers the voucher when the lane
//! reserves it (`arca_vouchers`, `arca.rs`), and that reservation holds the exact input sent.

use chrono::{DateTime, Utc};

use super::exec::{Tx, stmt};
use super::{Db, StoreError};
use crate::domain::{DocumentKind, DocumentState, PaymentStatus};

/// An ARS sale's voucher to freeze with its payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArcaDraft {
    /// The sale's ARCA key, `{provider}:{payment_id}`.
    pub key: String,
    /// The frozen order (JSON), or why the sale cannot be issued as it is (held for a human).
    pub order: Result<String, String>,
}

impl ArcaDraft {
    /// The payment's status and reason that go with it.
    pub fn payment_status(&self) -> (PaymentStatus, String) {
        match &self.order {
            Ok(_) => (
                PaymentStatus::ArcaPending,
                "waiting for its ARCA voucher (Argentina)".into(),
            ),
            Err(why) => (PaymentStatus::NeedsAttention, format!("ARCA: {why}")),
        }
    }
}

/// A frozen voucher due at the ARCA lane: a sale's, or a refund's nota de crédito.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaOrderRow {
    /// The outbox row.
    pub id: i64,
    /// The payment's row (a nota's own, provider `refund`).
    pub payment_row: i64,
    pub provider: String,
    pub payment_id: String,
    /// For a nota de crédito, its refund's row.
    pub refund_row: Option<i64>,
    /// The key its voucher is issued under (the sale's, or a correction's attempt).
    pub stamp_key: String,
    /// The frozen order (JSON).
    pub request_json: String,
}

/// An ARS sale recorded `arca_pending` before its voucher was frozen in the outbox.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaUnfrozenSale {
    /// The payment's row.
    pub id: i64,
    pub provider: String,
    pub payment_id: String,
    /// Decimal text in pesos.
    pub amount: String,
    /// The buyer's data (`crate::ingest::CustomerData`: its `identification`).
    pub customer_json: String,
    pub livemode: bool,
}

/// In `tx`: the outbox row of `draft` for payment `payment_row` (`arca_pending`, or
/// `arca_held` with its reason); `None` when its key exists (a redelivery writes nothing).
pub(super) async fn enqueue_arca_in(
    tx: &mut Tx<'_>,
    payment_row: i64,
    draft: &ArcaDraft,
    livemode: bool,
    now: DateTime<Utc>,
) -> Result<Option<i64>, StoreError> {
    let (state, json, why) = match &draft.order {
        Ok(json) => (DocumentState::ArcaPending, json.as_str(), None),
        Err(why) => (DocumentState::ArcaHeld, "null", Some(why.as_str())),
    };
    // `fecha` is when it was frozen; the voucher's date (CbteFch) is given at reservation.
    let row: Option<(i64,)> = stmt(
        "INSERT INTO outbox (payment_id, kind, stamp_key, request_json, state, attempts, \
         run_at, last_error_message, test_mode, fecha, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9, $6, $6) \
         ON CONFLICT (stamp_key) DO NOTHING RETURNING id",
    )
    .bind(payment_row)
    .bind(DocumentKind::Arca)
    .bind(&draft.key)
    .bind(json)
    .bind(state)
    .bind(now)
    .bind(why)
    .bind(!livemode)
    .bind(now.naive_utc())
    .fetch_optional_in(tx, "freeze an ARS sale's voucher")
    .await?;
    Ok(row.map(|r| r.0))
}

/// In `tx`: the ARCA row of sale `payment_row`, still `arca_pending`, settled `state`
/// (`arca_authorized`, or `arca_held` with `reason` as its error); how many rows moved.
pub(super) async fn settle_arca_in(
    tx: &mut Tx<'_>,
    payment_row: i64,
    state: DocumentState,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    stmt(
        "UPDATE outbox SET state = $1, last_error_message = $2, attempts = attempts + 1, \
         updated_at = $3 WHERE payment_id = $4 AND kind = 'arca' AND state = 'arca_pending'",
    )
    .bind(state)
    .bind((state == DocumentState::ArcaHeld).then_some(reason))
    .bind(now)
    .bind(payment_row)
    .execute_in(tx, "settle an ARS sale's outbox row")
    .await
}

/// In `tx`: the held ARCA row of sale `provider:payment_id` back to `arca_pending`, under
/// `key` with `order` (JSON) when a human corrected it, else as it was (a conflict re-issued:
/// the issuer follows the conflict to its next attempt).
pub(super) async fn back_to_arca_row_in(
    tx: &mut Tx<'_>,
    (provider, payment_id): (&str, &str),
    refrozen: Option<(&str, &str)>,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    let (key, order) = refrozen.unzip();
    stmt(
        "UPDATE outbox SET state = 'arca_pending', last_error_message = NULL, \
         stamp_key = COALESCE($1, stamp_key), request_json = COALESCE($2, request_json), \
         updated_at = $3 WHERE kind = 'arca' AND state = 'arca_held' AND payment_id = \
         (SELECT id FROM payments WHERE provider = $4 AND payment_id = $5)",
    )
    .bind(key)
    .bind(order)
    .bind(now)
    .bind(provider)
    .bind(payment_id)
    .execute_in(tx, "send an ARS sale's outbox row back to ARCA")
    .await
}

/// A refund's own payment row, as an egreso's (provider `refund`, payment id
/// `{provider}:{refund id}`), for its nota de crédito; `$1` the refund's row, `$2` now.
const INSERT_NOTA_PAYMENT: &str = "INSERT INTO payments (provider, payment_id, event_id, \
    amount, currency, method, forma_pago, customer_json, paid_at, livemode, status, reason, \
    created_at, updated_at) \
    SELECT 'refund', r.provider || ':' || r.refund_id, r.event_id, r.amount, r.currency, \
    'refund', NULL, '{}', r.refunded_at, p.livemode, 'arca_pending', \
    'refund ' || r.refund_id || ' of ' || r.provider || ' ' || r.payment_ref || \
    ': its nota de crédito at ARCA', $2, $2 \
    FROM refunds r JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_ref \
    WHERE r.id = $1 ON CONFLICT (provider, payment_id) DO NOTHING RETURNING id, livemode";

impl Db {
    /// Refunds waiting for their nota de crédito (`arca_pending`) whose sale ARCA authorized
    /// and whose nota is not frozen yet, oldest first.
    pub async fn arca_unfrozen_refunds(
        &self,
        limit: i64,
    ) -> Result<Vec<super::ArcaRefundRow>, StoreError> {
        stmt(
            "SELECT r.id, r.provider, r.refund_id, r.payment_ref, r.amount FROM refunds r \
             JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_ref \
             WHERE r.status = 'arca_pending' AND r.outbox_id IS NULL \
             AND p.status = 'arca_authorized' ORDER BY r.id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self, "list refunds whose nota de crédito is not frozen")
        .await
    }

    /// Freezes the nota de crédito `draft` of refund `refund_row` (still `arca_pending`, none
    /// frozen) in one transaction: its payment row of its own, its outbox row, and the refund
    /// naming it. `false` when it was frozen already.
    pub async fn arca_freeze_nota(
        &self,
        refund_row: i64,
        draft: &ArcaDraft,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        // Taken first: another instance freezing it waits here, then finds it frozen.
        let taken = stmt(
            "UPDATE refunds SET updated_at = $1 \
             WHERE id = $2 AND status = 'arca_pending' AND outbox_id IS NULL",
        )
        .bind(now)
        .bind(refund_row)
        .execute_in(&mut tx, "take a refund to freeze its nota")
        .await?;
        let payment: Option<(i64, bool)> = match taken {
            1 => {
                stmt(INSERT_NOTA_PAYMENT)
                    .bind(refund_row)
                    .bind(now)
                    .fetch_optional_in(&mut tx, "record a nota's payment row")
                    .await?
            }
            _ => None,
        };
        let Some((payment_row, livemode)) = payment else {
            tx.rollback().await?;
            return Ok(false);
        };
        let Some(outbox) = enqueue_arca_in(&mut tx, payment_row, draft, livemode, now).await?
        else {
            tx.rollback().await?;
            return Ok(false);
        };
        stmt("UPDATE refunds SET outbox_id = $1 WHERE id = $2")
            .bind(outbox)
            .bind(refund_row)
            .execute_in(&mut tx, "name the refund's nota")
            .await?;
        tx.commit("freeze a nota de crédito").await?;
        Ok(true)
    }

    /// Frozen vouchers due at the ARCA lane (`arca_pending`), oldest first.
    pub async fn arca_orders(&self, limit: i64) -> Result<Vec<ArcaOrderRow>, StoreError> {
        stmt(
            "SELECT o.id, o.payment_id AS payment_row, p.provider, p.payment_id, \
             r.id AS refund_row, o.stamp_key, o.request_json \
             FROM outbox o JOIN payments p ON p.id = o.payment_id \
             LEFT JOIN refunds r ON r.outbox_id = o.id \
             WHERE o.kind = 'arca' AND o.state = 'arca_pending' ORDER BY o.id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self, "list the ARS sales due at ARCA")
        .await
    }

    /// ARS sales `arca_pending` without a frozen voucher (recorded by a version that froze
    /// none: the ARCA lane freezes them), oldest first.
    pub async fn arca_unfrozen_sales(
        &self,
        limit: i64,
    ) -> Result<Vec<ArcaUnfrozenSale>, StoreError> {
        stmt(
            "SELECT id, provider, payment_id, amount, customer_json, livemode FROM payments p \
             WHERE status = 'arca_pending' \
             AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.payment_id = p.id AND o.kind = 'arca') \
             ORDER BY id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self, "list the ARS sales without a frozen voucher")
        .await
    }

    /// Freezes `draft` for sale `sale` (an [`ArcaUnfrozenSale`]), still `arca_pending`: its
    /// outbox row, and the sale held when the draft is. `false` when it was frozen already.
    pub async fn arca_freeze(
        &self,
        sale: &ArcaUnfrozenSale,
        draft: &ArcaDraft,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        if enqueue_arca_in(&mut tx, sale.id, draft, sale.livemode, now)
            .await?
            .is_none()
        {
            tx.rollback().await?;
            return Ok(false);
        }
        let (status, reason) = draft.payment_status();
        stmt(
            "UPDATE payments SET status = $1, reason = $2, updated_at = $3 \
             WHERE id = $4 AND status = 'arca_pending'",
        )
        .bind(status)
        .bind(reason)
        .bind(now)
        .bind(sale.id)
        .execute_in(&mut tx, "hold an ARS sale")
        .await?;
        tx.commit("freeze an ARS sale's voucher").await?;
        Ok(true)
    }
}
