//! The invoicing API's statements: keys, invoices, idempotency records, the merchant's webhook
//! outbox. Written once with `?` placeholders, numbered for PostgreSQL by [`Dialect::sql`].
//!
//! Creating an invoice is one transaction, like a webhook payment: the payment row, the folio,
//! the frozen outbox row, the API invoice and the idempotency record commit together or not at
//! all, so a key is never taken without its invoice nor an invoice written without its key.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::admin::Dialect;
use super::{Db, NewPayment, OutboxDraft, StoreError, ctx, sql};

/// States of an outbox row that ended without a stamp, for sure: the PAC rejected it or
/// confirmed it holds no stamp of it (the worker keeps any outcome it could not confirm
/// `unknown`, whatever the window or the attempts). Only these release the idempotency key of
/// their invoice, and an explicitly requested folio with it; a key whose invoice was stamped, or
/// may have been, is never released.
pub const RELEASED_STATES: &[&str] = &["failed", "expired", "superseded"];

/// Whether an outbox row in `state` ended without a stamp for sure.
pub fn released(state: &str) -> bool {
    RELEASED_STATES.contains(&state)
}

/// A live API key.
#[derive(Debug, Clone)]
pub struct ApiKeyRow {
    pub id: i64,
    pub name: String,
    pub rfc_emisor: String,
}

/// A key as `api-key list` shows it: never the key, only its first characters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ApiKeyListing {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    pub rfc_emisor: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What is stored under an idempotency key, with the state of its invoice's outbox row.
#[derive(Debug, Clone)]
pub struct IdemRecord {
    pub request_hash: String,
    /// `in_progress` or `completed`.
    pub state: String,
    pub invoice_id: i64,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub outbox_state: String,
    pub outbox_code: Option<String>,
}

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
    /// `request.folio` set = an explicit folio (claimed); `None` = allocated from the serie.
    pub draft: OutboxDraft,
}

/// What the creation transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    Created {
        invoice_id: i64,
        folio: String,
    },
    /// Another request holds the idempotency key (or it changed meanwhile): nothing written.
    KeyTaken,
    /// The explicit folio belongs to another live invoice: nothing written.
    FolioTaken,
}

/// An API invoice with its comprobante's progress.
#[derive(Debug, Clone)]
pub struct ApiInvoiceRow {
    pub id: i64,
    pub public_id: String,
    pub rfc_emisor: String,
    pub outbox_id: i64,
    pub idempotency_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub state: String,
    pub uuid: Option<String>,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub request_json: String,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub stamped_at: Option<DateTime<Utc>>,
    pub stamped_xml: Option<Vec<u8>>,
    /// The latest cancellation's state, if one was requested.
    pub cancellation: Option<String>,
}

/// A merchant webhook claimed for delivery.
#[derive(Debug, Clone)]
pub struct ClaimedWebhook {
    pub id: i64,
    pub invoice_id: i64,
    pub event_type: String,
    pub payload: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Including this claim.
    pub attempts: i32,
}

/// One merchant webhook (tests, admin).
#[derive(Debug, Clone)]
pub struct WebhookRow {
    pub id: i64,
    pub event_type: String,
    pub state: String,
    pub attempts: i32,
    pub payload: Option<String>,
}

const INVOICE_COLUMNS: &str = "a.id, a.public_id, a.rfc_emisor, a.outbox_id, a.idempotency_key, a.created_at, \
    o.state, o.uuid, o.serie, o.folio, o.request_json, o.last_error_code, o.last_error_message, o.stamped_at, \
    o.stamped_xml, (SELECT c.state FROM cancellations c WHERE c.outbox_id = o.id ORDER BY c.id DESC LIMIT 1) \
    AS cancellation FROM api_invoices a JOIN outbox o ON o.id = a.outbox_id";

