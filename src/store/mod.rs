//! Storage: every SQL statement and every SQLite/PostgreSQL difference lives here.
//!
//! [`Db`] is an enum over the two pools; each operation matches once and runs the backend's
//! statement from [`sql`]. Transactions never span a network call: callers fetch first, then
//! hand complete values to one short transaction here.

mod admin;
pub mod api;
mod events;
mod exec;
mod outbox;
mod payments;
pub mod worker;

pub use events::{EventRecord, EventRow, IngestOutcome, NewEvent, PendingFetch};
pub use outbox::OutboxDraft;
pub use payments::{InvoiceRow, NewPayment};

pub use admin::{
    ActionRow, AdminPacCall, AdminSession, AttemptRow, CANCEL_IN_PROCESS, CancelConflict,
    CancellationRow, DocFull, DocRow, FindingRow, HistoryRow, ListFilter, ListView,
    NewCancellation, PaymentRow, SealedGeneration, WorkerRow,
};

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::config::DatabaseSettings;

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
                sqlx::query("SELECT 1")
                    .execute(pool)
                    .await
                    .map_err(ctx("ping SQLite"))?;
            }
            Db::Postgres(pool) => {
                sqlx::query("SELECT 1")
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
