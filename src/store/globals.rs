//! The factura global: the sales waiting for one and the deliveries recorded for them (refunds),
//! the transaction that freezes a global with its members, and what the admin and the command
//! line read (globals, their sales, every document).
//!
//! A global's outbox row hangs from a payment row of its own (provider [`GLOBAL_PROVIDER`]),
//! as an API invoice's does (provider `api`), so retry, cancel and refreeze need nothing new.

use chrono::{DateTime, Utc};

use super::admin::audit_in;
use super::exec::{Dialected, Tx, stmt};
use super::outbox::{OutboxDraft, enqueue_in_tx};
use super::payments::{NewPayment, insert_payment_in};
use super::{Db, StoreError};
use crate::domain::{DocumentState, PaymentStatus};

/// The provider of a global's own payment row.
pub const GLOBAL_PROVIDER: &str = "global";

/// A sale waiting for the factura global, or in one.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Sale {
    /// The payment row.
    pub id: i64,
    pub provider: String,
    pub payment_id: String,
    /// Decimal text in major units.
    pub amount: String,
    pub currency: String,
    pub forma_pago: Option<String>,
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    /// The exchange rate to MXN the sale carries (decimal text; migration 0017), for a sale
    /// in another currency.
    pub tipo_cambio: Option<String>,
}

/// A delivery kept for a later flow (`recorded`: refunds, disputes) of a sale waiting for the
/// global.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecordedEvent {
    pub payment_row: i64,
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub reason: Option<String>,
    pub raw_body: Vec<u8>,
}

/// Which global it is: its emisor, period, currency and place in the period's sequence (the
/// table's unique key).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GlobalIdentity {
    pub rfc_emisor: String,
    /// c_Periodicidad code.
    pub periodicidad: String,
    /// The period's first and last local dates, `YYYY-MM-DD`.
    pub period_start: String,
    pub period_end: String,
    pub moneda: String,
    pub seq: i32,
}

/// A factura global to freeze with its members, in one transaction.
#[derive(Debug, Clone)]
pub struct NewGlobal {
    pub identity: GlobalIdentity,
    /// Payment rows of the sales it covers, one concepto each.
    pub members: Vec<i64>,
    /// The comprobante's Total.
    pub total: String,
    /// The global's own payment row.
    pub payment: NewPayment,
    pub draft: OutboxDraft,
    /// The stamped global this one replaces (motivo 01), whose members it takes over.
    pub replaces: Option<i64>,
    /// Who asked (recorded in the audit log for a replacement).
    pub actor: String,
    /// The reason the members carry once in it.
    pub member_reason: String,
    /// How many refunds of the members (`global_reduced`) the amounts were reduced by, as
    /// read when planning: a refund recorded since then rolls the freeze back, so the global
    /// never carries a sale at more than was kept.
    pub reductions: usize,
}

/// What freezing a global did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frozen {
    /// Frozen as document `outbox_id` (its folio is the outbox's to allocate: read it from the
    /// document).
    Global { outbox_id: i64 },
    /// Someone else got there first (another instance froze it, the portal took a sale, a seq
    /// was taken): nothing was written; read again and plan anew.
    Changed(String),
}

/// A global with its document's state.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GlobalRow {
    pub outbox_id: i64,
    /// Its own payment row (the admin's detail page).
    pub payment_row: i64,
    #[sqlx(flatten)]
    pub identity: GlobalIdentity,
    pub payments: i32,
    pub total: String,
    pub replaces: Option<i64>,
    pub replaced_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub state: DocumentState,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub uuid: Option<String>,
    pub last_error_message: Option<String>,
}

/// A replacement (motivo 01) that is stamped while the global it replaces is not cancelled yet.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingSubstitution {
    pub replaced: i64,
    pub replacement: i64,
    pub replacement_uuid: String,
}

