//! Storage: every SQL statement and every SQLite/PostgreSQL difference lives here.
//!
//! [`Db`] is an enum over the two pools; each operation matches once and runs the backend's
//! statement from [`sql`]. Transactions never span a network call: callers fetch first, then
//! hand complete values to one short transaction here.

#[macro_use]
mod admin;
pub mod api;
mod sql;
pub mod worker;

pub use admin::{
    ActionRow, AdminPacCall, AdminSession, AttemptRow, CANCEL_IN_PROCESS, CancelConflict,
    CancellationRow, DocFull, DocRow, FindingRow, HistoryRow, ListFilter, ListView,
    NewCancellation, PaymentRow, SealedGeneration, WorkerRow,
};

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Postgres, Sqlite, Transaction};

use crate::cfdi::InvoiceRequest;
use crate::config::DatabaseSettings;
use crate::domain::StampKey;

/// Migrations per backend: same versions and names, embedded so the binary needs no files.
pub const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "worker_admin",
        include_str!("../../migrations/sqlite/0002_worker_admin.sql"),
    ),
    (
        3,
        "admin",
        include_str!("../../migrations/sqlite/0003_admin.sql"),
    ),
    (
        4,
        "claim_indexes",
        include_str!("../../migrations/sqlite/0004_claim_indexes.sql"),
    ),
    (
        5,
        "api",
        include_str!("../../migrations/sqlite/0005_api.sql"),
    ),
    (
        6,
        "outbox_writes",
        include_str!("../../migrations/sqlite/0006_outbox_writes.sql"),
    ),
    (
        7,
        "unknown_outcomes",
        include_str!("../../migrations/sqlite/0007_unknown_outcomes.sql"),
    ),
];
pub const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "worker_admin",
        include_str!("../../migrations/postgres/0002_worker_admin.sql"),
    ),
    (
        3,
        "admin",
        include_str!("../../migrations/postgres/0003_admin.sql"),
    ),
    (
        4,
        "claim_indexes",
        include_str!("../../migrations/postgres/0004_claim_indexes.sql"),
    ),
    (
        5,
        "api",
        include_str!("../../migrations/postgres/0005_api.sql"),
    ),
    (
        6,
        "outbox_writes",
        include_str!("../../migrations/postgres/0006_outbox_writes.sql"),
    ),
    (
        7,
        "unknown_outcomes",
        include_str!("../../migrations/postgres/0007_unknown_outcomes.sql"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or answered with an error; retrying later is safe.
    #[error("database error while trying to {what}: {source}")]
    Database {
        what: &'static str,
        source: sqlx::Error,
    },
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Other(String),
}

fn ctx(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database { what, source }
}

/// The database: SQLite (embedded default) or PostgreSQL (several instances, one database).
#[derive(Debug, Clone)]
pub enum Db {
    /// SQLite allows one writer at a time; `write_lock` queues this process's writers in
    /// order instead of letting them poll the busy handler.
    Sqlite {
        pool: SqlitePool,
        write_lock: Arc<tokio::sync::Mutex<()>>,
    },
    Postgres(PgPool),
}

/// Connects as configured. SQLite: the file and its directory are created; WAL, a busy timeout,
/// foreign keys and `synchronous = FULL` (an acknowledged webhook survives power loss).
pub async fn connect(settings: &DatabaseSettings) -> Result<Db, StoreError> {
    let url = settings.url.expose();
    if url.starts_with("sqlite:") {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(ctx("parse the SQLite URL"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        if let Some(dir) = opts.get_filename().parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Other(format!("cannot create {}: {e}", dir.display())))?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(ctx("open the SQLite database"))?;
        Ok(Db::Sqlite {
            pool,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
        })
    } else {
        let opts = PgConnectOptions::from_str(url).map_err(ctx("parse the PostgreSQL URL"))?;
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(ctx("connect to PostgreSQL"))?;
        Ok(Db::Postgres(pool))
    }
}

/// Whether `name` can be spliced into `CREATE DATABASE` as is (lower-case letters, digits, `_`).
fn plain_identifier(name: &str) -> Result<&str, StoreError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(name)
    } else {
        Err(StoreError::Other(format!(
            "`{name}` is not a plain database name (a-z, 0-9, _)"
        )))
    }
}

