//! Reads only the tests make (the appliance never needs them): rows read straight from the
//! tables, on either backend.

use autofactura::store::{Db, NewEvent};
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

/// A value bound to a test query.
pub enum Bind<'a> {
    Str(&'a str),
    I64(i64),
}

/// Every row of `sql` (`$n` placeholders, bound from `binds` in order), on either backend.
pub async fn fetch_rows<T>(db: &Db, sql: &str, binds: &[Bind<'_>]) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    macro_rules! run {
        ($pool:expr) => {{
            let mut q = sqlx::query_as::<_, T>(sqlx::AssertSqlSafe(sql.to_owned()));
            for b in binds {
                q = match b {
                    Bind::Str(s) => q.bind(*s),
                    Bind::I64(n) => q.bind(*n),
                };
            }
            q.fetch_all($pool).await.expect(sql)
        }};
    }
    match db {
        Db::Sqlite { pool, .. } => run!(pool),
        Db::Postgres(pool) => run!(pool),
    }
}

/// The worker-facing view of one outbox row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxStatus {
    pub id: i64,
    pub state: String,
    pub run_at: DateTime<Utc>,
    pub attempts: i32,
    pub uuid: Option<String>,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub sealed_xml: Option<Vec<u8>>,
    pub stamped_xml: Option<Vec<u8>>,
}

/// One outbox row by its stamp key.
pub async fn outbox_status(db: &Db, stamp_key: &str) -> Option<OutboxStatus> {
    fetch_rows(
        db,
        "SELECT id, state, run_at, attempts, uuid, last_error_code, last_error_message, \
         sealed_xml, stamped_xml FROM outbox WHERE stamp_key = $1",
        &[Bind::Str(stamp_key)],
    )
    .await
    .into_iter()
    .next()
}

/// Every stored delivery, oldest first, as it was recorded.
pub async fn events(db: &Db) -> Vec<NewEvent> {
    fetch_rows(
        db,
        "SELECT provider, event_id, event_type, status, reason, payment_ref, livemode, \
         api_version, account, headers_json, raw_body, next_attempt_at FROM webhook_events \
         ORDER BY id",
        &[],
    )
    .await
}

/// One merchant webhook.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookRow {
    pub id: i64,
    pub event_type: String,
    pub state: String,
    pub attempts: i32,
    pub payload: Option<String>,
}

/// The merchant webhooks of an API invoice, oldest first.
pub async fn api_webhooks_of(db: &Db, invoice_id: i64) -> Vec<WebhookRow> {
    fetch_rows(
        db,
        "SELECT id, event_type, state, attempts, payload FROM api_webhook_outbox \
         WHERE invoice_id = $1 ORDER BY id",
        &[Bind::I64(invoice_id)],
    )
    .await
}

/// Stamp attempts per worker process: how the work was shared.
pub async fn attempts_per_worker(db: &Db) -> Vec<(String, i64)> {
    fetch_rows(
        db,
        "SELECT COALESCE(worker, '') AS worker, COUNT(*) AS n FROM pac_attempts \
         WHERE operation = 'stamp' GROUP BY worker ORDER BY worker",
        &[],
    )
    .await
}