/// One line of `invoices list --json`: a document, or a sale that has none of its own.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct DocumentListing {
    /// The document (outbox row); `null` for a sale without a document of its own.
    pub id: Option<i64>,
    /// `ingreso`, `global` or `egreso` (`pago` once they are issued).
    pub kind: String,
    /// The provider's payment id; `null` for a global.
    pub payment_id: Option<String>,
    pub provider: Option<String>,
    pub status: String,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub uuid: Option<String>,
    pub receptor_rfc: Option<String>,
    /// Decimal text: the sale's amount, or the global's Total.
    pub total: String,
    /// The same as `total` (the name earlier versions printed).
    pub amount: String,
    pub currency: String,
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub stamp_key: Option<String>,
    /// For a sale in a factura global: the global's document and its UUID once stamped.
    pub global_id: Option<i64>,
    pub global_uuid: Option<String>,
    /// The UUID the document relates to (CfdiRelacionados): an egreso's ingreso or global, a
    /// replacement's replaced global.
    pub related_uuid: Option<String>,
    #[serde(skip)]
    pub payment_row: i64,
}

const AWAITING: &str = "SELECT id, provider, payment_id, amount, currency, forma_pago, paid_at, livemode, tipo_cambio \
    FROM payments WHERE status = 'awaiting_global' AND paid_at < $1 ORDER BY paid_at, id";

const RECORDED_EVENTS: &str = "SELECT p.id AS payment_row, e.provider, e.event_id, e.event_type, \
    e.reason, e.raw_body FROM webhook_events e \
    JOIN payments p ON p.provider = e.provider AND p.payment_id = e.payment_ref \
    WHERE p.status = 'awaiting_global' AND p.paid_at < $1 AND e.status = 'recorded' ORDER BY e.id";

/// Takes a sale out of `awaiting_global`, only if it is still there: the portal (a nominative
/// invoice) and the global compete for it, and whoever commits first wins.
const TAKE_SALE: &str = "UPDATE payments SET status = $1, reason = $2, updated_at = $3 \
    WHERE id = $4 AND status = 'awaiting_global'";

const GLOBAL_COLUMNS: &str = "g.outbox_id, o.payment_id AS payment_row, g.rfc_emisor, \
    g.periodicidad, g.period_start, g.period_end, g.moneda, g.seq, g.payments, g.total, g.replaces, \
    (SELECT r.outbox_id FROM globals r WHERE r.replaces = g.outbox_id) AS replaced_by, g.created_at, \
    o.state, o.serie, o.folio, o.uuid, o.last_error_message \
    FROM globals g JOIN outbox o ON o.id = g.outbox_id";

/// Every document, and every sale without one (with its global once included).
static LIST_DOCUMENTS: Dialected = Dialected::new(
    "SELECT * FROM (\
     SELECT o.id, o.kind, CASE WHEN o.kind = 'global' THEN NULL ELSE p.payment_id END AS payment_id, \
     CASE WHEN o.kind = 'global' THEN NULL ELSE p.provider END AS provider, o.state AS status, \
     o.serie, o.folio, o.uuid, \
     CASE WHEN o.kind = 'global' THEN 'XAXX010101000' ELSE {RECEPTOR_RFC} END AS receptor_rfc, \
     p.amount AS total, p.amount, p.currency, p.paid_at, p.livemode, o.attempts, \
     COALESCE(o.last_error_message, p.reason) AS last_error, o.stamp_key, \
     CAST(NULL AS BIGINT) AS global_id, CAST(NULL AS TEXT) AS global_uuid, \
     {RELATED_UUID} AS related_uuid, p.id AS payment_row \
     FROM outbox o JOIN payments p ON p.id = o.payment_id \
     UNION ALL \
     SELECT CAST(NULL AS BIGINT), 'ingreso', p.payment_id, p.provider, p.status, CAST(NULL AS TEXT), \
     CAST(NULL AS TEXT), CAST(NULL AS TEXT), CAST(NULL AS TEXT), p.amount, p.amount, p.currency, p.paid_at, \
     p.livemode, 0, p.reason, CAST(NULL AS TEXT), m.outbox_id, g.uuid, CAST(NULL AS TEXT), p.id \
     FROM payments p LEFT JOIN global_members m ON m.payment_row = p.id \
     LEFT JOIN outbox g ON g.id = m.outbox_id \
     WHERE p.provider <> 'global' AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.payment_id = p.id)\
     ) d WHERE (CAST($1 AS TEXT) IS NULL OR d.status = $1) ORDER BY d.payment_row, d.id",
    &[
        (
            "{RECEPTOR_RFC}",
            "json_extract(o.request_json, '$.receptor.rfc')",
            "o.request_json::jsonb #>> '{receptor,rfc}'",
        ),
        (
            "{RELATED_UUID}",
            // An egreso's first related UUID; a pago's, the invoice it pays.
            "COALESCE(json_extract(o.request_json, '$.relacionados[0].uuids[0]'), \
             json_extract(o.request_json, '$.pago.documento.uuid'))",
            "COALESCE(o.request_json::jsonb #>> '{relacionados,0,uuids,0}', \
             o.request_json::jsonb #>> '{pago,documento,uuid}')",
        ),
    ],
);