/// One statement on a fresh connection to the PostgreSQL server at `admin_url` (CREATE and
/// DROP DATABASE cannot run inside a transaction or a pool's session state).
async fn postgres_admin_statement(
    admin_url: &str,
    sql: String,
    what: &'static str,
) -> Result<(), StoreError> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(admin_url)
        .await
        .map_err(ctx("connect to PostgreSQL"))?;
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .map_err(ctx(what))?;
    c.close().await.map_err(ctx("close the admin connection"))
}

/// Creates the empty database `name` on the server at `admin_url` (for a run of its own).
pub async fn create_postgres_database(admin_url: &str, name: &str) -> Result<(), StoreError> {
    let name = plain_identifier(name)?;
    postgres_admin_statement(
        admin_url,
        format!("CREATE DATABASE {name}"),
        "create a database",
    )
    .await
}

/// Drops the database `name`, closing whatever sessions still use it.
pub async fn drop_postgres_database(admin_url: &str, name: &str) -> Result<(), StoreError> {
    let name = plain_identifier(name)?;
    postgres_admin_statement(
        admin_url,
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        "drop a database",
    )
    .await
}

/// `url` with its database replaced by `name` (credentials, host and query parameters kept).
pub fn postgres_url_with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, format!("?{q}")),
        None => (rest, String::new()),
    };
    let authority = rest.split_once('/').map_or(rest, |(a, _)| a);
    format!("{scheme}://{authority}/{name}{query}")
}

impl Db {
    /// A second handle on the same database for the worker pool, whose commits do not wait for
    /// the disk: SQLite `synchronous = NORMAL` (WAL), PostgreSQL `synchronous_commit = off`.
    ///
    /// Why this is safe: a committed write survives a crashed or killed process either way; only
    /// a power loss can drop the last few worker commits, and every one of them is redone
    /// without harm — a lost claim or outcome leaves the row to be recovered by key from the
    /// idempotent PAC, and a lost sealed document is sealed again to the same bytes (sealing is
    /// deterministic). Webhook acknowledgements keep full durability on the main handle. On
    /// SQLite both handles share the process's write lock, so they queue instead of colliding.
    ///
    /// Connections are not pinged before each use (one round trip less per statement): a
    /// connection that went bad fails its statement, the worker logs it and tries again, and a
    /// row whose outcome was not written is recovered by key when its lease expires.
    pub async fn for_workers(&self, settings: &DatabaseSettings) -> Result<Db, StoreError> {
        let url = settings.url.expose();
        match self {
            Db::Sqlite { write_lock, .. } => {
                let opts = SqliteConnectOptions::from_str(url)
                    .map_err(ctx("parse the SQLite URL"))?
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(10))
                    .foreign_keys(true)
                    // Their commits never checkpoint the WAL themselves (a checkpoint copies and
                    // syncs megabytes while the one write lock is held): the pool checkpoints
                    // from a task of its own, beside the writers ([`Db::checkpoint`]).
                    .pragma("wal_autocheckpoint", "0");
                // Worker statements are writes, which queue on the write lock anyway: a few
                // connections with warm page caches beat one thread per slot.
                let pool = SqlitePoolOptions::new()
                    .max_connections(settings.max_connections.min(4))
                    .acquire_timeout(Duration::from_secs(30))
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await
                    .map_err(ctx("open the SQLite database for the workers"))?;
                Ok(Db::Sqlite {
                    pool,
                    write_lock: write_lock.clone(),
                })
            }
            Db::Postgres(_) => {
                let opts = PgConnectOptions::from_str(url)
                    .map_err(ctx("parse the PostgreSQL URL"))?
                    .options([("synchronous_commit", "off")]);
                let pool = PgPoolOptions::new()
                    .max_connections(settings.max_connections)
                    .acquire_timeout(Duration::from_secs(5))
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await
                    .map_err(ctx("connect to PostgreSQL for the workers"))?;
                Ok(Db::Postgres(pool))
            }
        }
    }
}

