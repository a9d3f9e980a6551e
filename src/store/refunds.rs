//! Refunds (`refunds`): each one a provider reported as succeeded, recorded once by its id, and
//! what it became — an egreso frozen in the same transaction, a wait for the original's UUID
//! (`awaiting_original`), a smaller share of the coming factura global (`global_reduced`), or
//! for a sale ARCA invoices a nota de crédito to issue (`arca_pending`, `arca_refunds.rs`).
//!
//! What a refund becomes is decided outside the store (`crate::refund`), from what the
//! transaction read of its sale ([`RefundSale`]); the store only reads, locks and writes. An
//! egreso's outbox row hangs from a payment row of its own (provider `refund`), as a global's.

use chrono::{DateTime, Utc};

use super::events::{NewEvent, insert_event};
use super::exec::{Tx, spelled_list, stmt};
use super::outbox::{OutboxDraft, enqueue_in_tx};
use super::payments::{NewPayment, insert_payment_in};
use super::{Db, StoreError};
use crate::domain::{DocumentState, PaymentStatus, RefundStatus};

/// A refund to record.
#[derive(Debug, Clone)]
pub struct NewRefund {
    pub provider: String,
    pub refund_id: String,
    /// The sale's payment id at the provider.
    pub payment_ref: String,
    /// Decimal text in major units.
    pub amount: String,
    pub currency: String,
    pub refunded_at: DateTime<Utc>,
    pub event_id: String,
}

/// A document a refund may credit: the sale's ingreso or the global that covered it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Credited {
    pub outbox_id: i64,
    pub state: DocumentState,
    pub uuid: Option<String>,
    pub request_json: String,
}

/// What the refund's transaction read, under the sale's row lock.
#[derive(Debug, Clone)]
pub struct RefundSale {
    pub refund_row: i64,
    pub refund: NewRefund,
    /// The sale: `None` while its payment is not recorded (the refund came first).
    pub sale: Option<SaleRow>,
    /// Its own ingreso, when it has one.
    pub ingreso: Option<Credited>,
    /// The factura global it is in, when it is.
    pub global: Option<Credited>,
    /// Decimal text of each refund of the sale already credited (egreso or global reduction).
    pub refunded_before: Vec<String>,
    /// Those of them the factura global carried less of (`global_reduced`): its concepto is
    /// the sale less these.
    pub reduced_in_global: Vec<String>,
    /// The frozen request (JSON) of each egreso of the sale already frozen, oldest first.
    pub earlier_egresos: Vec<String>,
    /// The policy `cancel` was tried for it and the ingreso could not be cancelled.
    pub cancel_refused: bool,
}

/// The sale a refund refunds.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SaleRow {
    pub id: i64,
    pub amount: String,
    pub currency: String,
    pub status: PaymentStatus,
    pub livemode: bool,
    pub paid_at: DateTime<Utc>,
}

/// What a refund becomes (decided by `crate::refund::Planner`).
#[derive(Debug, Clone)]
pub enum RefundDecision {
    /// Freeze this egreso now, on this payment row of its own.
    Egreso {
        payment: Box<NewPayment>,
        draft: Box<OutboxDraft>,
    },
    /// Wait (`awaiting_original`) for the reason given.
    Wait(String),
    /// The sale is still waiting for its global: the global will carry it less this refund.
    GlobalReduced(String),
    /// Cannot be credited as it is (more than the sale, another currency): `needs_attention`.
    Attention(String),
    /// A full refund under `[refunds] full = "cancel"`: the ingreso (this outbox row) is to be
    /// cancelled with motivo 02 instead of credited (`canceling`).
    Cancel { ingreso: i64, reason: String },
    /// A sale ARCA invoices (Argentina): a nota de crédito, issued by the ARCA loop once the
    /// sale's voucher is authorized (`arca_pending`).
    Arca(String),
}

/// What one refund delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The event was recorded already: nothing written.
    DuplicateEvent,
    /// The refunds it carried, by status after the transaction (`None` for a refund
    /// recorded earlier, left as it was).
    Recorded(Vec<Option<RefundStatus>>),
}

impl RefundOutcome {
    /// Each refund's status as the webhook's answer says it: `duplicate` for one recorded
    /// earlier.
    pub fn said(&self) -> Vec<&'static str> {
        match self {
            Self::DuplicateEvent => Vec::new(),
            Self::Recorded(s) => s
                .iter()
                .map(|s| s.map_or("duplicate", RefundStatus::as_str))
                .collect(),
        }
    }
}