/// In `tx`: the members of `g` become its: taken out of `awaiting_global` (a new global) or
/// moved from the global it replaces. `Err(reason)` when one is not where it was read.
async fn take_members_in(
    tx: &mut Tx<'_>,
    g: &NewGlobal,
    outbox_id: i64,
    now: DateTime<Utc>,
) -> Result<Result<(), String>, StoreError> {
    const ADD: &str =
        "INSERT INTO global_members (payment_row, outbox_id, added_at) VALUES ($1, $2, $3)";
    const MOVE: &str = "UPDATE global_members SET outbox_id = $1, added_at = $2 \
        WHERE payment_row = $3 AND outbox_id = $4";
    for &member in &g.members {
        match g.replaces {
            Some(old) => {
                let n = stmt(MOVE)
                    .bind(outbox_id)
                    .bind(now)
                    .bind(member)
                    .bind(old)
                    .execute_in(tx, "move a sale to the replacement global")
                    .await?;
                if n != 1 {
                    return Ok(Err(format!(
                        "payment row {member} is no longer in global #{old}"
                    )));
                }
            }
            None => {
                stmt(ADD)
                    .bind(member)
                    .bind(outbox_id)
                    .bind(now)
                    .execute_in(tx, "record a sale of the global")
                    .await?;
            }
        }
    }
    Ok(Ok(()))
}

impl Db {
    /// Sales waiting for the factura global, paid before `before`, oldest first.
    pub async fn awaiting_global(&self, before: DateTime<Utc>) -> Result<Vec<Sale>, StoreError> {
        stmt(AWAITING)
            .bind(before)
            .fetch_all(self, "list the sales awaiting the factura global")
            .await
    }

    /// Deliveries recorded for later (refunds, disputes) of the sales [`Db::awaiting_global`]
    /// returns for `before`.
    pub async fn recorded_events_of_awaiting(
        &self,
        before: DateTime<Utc>,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        stmt(RECORDED_EVENTS)
            .bind(before)
            .fetch_all(
                self,
                "read the refunds of sales awaiting the factura global",
            )
            .await
    }

    /// When each sale waiting for the factura global was paid, and its currency (the
    /// dashboard's globals due).
    pub async fn awaiting_global_times(&self) -> Result<Vec<(DateTime<Utc>, String)>, StoreError> {
        stmt("SELECT paid_at, currency FROM payments WHERE status = 'awaiting_global'")
            .fetch_all(
                self,
                "read when the sales awaiting the factura global were paid",
            )
            .await
    }

    /// The sales that need attention and have no document (what the admin may send to the
    /// factura global), oldest first.
    pub async fn needs_attention_sales(&self) -> Result<Vec<super::PaymentRow>, StoreError> {
        stmt(format!(
            "{} WHERE status = 'needs_attention' AND provider NOT IN ('global', 'api') \
             AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.payment_id = payments.id) \
             ORDER BY paid_at, id",
            super::payments::SELECT_PAYMENT
        ))
        .fetch_all(self, "list the sales that need attention")
        .await
    }