/// The embedded migrations of one backend, as a sqlx source.
#[derive(Debug)]
struct Embedded(&'static [(i64, &'static str, &'static str)]);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Vec<Migration>, sqlx::error::BoxDynError>>
                + Send
                + 's,
        >,
    > {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|(v, name, text)| {
                    Migration::new(
                        *v,
                        Cow::Borrowed(*name),
                        MigrationType::Simple,
                        sqlx::SqlSafeStr::into_sql_str(*text),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// A new webhook delivery to record.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub status: String,
    pub reason: Option<String>,
    pub payment_ref: Option<String>,
    pub livemode: Option<bool>,
    pub api_version: Option<String>,
    pub account: Option<String>,
    pub headers_json: String,
    pub raw_body: Vec<u8>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// A payment to record.
#[derive(Debug, Clone)]
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
    /// `invoice_pending`, `awaiting_global` or `needs_attention`.
    pub status: String,
    pub reason: Option<String>,
}

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

/// Where the event row of an ingest comes from.
#[derive(Debug, Clone)]
pub enum EventRow {
    /// Insert it in the same transaction (Stripe: everything is in the delivery).
    Insert(Box<NewEvent>),
    /// Already stored as `pending_fetch` (Mercado Pago): take it over by id.
    Stored {
        id: i64,
        payment_ref: String,
        livemode: bool,
    },
}

/// What one ingest transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    /// The event was already recorded (or already taken over): nothing written.
    DuplicateEvent,
    /// A new event for a payment already recorded: the event is kept, nothing else.
    DuplicatePayment,
    /// Payment recorded; `folio` is set when an outbox row was written.
    Recorded {
        payment_row: i64,
        outbox_row: Option<i64>,
        folio: Option<String>,
    },
}

/// A stored notification whose payment must still be fetched.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingFetch {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub payment_ref: Option<String>,
    pub livemode: Option<bool>,
    pub attempts: i32,
}

/// One line of `invoices list`.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct InvoiceRow {
    pub provider: String,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    pub status: String,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub uuid: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub stamp_key: Option<String>,
    #[serde(skip)]
    pub request_json: Option<String>,
    /// The receptor's RFC in the frozen request; none for a factura global or no invoice yet.
    pub receptor_rfc: Option<String>,
}

/// One stored webhook delivery (audit view).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRecord {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub status: String,
    pub reason: Option<String>,
    pub payment_ref: Option<String>,
    pub livemode: Option<bool>,
    pub raw_body: Vec<u8>,
    pub attempts: i32,
}