trait ApiRow {
    fn api_key(&self) -> Result<ApiKeyRow, sqlx::Error>;
    fn api_key_listing(&self) -> Result<ApiKeyListing, sqlx::Error>;
    fn idem(&self) -> Result<IdemRecord, sqlx::Error>;
    fn invoice(&self) -> Result<ApiInvoiceRow, sqlx::Error>;
    fn webhook(&self) -> Result<ClaimedWebhook, sqlx::Error>;
    fn webhook_row(&self) -> Result<WebhookRow, sqlx::Error>;
}

macro_rules! impl_api_row {
    ($row:ty) => {
        impl ApiRow for $row {
            fn api_key(&self) -> Result<ApiKeyRow, sqlx::Error> {
                Ok(ApiKeyRow {
                    id: self.try_get("id")?,
                    name: self.try_get("name")?,
                    rfc_emisor: self.try_get("rfc_emisor")?,
                })
            }
            fn api_key_listing(&self) -> Result<ApiKeyListing, sqlx::Error> {
                Ok(ApiKeyListing {
                    id: self.try_get("id")?,
                    name: self.try_get("name")?,
                    prefix: self.try_get("prefix")?,
                    rfc_emisor: self.try_get("rfc_emisor")?,
                    created_at: self.try_get("created_at")?,
                    revoked_at: self.try_get("revoked_at")?,
                })
            }
            fn idem(&self) -> Result<IdemRecord, sqlx::Error> {
                Ok(IdemRecord {
                    request_hash: self.try_get("request_hash")?,
                    state: self.try_get("state")?,
                    invoice_id: self.try_get("invoice_id")?,
                    response_status: self.try_get("response_status")?,
                    response_body: self.try_get("response_body")?,
                    expires_at: self.try_get("expires_at")?,
                    outbox_state: self.try_get("outbox_state")?,
                    outbox_code: self.try_get("outbox_code")?,
                })
            }
            fn invoice(&self) -> Result<ApiInvoiceRow, sqlx::Error> {
                Ok(ApiInvoiceRow {
                    id: self.try_get("id")?,
                    public_id: self.try_get("public_id")?,
                    rfc_emisor: self.try_get("rfc_emisor")?,
                    outbox_id: self.try_get("outbox_id")?,
                    idempotency_key: self.try_get("idempotency_key")?,
                    created_at: self.try_get("created_at")?,
                    state: self.try_get("state")?,
                    uuid: self.try_get("uuid")?,
                    serie: self.try_get("serie")?,
                    folio: self.try_get("folio")?,
                    request_json: self.try_get("request_json")?,
                    last_error_code: self.try_get("last_error_code")?,
                    last_error_message: self.try_get("last_error_message")?,
                    stamped_at: self.try_get("stamped_at")?,
                    stamped_xml: self.try_get("stamped_xml")?,
                    cancellation: self.try_get("cancellation")?,
                })
            }
            fn webhook(&self) -> Result<ClaimedWebhook, sqlx::Error> {
                Ok(ClaimedWebhook {
                    id: self.try_get("id")?,
                    invoice_id: self.try_get("invoice_id")?,
                    event_type: self.try_get("event_type")?,
                    payload: self.try_get("payload")?,
                    created_at: self.try_get("created_at")?,
                    attempts: self.try_get("attempts")?,
                })
            }
            fn webhook_row(&self) -> Result<WebhookRow, sqlx::Error> {
                Ok(WebhookRow {
                    id: self.try_get("id")?,
                    event_type: self.try_get("event_type")?,
                    state: self.try_get("state")?,
                    attempts: self.try_get("attempts")?,
                    payload: self.try_get("payload")?,
                })
            }
        }
    };
}
impl_api_row!(sqlx::sqlite::SqliteRow);
impl_api_row!(sqlx::postgres::PgRow);

