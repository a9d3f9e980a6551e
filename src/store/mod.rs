//! Storage: every SQL statement, and every SQLite/PostgreSQL difference, lives in this folder.
//!
//! - `exec.rs`: the only file that knows the backend: connecting, migrations, running a
//!   statement (written once with `$n` placeholders) on either pool or in a transaction, and
//!   SQLite's write lock / `BEGIN IMMEDIATE`. Elsewhere a backend branch ([`exec::Dialect`])
//!   appears only where the SQL really differs (SKIP LOCKED claims, JSON extraction), and the
//!   worker's batched settles keep a path per backend for throughput.
//! - `rows.rs`: the `#[derive(sqlx::FromRow)]` structs statements read into.
//! - `events.rs` (webhook deliveries, the ingest transaction), `payments.rs` (with folio
//!   sequences), `outbox.rs` (the frozen comprobante, `enqueue_in_tx` shared by ingest and the
//!   API), `api.rs` (keys, idempotency, API invoices, merchant webhooks), `admin.rs` (sessions,
//!   audit, the admin's lists and actions), `worker.rs` (claims, leases, settles, attempts,
//!   heartbeats).
//!
//! Who may import it: anything outside `store/` uses [`Db`] and the types re-exported here (or
//! from `store::api` / `store::worker`); nothing in this folder imports outside it except plain
//! data types (`config`, `cfdi`, `domain`). Transactions never span a network call: callers
//! fetch first, then hand complete values to one short transaction here.

mod admin;
pub mod api;
mod events;
mod exec;
mod outbox;
mod payments;
mod rows;
pub mod worker;

pub use admin::{
    ActionRow, AdminPacCall, AdminSession, AttemptRow, CANCEL_IN_PROCESS, CancelConflict,
    CancellationRow, DocFull, DocRow, FindingRow, HistoryRow, ListFilter, ListView,
    NewCancellation, PaymentRow, SealedGeneration, WorkerRow,
};
pub use events::{EventRecord, EventRow, IngestOutcome, NewEvent, PendingFetch};
pub use exec::connect;
pub use outbox::OutboxDraft;
pub use payments::{InvoiceRow, NewPayment};

use std::borrow::Cow;
use std::sync::Arc;

use sqlx::migrate::{Migration, MigrationSource, MigrationType};
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

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
