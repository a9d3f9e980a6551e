//! Reads only the tests make (the appliance never needs them): rows read straight from the
//! tables, on either backend.

use autofactura::store::{Db, DocFull, NewEvent};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

/// A value bound to a test query.
pub enum Bind<'a> {
    Str(&'a str),
    I64(i64),
}

/// Runs `$body` with `$pool` bound to the app's pool, whichever backend it is: the text of a
/// test statement is the same on both, only the pool's type differs.
macro_rules! on_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            Db::Sqlite { pool: $pool, .. } => $body,
            Db::Postgres($pool, ..) => $body,
        }
    };
}

/// Every row of `sql` (`$n` placeholders, bound from `binds` in order), on either backend.
pub async fn fetch_rows<T>(db: &Db, sql: &str, binds: &[Bind<'_>]) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
{
    on_pool!(db, |pool| {
        let mut q = sqlx::query_as::<_, T>(sqlx::AssertSqlSafe(sql.to_owned()));
        for b in binds {
            q = match b {
                Bind::Str(s) => q.bind(*s),
                Bind::I64(n) => q.bind(*n),
            };
        }
        q.fetch_all(pool).await.expect(sql)
    })
}

/// The one number a `SELECT COUNT(*) …` (no binds) answers.
pub async fn count(db: &Db, sql: &str) -> i64 {
    let rows: Vec<(i64,)> = fetch_rows(db, sql, &[]).await;
    rows.first().expect(sql).0
}

/// Runs literal SQL, one statement or several separated by `;`, no binds: to take a table
/// away and bring it back, to set rows up, to run a migration's text again.
pub async fn exec_sql(db: &Db, sql: &str) {
    on_pool!(db, |pool| {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(pool)
            .await
            .expect(sql);
    });
}

/// One outbox row by its stamp key (the store reads documents by id).
pub async fn outbox_status(db: &Db, stamp_key: &str) -> Option<DocFull> {
    let ids: Vec<(i64,)> = fetch_rows(
        db,
        "SELECT id FROM outbox WHERE stamp_key = $1",
        &[Bind::Str(stamp_key)],
    )
    .await;
    let (id,) = ids.into_iter().next()?;
    db.document(id).await.expect("read the document")
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
    /// Why the last attempt failed; `None` until one has.
    pub last_error: Option<String>,
}

/// The merchant webhooks of an API invoice, oldest first.
pub async fn api_webhooks_of(db: &Db, invoice_id: i64) -> Vec<WebhookRow> {
    fetch_rows(
        db,
        "SELECT w.id, w.event_type, w.state, w.attempts, w.payload, w.last_error \
         FROM merchant_events w \
         JOIN api_invoices a ON a.outbox_id = w.outbox_id WHERE a.id = $1 ORDER BY w.id",
        &[Bind::I64(invoice_id)],
    )
    .await
}

/// The merchant events of a document (outbox row), oldest first.
pub async fn merchant_events_of(db: &Db, outbox_id: i64) -> Vec<WebhookRow> {
    fetch_rows(
        db,
        "SELECT id, event_type, state, attempts, payload, last_error FROM merchant_events \
         WHERE outbox_id = $1 ORDER BY id",
        &[Bind::I64(outbox_id)],
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

/// Outbox rows a worker still has to take to an end (`pending`, `stamping`, `retry_scheduled`,
/// `unknown`).
pub async fn undrained(db: &Db) -> i64 {
    let n: Vec<(i64,)> = fetch_rows(
        db,
        "SELECT COUNT(*) FROM outbox WHERE state IN ('pending', 'stamping', 'retry_scheduled', 'unknown')",
        &[],
    )
    .await;
    n[0].0
}

/// Waits until no outbox row waits for a worker, failing when none has drained for `secs`: a
/// stall is the defect, while a loaded machine only makes the whole drain slower.
pub async fn wait_drained(db: &Db, secs: u64) {
    let window = std::time::Duration::from_secs(secs);
    let mut deadline = tokio::time::Instant::now() + window;
    let mut fewest = i64::MAX;
    loop {
        let left = undrained(db).await;
        if left == 0 {
            return;
        }
        if left < fewest {
            fewest = left;
            deadline = tokio::time::Instant::now() + window;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} outbox rows, none drained in the last {secs} s: {:?}",
            db.outbox_counts().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Every folio assigned in `serie` (numbers only), sorted: after a drain, 1..=N.
pub async fn folios_of(db: &Db, serie: &str) -> Vec<i64> {
    let rows: Vec<(Option<String>,)> = fetch_rows(
        db,
        "SELECT folio FROM outbox WHERE serie = $1 AND folio IS NOT NULL",
        &[Bind::Str(serie)],
    )
    .await;
    let mut n: Vec<i64> = rows
        .into_iter()
        .map(|(f,)| {
            let f = f.unwrap_or_default();
            f.parse()
                .unwrap_or_else(|_| panic!("folio {f:?} is not a number"))
        })
        .collect();
    n.sort_unstable();
    n
}

/// Asserts `folios` are exactly 1..=`n`: no gap, no repeat.
pub fn assert_gapless(folios: &[i64], n: usize) {
    let want: Vec<i64> = (1..=i64::try_from(n).expect("n")).collect();
    if folios != want.as_slice() {
        let mut seen = std::collections::BTreeMap::new();
        for f in folios {
            *seen.entry(*f).or_insert(0) += 1;
        }
        let repeated: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
        let missing: Vec<_> = want
            .iter()
            .filter(|f| !seen.contains_key(f))
            .take(20)
            .collect();
        panic!(
            "folios are not 1..={n}: {} assigned, repeated {repeated:?}, missing (first 20) {missing:?}",
            folios.len()
        );
    }
}