    /// An operator sends sales that cannot be invoiced nominatively to the factura global, in
    /// one transaction: each still `needs_attention` without a document becomes
    /// `awaiting_global` (the next run puts it in its period's global), audited. Sent twice,
    /// the second finds them moved and changes nothing. The payment rows moved.
    pub async fn send_to_global(
        &self,
        payment_rows: &[i64],
        actor: &str,
    ) -> Result<Vec<i64>, StoreError> {
        const MOVE: &str = "UPDATE payments SET status = 'awaiting_global', reason = $1, \
            updated_at = $2 WHERE id = $3 AND status = 'needs_attention' \
            AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.payment_id = payments.id)";
        let now = Utc::now();
        let reason =
            format!("sent to the factura global by {actor}: it cannot be invoiced to the customer");
        let mut moved = Vec::new();
        let mut tx = self.begin().await?;
        for &row in payment_rows {
            let n = stmt(MOVE)
                .bind(&reason)
                .bind(now)
                .bind(row)
                .execute_in(&mut tx, "send a sale to the factura global")
                .await?;
            if n == 1 {
                audit_in(
                    &mut tx,
                    actor,
                    "send_to_global",
                    ("payment", row),
                    "needs_attention → awaiting_global",
                    now,
                )
                .await?;
                moved.push(row);
            }
        }
        tx.commit("commit the sales sent to the factura global")
            .await?;
        Ok(moved)
    }

    /// The sales whose ingreso failed with `code` (the PAC stamped nothing) go to the factura
    /// global: per sale, in one transaction, the failed document is set aside (`superseded`)
    /// and the sale becomes `awaiting_global`, audited. API invoices are left alone (their
    /// receptor is the merchant's to decide). The payment rows moved.
    pub async fn send_failed_to_global(
        &self,
        code: &str,
        actor: &str,
    ) -> Result<Vec<i64>, StoreError> {
        const FAILED: &str = "SELECT o.payment_id FROM outbox o JOIN payments p ON p.id = o.payment_id \
            WHERE o.kind = 'ingreso' AND o.state = 'failed' AND o.last_error_code = $1 \
            AND p.provider NOT IN ('global', 'api', 'refund') ORDER BY p.paid_at, p.id";
        const SET_ASIDE: &str = "UPDATE outbox SET state = 'superseded', updated_at = $1, \
            last_error_message = COALESCE(last_error_message, '') || ' (superseded: the sale was sent to the factura global)' \
            WHERE payment_id = $2 AND kind = 'ingreso' AND state = 'failed' AND last_error_code = $3";
        const MOVE: &str = "UPDATE payments SET status = 'awaiting_global', reason = $1, \
            updated_at = $2 WHERE id = $3";
        let rows: Vec<(i64,)> = stmt(FAILED)
            .bind(code)
            .fetch_all(self, "list the sales whose ingreso failed with a code")
            .await?;
        let now = Utc::now();
        let reason =
            format!("sent to the factura global by {actor}: its CFDI was refused with {code}");
        let mut moved = Vec::new();
        for (row,) in rows {
            let mut tx = self.begin().await?;
            let n = stmt(SET_ASIDE)
                .bind(now)
                .bind(row)
                .bind(code)
                .execute_in(&mut tx, "set a failed ingreso aside")
                .await?;
            if n != 1 {
                // Retried or refrozen meanwhile: it is no longer a failure of this group.
                tx.rollback().await?;
                continue;
            }
            stmt(MOVE)
                .bind(&reason)
                .bind(now)
                .bind(row)
                .execute_in(&mut tx, "send a sale to the factura global")
                .await?;
            audit_in(
                &mut tx,
                actor,
                "send_to_global",
                ("payment", row),
                &format!("ingreso failed with {code} → superseded; sale → awaiting_global"),
                now,
            )
            .await?;
            tx.commit("commit a failed sale sent to the factura global")
                .await?;
            moved.push(row);
        }
        Ok(moved)
    }

    /// Says why a sale still `awaiting_global` is held out of its period's global (e.g. no
    /// exchange rate); it keeps waiting. `false` when it was not waiting any more.
    pub async fn hold_from_global(
        &self,
        payment_row: i64,
        reason: &str,
    ) -> Result<bool, StoreError> {
        self.leave_out_of_global(payment_row, PaymentStatus::AwaitingGlobal, reason)
            .await
    }

