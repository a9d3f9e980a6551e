//! The invoicing API's statements: keys, invoices, idempotency records (the merchant's events
//! are `merchant.rs`'s). Written once with `$n` placeholders and run through [`super::exec`].
//!
//! Creating an invoice is one transaction, like a webhook payment: the payment row, the explicit
//! folio if any (a folio of the serie's numbering is assigned when the worker seals it), the
//! frozen outbox row, the API invoice and the idempotency record commit together or not at
//! all, so a key is never taken without its invoice nor an invoice written without its key.

use chrono::{DateTime, Utc};

use super::exec::stmt;
use super::folios::bump_past_in;
pub use super::merchant::ClaimedWebhook;
use super::outbox::{enqueue_in_tx, supersede_folio_in, supersede_invoice_in};
use super::payments::insert_payment_in;
pub use super::rows::{ApiInvoiceRow, ApiKeyListing, ApiKeyRow, IdemRecord};
use super::{Db, NewPayment, OutboxDraft, StoreError, ctx};

/// An idempotency key to take with a new invoice.
#[derive(Debug, Clone)]
pub struct NewIdem {
    pub key: String,
    pub request_hash: String,
    pub expires_at: DateTime<Utc>,
    /// The invoice that held the key and ended without a stamp: its outbox row becomes
    /// `superseded` in the same transaction (so no one retries it any more).
    pub releases: Option<i64>,
}

/// An invoice to create through the API.
#[derive(Debug, Clone)]
pub struct NewApiInvoice {
    pub public_id: String,
    pub rfc_emisor: String,
    pub api_key_id: i64,
    pub idem: Option<NewIdem>,
    pub payment: NewPayment,
    /// `request.folio` set = an explicit folio (claimed); `None` = the serie's next, assigned
    /// when the worker seals it.
    pub draft: OutboxDraft,
}

/// What the creation transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    Created {
        invoice_id: i64,
    },
    /// Another request holds the idempotency key (or it changed meanwhile): nothing written.
    KeyTaken,
    /// The explicit folio belongs to another live invoice: nothing written.
    FolioTaken,
}

/// The state of outbox row `o` as the API tells it. A document whose outcome was unknown stays
/// `unknown` while a worker asks the PAC about it (`stamping`, claimed from `unknown`, or from
/// `stamping` when an earlier worker's lease lapsed mid-call): a retry gets 503 until the
/// answer is known, as README says. Invoices and REPs (`pagos.rs`) share it.
macro_rules! api_state_sql {
    () => {
        "CASE WHEN o.state = 'stamping' AND o.claimed_from IN ('unknown', 'stamping') \
         THEN 'unknown' ELSE o.state END AS state"
    };
}
pub(super) use api_state_sql;

const INVOICE_COLUMNS: &str = concat!(
    "a.id, a.public_id, a.rfc_emisor, a.outbox_id, a.idempotency_key, a.created_at, ",
    api_state_sql!(),
    ", o.uuid, o.serie, o.folio, o.request_json, o.last_error_code, o.last_error_message, o.stamped_at, \
    o.stamped_xml, (SELECT c.state FROM cancellations c WHERE c.outbox_id = o.id ORDER BY c.id DESC LIMIT 1) \
    AS cancellation FROM api_invoices a JOIN outbox o ON o.id = a.outbox_id"
);

impl Db {
    /// Stores a new key (its hash only) for `rfc_emisor`.
    pub async fn create_api_key(
        &self,
        name: &str,
        key_hash: &str,
        prefix: &str,
        rfc_emisor: &str,
    ) -> Result<i64, StoreError> {
        const SQL: &str = "INSERT INTO api_keys (name, key_hash, prefix, rfc_emisor, created_at) \
            VALUES ($1, $2, $3, $4, $5) RETURNING id";
        let now = Utc::now();
        let (id,): (i64,) = stmt(SQL)
            .bind(name)
            .bind(key_hash)
            .bind(prefix)
            .bind(rfc_emisor)
            .bind(now)
            .writes()
            .fetch_one(self, "store an API key")
            .await?;
        Ok(id)
    }

