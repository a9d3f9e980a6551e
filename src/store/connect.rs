//! Opening the database: connecting as configured (SQLite's file, pragmas and write lock;
//! PostgreSQL's pool), the second handle the worker pool writes through, migrations, and the
//! throwaway PostgreSQL databases that tests and benchmarks run in.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::pool::PoolOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

use super::lite::Lite;
use super::stash::Stash;
use super::writer::{Durability, WriteLock};
use super::{Db, Embedded, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS, StoreError, ctx};
use crate::config::DatabaseSettings;

/// Connects as configured. SQLite: the file and its directory are created; WAL, a busy timeout,
/// foreign keys, and every write on disk before it returns (an acknowledged webhook survives
/// power loss): `synchronous = FULL` for a database without a write connection of its own,
/// else the log synced after the write ([`Durability`]).
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
        // No ping before each use: a connection to a file in this process cannot go stale as a
        // network one can, and a write acquires its connection while holding the write lock,
        // so a ping would be one more trip to the connection's thread inside it.
        let file = opts.get_filename().to_owned();
        let pool = pool_options(settings.max_connections, 5)
            .test_before_acquire(false)
            .connect_with(opts.clone())
            .await
            .map_err(ctx("open the SQLite database"))?;
        // Every write of the process runs on one connection of its own, whose commits do not
        // wait for the disk: a write that must be durable syncs the log after it, outside the
        // write lock (`writer.rs`). One connection keeps its page cache across writes, which
        // a connection whose database another one changed must drop. A database in memory
        // has no file, nor a log to sync: its writes run on the pool.
        let write_lock = if file.is_file() {
            let writer = pool_options(1, 30)
                .test_before_acquire(false)
                .connect_with(
                    opts.synchronous(SqliteSynchronous::Normal)
                        // The checkpoints are made beside it ([`WriteLock::deferring_sync`]):
                        // one on commit copies and syncs megabytes while the lock is held.
                        .pragma("wal_autocheckpoint", "0")
                        // When the log starts over after a burst, its file shrinks back to this.
                        .pragma("journal_size_limit", "67108864")
                        // Every write statement of the process is prepared on it.
                        .statement_cache_capacity(512),
                )
                .await
                .map_err(ctx("open the SQLite database for writing"))?;
            // New sales and the writes made outside a transaction run on a connection of their
            // own on the caller's thread (`lite.rs`).
            let lite = Lite::open(&file).map_err(ctx("open the SQLite database for writing"))?;
            WriteLock::deferring_sync(Durability::new(writer, &file), pool.clone(), Some(lite))
        } else {
            WriteLock::default()
        };
        Ok(Db::Sqlite {
            pool,
            write_lock,
            durable: true,
            reads: Arc::new(Stash::for_pool(settings.max_connections)),
        })
    } else {
        let opts = PgConnectOptions::from_str(url).map_err(ctx("parse the PostgreSQL URL"))?;
        // A connection idle for a while is pinged before use (the server may have restarted
        // or dropped it meanwhile); one in steady use is not, which spares every webhook a
        // round trip.
        let pool = pool_options(settings.max_connections, 5)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for > IDLE_BEFORE_PING {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(opts)
            .await
            .map_err(ctx("connect to PostgreSQL"))?;
        Ok(Db::Postgres(
            pool,
            Arc::new(Stash::for_pool(settings.max_connections)),
        ))
    }
}

/// How long a PostgreSQL connection of the main pool may sit idle and still be used without
/// a ping first.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(10);

/// A pool of at most `max` connections that waits `acquire_secs` for a free one.
fn pool_options<DB: sqlx::Database>(max: u32, acquire_secs: u64) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(acquire_secs))
}

impl Db {
    /// A second handle on the same database for the worker pool, whose commits do not wait for
    /// the disk: SQLite `synchronous = NORMAL` (WAL), PostgreSQL `synchronous_commit = off`.
    ///
    /// Why this is safe: a committed write survives a crashed or killed process either way; only
    /// a power loss can drop the last few worker commits, and every one of them is redone
    /// without harm — a lost claim or outcome leaves the row to be recovered by key from the
    /// idempotent PAC, and a lost sealed document is sealed again to the same bytes (sealing is
    /// deterministic). The ones that are not, a row's folio and an ARCA number, are on disk
    /// before they are first sent (`Db::durable_before_sending`, `Tx::commit_durable`).
    /// Webhook acknowledgements keep full durability on the main handle. On SQLite both
    /// handles share the process's write lock and its one write connection, so they queue
    /// instead of colliding; only the main handle's writes wait for a sync.
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
                    .pragma("wal_autocheckpoint", "0");
                // For their reads: their writes run on the write lock's connection, shared
                // with the appliance's handle, and are not synced.
                let pool = pool_options(settings.max_connections.min(4), 30)
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await
                    .map_err(ctx("open the SQLite database for the workers"))?;
                Ok(Db::Sqlite {
                    pool,
                    write_lock: write_lock.clone(),
                    durable: false,
                    reads: Arc::new(Stash::for_pool(settings.max_connections.min(4))),
                })
            }
            Db::Postgres(..) => {
                let opts = PgConnectOptions::from_str(url)
                    .map_err(ctx("parse the PostgreSQL URL"))?
                    .options([("synchronous_commit", "off")]);
                let pool = pool_options(settings.max_connections, 5)
                    .test_before_acquire(false)
                    .connect_with(opts)
                    .await
                    .map_err(ctx("connect to PostgreSQL for the workers"))?;
                Ok(Db::Postgres(
                    pool,
                    Arc::new(Stash::for_pool(settings.max_connections)),
                ))
            }
        }
    }
}

impl Db {
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite { .. } => "sqlite",
            Db::Postgres(..) => "postgres",
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
            Db::Postgres(pool, ..) => {
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
            Db::Postgres(pool, ..) => {
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
            Db::Sqlite {
                pool,
                write_lock,
                reads,
                ..
            } => {
                reads.close();
                // An open group of sales holds a connection the close would wait for: ended
                // (committed) first.
                drop(write_lock.lock().await);
                write_lock.close().await;
                pool.close().await;
            }
            Db::Postgres(pool, stash) => {
                stash.close();
                pool.close().await;
            }
        }
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
