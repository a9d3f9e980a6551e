//! Payments of PPD invoices issued through the API, each with its REP (CFDI tipo P).
//!
//! Recording one is one transaction: the invoice's row is locked first (so two payments of the
//! same invoice run one after the other and never get the same parcialidad), the last
//! parcialidad and saldo are read, the caller's planner turns them into the frozen REP (or
//! refuses, and nothing is written), then the payment row the REP hangs from, the REP's outbox
//! row and the `api_pagos` row commit together.
//!
//! A payment whose REP the PAC refused (it ended without a stamp, for sure) is released by the
//! next payment of its invoice, or the next one under its idempotency key, in that payment's
//! transaction: its REP becomes `superseded`, it gives up its key and its parcialidad (stored
//! as `-id`, shown as none), and stops counting in the saldo.

use chrono::{DateTime, Utc};

use super::api::api_state_sql;
use super::exec::stmt;
use super::outbox::{enqueue_in_tx, supersede_refused_pagos_in};
use super::payments::insert_payment_in;
use super::{Db, NewPayment, OutboxDraft, StoreError, ctx};
use crate::domain::DocumentState;

/// A payment to record, as the API received it.
#[derive(Debug, Clone)]
pub struct NewPago {
    pub public_id: String,
    pub invoice_id: i64,
    pub rfc_emisor: String,
    pub idem_key: Option<String>,
    pub request_hash: String,
    pub paid: Paid,
}

/// The payment itself, as the API received it and the REP's Pago node states it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Paid {
    pub fecha_pago: String,
    pub forma_pago: String,
    pub amount: String,
    pub currency: String,
    pub tipo_cambio: Option<String>,
    pub num_operacion: Option<String>,
}

/// What the planner makes of a payment at its place in the invoice's sequence.
#[derive(Debug, Clone)]
pub struct PagoPlan {
    /// ImpSaldoAnt and ImpSaldoInsoluto, decimal text in the invoice's currency.
    pub saldo_anterior: String,
    pub saldo_insoluto: String,
    /// The payment row the REP hangs from.
    pub payment: NewPayment,
    pub draft: OutboxDraft,
}

/// What recording a payment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagoOutcome {
    Recorded {
        id: i64,
    },
    /// The planner refused (an overpayment, a REP that would not build): nothing written.
    Refused(String),
    /// The idempotency key is taken (by an earlier or a concurrent request): nothing written.
    KeyTaken,
}

/// A recorded payment with its REP's progress.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PagoRow {
    pub id: i64,
    pub public_id: String,
    pub invoice_id: i64,
    pub parcialidad: i64,
    #[sqlx(flatten)]
    pub paid: Paid,
    pub saldo_anterior: String,
    pub saldo_insoluto: String,
    pub request_hash: String,
    pub created_at: DateTime<Utc>,
    pub outbox_id: i64,
    pub state: DocumentState,
    pub uuid: Option<String>,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
}

impl PagoRow {
    /// Whether it still counts in its invoice's saldo: not refused by the PAC (see the module).
    pub fn counts(&self) -> bool {
        self.parcialidad > 0 && !self.state.released()
    }
}

/// The state as the API tells it: [`api_state_sql`], shared with invoices.
const PAGO_COLUMNS: &str = concat!(
    "p.id, p.public_id, p.invoice_id, p.parcialidad, p.fecha_pago, p.forma_pago, \
    p.amount, p.currency, p.tipo_cambio, p.num_operacion, p.saldo_anterior, p.saldo_insoluto, \
    p.request_hash, p.created_at, p.outbox_id, ",
    api_state_sql!(),
    ", o.uuid, o.last_error_code, o.last_error_message FROM api_pagos p JOIN outbox o ON o.id = p.outbox_id"
);