/// Runs one ingest transaction; a macro because the two backends differ only in types and SQL.
macro_rules! ingest_tx {
    ($tx:expr, $q:ident, $event:expr, $payment:expr, $draft:expr, $now:expr) => {{
        let tx = $tx;
        let now: DateTime<Utc> = $now;
        let _event_row: i64 = match $event {
            EventRow::Insert(ev) => {
                let row: Option<(i64,)> = sqlx::query_as(sql::$q::INSERT_EVENT)
                    .bind(&ev.provider)
                    .bind(&ev.event_id)
                    .bind(&ev.event_type)
                    .bind(&ev.status)
                    .bind(&ev.reason)
                    .bind(&ev.payment_ref)
                    .bind(ev.livemode)
                    .bind(&ev.api_version)
                    .bind(&ev.account)
                    .bind(&ev.headers_json)
                    .bind(&ev.raw_body)
                    .bind(ev.next_attempt_at)
                    .bind(now)
                    .bind(now)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(ctx("insert the webhook event"))?;
                match row {
                    Some((id,)) => id,
                    None => return Ok(IngestOutcome::DuplicateEvent),
                }
            }
            EventRow::Stored {
                id,
                payment_ref,
                livemode,
            } => {
                let done = sqlx::query(sql::$q::FINISH_PENDING_EVENT)
                    .bind("processed")
                    .bind(Option::<String>::None)
                    .bind(Some(payment_ref.as_str()))
                    .bind(Some(*livemode))
                    .bind(now)
                    .bind(*id)
                    .execute(&mut **tx)
                    .await
                    .map_err(ctx("take over the stored notification"))?;
                if done.rows_affected() == 0 {
                    return Ok(IngestOutcome::DuplicateEvent);
                }
                *id
            }
        };
        let p: &NewPayment = $payment;
        let payment_row: Option<(i64,)> = sqlx::query_as(sql::$q::INSERT_PAYMENT)
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
            .fetch_optional(&mut **tx)
            .await
            .map_err(ctx("insert the payment"))?;
        let Some((payment_row,)) = payment_row else {
            return Ok(IngestOutcome::DuplicatePayment);
        };
        let draft: Option<OutboxDraft> = $draft;
        let Some(mut draft) = draft else {
            return Ok(IngestOutcome::Recorded {
                payment_row,
                outbox_row: None,
                folio: None,
            });
        };
        let serie = draft.request.serie.clone().unwrap_or_default();
        let (folio,): (i64,) = sqlx::query_as(sql::$q::NEXT_FOLIO)
            .bind(&serie)
            .fetch_one(&mut **tx)
            .await
            .map_err(ctx("allocate a folio"))?;
        let folio = folio.to_string();
        draft.request.folio = Some(folio.clone());
        let request_json = serde_json::to_string(&draft.request)
            .map_err(|e| StoreError::Other(format!("cannot serialize the invoice request: {e}")))?;
        let outbox: Option<(i64,)> = sqlx::query_as(sql::$q::INSERT_OUTBOX)
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
            .fetch_optional(&mut **tx)
            .await
            .map_err(ctx("insert the outbox row"))?;
        Ok(IngestOutcome::Recorded {
            payment_row,
            outbox_row: outbox.map(|r| r.0),
            folio: Some(folio),
        })
    }};
}

async fn ingest_sqlite(
    tx: &mut Transaction<'static, Sqlite>,
    event: &EventRow,
    payment: &NewPayment,
    draft: Option<OutboxDraft>,
    now: DateTime<Utc>,
) -> Result<IngestOutcome, StoreError> {
    ingest_tx!(tx, sqlite, event, payment, draft, now)
}

async fn ingest_postgres(
    tx: &mut Transaction<'static, Postgres>,
    event: &EventRow,
    payment: &NewPayment,
    draft: Option<OutboxDraft>,
    now: DateTime<Utc>,
) -> Result<IngestOutcome, StoreError> {
    ingest_tx!(tx, postgres, event, payment, draft, now)
}