    /// Refunds of the sales [`Db::awaiting_global`] returns for `before` that the global is to
    /// carry less of (`global_reduced`): `(payment row, amount)`, decimal text.
    pub async fn reductions_of_awaiting(
        &self,
        before: DateTime<Utc>,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        stmt(
            "SELECT p.id, r.amount FROM refunds r \
             JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_ref \
             WHERE p.status = 'awaiting_global' AND p.paid_at < $1 AND r.status = 'global_reduced' \
             ORDER BY r.id",
        )
        .bind(before)
        .fetch_all(
            self,
            "read the refunds of sales awaiting the factura global",
        )
        .await
    }

    /// Leaves a sale out of the factura global (`status`, e.g. `refunded`, with `reason`);
    /// `false` when it was not `awaiting_global` any more.
    pub async fn leave_out_of_global(
        &self,
        payment_row: i64,
        status: PaymentStatus,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let n = stmt(TAKE_SALE)
            .bind(status)
            .bind(reason)
            .bind(Utc::now())
            .bind(payment_row)
            .execute(self, "leave a sale out of the factura global")
            .await?;
        Ok(n == 1)
    }

    /// The next free number in the sequence of globals of one period and currency.
    pub async fn next_global_seq(
        &self,
        rfc_emisor: &str,
        periodicidad: &str,
        period_start: &str,
        moneda: &str,
    ) -> Result<i32, StoreError> {
        let (n,): (i32,) = stmt(
            "SELECT CAST(COALESCE(MAX(seq), 0) + 1 AS INTEGER) FROM globals \
             WHERE rfc_emisor = $1 AND periodicidad = $2 AND period_start = $3 AND moneda = $4",
        )
        .bind(rfc_emisor)
        .bind(periodicidad)
        .bind(period_start)
        .bind(moneda)
        .fetch_one(self, "number the next factura global")
        .await?;
        Ok(n)
    }

    /// In one transaction: the members leave `awaiting_global` (each only if still there, in
    /// row order, so two instances never wait on each other in a circle), the global's payment
    /// row, its folio and frozen outbox row, the `globals` row and the membership. Anything
    /// found changed rolls everything back ([`Frozen::Changed`]).
    pub async fn freeze_global(&self, g: &NewGlobal) -> Result<Frozen, StoreError> {
        const INSERT_GLOBAL: &str = "INSERT INTO globals (outbox_id, rfc_emisor, periodicidad, \
            period_start, period_end, moneda, seq, payments, total, replaces, created_at) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING outbox_id";
        let now = Utc::now();
        let mut members = g.members.clone();
        members.sort_unstable();
        let mut tx = self.begin().await?;
        if g.replaces.is_none() {
            for &member in &members {
                let n = stmt(TAKE_SALE)
                    .bind(PaymentStatus::InGlobal)
                    .bind(&g.member_reason)
                    .bind(now)
                    .bind(member)
                    .execute_in(&mut tx, "take a sale into the factura global")
                    .await?;
                if n != 1 {
                    tx.rollback().await?;
                    return Ok(Frozen::Changed(format!(
                        "payment row {member} is no longer awaiting the factura global"
                    )));
                }
            }
        }
        let Some(payment_row) = insert_payment_in(&mut tx, &g.payment, now).await? else {
            tx.rollback().await?;
            return Ok(Frozen::Changed(format!(
                "global {} was already frozen",
                g.payment.payment_id
            )));
        };
        let mut draft = g.draft.clone();
        let outbox_id = enqueue_in_tx(&mut tx, payment_row, &mut draft, None, now).await?;
        let Some(outbox_id) = outbox_id else {
            tx.rollback().await?;
            return Ok(Frozen::Changed(format!(
                "stamp key {} is taken",
                g.draft.stamp_key
            )));
        };
        let inserted: Option<(i64,)> = stmt(INSERT_GLOBAL)
            .bind(outbox_id)
            .bind(&g.identity.rfc_emisor)
            .bind(&g.identity.periodicidad)
            .bind(&g.identity.period_start)
            .bind(&g.identity.period_end)
            .bind(&g.identity.moneda)
            .bind(g.identity.seq)
            .bind(i32::try_from(g.members.len()).unwrap_or(i32::MAX))
            .bind(&g.total)
            .bind(g.replaces)
            .bind(now)
            .fetch_optional_in(&mut tx, "record the factura global")
            .await?;
        if inserted.is_none() {
            tx.rollback().await?;
            return Ok(Frozen::Changed(format!(
                "global number {} of {} is taken, or #{:?} was already replaced",
                g.identity.seq, g.identity.period_start, g.replaces
            )));
        }
        if let Err(why) = take_members_in(&mut tx, g, outbox_id, now).await? {
            tx.rollback().await?;
            return Ok(Frozen::Changed(why));
        }
        // The members' rows are locked now (taken above), and a refund decides under that
        // lock: one that committed between the plan's read and here is counted.
        if g.replaces.is_none() {
            let (n,): (i64,) = stmt(
                "SELECT COUNT(*) FROM refunds r \
                 JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_ref \
                 JOIN global_members m ON m.payment_row = p.id \
                 WHERE m.outbox_id = $1 AND r.status = 'global_reduced'",
            )
            .bind(outbox_id)
            .fetch_one_in(&mut tx, "count the refunds the global's sales carry")
            .await?;
            if usize::try_from(n).ok() != Some(g.reductions) {
                tx.rollback().await?;
                return Ok(Frozen::Changed(format!(
                    "a refund of one of its sales was recorded meanwhile ({n} now, {} planned)",
                    g.reductions
                )));
            }
        }
        if let Some(old) = g.replaces {
            let detail = format!("replaced by global #{outbox_id} (motivo 01)");
            audit_in(
                &mut tx,
                &g.actor,
                "replace_global",
                ("outbox", old),
                &detail,
                now,
            )
            .await?;
        }
        tx.commit("commit the factura global").await?;
        Ok(Frozen::Global { outbox_id })
    }