impl Db {
    /// Records payment `new` in one transaction serialised per invoice: `plan` gets the next
    /// parcialidad and the saldo left by the last payment (`None` before the first) and returns
    /// the frozen REP, or why the payment is refused.
    pub async fn record_pago(
        &self,
        new: &NewPago,
        plan: impl FnOnce(u32, Option<&str>) -> Result<PagoPlan, String>,
    ) -> Result<PagoOutcome, StoreError> {
        // A write to the invoice's row: on PostgreSQL it holds the row's lock until commit, so
        // a concurrent payment of the same invoice waits here (SQLite's transactions already
        // take the write lock at BEGIN).
        const LOCK: &str = "UPDATE api_invoices SET id = id WHERE id = $1";
        const RELEASE: &str = "UPDATE api_pagos SET parcialidad = -id, idem_key = NULL \
            WHERE parcialidad > 0 AND (invoice_id = $1 OR (rfc_emisor = $2 AND idem_key = $3)) \
            AND outbox_id IN (SELECT id FROM outbox WHERE state = 'superseded')";
        const KEY: &str = "SELECT COUNT(*) FROM api_pagos WHERE rfc_emisor = $1 AND idem_key = $2";
        const LAST: &str = "SELECT parcialidad, saldo_insoluto FROM api_pagos WHERE invoice_id = $1 \
            AND parcialidad > 0 ORDER BY parcialidad DESC LIMIT 1";
        const INSERT: &str = "INSERT INTO api_pagos (public_id, invoice_id, rfc_emisor, parcialidad, \
            fecha_pago, forma_pago, amount, currency, tipo_cambio, num_operacion, saldo_anterior, \
            saldo_insoluto, outbox_id, idem_key, request_hash, created_at) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
            ON CONFLICT DO NOTHING RETURNING id";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        stmt(LOCK)
            .bind(new.invoice_id)
            .execute_in(&mut tx, "lock the invoice for its payment")
            .await?;
        let key = new.idem_key.as_deref();
        supersede_refused_pagos_in(&mut tx, new.invoice_id, &new.rfc_emisor, key, now).await?;
        stmt(RELEASE)
            .bind(new.invoice_id)
            .bind(&new.rfc_emisor)
            .bind(key)
            .execute_in(&mut tx, "release refused payments")
            .await?;
        if let Some(key) = &new.idem_key {
            let (taken,): (i64,) = stmt(KEY)
                .bind(&new.rfc_emisor)
                .bind(key)
                .fetch_one_in(&mut tx, "check the payment's idempotency key")
                .await?;
            if taken > 0 {
                return Ok(PagoOutcome::KeyTaken);
            }
        }
        let last: Option<(i64, String)> = stmt(LAST)
            .bind(new.invoice_id)
            .fetch_optional_in(&mut tx, "read the last payment")
            .await?;
        let parcialidad = last.as_ref().map_or(1, |l| l.0 + 1);
        let mut plan = match plan(
            u32::try_from(parcialidad).unwrap_or(u32::MAX),
            last.as_ref().map(|l| l.1.as_str()),
        ) {
            Ok(p) => p,
            Err(why) => return Ok(PagoOutcome::Refused(why)),
        };
        let Some(payment_row) = insert_payment_in(&mut tx, &plan.payment, now).await? else {
            return Err(StoreError::Other(format!(
                "payment id {} already used",
                plan.payment.payment_id
            )));
        };
        let outbox_id = enqueue_in_tx(&mut tx, payment_row, &mut plan.draft, None, now)
            .await?
            .ok_or_else(|| ctx("insert the REP's outbox row")(sqlx::Error::RowNotFound))?;
        let row: Option<(i64,)> = stmt(INSERT)
            .bind(&new.public_id)
            .bind(new.invoice_id)
            .bind(&new.rfc_emisor)
            .bind(parcialidad)
            .bind(&new.paid.fecha_pago)
            .bind(&new.paid.forma_pago)
            .bind(&new.paid.amount)
            .bind(&new.paid.currency)
            .bind(&new.paid.tipo_cambio)
            .bind(&new.paid.num_operacion)
            .bind(&plan.saldo_anterior)
            .bind(&plan.saldo_insoluto)
            .bind(outbox_id)
            .bind(&new.idem_key)
            .bind(&new.request_hash)
            .bind(now)
            .fetch_optional_in(&mut tx, "insert the payment of an invoice")
            .await?;
        let Some((id,)) = row else {
            return Ok(PagoOutcome::KeyTaken);
        };
        tx.commit("commit the payment and its REP").await?;
        Ok(PagoOutcome::Recorded { id })
    }

    /// The payments of API invoice `invoice_id`, by parcialidad.
    pub async fn pagos_of_invoice(&self, invoice_id: i64) -> Result<Vec<PagoRow>, StoreError> {
        stmt(format!(
            "SELECT {PAGO_COLUMNS} WHERE p.invoice_id = $1 ORDER BY p.parcialidad"
        ))
        .bind(invoice_id)
        .fetch_all(self, "list the payments of an invoice")
        .await
    }

    /// The payments of the API invoice whose document hangs from payment row `payment_row`
    /// (its page in the admin), by parcialidad.
    pub async fn pagos_of_payment_row(&self, payment_row: i64) -> Result<Vec<PagoRow>, StoreError> {
        stmt(format!(
            "SELECT {PAGO_COLUMNS} JOIN api_invoices a ON a.id = p.invoice_id \
             JOIN outbox ao ON ao.id = a.outbox_id WHERE ao.payment_id = $1 ORDER BY p.parcialidad"
        ))
        .bind(payment_row)
        .fetch_all(self, "list the payments of an invoice")
        .await
    }

    /// The payments whose REP is not stamped yet (nor given up for another), oldest payment
    /// first: the complementos the dashboard counts against their deadline.
    pub async fn reps_not_stamped(&self) -> Result<Vec<PagoRow>, StoreError> {
        stmt(format!(
            "SELECT {PAGO_COLUMNS} WHERE o.state NOT IN ('stamped', 'canceled', 'superseded') \
             ORDER BY p.fecha_pago, p.id"
        ))
        .fetch_all(self, "list the REPs not stamped")
        .await
    }

    /// The payment recorded under idempotency key `key` of emisor `rfc_emisor`.
    pub async fn pago_by_key(
        &self,
        rfc_emisor: &str,
        key: &str,
    ) -> Result<Option<PagoRow>, StoreError> {
        stmt(format!(
            "SELECT {PAGO_COLUMNS} WHERE p.rfc_emisor = $1 AND p.idem_key = $2"
        ))
        .bind(rfc_emisor)
        .bind(key)
        .fetch_optional(self, "read a payment by its idempotency key")
        .await
    }

    /// A payment by its row id.
    pub async fn pago_by_id(&self, id: i64) -> Result<Option<PagoRow>, StoreError> {
        stmt(format!("SELECT {PAGO_COLUMNS} WHERE p.id = $1"))
            .bind(id)
            .fetch_optional(self, "read a payment")
            .await
    }
}
