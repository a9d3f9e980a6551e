//! Payments (their comprobantes' folios are in `folios.rs`).

use chrono::{DateTime, Utc};

use super::exec::{Dialected, Stmt, Tx, stmt};
pub use super::rows::{InvoiceRow, PaymentRow};
use super::{Db, StoreError};
use crate::domain::PaymentStatus;

/// A payment to record (and, in [`PaymentRow`], as it was recorded).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NewPayment {
    pub provider: String,
    pub payment_id: String,
    pub event_id: String,
    /// Decimal text in major units, exact.
    pub amount: String,
    pub currency: String,
    pub method: String,
    pub forma_pago: Option<String>,
    pub customer_json: String,
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    /// At ingest: `invoice_pending`, `awaiting_global` or `needs_attention`.
    pub status: PaymentStatus,
    pub reason: Option<String>,
    /// Other references the customer may hold for this sale (Checkout Session id, receipt
    /// number, order reference), for the portal's look-up; `payment_id` always is one.
    #[sqlx(skip)]
    pub references: Vec<String>,
    /// The sale's lines as the provider described them (JSON of `basket::SaleLine`s); `None`
    /// for a sale of one Concepto with the `[invoice]` keys.
    #[sqlx(default)]
    pub lines_json: Option<String>,
    /// The TipoCambio found at ingest for a sale not in MXN (decimal text): the factura
    /// global and the portal invoice the sale with it later.
    #[sqlx(default)]
    pub tipo_cambio: Option<String>,
    /// An ARS sale's voucher, frozen with it in the outbox (kind `arca`); `None` otherwise.
    #[sqlx(skip)]
    pub arca: Option<super::ArcaDraft>,
}

const INSERT_PAYMENT: &str = "INSERT INTO payments \
    (provider, payment_id, event_id, amount, currency, method, forma_pago, customer_json, paid_at, \
     livemode, status, reason, created_at, updated_at, lines_json, tipo_cambio) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
    ON CONFLICT (provider, payment_id) DO NOTHING RETURNING id";

/// A [`PaymentRow`]'s columns, for a `WHERE` to follow.
pub(super) const SELECT_PAYMENT: &str = "SELECT id, provider, payment_id, event_id, amount, \
    currency, method, forma_pago, customer_json, paid_at, livemode, status, reason, created_at, lines_json, \
    tipo_cambio \
    FROM payments";

/// Payments with their invoice state (the sales: the payment rows of a factura global and of an
/// egreso are left out). The receptor's RFC is read out of the frozen JSON, which each backend
/// does with its own function.
static LIST_INVOICES: Dialected = Dialected::new(
    "SELECT p.provider, p.payment_id, p.amount, p.currency, p.paid_at, p.livemode, \
     COALESCE(o.state, p.status) AS status, o.serie, o.folio, o.uuid, COALESCE(o.attempts, 0) AS attempts, \
     COALESCE(o.last_error_message, p.reason) AS last_error, o.stamp_key, o.request_json, \
     {RECEPTOR_RFC} AS receptor_rfc \
     FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id AND o.kind = 'ingreso' \
     WHERE p.provider NOT IN ('global', 'refund') \
     AND (CAST($1 AS TEXT) IS NULL OR COALESCE(o.state, p.status) = $1) ORDER BY p.id",
    &[(
        "{RECEPTOR_RFC}",
        "json_extract(o.request_json, '$.receptor.rfc')",
        "o.request_json::jsonb #>> '{receptor,rfc}'",
    )],
);

/// In `tx`: records the payment; `None` when it was already recorded.
pub(super) async fn insert_payment_in(
    tx: &mut Tx<'_>,
    p: &NewPayment,
    now: DateTime<Utc>,
) -> Result<Option<i64>, StoreError> {
    let row: Option<(i64,)> = insert_payment(p, now)
        .fetch_optional_in(tx, "insert the payment")
        .await?;
    let Some((id,)) = row else {
        return Ok(None);
    };
    insert_references_in(tx, p, id).await?;
    Ok(Some(id))
}

/// [`INSERT_PAYMENT`] with `p`'s sixteen arguments.
pub(super) fn insert_payment(p: &NewPayment, now: DateTime<Utc>) -> Stmt<'_> {
    stmt(INSERT_PAYMENT)
        .bind(&p.provider)
        .bind(&p.payment_id)
        .bind(&p.event_id)
        .bind(&p.amount)
        .bind(&p.currency)
        .bind(&p.method)
        .bind(&p.forma_pago)
        .bind(&p.customer_json)
        .bind(p.paid_at)
        .bind(p.livemode)
        .bind(p.status)
        .bind(&p.reason)
        .bind(now)
        .bind(now)
        .bind(&p.lines_json)
        .bind(&p.tipo_cambio)
}

/// A SQLite script's statement: every reference of `p` as one of the payment `p` recorded with
/// its event id (only an ingest of that event inserts it, and a repeat of that ingest finds
/// its references already there). `None` when `p` has none.
pub(super) fn insert_references_of_event(p: &NewPayment) -> Option<Stmt<'_>> {
    let refs = lookup_references(p);
    if refs.is_empty() {
        return None;
    }
    let values: Vec<String> = (1..=refs.len()).map(|i| format!("(${i})")).collect();
    let n = refs.len();
    let sql = format!(
        "INSERT INTO payment_refs (reference, payment_id) SELECT r.column1, p.id \
         FROM payments p, (VALUES {}) r WHERE p.provider = ${} AND p.payment_id = ${} \
         AND p.event_id = ${} ON CONFLICT DO NOTHING",
        values.join(", "),
        n + 1,
        n + 2,
        n + 3
    );
    let q = refs.into_iter().fold(stmt(sql), |q, r| q.bind(r));
    Some(q.bind(&p.provider).bind(&p.payment_id).bind(&p.event_id))
}