    /// Every factura global, newest period first.
    pub async fn list_globals(&self) -> Result<Vec<GlobalRow>, StoreError> {
        stmt(format!(
            "SELECT {GLOBAL_COLUMNS} ORDER BY g.period_start DESC, g.moneda, g.seq DESC"
        ))
        .fetch_all(self, "list the facturas globales")
        .await
    }

    /// One factura global by its document (outbox row).
    pub async fn global(&self, outbox_id: i64) -> Result<Option<GlobalRow>, StoreError> {
        stmt(format!("SELECT {GLOBAL_COLUMNS} WHERE g.outbox_id = $1"))
            .bind(outbox_id)
            .fetch_optional(self, "read a factura global")
            .await
    }

    /// The sales of a global, in concepto order (when they were paid).
    pub async fn global_members(&self, outbox_id: i64) -> Result<Vec<Sale>, StoreError> {
        stmt(
            "SELECT p.id, p.provider, p.payment_id, p.amount, p.currency, p.forma_pago, p.paid_at, p.livemode, p.tipo_cambio \
             FROM global_members m JOIN payments p ON p.id = m.payment_row \
             WHERE m.outbox_id = $1 ORDER BY p.paid_at, p.id",
        )
        .bind(outbox_id)
        .fetch_all(self, "list the sales of a factura global")
        .await
    }

    /// Stamped replacements whose replaced global is still stamped and was never asked to be
    /// cancelled: the motivo 01 cancellations still to request.
    pub async fn pending_substitutions(&self) -> Result<Vec<PendingSubstitution>, StoreError> {
        stmt(
            "SELECT g.replaces AS replaced, g.outbox_id AS replacement, n.uuid AS replacement_uuid \
             FROM globals g JOIN outbox n ON n.id = g.outbox_id JOIN outbox o ON o.id = g.replaces \
             WHERE n.state = 'stamped' AND n.uuid IS NOT NULL AND o.state = 'stamped' \
             AND NOT EXISTS (SELECT 1 FROM cancellations c WHERE c.outbox_id = o.id) ORDER BY g.outbox_id",
        )
        .fetch_all(self, "list replaced globals to cancel")
        .await
    }

    /// Every document and every sale without one (`invoices list`); `status` filters.
    pub async fn list_documents_and_sales(
        &self,
        status: Option<&str>,
    ) -> Result<Vec<DocumentListing>, StoreError> {
        stmt(LIST_DOCUMENTS.text(self.dialect()))
            .bind(status)
            .fetch_all(self, "list documents")
            .await
    }
}