    /// The live key whose SHA-256 is `key_hash`.
    pub async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        stmt("SELECT id, name, rfc_emisor FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL")
            .bind(key_hash)
            .fetch_optional(self, "read an API key")
            .await
    }

    /// Every key, live and revoked, oldest first.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyListing>, StoreError> {
        stmt(
            "SELECT id, name, prefix, rfc_emisor, created_at, revoked_at FROM api_keys ORDER BY id",
        )
        .fetch_all(self, "list API keys")
        .await
    }

    /// Revokes a key: from now on it authenticates nothing. `false` when no live key has `id`.
    pub async fn revoke_api_key(&self, id: i64) -> Result<bool, StoreError> {
        const SQL: &str =
            "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL";
        let now = Utc::now();
        let n = stmt(SQL)
            .bind(now)
            .bind(id)
            .execute(self, "revoke an API key")
            .await?;
        Ok(n == 1)
    }

    /// The record under an idempotency key, with its invoice's outbox state.
    pub async fn idempotency_record(
        &self,
        rfc_emisor: &str,
        key: &str,
    ) -> Result<Option<IdemRecord>, StoreError> {
        stmt("SELECT i.request_hash, i.state, i.invoice_id, i.response_status, i.response_body, i.expires_at, \
             o.state AS outbox_state, o.last_error_code AS outbox_code FROM api_idempotency i JOIN api_invoices a ON a.id = i.invoice_id \
             JOIN outbox o ON o.id = a.outbox_id WHERE i.rfc_emisor = $1 AND i.idem_key = $2")
            .bind(rfc_emisor)
            .bind(key)
            .fetch_optional(self, "read an idempotency key")
            .await
    }

    /// Stores the final response of a key, once: `false` when it was already completed (the
    /// caller then replays what is stored) or the key now belongs to another invoice.
    pub async fn complete_idempotency(
        &self,
        rfc_emisor: &str,
        key: &str,
        invoice_id: i64,
        status: i32,
        body: &str,
    ) -> Result<bool, StoreError> {
        let n = stmt("UPDATE api_idempotency SET state = 'completed', response_status = $1, response_body = $2 \
             WHERE rfc_emisor = $3 AND idem_key = $4 AND invoice_id = $5 AND state = 'in_progress'")
            .bind(status)
            .bind(body)
            .bind(rfc_emisor)
            .bind(key)
            .bind(invoice_id)
            .execute(self, "store the response of an idempotency key")
            .await?;
        Ok(n == 1)
    }

    /// Notes that the request under `key` was answered 503 `STAMPING_OUTCOME_UNKNOWN` while its
    /// PAC call was still in flight, so that retries get the same answer, not 409, until the
    /// outcome is known. The status alone is kept: the body is the final 201's, later.
    pub async fn mark_idempotency_unknown(
        &self,
        rfc_emisor: &str,
        key: &str,
        invoice_id: i64,
    ) -> Result<(), StoreError> {
        stmt("UPDATE api_idempotency SET response_status = 503 WHERE rfc_emisor = $1 AND idem_key = $2 \
             AND invoice_id = $3 AND state = 'in_progress' AND response_status IS NULL")
            .bind(rfc_emisor)
            .bind(key)
            .bind(invoice_id)
            .execute(self, "note an unknown outcome under an idempotency key")
            .await?;
        Ok(())
    }

    /// Deletes released keys (their invoice ended without a stamp, for sure) whose retention
    /// ended before `now`. A key whose invoice was stamped, or may have been, is never deleted:
    /// a retry under it, however late, must replay the original and not issue a second CFDI.
    /// What such a key keeps is only what the replay needs: the request's hash and the 201.
    pub async fn purge_idempotency(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        stmt("DELETE FROM api_idempotency WHERE expires_at <= $1 AND state = 'in_progress' AND invoice_id IN \
             (SELECT a.id FROM api_invoices a JOIN outbox o ON o.id = a.outbox_id \
              WHERE o.state IN ('failed', 'expired', 'superseded'))")
            .bind(now)
            .execute(self, "purge expired idempotency keys")
            .await
    }

    /// In one transaction: release what must be released, then the payment, the explicit folio
    /// if any, the frozen outbox row, the API invoice and the idempotency record.
    pub async fn create_api_invoice(
        &self,
        inv: &NewApiInvoice,
    ) -> Result<CreateOutcome, StoreError> {
        const FREE_OLD: &str = "UPDATE api_invoices SET folio_claim = NULL WHERE id = $1";
        const DROP_KEY: &str = "DELETE FROM api_idempotency WHERE rfc_emisor = $1 AND idem_key = $2 AND invoice_id = $3";
        const FOLIO_LIVE: &str = "SELECT COUNT(*) FROM outbox o WHERE o.serie = $1 AND o.folio = $2 \
            AND (o.state NOT IN ('failed', 'expired', 'superseded') \
                 OR NOT EXISTS (SELECT 1 FROM api_invoices a WHERE a.outbox_id = o.id))";
        const FOLIO_UNCLAIM: &str =
            "UPDATE api_invoices SET folio_claim = NULL WHERE rfc_emisor = $1 AND folio_claim = $2";
        const INSERT_INVOICE: &str = "INSERT INTO api_invoices (public_id, rfc_emisor, api_key_id, outbox_id, \
            idempotency_key, folio_claim, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING id";
        const INSERT_IDEM: &str = "INSERT INTO api_idempotency (rfc_emisor, idem_key, request_hash, state, \
            invoice_id, created_at, expires_at) VALUES ($1, $2, $3, 'in_progress', $4, $5, $6) ON CONFLICT DO NOTHING";
        let now = Utc::now();
        let p = &inv.payment;
        let mut draft = inv.draft.clone();
        let serie = draft.request.serie.clone().unwrap_or_default();
        let explicit = draft.request.folio.clone();
        let mut tx = self.begin().await?;
        let out = {
            if let Some(idem) = &inv.idem {
                if let Some(old) = idem.releases {
                    if !supersede_invoice_in(&mut tx, old, now).await? {
                        return Ok(CreateOutcome::KeyTaken);
                    }
                    stmt(FREE_OLD)
                        .bind(old)
                        .execute_in(&mut tx, "release a folio")
                        .await?;
                }
                stmt(DROP_KEY)
                    .bind(&inv.rfc_emisor)
                    .bind(&idem.key)
                    .bind(idem.releases.unwrap_or(-1))
                    .execute_in(&mut tx, "release an idempotency key")
                    .await?;
            }
            let folio_claim = match &explicit {
                Some(folio) => {
                    // First, so that the check below sees any batch numbered meanwhile.
                    bump_past_in(&mut tx, &serie, folio).await?;
                    let (live,): (i64,) = stmt(FOLIO_LIVE)
                        .bind(&serie)
                        .bind(folio)
                        .fetch_one_in(&mut tx, "check a folio")
                        .await?;
                    if live > 0 {
                        return Ok(CreateOutcome::FolioTaken);
                    }
                    let claim = format!("{serie}/{folio}");
                    supersede_folio_in(&mut tx, &serie, folio, now).await?;
                    stmt(FOLIO_UNCLAIM)
                        .bind(&inv.rfc_emisor)
                        .bind(&claim)
                        .execute_in(&mut tx, "release a folio")
                        .await?;
                    Some(claim)
                }
                None => None,
            };
            let Some(payment_row) = insert_payment_in(&mut tx, p, now).await? else {
                return Err(StoreError::Other(format!(
                    "API invoice id {} already used",
                    p.payment_id
                )));
            };
            let outbox_id =
                enqueue_in_tx(&mut tx, payment_row, &mut draft, explicit.clone(), now).await?;
            // The stamp key of an API invoice is new by construction (its public id).
            let outbox_id =
                outbox_id.ok_or_else(|| ctx("insert the outbox row")(sqlx::Error::RowNotFound))?;
            let invoice: Option<(i64,)> = stmt(INSERT_INVOICE)
                .bind(&inv.public_id)
                .bind(&inv.rfc_emisor)
                .bind(inv.api_key_id)
                .bind(outbox_id)
                .bind(inv.idem.as_ref().map(|i| i.key.as_str()))
                .bind(&folio_claim)
                .bind(now)
                .fetch_optional_in(&mut tx, "insert the API invoice")
                .await?;
            let Some((invoice_id,)) = invoice else {
                return Ok(CreateOutcome::FolioTaken);
            };
            if let Some(idem) = &inv.idem {
                let n = stmt(INSERT_IDEM)
                    .bind(&inv.rfc_emisor)
                    .bind(&idem.key)
                    .bind(&idem.request_hash)
                    .bind(invoice_id)
                    .bind(now)
                    .bind(idem.expires_at)
                    .execute_in(&mut tx, "take the idempotency key")
                    .await?;
                if n != 1 {
                    return Ok(CreateOutcome::KeyTaken);
                }
            }
            Ok::<_, StoreError>(CreateOutcome::Created { invoice_id })
        };
        tx.commit("commit the API invoice").await?;
        out
    }

    /// An API invoice by its public id, for the emisor `rfc_emisor`.
    pub async fn api_invoice(
        &self,
        public_id: &str,
        rfc_emisor: &str,
    ) -> Result<Option<ApiInvoiceRow>, StoreError> {
        stmt(format!(
            "SELECT {INVOICE_COLUMNS} WHERE a.public_id = $1 AND a.rfc_emisor = $2"
        ))
        .bind(public_id)
        .bind(rfc_emisor)
        .fetch_optional(self, "read an API invoice")
        .await
    }

    /// An API invoice by its row id.
    pub async fn api_invoice_by_id(&self, id: i64) -> Result<Option<ApiInvoiceRow>, StoreError> {
        stmt(format!("SELECT {INVOICE_COLUMNS} WHERE a.id = $1"))
            .bind(id)
            .fetch_optional(self, "read an API invoice")
            .await
    }

    /// The API invoice of outbox row `outbox_id`, if the document is one.
    pub async fn api_invoice_by_outbox(
        &self,
        outbox_id: i64,
    ) -> Result<Option<ApiInvoiceRow>, StoreError> {
        stmt(format!("SELECT {INVOICE_COLUMNS} WHERE a.outbox_id = $1"))
            .bind(outbox_id)
            .fetch_optional(self, "read an API invoice")
            .await
    }

    /// The emisor's API invoices, newest first, optionally by serie and folio (at most 100).
    pub async fn find_api_invoices(
        &self,
        rfc_emisor: &str,
        serie: Option<&str>,
        folio: Option<&str>,
    ) -> Result<Vec<ApiInvoiceRow>, StoreError> {
        stmt(format!(
            "SELECT {INVOICE_COLUMNS} WHERE a.rfc_emisor = $1 AND ($2 IS NULL OR o.serie = $3) \
                 AND ($4 IS NULL OR o.folio = $5) ORDER BY a.id DESC LIMIT 100"
        ))
        .bind(rfc_emisor)
        .bind(serie)
        .bind(serie)
        .bind(folio)
        .bind(folio)
        .fetch_all(self, "list API invoices")
        .await
    }
}
