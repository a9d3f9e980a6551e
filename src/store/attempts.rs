//! The append-only log of PAC calls (the workers' and the admin's alike) and the heartbeats of
//! the worker pools.

use chrono::{DateTime, Utc};

use super::exec::{Dialected, Stmt, stmt};
pub use super::rows::{AttemptRow, WorkerRow};
use super::{Db, StoreError};

/// One PAC call, for the append-only attempt log.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    pub outbox_id: Option<i64>,
    pub cancellation_id: Option<i64>,
    pub operation: &'a str,
    pub pac: &'a str,
    pub outcome: &'a str,
    pub http_status: Option<i32>,
    pub code: Option<&'a str>,
    pub message: Option<&'a str>,
    pub latency_ms: i64,
    pub uuid: Option<&'a str>,
    pub worker: &'a str,
}

/// A PAC call made from the admin, for the attempt log.
#[derive(Debug, Clone)]
pub struct AdminPacCall<'a> {
    pub outbox_id: Option<i64>,
    /// `recover`, `sat_status`, …
    pub operation: &'a str,
    pub pac: &'a str,
    pub outcome: &'a str,
    pub code: Option<&'a str>,
    pub message: Option<&'a str>,
    pub latency_ms: i64,
    pub uuid: Option<&'a str>,
    /// Who asked (`admin:<name>` or `reconcile`), in the `worker` column.
    pub by: &'a str,
}

impl<'a> From<&AdminPacCall<'a>> for Attempt<'a> {
    fn from(c: &AdminPacCall<'a>) -> Self {
        Attempt {
            outbox_id: c.outbox_id,
            cancellation_id: None,
            operation: c.operation,
            pac: c.pac,
            outcome: c.outcome,
            http_status: None,
            code: c.code,
            message: c.message,
            latency_ms: c.latency_ms,
            uuid: c.uuid,
            worker: c.by,
        }
    }
}

/// Counts a PAC call in the metrics. Every call, the workers' and the admin's, is logged
/// through [`bind_attempt`] (or, for PostgreSQL's batched settles, the arrays of
/// `settle_stamped_many`, which call this for each): counted there, once, whether or not its
/// log row commits, since the call was made either way.
pub(super) fn counted(a: &Attempt<'_>) {
    crate::metrics::pac_request(
        a.pac,
        a.operation,
        a.outcome,
        std::time::Duration::from_millis(u64::try_from(a.latency_ms).unwrap_or(0)),
    );
}

/// Appends one call; its twelve arguments are bound by [`bind_attempt`].
pub(super) const INSERT_ATTEMPT: &str = "INSERT INTO pac_attempts (outbox_id, cancellation_id, operation, pac, outcome, http_status, \
     code, message, latency_ms, uuid, worker, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// Binds an [`Attempt`] and the time (the twelve arguments of [`INSERT_ATTEMPT`]) to `q`.
pub(super) fn bind_attempt<'a>(q: Stmt<'a>, a: &Attempt<'a>, now: DateTime<Utc>) -> Stmt<'a> {
    counted(a);
    q.bind(a.outbox_id)
        .bind(a.cancellation_id)
        .bind(a.operation)
        .bind(a.pac)
        .bind(a.outcome)
        .bind(a.http_status)
        .bind(a.code)
        .bind(a.message)
        .bind(a.latency_ms)
        .bind(a.uuid)
        .bind(a.worker)
        .bind(now)
}

/// Stamps and errors per minute; each backend names the minute of a time its own way (SQLite
/// keeps RFC 3339 text, whose first 16 characters are the minute).
static PAC_MINUTES: Dialected = Dialected::new(
    "SELECT {MINUTE} AS minute, \
     COUNT(CASE WHEN operation IN ('stamp', 'recover') \
       AND outcome IN ('stamped', 'already_stamped', 'found') THEN 1 END) AS stamps, \
     COUNT(CASE WHEN outcome IN ('rejected', 'retryable', 'unknown', 'unresolved') THEN 1 END) AS errors \
     FROM pac_attempts WHERE at >= $1 GROUP BY {MINUTE} ORDER BY 1",
    &[(
        "{MINUTE}",
        "substr(at, 1, 16)",
        "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI')",
    )],
);

const ATTEMPT_COLUMNS: &str = "id, outbox_id, cancellation_id, operation, pac, outcome, http_status, \
    code, message, latency_ms, uuid, worker, at";

impl Db {
    /// Appends one PAC call to the attempt log.
    pub async fn log_attempt(&self, a: &Attempt<'_>) -> Result<(), StoreError> {
        bind_attempt(stmt(INSERT_ATTEMPT), a, Utc::now())
            .execute(self, "log a PAC attempt")
            .await?;
        Ok(())
    }