const INSERT_REFUND: &str = "INSERT INTO refunds \
    (provider, refund_id, payment_ref, amount, currency, refunded_at, event_id, status, created_at, updated_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, 'awaiting_original', $8, $8) \
    ON CONFLICT (provider, refund_id) DO NOTHING RETURNING id";

/// In `tx`: reads what refund `refund_row` (still `awaiting_original`) refunds, asks `plan`
/// and writes its answer. Two refunds of one sale are serialized on the sale's payment row,
/// so each sees the other's credit. Returns the refund's status.
async fn settle_refund_in<F>(
    tx: &mut Tx<'_>,
    refund_row: i64,
    (refund, cancel_refused): (NewRefund, bool),
    plan: &F,
    now: DateTime<Utc>,
) -> Result<RefundStatus, StoreError>
where
    F: Fn(&RefundSale) -> RefundDecision,
{
    // Taken first: the lock every refund of this sale (and the global's freeze) waits on.
    stmt("UPDATE payments SET updated_at = updated_at WHERE provider = $1 AND payment_id = $2")
        .bind(&refund.provider)
        .bind(&refund.payment_ref)
        .execute_in(tx, "lock the refunded sale")
        .await?;
    let sale: Option<SaleRow> = stmt(
        "SELECT id, amount, currency, status, livemode, paid_at FROM payments \
         WHERE provider = $1 AND payment_id = $2",
    )
    .bind(&refund.provider)
    .bind(&refund.payment_ref)
    .fetch_optional_in(tx, "read the refunded sale")
    .await?;
    let (mut ingreso, mut global) = (None, None);
    if let Some(s) = &sale {
        ingreso = stmt(
            "SELECT id AS outbox_id, state, uuid, request_json FROM outbox \
             WHERE payment_id = $1 AND kind = 'ingreso'",
        )
        .bind(s.id)
        .fetch_optional_in(tx, "read the refunded sale's ingreso")
        .await?;
        global = stmt(
            "SELECT o.id AS outbox_id, o.state, o.uuid, o.request_json FROM global_members m \
             JOIN outbox o ON o.id = m.outbox_id WHERE m.payment_row = $1",
        )
        .bind(s.id)
        .fetch_optional_in(tx, "read the refunded sale's global")
        .await?;
    }
    let before: Vec<(String, RefundStatus)> = stmt(format!(
        "SELECT amount, status FROM refunds WHERE provider = $1 AND payment_ref = $2 \
         AND status IN {} AND id <> $3 ORDER BY id",
        spelled_list(RefundStatus::CREDITED.iter().map(|s| s.as_str()))
    ))
    .bind(&refund.provider)
    .bind(&refund.payment_ref)
    .bind(refund_row)
    .fetch_all_in(tx, "read the sale's earlier refunds")
    .await?;
    let earlier: Vec<(String,)> = stmt(
        "SELECT o.request_json FROM refunds r JOIN outbox o ON o.id = r.outbox_id \
         WHERE r.provider = $1 AND r.payment_ref = $2 AND r.status = 'egreso' AND r.id <> $3 \
         ORDER BY r.id",
    )
    .bind(&refund.provider)
    .bind(&refund.payment_ref)
    .bind(refund_row)
    .fetch_all_in(tx, "read the sale's earlier egresos")
    .await?;
    let view = RefundSale {
        refund_row,
        refund,
        sale,
        ingreso,
        global,
        reduced_in_global: before
            .iter()
            .filter(|r| r.1 == RefundStatus::GlobalReduced)
            .map(|r| r.0.clone())
            .collect(),
        refunded_before: before.into_iter().map(|r| r.0).collect(),
        earlier_egresos: earlier.into_iter().map(|r| r.0).collect(),
        cancel_refused,
    };
    let (status, reason, outbox) = match plan(&view) {
        RefundDecision::Egreso { payment, mut draft } => {
            let Some(payment_row) = insert_payment_in(tx, &payment, now).await? else {
                return Err(StoreError::Other(format!(
                    "refund {} already has a payment row of its own",
                    payment.payment_id
                )));
            };
            let outbox = enqueue_in_tx(tx, payment_row, &mut draft, None, now).await?;
            (RefundStatus::Egreso, None, outbox)
        }
        RefundDecision::Wait(r) => (RefundStatus::AwaitingOriginal, Some(r), None),
        RefundDecision::GlobalReduced(r) => (RefundStatus::GlobalReduced, Some(r), None),
        RefundDecision::Attention(r) => (RefundStatus::NeedsAttention, Some(r), None),
        RefundDecision::Cancel { ingreso, reason } => {
            (RefundStatus::Canceling, Some(reason), Some(ingreso))
        }
        RefundDecision::Arca(r) => (RefundStatus::ArcaPending, Some(r), None),
    };
    stmt("UPDATE refunds SET status = $1, reason = $2, outbox_id = $3, updated_at = $4 WHERE id = $5")
        .bind(status)
        .bind(reason)
        .bind(outbox)
        .bind(now)
        .bind(refund_row)
        .execute_in(tx, "record what the refund became")
        .await?;
    Ok(status)
}