impl Db {
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// Applies the backend's pending migrations.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Db::Sqlite { pool, .. } => {
                Migrator::new(Embedded(SQLITE_MIGRATIONS))
                    .await?
                    .run(pool)
                    .await?;
            }
            Db::Postgres(pool) => {
                Migrator::new(Embedded(POSTGRES_MIGRATIONS))
                    .await?
                    .run(pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// A round trip to the database (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Db::Sqlite { pool, .. } => {
                sqlx::query(sql::sqlite::PING)
                    .execute(pool)
                    .await
                    .map_err(ctx("ping SQLite"))?;
            }
            Db::Postgres(pool) => {
                sqlx::query(sql::postgres::PING)
                    .execute(pool)
                    .await
                    .map_err(ctx("ping PostgreSQL"))?;
            }
        }
        Ok(())
    }

    pub async fn close(&self) {
        match self {
            Db::Sqlite { pool, .. } => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }

    /// Records a delivery on its own (ignored, malformed, refund, pending fetch). `None` when
    /// the same (provider, event id) was already recorded.
    pub async fn record_event(&self, ev: &NewEvent) -> Result<Option<i64>, StoreError> {
        let now = Utc::now();
        match self {
            Db::Sqlite { pool, write_lock } => {
                let _w = write_lock.lock().await;
                let row: Option<(i64,)> =
                    bind_event(sqlx::query_as(sql::sqlite::INSERT_EVENT), ev, now)
                        .fetch_optional(pool)
                        .await
                        .map_err(ctx("insert the webhook event"))?;
                Ok(row.map(|r| r.0))
            }
            Db::Postgres(pool) => {
                let row: Option<(i64,)> =
                    bind_event(sqlx::query_as(sql::postgres::INSERT_EVENT), ev, now)
                        .fetch_optional(pool)
                        .await
                        .map_err(ctx("insert the webhook event"))?;
                Ok(row.map(|r| r.0))
            }
        }
    }

    /// The id and status of a recorded event.
    pub async fn event_status(
        &self,
        provider: &str,
        event_id: &str,
    ) -> Result<Option<(i64, String)>, StoreError> {
        match self {
            Db::Sqlite { pool, .. } => sqlx::query_as(sql::sqlite::EVENT_BY_KEY)
                .bind(provider)
                .bind(event_id)
                .fetch_optional(pool)
                .await
                .map_err(ctx("read a webhook event")),
            Db::Postgres(pool) => sqlx::query_as(sql::postgres::EVENT_BY_KEY)
                .bind(provider)
                .bind(event_id)
                .fetch_optional(pool)
                .await
                .map_err(ctx("read a webhook event")),
        }
    }

    /// In one transaction: the event (or the takeover of a stored one), the payment and, when
    /// `draft` is given, a folio and the outbox row with the frozen comprobante. Every insert
    /// is `ON CONFLICT DO NOTHING`, so a redelivery writes nothing and no folio is spent.
    pub async fn ingest(
        &self,
        event: &EventRow,
        payment: &NewPayment,
        draft: Option<OutboxDraft>,
    ) -> Result<IngestOutcome, StoreError> {
        let now = Utc::now();
        match self {
            Db::Sqlite { pool, write_lock } => {
                let _w = write_lock.lock().await;
                // IMMEDIATE takes the write lock up front, so two writers never deadlock
                // upgrading from a read.
                let mut tx = pool
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(ctx("begin a transaction"))?;
                let out = ingest_sqlite(&mut tx, event, payment, draft, now).await?;
                finish_sqlite(tx, &out).await?;
                Ok(out)
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await.map_err(ctx("begin a transaction"))?;
                let out = ingest_postgres(&mut tx, event, payment, draft, now).await?;
                if out == IngestOutcome::DuplicateEvent {
                    tx.rollback().await.map_err(ctx("roll back"))?;
                } else {
                    tx.commit()
                        .await
                        .map_err(ctx("commit the ingest transaction"))?;
                }
                Ok(out)
            }
        }
    }

    /// Marks a stored notification as handled without a payment (not approved, not a
    /// payment, …). `false` when it was not pending any more.
    pub async fn finish_pending_event(
        &self,
        id: i64,
        status: &str,
        reason: Option<&str>,
        payment_ref: Option<&str>,
        livemode: Option<bool>,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let done = match self {
            Db::Sqlite { pool, write_lock } => {
                let _w = write_lock.lock().await;
                sqlx::query(sql::sqlite::FINISH_PENDING_EVENT)
                    .bind(status)
                    .bind(reason)
                    .bind(payment_ref)
                    .bind(livemode)
                    .bind(now)
                    .bind(id)
                    .execute(pool)
                    .await
                    .map(|r| r.rows_affected())
            }
            Db::Postgres(pool) => sqlx::query(sql::postgres::FINISH_PENDING_EVENT)
                .bind(status)
                .bind(reason)
                .bind(payment_ref)
                .bind(livemode)
                .bind(now)
                .bind(id)
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
        }
        .map_err(ctx("update a stored notification"))?;
        Ok(done == 1)
    }

    /// Claims up to `limit` stored notifications due for a fetch; each is hidden from other
    /// claimers for `lease`, after which it is due again if the claimer died.
    pub async fn claim_pending_fetches(
        &self,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<PendingFetch>, StoreError> {
        let now = Utc::now();
        let until =
            now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(60));
        match self {
            Db::Sqlite { pool, write_lock } => {
                let _w = write_lock.lock().await;
                sqlx::query_as(sql::sqlite::CLAIM_PENDING_FETCH)
                    .bind(until)
                    .bind(now)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(pool)
                    .await
            }
            Db::Postgres(pool) => {
                sqlx::query_as(sql::postgres::CLAIM_PENDING_FETCH)
                    .bind(until)
                    .bind(now)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(pool)
                    .await
            }
        }
        .map_err(ctx("claim stored notifications"))
    }

    /// Schedules the next fetch of a stored notification and notes why the last one failed.
    pub async fn reschedule_fetch(
        &self,
        id: i64,
        at: DateTime<Utc>,
        reason: &str,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        match self {
            Db::Sqlite { pool, write_lock } => {
                let _w = write_lock.lock().await;
                sqlx::query(sql::sqlite::RESCHEDULE_FETCH)
                    .bind(at)
                    .bind(reason)
                    .bind(now)
                    .bind(id)
                    .execute(pool)
                    .await
                    .map(|_| ())
            }
            Db::Postgres(pool) => sqlx::query(sql::postgres::RESCHEDULE_FETCH)
                .bind(at)
                .bind(reason)
                .bind(now)
                .bind(id)
                .execute(pool)
                .await
                .map(|_| ()),
        }
        .map_err(ctx("reschedule a stored notification"))?;
        Ok(())
    }

    /// Payments with their invoice state, oldest first; `status` filters on the shown state.
    pub async fn list_invoices(&self, status: Option<&str>) -> Result<Vec<InvoiceRow>, StoreError> {
        match self {
            Db::Sqlite { pool, .. } => sqlx::query_as(sql::sqlite::LIST_INVOICES)
                .bind(status)
                .bind(status)
                .fetch_all(pool)
                .await
                .map_err(ctx("list invoices")),
            Db::Postgres(pool) => sqlx::query_as(sql::postgres::LIST_INVOICES)
                .bind(status)
                .fetch_all(pool)
                .await
                .map_err(ctx("list invoices")),
        }
    }

    /// Every stored delivery, oldest first (audit view).
    pub async fn list_events(&self) -> Result<Vec<EventRecord>, StoreError> {
        match self {
            Db::Sqlite { pool, .. } => sqlx::query_as(sql::sqlite::LIST_EVENTS)
                .fetch_all(pool)
                .await
                .map_err(ctx("list events")),
            Db::Postgres(pool) => sqlx::query_as(sql::postgres::LIST_EVENTS)
                .fetch_all(pool)
                .await
                .map_err(ctx("list events")),
        }
    }
}