    /// Appends a PAC call the admin made (recover before a refreeze, reconciliation, a SAT
    /// status query) to the attempt log the workers write.
    pub async fn log_admin_pac_call(&self, call: &AdminPacCall<'_>) -> Result<(), StoreError> {
        self.log_attempt(&Attempt::from(call)).await
    }

    /// The latest PAC calls, newest first.
    pub async fn recent_attempts(&self, limit: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!("SELECT {ATTEMPT_COLUMNS} FROM pac_attempts ORDER BY id DESC LIMIT $1");
        stmt(sql)
            .bind(limit)
            .fetch_all(self, "list PAC attempts")
            .await
    }

    /// The PAC calls about a document and its cancellations, oldest first.
    /// The PAC calls made at or after `since`, newest first, at most `limit`.
    pub async fn attempts_since(
        &self,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM pac_attempts WHERE at >= $1 ORDER BY at DESC, id DESC LIMIT $2"
        );
        stmt(sql)
            .bind(since)
            .bind(limit)
            .fetch_all::<AttemptRow>(self, "read recent PAC calls")
            .await
    }

    /// Per minute (UTC, `YYYY-MM-DDTHH:MM`) since `since`: stamps recorded (a stamp, or one
    /// found by recovery) and errors (rejections, calls unanswered or refused), minutes with
    /// neither left out.
    pub async fn pac_minutes(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<(String, i64, i64)>, StoreError> {
        stmt(PAC_MINUTES.text(self.dialect()))
            .bind(since)
            .fetch_all::<(String, i64, i64)>(self, "count PAC calls per minute")
            .await
    }

    pub async fn attempts_of(&self, outbox_id: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM pac_attempts WHERE outbox_id = $1 \
             OR cancellation_id IN (SELECT id FROM cancellations WHERE outbox_id = $2) ORDER BY id"
        );
        stmt(sql)
            .bind(outbox_id)
            .bind(outbox_id)
            .fetch_all(self, "read the attempt log")
            .await
    }

    /// Latencies (ms) of every logged call of one operation, ascending: for benchmarks and the
    /// dashboard's view of PAC health.
    pub async fn attempt_latencies(&self, operation: &str) -> Result<Vec<i64>, StoreError> {
        let rows: Vec<(i64,)> =
            stmt("SELECT latency_ms FROM pac_attempts WHERE operation = $1 ORDER BY latency_ms")
                .bind(operation)
                .fetch_all(self, "read attempt latencies")
                .await?;
        Ok(rows.into_iter().map(|(l,)| l).collect())
    }

    /// PAC calls per operation and outcome: the attempt log summed up (the chaos run counts the
    /// faults it met from here).
    pub async fn attempt_outcome_counts(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        stmt(
            "SELECT operation, outcome, COUNT(*) AS n FROM pac_attempts \
             GROUP BY operation, outcome ORDER BY operation, outcome",
        )
        .fetch_all(self, "count attempts per outcome")
        .await
    }

    /// Registers or refreshes this process's worker pool.
    pub async fn worker_heartbeat(
        &self,
        id: &str,
        hostname: &str,
        concurrency: i32,
        in_flight: i32,
        started_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let pid = i64::from(std::process::id());
        stmt("INSERT INTO workers (id, hostname, pid, concurrency, in_flight, started_at, last_seen) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (id) DO UPDATE SET in_flight = $5, last_seen = $7, stopped_at = NULL")
            .bind(id)
            .bind(hostname)
            .bind(pid)
            .bind(concurrency)
            .bind(in_flight)
            .bind(started_at)
            .bind(now)
            .execute(self, "record the worker heartbeat")
            .await?;
        Ok(())
    }

    pub async fn worker_stopped(&self, id: &str) -> Result<(), StoreError> {
        stmt("UPDATE workers SET stopped_at = $1, in_flight = 0 WHERE id = $2")
            .bind(Utc::now())
            .bind(id)
            .execute(self, "record the worker stop")
            .await?;
        Ok(())
    }

    /// Worker processes that have not stopped, most recent heartbeat first.
    pub async fn workers(&self) -> Result<Vec<WorkerRow>, StoreError> {
        const SQL: &str = "SELECT id, hostname, pid, concurrency, in_flight, started_at, last_seen, stopped_at \
            FROM workers ORDER BY last_seen DESC LIMIT 20";
        stmt(SQL).fetch_all(self, "list workers").await
    }
}