/// Refunds waiting for their original whose sale may now be credited: its ingreso or global
/// stamped, or the sale waiting for a global.
const WAITING_READY: &str = "SELECT r.id, r.provider, r.refund_id, r.payment_ref, r.amount, \
    r.currency, r.refunded_at, r.event_id, r.cancel_refused FROM refunds r \
    JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_ref \
    WHERE r.status = 'awaiting_original' AND (p.status IN ('awaiting_global', 'arca_pending', 'arca_authorized') \
    OR EXISTS (SELECT 1 FROM outbox o WHERE o.payment_id = p.id AND o.kind = 'ingreso' AND o.state = 'stamped') \
    OR EXISTS (SELECT 1 FROM global_members m JOIN outbox g ON g.id = m.outbox_id \
               WHERE m.payment_row = p.id AND g.state = 'stamped')) \
    ORDER BY r.id LIMIT 50";

#[derive(sqlx::FromRow)]
struct WaitingRow {
    id: i64,
    provider: String,
    refund_id: String,
    payment_ref: String,
    amount: String,
    currency: String,
    refunded_at: DateTime<Utc>,
    event_id: String,
    cancel_refused: bool,
}

/// A refund whose sale's ingreso is being cancelled instead (`canceling`), with where its
/// cancellation stands.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CancelingRefund {
    pub id: i64,
    pub refund_id: String,
    /// The ingreso to cancel.
    pub outbox_id: i64,
    /// Its cancellation's state, once requested.
    pub cancellation: Option<String>,
    pub cancel_error: Option<String>,
}

impl Db {
    /// Refunds per status (the chaos run waits for those still on their way to an egreso).
    pub async fn refund_counts(&self) -> Result<Vec<(RefundStatus, i64)>, StoreError> {
        stmt("SELECT status AS state, COUNT(*) AS n FROM refunds GROUP BY status ORDER BY status")
            .fetch_all(self, "count refunds")
            .await
    }

    /// In one transaction: the delivery `event` (when given; a redelivery writes nothing), each
    /// refund not recorded yet, and what `plan` makes of it (an egreso is frozen here). A
    /// refund recorded earlier is left as it is.
    pub async fn record_refunds<F>(
        &self,
        event: Option<&NewEvent>,
        refunds: &[NewRefund],
        plan: F,
    ) -> Result<RefundOutcome, StoreError>
    where
        F: Fn(&RefundSale) -> RefundDecision,
    {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        if let Some(ev) = event {
            let row: Option<(i64,)> = insert_event(ev, now)
                .fetch_optional_in(&mut tx, "insert the webhook event")
                .await?;
            if row.is_none() {
                tx.rollback().await?;
                return Ok(RefundOutcome::DuplicateEvent);
            }
        }
        let mut statuses = Vec::with_capacity(refunds.len());
        for r in refunds {
            let row: Option<(i64,)> = stmt(INSERT_REFUND)
                .bind(&r.provider)
                .bind(&r.refund_id)
                .bind(&r.payment_ref)
                .bind(&r.amount)
                .bind(&r.currency)
                .bind(r.refunded_at)
                .bind(&r.event_id)
                .bind(now)
                .fetch_optional_in(&mut tx, "insert the refund")
                .await?;
            let status = match row {
                Some((id,)) => {
                    Some(settle_refund_in(&mut tx, id, (r.clone(), false), &plan, now).await?)
                }
                None => None,
            };
            statuses.push(status);
        }
        tx.commit("commit the refund").await?;
        Ok(RefundOutcome::Recorded(statuses))
    }