async fn finish_sqlite(
    tx: Transaction<'static, Sqlite>,
    out: &IngestOutcome,
) -> Result<(), StoreError> {
    if *out == IngestOutcome::DuplicateEvent {
        tx.rollback().await.map_err(ctx("roll back"))
    } else {
        tx.commit()
            .await
            .map_err(ctx("commit the ingest transaction"))
    }
}

fn bind_event<'q, DB, O>(
    q: sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments>,
    ev: &'q NewEvent,
    now: DateTime<Utc>,
) -> sqlx::query::QueryAs<'q, DB, O, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<bool>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Vec<u8>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<DateTime<Utc>>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    DateTime<Utc>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    q.bind(ev.provider.clone())
        .bind(ev.event_id.clone())
        .bind(ev.event_type.clone())
        .bind(ev.status.clone())
        .bind(ev.reason.clone())
        .bind(ev.payment_ref.clone())
        .bind(ev.livemode)
        .bind(ev.api_version.clone())
        .bind(ev.account.clone())
        .bind(ev.headers_json.clone())
        .bind(ev.raw_body.clone())
        .bind(ev.next_attempt_at)
        .bind(now)
        .bind(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_have_the_same_migration_versions_and_names() {
        let names = |m: &[(i64, &str, &str)]| {
            m.iter()
                .map(|(v, n, _)| (*v, n.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(SQLITE_MIGRATIONS), names(POSTGRES_MIGRATIONS));
        let files = |dir: &str| {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .expect("migrations dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let sqlite = files(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"));
        assert_eq!(
            sqlite,
            files(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
        );
        assert_eq!(
            sqlite.len(),
            SQLITE_MIGRATIONS.len(),
            "every migration file is embedded"
        );
    }
}