/// PostgreSQL, in a `WITH` whose `pay` returns the id of the payment `p` just inserted: every
/// reference of `p` as one of that payment's (none when `pay` returned none). `None` when `p`
/// has none.
pub(super) fn insert_references_of_inserted(p: &NewPayment) -> Option<Stmt<'_>> {
    let refs = lookup_references(p);
    if refs.is_empty() {
        return None;
    }
    let values: Vec<String> = (1..=refs.len()).map(|i| format!("(${i}::text)")).collect();
    let sql = format!(
        "INSERT INTO payment_refs (reference, payment_id) SELECT r.column1, pay.id \
         FROM pay, (VALUES {}) r ON CONFLICT DO NOTHING",
        values.join(", ")
    );
    Some(refs.into_iter().fold(stmt(sql), |q, r| q.bind(r)))
}

/// In `tx`: every reference of `p` (see [`lookup_references`]) as one of payment `id`'s.
async fn insert_references_in(tx: &mut Tx<'_>, p: &NewPayment, id: i64) -> Result<(), StoreError> {
    for reference in lookup_references(p) {
        stmt("INSERT INTO payment_refs (reference, payment_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind(reference)
            .bind(id)
            .execute_in(tx, "record a reference of the payment")
            .await?;
    }
    Ok(())
}

/// In `tx`: a later delivery of a payment already recorded brings the customer's fiscal data
/// (a Checkout Session after its PaymentIntent): the sale, if it still waits for the factura
/// global or for fiscal data, takes `p`'s status, reason and customer data, and its references
/// are added. Conditional on the stored status, so the factura global's freeze, the portal and
/// this compete for the sale and the first to commit wins. The payment row when it was taken.
pub(super) async fn complete_payment_in(
    tx: &mut Tx<'_>,
    p: &NewPayment,
    now: DateTime<Utc>,
) -> Result<Option<i64>, StoreError> {
    const TAKE: &str = "UPDATE payments SET status = $1, reason = $2, customer_json = $3, \
        updated_at = $4 WHERE provider = $5 AND payment_id = $6 \
        AND status IN ('awaiting_global', 'needs_attention') RETURNING id";
    let row: Option<(i64,)> = stmt(TAKE)
        .bind(p.status)
        .bind(&p.reason)
        .bind(&p.customer_json)
        .bind(now)
        .bind(&p.provider)
        .bind(&p.payment_id)
        .fetch_optional_in(tx, "complete a payment's fiscal data")
        .await?;
    let Some((id,)) = row else {
        return Ok(None);
    };
    insert_references_in(tx, p, id).await?;
    Ok(Some(id))
}

/// A reference as it is stored and looked up: trimmed, without a leading `#`, in capitals.
pub fn normalize_reference(r: &str) -> String {
    r.trim().trim_start_matches('#').trim().to_uppercase()
}

/// The payment id and every other reference of `p`, normalized, each once.
fn lookup_references(p: &NewPayment) -> Vec<String> {
    let mut refs: Vec<String> = std::iter::once(&p.payment_id)
        .chain(&p.references)
        .map(|r| normalize_reference(r))
        .filter(|r| !r.is_empty())
        .collect();
    refs.sort();
    refs.dedup();
    refs
}

impl Db {
    /// Payments with their invoice state, oldest first; `status` filters on the shown state.
    pub async fn list_invoices(&self, status: Option<&str>) -> Result<Vec<InvoiceRow>, StoreError> {
        stmt(LIST_INVOICES.text(self.dialect()))
            .bind(status)
            .fetch_all(self, "list invoices")
            .await
    }

    pub async fn payment(&self, id: i64) -> Result<Option<PaymentRow>, StoreError> {
        stmt(format!("{SELECT_PAYMENT} WHERE id = $1"))
            .bind(id)
            .fetch_optional(self, "read a payment")
            .await
    }

    /// An operator's fix of a payment that needed attention, in one transaction: the corrected
    /// customer data replace the payment's, it becomes `invoice_pending`, `draft` is frozen
    /// (a folio taken) and the action audited. Only from `needs_attention`, so a form sent
    /// twice re-issues once: the second finds the payment already fixed (on PostgreSQL its
    /// update waits for the first to commit, then matches nothing) and changes nothing. The
    /// new outbox row, or `None` when nothing was done.
    pub async fn reissue_payment(
        &self,
        payment_row: i64,
        customer_json: &str,
        draft: &mut super::OutboxDraft,
        actor: &str,
        detail: &str,
        submission: &str,
    ) -> Result<Option<i64>, StoreError> {
        const FIX: &str = "UPDATE payments SET status = 'invoice_pending', reason = NULL, \
            customer_json = $1, updated_at = $2 WHERE id = $3 AND status = 'needs_attention'";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let fixed = stmt(FIX)
            .bind(customer_json)
            .bind(now)
            .bind(payment_row)
            .execute_in(&mut tx, "fix a payment")
            .await?;
        if fixed != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let row = super::outbox::enqueue_in_tx(&mut tx, payment_row, draft, None, now).await?;
        let Some(id) = row else {
            tx.rollback().await?;
            return Ok(None);
        };
        super::admin::audit_submitted_in(
            &mut tx,
            actor,
            "reissue",
            ("payment", payment_row),
            detail,
            submission,
            now,
        )
        .await?;
        tx.commit("commit a fixed payment").await?;
        Ok(Some(id))
    }
}
