//! The self-invoicing portal's reads and its one write: finding a sale by what the customer
//! holds, the customer's submission (the sale leaves `awaiting_global` / `needs_attention` and
//! gets its frozen ingreso in one transaction), and the key of the signed links.

use chrono::{DateTime, Utc};

use super::exec::stmt;
use super::outbox::{OutboxDraft, enqueue_in_tx};
use super::payments::{PaymentRow, SELECT_PAYMENT};
use super::{Db, StoreError};

/// The most payments one look-up reads (a reference several sales share; the total decides).
const LOOKUP_LIMIT: i64 = 20;

/// What the customer submitted, and the comprobante it becomes.
#[derive(Debug, Clone)]
pub struct PortalSubmission {
    pub payment_row: i64,
    /// The payment's customer data with what the customer typed.
    pub customer_json: String,
    pub email: String,
    pub client_ip: Option<String>,
    pub draft: OutboxDraft,
}

/// What a submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// The sale left `awaiting_global` / `needs_attention` with this outbox row.
    Queued { outbox_id: i64 },
    /// The sale was no longer waiting (another submission, the factura global, the admin):
    /// nothing was written.
    Taken,
}

/// A factura global that holds a sale (as its outbox row reads).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct GlobalRef {
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub uuid: Option<String>,
    pub state: String,
}

impl Db {
    /// The payments `reference` (normalized, see [`super::payments::normalize_reference`]) or,
    /// for an API invoice, `serie_folio` may name; factura global rows are never among them.
    /// The same one statement runs whatever the input, found or not, so its time says nothing.
    pub async fn portal_lookup(
        &self,
        reference: &str,
        serie_folio: Option<(&str, &str)>,
    ) -> Result<Vec<PaymentRow>, StoreError> {
        let sql = format!(
            "{SELECT_PAYMENT} WHERE provider NOT IN ('global', 'refund') AND (\
             id IN (SELECT payment_id FROM payment_refs WHERE reference = $1) \
             OR id IN (SELECT payment_id FROM outbox WHERE serie = $2 AND folio = $3 AND kind = 'ingreso')) \
             ORDER BY id LIMIT $4"
        );
        stmt(sql)
            .bind(reference)
            .bind(serie_folio.map(|s| s.0))
            .bind(serie_folio.map(|s| s.1))
            .bind(LOOKUP_LIMIT)
            .fetch_all(self, "look a sale up for the portal")
            .await
    }

    /// The outbox id of payment `payment_row`'s ingreso, when it has one.
    pub async fn ingreso_of(&self, payment_row: i64) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> =
            stmt("SELECT id FROM outbox WHERE payment_id = $1 AND kind = 'ingreso'")
                .bind(payment_row)
                .fetch_optional(self, "find the ingreso of a payment")
                .await?;
        Ok(row.map(|r| r.0))
    }

    /// The factura global that holds payment `payment_row` (its membership is frozen with the
    /// global, migration 0009), whatever the global's state.
    pub async fn global_of(&self, payment_row: i64) -> Result<Option<GlobalRef>, StoreError> {
        stmt(
            "SELECT o.serie, o.folio, o.uuid, o.state FROM global_members m \
             JOIN outbox o ON o.id = m.outbox_id WHERE m.payment_row = $1",
        )
        .bind(payment_row)
        .fetch_optional(self, "find the factura global of a sale")
        .await
    }

    /// In one transaction: the sale leaves `awaiting_global` / `needs_attention` (only if it is
    /// still there: the factura global's freeze, a second tab and a double click compete for
    /// it, and whoever commits first wins), its frozen ingreso goes into the outbox through
    /// the path every ingreso takes, and the submission is recorded.
    pub async fn portal_submit(&self, s: &PortalSubmission) -> Result<Submitted, StoreError> {
        const TAKE: &str = "UPDATE payments SET status = 'invoice_pending', reason = $1, \
            customer_json = $2, updated_at = $3 \
            WHERE id = $4 AND status IN ('awaiting_global', 'needs_attention')";
        const RECORD: &str = "INSERT INTO portal_submissions \
            (payment_id, outbox_id, email, client_ip, submitted_at) VALUES ($1, $2, $3, $4, $5)";
        let now = Utc::now();
        let mut draft = s.draft.clone();
        let mut tx = self.begin().await?;
        let taken = stmt(TAKE)
            .bind("invoiced by the customer at the self-invoicing portal")
            .bind(&s.customer_json)
            .bind(now)
            .bind(s.payment_row)
            .execute_in(&mut tx, "take the sale for the portal")
            .await?;
        if taken != 1 {
            tx.rollback().await?;
            return Ok(Submitted::Taken);
        }
        let outbox_id = enqueue_in_tx(&mut tx, s.payment_row, &mut draft, None, now).await?;
        let Some(outbox_id) = outbox_id else {
            // Its stamp key is taken: the sale has an ingreso already.
            tx.rollback().await?;
            return Ok(Submitted::Taken);
        };
        stmt(RECORD)
            .bind(s.payment_row)
            .bind(outbox_id)
            .bind(&s.email)
            .bind(s.client_ip.as_deref())
            .bind(now)
            .execute_in(&mut tx, "record the portal submission")
            .await?;
        tx.commit("commit the portal submission").await?;
        Ok(Submitted::Queued { outbox_id })
    }

    /// The email the customer gave at the portal for payment `payment_row`.
    pub async fn portal_email(&self, payment_row: i64) -> Result<Option<String>, StoreError> {
        let row: Option<(String,)> =
            stmt("SELECT email FROM portal_submissions WHERE payment_id = $1")
                .bind(payment_row)
                .fetch_optional(self, "read a portal submission")
                .await?;
        Ok(row.map(|r| r.0))
    }

    /// The key of the signed links kept in the database: `candidate` when none is kept yet
    /// (the first caller's wins, whoever else starts at the same time).
    pub async fn portal_key(&self, candidate: &str) -> Result<String, StoreError> {
        let now: DateTime<Utc> = Utc::now();
        stmt("INSERT INTO portal_key (id, secret, created_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING")
            .bind(candidate)
            .bind(now)
            .execute(self, "keep the portal's link key")
            .await?;
        let (key,): (String,) = stmt("SELECT secret FROM portal_key WHERE id = 1")
            .fetch_one(self, "read the portal's link key")
            .await?;
        Ok(key)
    }
}