    /// Refunds that waited for their original and may go on now (the ingreso or the global
    /// was stamped, or the sale waits for a global): each decided again by `plan`, in a
    /// transaction of its own. Returns how many left `awaiting_original`.
    pub async fn release_waiting_refunds<F>(&self, plan: F) -> Result<usize, StoreError>
    where
        F: Fn(&RefundSale) -> RefundDecision,
    {
        let ready: Vec<WaitingRow> = stmt(WAITING_READY)
            .fetch_all(self, "read the refunds ready to be credited")
            .await?;
        let mut released = 0;
        for w in ready {
            let now = Utc::now();
            let mut tx = self.begin().await?;
            // Still waiting? Another instance may have taken it in the meantime.
            let still = stmt(
                "UPDATE refunds SET updated_at = $1 WHERE id = $2 AND status = 'awaiting_original'",
            )
            .bind(now)
            .bind(w.id)
            .execute_in(&mut tx, "take a waiting refund")
            .await?;
            if still == 0 {
                tx.rollback().await?;
                continue;
            }
            let refund = NewRefund {
                provider: w.provider,
                refund_id: w.refund_id,
                payment_ref: w.payment_ref,
                amount: w.amount,
                currency: w.currency,
                refunded_at: w.refunded_at,
                event_id: w.event_id,
            };
            let status =
                settle_refund_in(&mut tx, w.id, (refund, w.cancel_refused), &plan, now).await?;
            tx.commit("commit the released refund").await?;
            if status != RefundStatus::AwaitingOriginal {
                released += 1;
            }
        }
        Ok(released)
    }

    /// Refunds whose ingreso is being cancelled instead of credited, with their cancellation.
    pub async fn canceling_refunds(&self) -> Result<Vec<CancelingRefund>, StoreError> {
        stmt(
            "SELECT r.id, r.refund_id, r.outbox_id, c.state AS cancellation, \
             c.last_error_message AS cancel_error FROM refunds r \
             LEFT JOIN cancellations c ON c.outbox_id = r.outbox_id \
             WHERE r.status = 'canceling' AND r.outbox_id IS NOT NULL ORDER BY r.id LIMIT 50",
        )
        .fetch_all(self, "read the refunds cancelling their ingreso")
        .await
    }

    /// The cancellation asked for a full refund (`canceling`) ended: `canceled`, or (it could
    /// not be had) back to `awaiting_original`, to be credited by an egreso, with `reason`.
    pub async fn settle_refund_cancel(
        &self,
        refund_row: i64,
        canceled: bool,
        reason: &str,
    ) -> Result<(), StoreError> {
        let (status, refused) = if canceled {
            (RefundStatus::Canceled, false)
        } else {
            (RefundStatus::AwaitingOriginal, true)
        };
        stmt(
            "UPDATE refunds SET status = $1, cancel_refused = $2, reason = $3, \
             outbox_id = CASE WHEN $2 THEN NULL ELSE outbox_id END, updated_at = $4 \
             WHERE id = $5 AND status = 'canceling'",
        )
        .bind(status)
        .bind(refused)
        .bind(reason)
        .bind(Utc::now())
        .bind(refund_row)
        .writes()
        .execute(self, "record how the refund's cancellation ended")
        .await?;
        Ok(())
    }

    /// The refunds of the sale recorded as payment row `payment_row`, oldest first, each with
    /// its egreso (or the ingreso it cancels) and that document's state and UUID.
    pub async fn refunds_of_sale(
        &self,
        payment_row: i64,
    ) -> Result<Vec<RefundListing>, StoreError> {
        stmt(
            "SELECT r.refund_id, r.amount, r.currency, r.status, r.reason, r.outbox_id, \
             o.payment_id AS document_payment, o.state AS document_state, o.uuid AS document_uuid \
             FROM refunds r JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_ref \
             LEFT JOIN outbox o ON o.id = r.outbox_id WHERE p.id = $1 ORDER BY r.id",
        )
        .bind(payment_row)
        .fetch_all(self, "read the refunds of a sale")
        .await
    }
}

/// One refund of a sale, as the admin's payment page shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RefundListing {
    pub refund_id: String,
    /// Decimal text.
    pub amount: String,
    pub currency: String,
    pub status: RefundStatus,
    pub reason: Option<String>,
    /// Its egreso (or, `canceling`/`canceled`, the ingreso cancelled instead).
    pub outbox_id: Option<i64>,
    /// That document's payment row (an egreso's own), its state and UUID.
    pub document_payment: Option<i64>,
    pub document_state: Option<DocumentState>,
    pub document_uuid: Option<String>,
}