/// Reads at most one row with `$map`.
macro_rules! one {
    ($db:expr, $what:literal, $sql:expr, [$($arg:expr),*], $map:ident) => {
        on_pool!($db, |pool, d| {
            let row = sqlx::query(d.owned($sql.to_string()))$(.bind($arg))*
                .fetch_optional(pool).await.map_err(ctx($what))?;
            row.map(|r| r.$map()).transpose().map_err(ctx($what))
        })
    };
}

/// Reads every row with `$map`.
macro_rules! all {
    ($db:expr, $what:literal, $sql:expr, [$($arg:expr),*], $map:ident) => {
        on_pool!($db, |pool, d| {
            let rows = sqlx::query(d.owned($sql.to_string()))$(.bind($arg))*
                .fetch_all(pool).await.map_err(ctx($what))?;
            rows.iter().map(|r| r.$map()).collect::<Result<Vec<_>, _>>().map_err(ctx($what))
        })
    };
}

/// Runs one write and evaluates to the rows affected.
macro_rules! exec_w {
    ($db:expr, $what:literal, $sql:expr, [$($arg:expr),*]) => {
        on_pool!($db, write, |pool, d| {
            sqlx::query(d.sql($sql))$(.bind($arg))*
                .execute(pool).await.map_err(ctx($what)).map(|r| r.rows_affected())
        })
    };
}

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
            VALUES (?, ?, ?, ?, ?) RETURNING id";
        let now = Utc::now();
        on_pool!(self, write, |pool, d| {
            let (id,): (i64,) = sqlx::query_as(d.sql(SQL))
                .bind(name)
                .bind(key_hash)
                .bind(prefix)
                .bind(rfc_emisor)
                .bind(now)
                .fetch_one(pool)
                .await
                .map_err(ctx("store an API key"))?;
            Ok(id)
        })
    }

    /// The live key whose SHA-256 is `key_hash`.
    pub async fn api_key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKeyRow>, StoreError> {
        one!(
            self,
            "read an API key",
            "SELECT id, name, rfc_emisor FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
            [key_hash],
            api_key
        )
    }

    /// Every key, live and revoked, oldest first.
    pub async fn list_api_keys(&self) -> Result<Vec<ApiKeyListing>, StoreError> {
        all!(
            self,
            "list API keys",
            "SELECT id, name, prefix, rfc_emisor, created_at, revoked_at FROM api_keys ORDER BY id",
            [],
            api_key_listing
        )
    }

    /// Revokes a key: from now on it authenticates nothing. `false` when no live key has `id`.
    pub async fn revoke_api_key(&self, id: i64) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL";
        let now = Utc::now();
        on_pool!(self, write, |pool, d| {
            let n = sqlx::query(d.sql(SQL))
                .bind(now)
                .bind(id)
                .execute(pool)
                .await
                .map_err(ctx("revoke an API key"))?
                .rows_affected();
            Ok(n == 1)
        })
    }

    /// The record under an idempotency key, with its invoice's outbox state.
    pub async fn idempotency_record(
        &self,
        rfc_emisor: &str,
        key: &str,
    ) -> Result<Option<IdemRecord>, StoreError> {
        one!(
            self,
            "read an idempotency key",
            "SELECT i.request_hash, i.state, i.invoice_id, i.response_status, i.response_body, i.expires_at, \
             o.state AS outbox_state, o.last_error_code AS outbox_code FROM api_idempotency i JOIN api_invoices a ON a.id = i.invoice_id \
             JOIN outbox o ON o.id = a.outbox_id WHERE i.rfc_emisor = ? AND i.idem_key = ?",
            [rfc_emisor, key],
            idem
        )
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
        let n = exec_w!(
            self,
            "store the response of an idempotency key",
            "UPDATE api_idempotency SET state = 'completed', response_status = ?, response_body = ? \
             WHERE rfc_emisor = ? AND idem_key = ? AND invoice_id = ? AND state = 'in_progress'",
            [status, body, rfc_emisor, key, invoice_id]
        )?;
        Ok(n == 1)
    }

    /// Deletes released keys (their invoice ended without a stamp, for sure) whose retention
    /// ended before `now`. A key whose invoice was stamped, or may have been, is never deleted:
    /// a retry under it, however late, must replay the original and not issue a second CFDI.
    /// What such a key keeps is only what the replay needs: the request's hash and the 201.
    pub async fn purge_idempotency(&self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        exec_w!(
            self,
            "purge expired idempotency keys",
            "DELETE FROM api_idempotency WHERE expires_at <= ? AND state = 'in_progress' AND invoice_id IN \
             (SELECT a.id FROM api_invoices a JOIN outbox o ON o.id = a.outbox_id \
              WHERE o.state IN ('failed', 'expired', 'superseded'))",
            [now]
        )
    }

    /// In one transaction: release what must be released, then the payment, the folio (explicit
    /// or allocated), the frozen outbox row, the API invoice and the idempotency record.
    pub async fn create_api_invoice(
        &self,
        inv: &NewApiInvoice,
    ) -> Result<CreateOutcome, StoreError> {
        const SUPERSEDE: &str = "UPDATE outbox SET state = 'superseded', updated_at = ?, \
            last_error_message = COALESCE(last_error_message, '') || ' (superseded: its idempotency key was used again)' \
            WHERE id = (SELECT outbox_id FROM api_invoices WHERE id = ?) AND state IN ('failed', 'expired', 'superseded')";
        const FREE_OLD: &str = "UPDATE api_invoices SET folio_claim = NULL WHERE id = ?";
        const DROP_KEY: &str =
            "DELETE FROM api_idempotency WHERE rfc_emisor = ? AND idem_key = ? AND invoice_id = ?";
        const FOLIO_LIVE: &str = "SELECT COUNT(*) FROM outbox o WHERE o.serie = ? AND o.folio = ? \
            AND (o.state NOT IN ('failed', 'expired', 'superseded') \
                 OR NOT EXISTS (SELECT 1 FROM api_invoices a WHERE a.outbox_id = o.id))";
        const FOLIO_RELEASE: &str = "UPDATE outbox SET state = 'superseded', updated_at = ? WHERE serie = ? \
            AND folio = ? AND state IN ('failed', 'expired') AND id IN (SELECT outbox_id FROM api_invoices)";
        const FOLIO_UNCLAIM: &str =
            "UPDATE api_invoices SET folio_claim = NULL WHERE rfc_emisor = ? AND folio_claim = ?";
        const INSERT_INVOICE: &str = "INSERT INTO api_invoices (public_id, rfc_emisor, api_key_id, outbox_id, \
            idempotency_key, folio_claim, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id";
        const INSERT_IDEM: &str = "INSERT INTO api_idempotency (rfc_emisor, idem_key, request_hash, state, \
            invoice_id, created_at, expires_at) VALUES (?, ?, ?, 'in_progress', ?, ?, ?) ON CONFLICT DO NOTHING";
        let now = Utc::now();
        let p = &inv.payment;
        let mut draft = inv.draft.clone();
        let serie = draft.request.serie.clone().unwrap_or_default();
        let explicit = draft.request.folio.clone();
        in_tx!(self, "commit the API invoice", |tx, d| {
            if let Some(idem) = &inv.idem {
                if let Some(old) = idem.releases {
                    let n = sqlx::query(d.sql(SUPERSEDE))
                        .bind(now)
                        .bind(old)
                        .execute(&mut *tx)
                        .await
                        .map_err(ctx("supersede a failed invoice"))?
                        .rows_affected();
                    if n != 1 {
                        return Ok(CreateOutcome::KeyTaken);
                    }
                    sqlx::query(d.sql(FREE_OLD))
                        .bind(old)
                        .execute(&mut *tx)
                        .await
                        .map_err(ctx("release a folio"))?;
                }
                sqlx::query(d.sql(DROP_KEY))
                    .bind(&inv.rfc_emisor)
                    .bind(&idem.key)
                    .bind(idem.releases.unwrap_or(-1))
                    .execute(&mut *tx)
                    .await
                    .map_err(ctx("release an idempotency key"))?;
            }
            let folio_claim = match &explicit {
                Some(folio) => {
                    let (live,): (i64,) = sqlx::query_as(d.sql(FOLIO_LIVE))
                        .bind(&serie)
                        .bind(folio)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(ctx("check a folio"))?;
                    if live > 0 {
                        return Ok(CreateOutcome::FolioTaken);
                    }
                    let claim = format!("{serie}/{folio}");
                    sqlx::query(d.sql(FOLIO_RELEASE))
                        .bind(now)
                        .bind(&serie)
                        .bind(folio)
                        .execute(&mut *tx)
                        .await
                        .map_err(ctx("release a folio"))?;
                    sqlx::query(d.sql(FOLIO_UNCLAIM))
                        .bind(&inv.rfc_emisor)
                        .bind(&claim)
                        .execute(&mut *tx)
                        .await
                        .map_err(ctx("release a folio"))?;
                    Some(claim)
                }
                None => None,
            };
            let insert_payment = match d {
                Dialect::Sqlite => sql::sqlite::INSERT_PAYMENT,
                Dialect::Postgres => sql::postgres::INSERT_PAYMENT,
            };
            let payment_row: Option<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(insert_payment))
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
                .bind(&p.status)
                .bind(&p.reason)
                .bind(now)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(ctx("insert the payment"))?;
            let Some((payment_row,)) = payment_row else {
                return Err(StoreError::Other(format!(
                    "API invoice id {} already used",
                    p.payment_id
                )));
            };
            let folio = match explicit.clone() {
                Some(f) => f,
                None => {
                    let next = match d {
                        Dialect::Sqlite => sql::sqlite::NEXT_FOLIO,
                        Dialect::Postgres => sql::postgres::NEXT_FOLIO,
                    };
                    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(next))
                        .bind(&serie)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(ctx("allocate a folio"))?;
                    n.to_string()
                }
            };
            draft.request.folio = Some(folio.clone());
            let request_json = serde_json::to_string(&draft.request).map_err(|e| {
                StoreError::Other(format!("cannot serialize the invoice request: {e}"))
            })?;
            let insert_outbox = match d {
                Dialect::Sqlite => sql::sqlite::INSERT_OUTBOX,
                Dialect::Postgres => sql::postgres::INSERT_OUTBOX,
            };
            let (outbox_id,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(insert_outbox))
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
                .fetch_one(&mut *tx)
                .await
                .map_err(ctx("insert the outbox row"))?;
            let invoice: Option<(i64,)> = sqlx::query_as(d.sql(INSERT_INVOICE))
                .bind(&inv.public_id)
                .bind(&inv.rfc_emisor)
                .bind(inv.api_key_id)
                .bind(outbox_id)
                .bind(inv.idem.as_ref().map(|i| i.key.as_str()))
                .bind(&folio_claim)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await
                .map_err(ctx("insert the API invoice"))?;
            let Some((invoice_id,)) = invoice else {
                return Ok(CreateOutcome::FolioTaken);
            };
            if let Some(idem) = &inv.idem {
                let n = sqlx::query(d.sql(INSERT_IDEM))
                    .bind(&inv.rfc_emisor)
                    .bind(&idem.key)
                    .bind(&idem.request_hash)
                    .bind(invoice_id)
                    .bind(now)
                    .bind(idem.expires_at)
                    .execute(&mut *tx)
                    .await
                    .map_err(ctx("take the idempotency key"))?
                    .rows_affected();
                if n != 1 {
                    return Ok(CreateOutcome::KeyTaken);
                }
            }
            Ok::<_, StoreError>(CreateOutcome::Created { invoice_id, folio })
        })
    }

    /// An API invoice by its public id, for the emisor `rfc_emisor`.
    pub async fn api_invoice(
        &self,
        public_id: &str,
        rfc_emisor: &str,
    ) -> Result<Option<ApiInvoiceRow>, StoreError> {
        one!(
            self,
            "read an API invoice",
            format!("SELECT {INVOICE_COLUMNS} WHERE a.public_id = ? AND a.rfc_emisor = ?"),
            [public_id, rfc_emisor],
            invoice
        )
    }

    /// An API invoice by its row id.
    pub async fn api_invoice_by_id(&self, id: i64) -> Result<Option<ApiInvoiceRow>, StoreError> {
        one!(
            self,
            "read an API invoice",
            format!("SELECT {INVOICE_COLUMNS} WHERE a.id = ?"),
            [id],
            invoice
        )
    }

    /// The emisor's API invoices, newest first, optionally by serie and folio (at most 100).
    pub async fn find_api_invoices(
        &self,
        rfc_emisor: &str,
        serie: Option<&str>,
        folio: Option<&str>,
    ) -> Result<Vec<ApiInvoiceRow>, StoreError> {
        all!(
            self,
            "list API invoices",
            format!(
                "SELECT {INVOICE_COLUMNS} WHERE a.rfc_emisor = ? AND (? IS NULL OR o.serie = ?) \
                 AND (? IS NULL OR o.folio = ?) ORDER BY a.id DESC LIMIT 100"
            ),
            [rfc_emisor, serie, serie, folio, folio],
            invoice
        )
    }

    /// Claims the next due merchant webhook, hidden from other senders until `lease_until`.
    pub async fn claim_api_webhook(
        &self,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Option<ClaimedWebhook>, StoreError> {
        const SQL: &str = "UPDATE api_webhook_outbox SET run_at = ?, attempts = attempts + 1 \
            WHERE id = (SELECT id FROM api_webhook_outbox WHERE state = 'pending' AND run_at <= ? \
            ORDER BY run_at, id LIMIT 1{LOCK}) \
            RETURNING id, invoice_id, event_type, payload, created_at, attempts";
        on_pool!(self, write, |pool, d| {
            let text = SQL.replace(
                "{LOCK}",
                match d {
                    Dialect::Sqlite => "",
                    Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
                },
            );
            let row = sqlx::query(d.owned(text))
                .bind(lease_until)
                .bind(now)
                .fetch_optional(pool)
                .await
                .map_err(ctx("claim a merchant webhook"))?;
            row.map(|r| r.webhook())
                .transpose()
                .map_err(ctx("claim a merchant webhook"))
        })
    }

    /// Fixes a webhook's payload before its first delivery; returns the payload now stored.
    pub async fn fix_webhook_payload(&self, id: i64, payload: &str) -> Result<String, StoreError> {
        exec_w!(
            self,
            "fix a webhook payload",
            "UPDATE api_webhook_outbox SET payload = ? WHERE id = ? AND payload IS NULL",
            [payload, id]
        )?;
        let got: Option<(Option<String>,)> = on_pool!(self, |pool, d| {
            sqlx::query_as(d.sql("SELECT payload FROM api_webhook_outbox WHERE id = ?"))
                .bind(id)
                .fetch_optional(pool)
                .await
                .map_err(ctx("read a webhook payload"))
        })?;
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
        exec_w!(
            self,
            "record a webhook delivery",
            "UPDATE api_webhook_outbox SET state = ?, run_at = ?, last_error = ?, \
             delivered_at = COALESCE(?, delivered_at) WHERE id = ?",
            [state, run_at, error, delivered, id]
        )?;
        Ok(())
    }

    /// The merchant webhooks of an invoice, oldest first.
    pub async fn api_webhooks_of(&self, invoice_id: i64) -> Result<Vec<WebhookRow>, StoreError> {
        all!(
            self,
            "list merchant webhooks",
            "SELECT id, event_type, state, attempts, payload FROM api_webhook_outbox WHERE invoice_id = ? ORDER BY id",
            [invoice_id],
            webhook_row
        )
    }
}
