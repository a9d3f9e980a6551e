//! The worker pool's statements: claiming outbox and cancellation rows with a lease, keeping the
//! lease alive, settling outcomes, the append-only PAC attempt log and worker heartbeats.
//!
//! Statements use `$n` placeholders, which sqlx accepts on SQLite too, so one text serves both
//! backends except where PostgreSQL needs `FOR UPDATE SKIP LOCKED`. Every write is one short
//! statement; nothing here is held across a PAC call.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::exec::{Dialect, stmt};
use super::rows::ClaimedStampRow;
pub use super::rows::{ClaimedCancel, OutboxStatus};
use super::{Db, StoreError, ctx};

/// The code an `unknown` row carries once its asking period is over (the worker asks daily
/// from then on): the admin lists these as unresolved.
pub const UNRESOLVED: &str = "UNRESOLVED";

/// A stamped invoice whose cancellation SAT confirmed leaves the stamped list.
const MARK_OUTBOX_CANCELED: &str =
    "UPDATE outbox SET state = 'canceled', updated_at = $1 WHERE id = $2 AND state = 'stamped'";

/// An outbox row a worker holds the lease of.
#[derive(Debug, Clone)]
pub struct ClaimedStamp {
    pub id: i64,
    /// The state it was claimed from: `pending`, `retry_scheduled`, `unknown`, or `stamping`
    /// (a lease that expired: its PAC call may have been sent).
    pub claimed_from: String,
    pub stamp_key: String,
    pub request_json: String,
    pub sealed_xml: Option<Vec<u8>>,
    /// Including this claim.
    pub attempts: i32,
    pub test_mode: bool,
    /// PACs the document was ever sent to (failover), comma-separated.
    pub pac_route: Option<String>,
}

/// Claims up to `$4` rows: `$where` (`FROM` onwards) picks them through a partial index in claim order
/// (migration 0004; SQLite is told which, PostgreSQL finds it),
/// so a claim costs the same however many stamped rows the outbox holds.
/// `claimed_from = state` keeps the state it was claimed from (SET reads the old values).
macro_rules! claim_stamp_sql {
    ($where:literal, $lock:literal) => {
        concat!(
            "UPDATE outbox SET claimed_from = state, state = 'stamping', lease_owner = $1, \
             lease_expires_at = $2, attempts = attempts + 1, updated_at = $3 \
             WHERE id IN (SELECT id FROM ",
            $where,
            " LIMIT $4",
            $lock,
            ") RETURNING id, claimed_from, stamp_key, request_json, sealed_xml, attempts, test_mode, pac_route"
        )
    };
}

/// Stores a row's sealed bytes ($1) at $2, once: only while it has none (row $3).
const SAVE_SEALED: &str =
    "UPDATE outbox SET sealed_xml = $1, sealed_at = $2 WHERE id = $3 AND sealed_xml IS NULL";

/// A row whose worker died: its lease expired while `stamping`.
const EXPIRED_LEASE: &str = "Expired";
/// A row due now.
const DUE: &str = "Due";

macro_rules! claim_cancel_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE cancellations SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, \
             updated_at = $3 \
             WHERE id = (SELECT id FROM cancellations \
                         WHERE state IN ('requested', 'retry_scheduled', 'unknown', 'pending_receiver') \
                           AND run_at <= $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $3) \
                         ORDER BY run_at, id LIMIT 1",
            $lock,
            ") RETURNING id, outbox_id, uuid, rfc_emisor, rfc_receptor, total, motivo, folio_sustitucion, \
             state, attempts"
        )
    };
}

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

const INSERT_ATTEMPT: &str = "INSERT INTO pac_attempts (outbox_id, cancellation_id, operation, pac, outcome, http_status, \
     code, message, latency_ms, uuid, worker, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// Statements on one row by id write its state test as `state || ''`: PostgreSQL's statistics,
/// taken while nearly every row is `pending` or `stamped`, make `stamping` look rare, and the
/// planner then walks outbox_state_updated through every row being stamped (and every dead
/// entry left by earlier claims) instead of looking the id up. An expression on the column
/// leaves it the primary key alone.
///
/// A stamping attempt's outcome ($7 the row, $8 the lease owner): stamped…
const SETTLE_STAMPED: &str = "UPDATE outbox SET state = 'stamped', uuid = $1, tfd_xml = $2, stamped_xml = $3, \
     fecha_timbrado = $4, stamped_at = $5, flag = COALESCE($6, flag), lease_owner = NULL, \
     lease_expires_at = NULL, last_error_code = NULL, last_error_message = NULL, updated_at = $5 \
     WHERE id = $7 AND lease_owner = $8 AND state || '' = 'stamping'";
/// …to be tried again at `run_at`…
const SETTLE_LATER: &str = "UPDATE outbox SET state = $1, run_at = $2, last_error_code = $3, last_error_message = $4, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = $5, uuid = $6 \
     WHERE id = $7 AND lease_owner = $8 AND state || '' = 'stamping'";
/// …or final, for a human.
const SETTLE_FINAL: &str = "UPDATE outbox SET state = $1, last_error_code = $2, last_error_message = $3, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = $4, run_at = $4, uuid = $5, \
     flag = COALESCE($6, flag) WHERE id = $7 AND lease_owner = $8 AND state || '' = 'stamping'";

/// Binds a settle's own arguments (`$1`–`$6` of its [`Settle::update_sql`]) to `$q`, on either
/// backend.
macro_rules! bind_settle {
    ($q:expr, $s:expr, $now:expr) => {
        match $s {
            Settle::Stamped {
                uuid,
                tfd_xml,
                stamped_xml,
                fecha_timbrado,
                flag,
            } => $q
                .bind(*uuid)
                .bind(*tfd_xml)
                .bind(*stamped_xml)
                .bind(*fecha_timbrado)
                .bind($now)
                .bind(*flag),
            Settle::Later {
                state,
                run_at,
                code,
                message,
            } => $q
                .bind(*state)
                .bind(*run_at)
                .bind(*code)
                .bind(*message)
                .bind($now)
                .bind(None::<String>),
            Settle::Final {
                state,
                code,
                message,
            } => $q
                .bind(*state)
                .bind(*code)
                .bind(*message)
                .bind($now)
                .bind(None::<String>)
                .bind(None::<String>),
        }
    };
}

/// Binds an [`Attempt`] and the time to `$q` (the twelve arguments of [`INSERT_ATTEMPT`]), on
/// either backend.
macro_rules! bind_attempt {
    ($q:expr, $a:expr, $now:expr) => {
        $q.bind($a.outbox_id)
            .bind($a.cancellation_id)
            .bind($a.operation)
            .bind($a.pac)
            .bind($a.outcome)
            .bind($a.http_status)
            .bind($a.code)
            .bind($a.message)
            .bind($a.latency_ms)
            .bind($a.uuid)
            .bind($a.worker)
            .bind($now)
    };
}

/// PostgreSQL: a whole settle as one statement, so one round trip and one implicit
/// transaction — the attempt, the outcome and the merchant's event are data-modifying `WITH`
/// parts, each run once. Evaluates to the number of outbox rows updated (0 when the lease was
/// lost). Arguments: the attempt's twelve when there is one, then the settle's eight, then the
/// event type and the time when the outcome queues a merchant webhook.
fn settle_postgres_sql(s: &Settle<'_>, attempt: Option<&Attempt<'_>>) -> String {
    let mut sql = String::from("WITH ");
    let mut used = 0;
    if attempt.is_some() {
        sql.push_str("logged AS (");
        sql.push_str(INSERT_ATTEMPT);
        sql.push_str("), ");
        used = 12;
    }
    sql.push_str("settled AS (");
    sql.push_str(&shift_params(s.update_sql(), used));
    sql.push_str(" RETURNING id)");
    used += 8;
    if s.api_event().is_some() {
        sql.push_str(&format!(
            ", queued AS (INSERT INTO api_webhook_outbox (invoice_id, event_type, state, attempts, \
             run_at, created_at) SELECT i.id, ${}, 'pending', 0, ${t}, ${t} FROM api_invoices i \
             JOIN settled ON i.outbox_id = settled.id)",
            used + 1,
            t = used + 2
        ));
    }
    sql.push_str(" SELECT count(*) FROM settled");
    sql
}

/// What a stamping attempt leaves in the row.
#[derive(Debug, Clone)]
pub enum Settle<'a> {
    Stamped {
        uuid: &'a str,
        tfd_xml: &'a str,
        stamped_xml: &'a [u8],
        fecha_timbrado: &'a str,
        flag: Option<&'a str>,
    },
    /// `retry_scheduled` or `unknown`, run again at `run_at`.
    Later {
        state: &'a str,
        run_at: DateTime<Utc>,
        code: Option<&'a str>,
        message: &'a str,
    },
    /// `failed` or `expired`: a human decides.
    Final {
        state: &'a str,
        code: Option<&'a str>,
        message: &'a str,
    },
}

impl Settle<'_> {
    /// The UPDATE that records this outcome ($7 the row, $8 the lease owner).
    fn update_sql(&self) -> &'static str {
        match self {
            Settle::Stamped { .. } => SETTLE_STAMPED,
            Settle::Later { .. } => SETTLE_LATER,
            Settle::Final { .. } => SETTLE_FINAL,
        }
    }

    /// The merchant webhook this outcome triggers for an invoice requested through the API.
    fn api_event(&self) -> Option<&'static str> {
        match self {
            Settle::Stamped { .. } => Some("invoice.stamped"),
            // Final states are definite non-stamps; an unknown outcome is never final.
            Settle::Final { state, .. } if matches!(*state, "failed" | "expired") => {
                Some("invoice.failed")
            }
            _ => None,
        }
    }
}

/// Queues a merchant webhook (`$1` event type) for the API invoice of outbox row `$3`, if any.
pub(super) const API_EVENT: &str = "INSERT INTO api_webhook_outbox (invoice_id, event_type, state, attempts, run_at, created_at) \
     SELECT id, $1, 'pending', 0, $2, $2 FROM api_invoices WHERE outbox_id = $3";

impl Db {
    /// Claims up to `limit` due outbox rows for `owner` until `lease_until`, oldest first:
    /// first, when `expired_first`, rows whose worker died (so a backlog never starves them),
    /// else the oldest due ones.
    pub async fn claim_stamps(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
        expired_first: bool,
        limit: i64,
    ) -> Result<Vec<ClaimedStamp>, StoreError> {
        let order: &[&str] = if expired_first {
            &[EXPIRED_LEASE, DUE]
        } else {
            &[DUE]
        };
        for &which in order {
            let (sqlite, pg) = if which == EXPIRED_LEASE {
                (
                    claim_stamp_sql!(
                        "outbox INDEXED BY outbox_lease_expired WHERE state = 'stamping' \
                         AND lease_expires_at <= $3 ORDER BY lease_expires_at, id",
                        ""
                    ),
                    claim_stamp_sql!(
                        "outbox WHERE state = 'stamping' AND lease_expires_at <= $3 \
                         ORDER BY lease_expires_at, id",
                        " FOR UPDATE SKIP LOCKED"
                    ),
                )
            } else {
                (
                    claim_stamp_sql!(
                        "outbox INDEXED BY outbox_due WHERE state IN ('pending', 'retry_scheduled', \
                         'unknown') AND run_at <= $3 ORDER BY run_at, id",
                        ""
                    ),
                    claim_stamp_sql!(
                        "outbox WHERE state IN ('pending', 'retry_scheduled', 'unknown') \
                         AND run_at <= $3 ORDER BY run_at, id",
                        " FOR UPDATE SKIP LOCKED"
                    ),
                )
            };
            // SQLite is told which partial index to walk; PostgreSQL finds it, and SKIP LOCKED
            // lets several instances claim different rows.
            let sql = match self.dialect() {
                Dialect::Sqlite => sqlite,
                Dialect::Postgres => pg,
            };
            let rows: Vec<ClaimedStampRow> = stmt(sql)
                .bind(owner)
                .bind(lease_until)
                .bind(now)
                .bind(limit)
                .write_fetch_all(self, "claim outbox rows")
                .await?;
            let mut claimed: Vec<ClaimedStamp> = rows.into_iter().map(ClaimedStamp::from).collect();
            if !claimed.is_empty() {
                // RETURNING follows no order; rows are sent oldest first (ids grow with time).
                claimed.sort_by_key(|c| c.id);
                return Ok(claimed);
            }
        }
        Ok(Vec::new())
    }

    /// SQLite: copies the write-ahead log into the database without waiting for or blocking
    /// the writers (`PASSIVE`); the worker pool calls it every second, as its own connections
    /// never checkpoint on commit. PostgreSQL has no such log to tend: nothing to do.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        if let Db::Sqlite { pool, .. } = self {
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(pool)
                .await
                .map_err(ctx("checkpoint the SQLite write-ahead log"))?;
        }
        Ok(())
    }

    /// Extends the lease while the PAC call runs; `false` when the lease was lost.
    pub async fn extend_stamp_lease(
        &self,
        id: i64,
        owner: &str,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let n = stmt("UPDATE outbox SET lease_expires_at = $1 WHERE id = $2 AND lease_owner = $3 AND state || '' = 'stamping'")
            .bind(until)
            .bind(id)
            .bind(owner)
            .execute(self, "extend an outbox lease")
            .await?;
        Ok(n == 1)
    }

    /// The PAC confirmed that a row it may have had holds no stamp: its attempt count starts
    /// over at this claim (only tries since the last definite answer count towards giving
    /// up). `false` when the lease was lost.
    pub async fn restart_attempts(&self, id: i64, owner: &str) -> Result<bool, StoreError> {
        let n = stmt("UPDATE outbox SET attempts = 1 WHERE id = $1 AND lease_owner = $2 AND state || '' = 'stamping'")
            .bind(id)
            .bind(owner)
            .execute(self, "restart the attempt count")
            .await?;
        Ok(n == 1)
    }

    /// Stores the sealed bytes, once: if another worker sealed first, its bytes stay (sealing
    /// is deterministic, so they are the same). Returns the bytes now in the row.
    pub async fn save_sealed(&self, id: i64, xml: &[u8]) -> Result<Vec<u8>, StoreError> {
        let now = Utc::now();
        let written = stmt(SAVE_SEALED)
            .bind(xml)
            .bind(now)
            .bind(id)
            .execute(self, "store the sealed comprobante")
            .await?;
        if written == 1 {
            return Ok(xml.to_vec());
        }
        let sql = "SELECT sealed_xml FROM outbox WHERE id = $1";
        let got: Option<Option<Vec<u8>>> = stmt(sql)
            .bind(id)
            .fetch_optional(self, "read the sealed comprobante")
            .await?
            .map(|(g,)| g);
        got.flatten().ok_or_else(|| {
            StoreError::Other(format!(
                "outbox row {id} has no sealed comprobante after sealing"
            ))
        })
    }

    /// Stores the sealed bytes of several rows in one write, each only if the row has none yet
    /// (as [`Db::save_sealed`]). Returns the ids written; for any other, another worker sealed
    /// first and [`Db::save_sealed`] reads the bytes that stay.
    pub async fn save_sealed_many(&self, rows: &[(i64, &[u8])]) -> Result<Vec<i64>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let now = Utc::now();
        let what = "store the sealed comprobantes";
        match self {
            Db::Sqlite { pool, write_lock } => {
                // One call to the connection, as settles are.
                let mut sql = String::from("BEGIN IMMEDIATE;\n");
                for i in 0..rows.len() {
                    sql.push_str(&shift_params(SAVE_SEALED, i * 3));
                    sql.push_str(" RETURNING id;\n");
                }
                sql.push_str("COMMIT;");
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (id, xml) in rows {
                    q = q.bind(*xml).bind(now).bind(*id);
                }
                sqlite_in_one_call(pool, write_lock, what, q).await
            }
            Db::Postgres(pool) => sqlx::query_scalar(
                "UPDATE outbox o SET sealed_xml = v.xml, sealed_at = $3 \
                     FROM unnest($1::bigint[], $2::bytea[]) AS v(id, xml) \
                     WHERE o.id = v.id AND o.sealed_xml IS NULL RETURNING o.id",
            )
            .bind(column(rows, |r| r.0))
            .bind(column(rows, |r| r.1))
            .bind(now)
            .fetch_all(pool)
            .await
            .map_err(ctx(what)),
        }
    }

    /// Records where a document is about to be sent (failover), before sending it.
    pub async fn add_pac_route(&self, stamp_key: &str, route: &str) -> Result<(), StoreError> {
        stmt(
            "UPDATE outbox SET pac_route = CASE WHEN pac_route IS NULL OR pac_route = '' THEN $1 \
               WHEN (',' || pac_route || ',') LIKE ('%,' || $1 || ',%') THEN pac_route \
               ELSE pac_route || ',' || $1 END WHERE stamp_key = $2",
        )
        .bind(route)
        .bind(stamp_key)
        .execute(self, "record the PAC route")
        .await?;
        Ok(())
    }

    /// The PACs a key was ever sent to.
    pub async fn pac_routes(&self, stamp_key: &str) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT pac_route FROM outbox WHERE stamp_key = $1";
        let got: Option<Option<String>> = stmt(sql)
            .bind(stamp_key)
            .fetch_optional(self, "read the PAC route")
            .await?
            .map(|(g,)| g);
        Ok(got
            .flatten()
            .map(|s| {
                s.split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Settles a claimed row, if this worker still holds its lease, and appends the attempt that
    /// led to it in the same transaction (one commit, and the log never disagrees with the row).
    /// `false` when the lease was lost (another worker reclaimed the row; it will reach the same
    /// answer from the idempotent PAC); the attempt is logged either way.
    pub async fn settle_stamp(
        &self,
        id: i64,
        owner: &str,
        s: &Settle<'_>,
        attempt: Option<&Attempt<'_>>,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let n = match self {
            Db::Sqlite { pool, write_lock } => {
                let one = [(id, s.clone(), attempt.cloned())];
                let q = settle_sqlite_query(owner, &one, now);
                sqlite_in_one_call(pool, write_lock, "settle an outbox row", q)
                    .await?
                    .len() as u64
            }
            Db::Postgres(pool) => {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(settle_postgres_sql(s, attempt)));
                if let Some(a) = attempt {
                    q = bind_attempt!(q, a, now);
                }
                q = bind_settle!(q, s, now).bind(id).bind(owner);
                if let Some(e) = s.api_event() {
                    q = q.bind(e).bind(now);
                }
                let n: i64 = q
                    .fetch_one(pool)
                    .await
                    .map_err(ctx("settle an outbox row"))?
                    .try_get(0)
                    .map_err(ctx("settle an outbox row"))?;
                u64::try_from(n).unwrap_or(0)
            }
        };
        Ok(n == 1)
    }

    /// On shutdown: rows whose PAC call did not finish become `unknown` (the call may have
    /// reached the PAC), to be recovered first by whichever worker takes them next.
    pub async fn release_stamp_leases(&self, owner: &str) -> Result<u64, StoreError> {
        let now = Utc::now();
        stmt("UPDATE outbox SET state = 'unknown', run_at = $1, lease_owner = NULL, lease_expires_at = NULL, \
             last_error_message = 'released at shutdown while a PAC call was in flight', updated_at = $1 \
             WHERE lease_owner = $2 AND state = 'stamping'")
            .bind(now)
            .bind(owner)
            .execute(self, "release leases")
            .await
    }

    /// Gives back a row this worker claimed but never sent (shutdown while it waited for its
    /// slot): it returns to `from`, the state it was claimed from, due at once and with the
    /// claim's attempt undone; a row taken from an expired lease returns as `unknown`, since its
    /// earlier worker may have sent it. `false` when the lease was no longer this worker's.
    pub async fn release_unsent_stamp(
        &self,
        id: i64,
        owner: &str,
        from: &str,
    ) -> Result<bool, StoreError> {
        let state = match from {
            "pending" | "retry_scheduled" | "unknown" => from,
            _ => "unknown",
        };
        let n = stmt(
            "UPDATE outbox SET state = $1, attempts = attempts - 1, lease_owner = NULL, \
             lease_expires_at = NULL, updated_at = $2 \
             WHERE id = $3 AND lease_owner = $4 AND state || '' = 'stamping'",
        )
        .bind(state)
        .bind(Utc::now())
        .bind(id)
        .bind(owner)
        .execute(self, "release an unsent row")
        .await?;
        Ok(n == 1)
    }

    /// Appends one PAC call to the attempt log.
    pub async fn log_attempt(&self, a: &Attempt<'_>) -> Result<(), StoreError> {
        let now = Utc::now();
        bind_attempt!(stmt(INSERT_ATTEMPT), a, now)
            .execute(self, "log a PAC attempt")
            .await?;
        Ok(())
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
        let now = Utc::now();
        stmt("UPDATE workers SET stopped_at = $1, in_flight = 0 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(self, "record the worker stop")
            .await?;
        Ok(())
    }

    /// Outbox rows per state.
    pub async fn outbox_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let sql = "SELECT state, COUNT(*) AS n FROM outbox GROUP BY state ORDER BY state";
        stmt(sql).fetch_all(self, "count outbox rows").await
    }

    /// When the most recent stamp was recorded (benchmarks time a drain by it).
    pub async fn last_stamped_at(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let sql = "SELECT MAX(stamped_at) AS t FROM outbox";
        let got: Option<Option<DateTime<Utc>>> = stmt(sql)
            .fetch_optional(self, "read the last stamp time")
            .await?
            .map(|(g,)| g);
        Ok(got.flatten())
    }

    /// Claims the next due cancellation (to send, or to poll) for `owner`.
    pub async fn claim_cancellation(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<ClaimedCancel>, StoreError> {
        // PostgreSQL: SKIP LOCKED lets several workers claim different rows; SQLite has one
        // writer at a time and no such clause.
        let sql = match self.dialect() {
            Dialect::Sqlite => claim_cancel_sql!(""),
            Dialect::Postgres => claim_cancel_sql!(" FOR UPDATE SKIP LOCKED"),
        };
        stmt(sql)
            .bind(owner)
            .bind(lease_until)
            .bind(now)
            .write_fetch_optional(self, "claim a cancellation")
            .await
    }

    /// Records a cancellation's progress and releases its lease. When it ends `canceled`,
    /// `outbox_id` (its invoice) leaves the stamped list and an API invoice's merchant webhook
    /// `invoice.canceled` is queued, in the same transaction: a process killed in between
    /// cannot leave a cancelled CFDI shown as `stamped`.
    #[allow(clippy::too_many_arguments)]
    pub async fn settle_cancellation(
        &self,
        id: i64,
        owner: &str,
        state: &str,
        run_at: DateTime<Utc>,
        estatus: Option<&str>,
        sat_estado: Option<&str>,
        acuse: Option<&str>,
        error: Option<(&str, &str)>,
        outbox_id: Option<i64>,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let (code, message) = error.map_or((None, None), |(c, m)| (Some(c), Some(m)));
        let outbox_id = outbox_id.filter(|_| state == "canceled");
        let mut tx = self.begin().await?;
        let n = stmt(
            "UPDATE cancellations SET state = $1, run_at = $2, estatus_cancelacion = COALESCE($3, estatus_cancelacion), \
             sat_estado = COALESCE($4, sat_estado), acuse_xml = COALESCE($5, acuse_xml), last_error_code = $6, \
             last_error_message = $7, lease_owner = NULL, lease_expires_at = NULL, updated_at = $8 \
             WHERE id = $9 AND lease_owner = $10",
        )
        .bind(state)
        .bind(run_at)
        .bind(estatus)
        .bind(sat_estado)
        .bind(acuse)
        .bind(code)
        .bind(message)
        .bind(now)
        .bind(id)
        .bind(owner)
        .execute_in(&mut tx, "record the cancellation's progress")
        .await?;
        if n == 1
            && let Some(oid) = outbox_id
        {
            let flipped = stmt(MARK_OUTBOX_CANCELED)
                .bind(now)
                .bind(oid)
                .execute_in(&mut tx, "mark the invoice cancelled")
                .await?;
            if flipped == 1 {
                stmt(API_EVENT)
                    .bind("invoice.canceled")
                    .bind(now)
                    .bind(oid)
                    .execute_in(&mut tx, "queue the merchant webhook")
                    .await?;
            }
        }
        tx.commit("commit the cancellation's progress").await?;
        Ok(n == 1)
    }

    /// The stamped XML of an outbox row, for the SAT status query of its cancellation.
    pub async fn stamped_xml_of(&self, outbox_id: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = "SELECT stamped_xml FROM outbox WHERE id = $1";
        let got: Option<Option<Vec<u8>>> = stmt(sql)
            .bind(outbox_id)
            .fetch_optional(self, "read the stamped XML")
            .await?
            .map(|(g,)| g);
        Ok(got.flatten())
    }
}

impl From<ClaimedStampRow> for ClaimedStamp {
    fn from(r: ClaimedStampRow) -> Self {
        ClaimedStamp {
            id: r.id,
            claimed_from: r.claimed_from.unwrap_or_default(),
            stamp_key: r.stamp_key,
            request_json: r.request_json,
            sealed_xml: r.sealed_xml,
            attempts: r.attempts,
            test_mode: r.test_mode,
            pac_route: r.pac_route,
        }
    }
}

/// `sql` with every `$n` placeholder renumbered `$n+by`, so several statements can share one
/// argument list.
fn shift_params(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' {
            let mut n = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                n.push(*d);
                chars.next();
            }
            match n.parse::<usize>() {
                Ok(n) => out.push_str(&(n + by).to_string()),
                Err(_) => out.push_str(&n),
            }
        }
    }
    out
}

/// SQLite: whole settles as one query for [`sqlite_in_one_call`] — `BEGIN IMMEDIATE`, then for
/// each the attempt, the outcome (returning the row's id when the lease still held) and the
/// merchant's event, then `COMMIT`. Every statement sent through sqlx is a trip to the
/// connection's thread, made while holding the process's one write lock; one trip instead of
/// five per settle is what lets a single SQLite writer keep up with the pool.
fn settle_sqlite_query<'q>(
    owner: &'q str,
    settles: &'q [(i64, Settle<'q>, Option<Attempt<'q>>)],
    now: DateTime<Utc>,
) -> SqliteQuery<'q> {
    let mut sql = String::from("BEGIN IMMEDIATE;\n");
    let mut used = 0;
    for (_, s, attempt) in settles {
        if attempt.is_some() {
            sql.push_str(&shift_params(INSERT_ATTEMPT, used));
            sql.push_str(";\n");
            used += 12;
        }
        sql.push_str(&shift_params(s.update_sql(), used));
        sql.push_str(" RETURNING id;\n");
        used += 8;
        if s.api_event().is_some() {
            // Only when the outcome was written (`changes()`: the UPDATE's count).
            sql.push_str(&shift_params(API_EVENT, used));
            sql.push_str(" AND changes() = 1;\n");
            used += 3;
        }
    }
    sql.push_str("COMMIT;");
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (id, s, attempt) in settles {
        if let Some(a) = attempt {
            q = bind_attempt!(q, a, now);
        }
        q = bind_settle!(q, s, now);
        q = q.bind(*id).bind(owner);
        if let Some(e) = s.api_event() {
            q = q.bind(e).bind(now).bind(*id);
        }
    }
    q
}

type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// SQLite: runs `q` — statements from `BEGIN IMMEDIATE` to `COMMIT` whose rows each return an
/// id — in one call to a connection, holding the process's write lock, and returns those ids.
/// On failure it rolls back, so no transaction stays open on a pooled connection.
async fn sqlite_in_one_call(
    pool: &sqlx::SqlitePool,
    write_lock: &tokio::sync::Mutex<()>,
    what: &'static str,
    q: SqliteQuery<'_>,
) -> Result<Vec<i64>, StoreError> {
    let _w = write_lock.lock().await;
    let mut conn = pool.acquire().await.map_err(ctx(what))?;
    let rows = match q.fetch_all(&mut *conn).await {
        Ok(rows) => rows,
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return Err(ctx(what)(e));
        }
    };
    rows.iter()
        .map(|r| r.try_get::<i64, _>(0))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ctx(what))
}

/// One field of every row, in order: a PostgreSQL array argument for `unnest`.
fn column<'a, R, T>(rows: &'a [R], f: impl Fn(&'a R) -> T) -> Vec<T> {
    rows.iter().map(f).collect()
}

/// A stamp's outcome and the call that brought it, owned, so that several can be stored in one
/// write ([`Db::settle_stamped_many`]).
#[derive(Debug, Clone)]
pub struct StampedOutcome {
    pub id: i64,
    pub uuid: String,
    pub tfd_xml: String,
    pub stamped_xml: Vec<u8>,
    pub fecha_timbrado: String,
    pub flag: Option<String>,
    /// The attempt log's `pac`, `outcome`, `code`, `http_status` and `latency_ms`.
    pub pac: String,
    pub outcome: String,
    pub code: Option<String>,
    pub http_status: Option<i32>,
    pub latency_ms: i64,
}

impl StampedOutcome {
    /// The owned form of a stamped settle of row `id` with the stamp call that brought it;
    /// `None` for any other outcome, or one without its call.
    pub fn of(id: i64, s: &Settle<'_>, attempt: Option<&Attempt<'_>>) -> Option<Self> {
        let (
            Settle::Stamped {
                uuid,
                tfd_xml,
                stamped_xml,
                fecha_timbrado,
                flag,
            },
            Some(a),
        ) = (s, attempt)
        else {
            return None;
        };
        (a.operation == "stamp" && a.message.is_none()).then(|| StampedOutcome {
            id,
            uuid: (*uuid).to_owned(),
            tfd_xml: (*tfd_xml).to_owned(),
            stamped_xml: stamped_xml.to_vec(),
            fecha_timbrado: (*fecha_timbrado).to_owned(),
            flag: flag.map(str::to_owned),
            pac: a.pac.to_owned(),
            outcome: a.outcome.to_owned(),
            code: a.code.map(str::to_owned),
            http_status: a.http_status,
            latency_ms: a.latency_ms,
        })
    }

    fn settle(&self) -> Settle<'_> {
        Settle::Stamped {
            uuid: &self.uuid,
            tfd_xml: &self.tfd_xml,
            stamped_xml: &self.stamped_xml,
            fecha_timbrado: &self.fecha_timbrado,
            flag: self.flag.as_deref(),
        }
    }

    fn attempt<'a>(&'a self, worker: &'a str) -> Attempt<'a> {
        Attempt {
            outbox_id: Some(self.id),
            cancellation_id: None,
            operation: "stamp",
            pac: &self.pac,
            outcome: &self.outcome,
            http_status: self.http_status,
            code: self.code.as_deref(),
            message: None,
            latency_ms: self.latency_ms,
            uuid: Some(&self.uuid),
            worker,
        }
    }
}

/// PostgreSQL: several stamped outcomes in one statement, as [`settle_postgres_sql`] stores
/// one: the attempts, the rows (each only while `$14` holds its lease) and the merchants'
/// events. Arguments are arrays, one element per outcome, so the text is the same for any
/// number of them.
const SETTLE_STAMPED_MANY_PG: &str = "WITH v AS (SELECT * FROM unnest($1::bigint[], $2::text[], \
     $3::text[], $4::bytea[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], \
     $10::int[], $11::bigint[]) AS v(id, uuid, tfd_xml, stamped_xml, fecha_timbrado, flag, pac, \
     outcome, code, http_status, latency_ms)), \
     logged AS (INSERT INTO pac_attempts (outbox_id, cancellation_id, operation, pac, outcome, \
     http_status, code, message, latency_ms, uuid, worker, at) \
     SELECT id, NULL, 'stamp', pac, outcome, http_status, code, NULL, latency_ms, uuid, $12, $13 \
     FROM v), \
     settled AS (UPDATE outbox o SET state = 'stamped', uuid = v.uuid, tfd_xml = v.tfd_xml, \
     stamped_xml = v.stamped_xml, fecha_timbrado = v.fecha_timbrado, stamped_at = $13, \
     flag = COALESCE(v.flag, o.flag), lease_owner = NULL, lease_expires_at = NULL, \
     last_error_code = NULL, last_error_message = NULL, updated_at = $13 \
     FROM v WHERE o.id = v.id AND o.lease_owner = $14 AND o.state || '' = 'stamping' \
     RETURNING o.id), \
     queued AS (INSERT INTO api_webhook_outbox (invoice_id, event_type, state, attempts, run_at, \
     created_at) SELECT i.id, 'invoice.stamped', 'pending', 0, $13, $13 FROM api_invoices i \
     JOIN settled ON i.outbox_id = settled.id) \
     SELECT id FROM settled";

impl Db {
    /// Stores several stamped outcomes of this worker (`owner`) in one write, with their
    /// attempts, as [`Db::settle_stamp`] stores one. Returns the ids whose lease still held
    /// (the others were reclaimed; their attempts are logged all the same).
    pub async fn settle_stamped_many(
        &self,
        owner: &str,
        outcomes: &[StampedOutcome],
    ) -> Result<Vec<i64>, StoreError> {
        let now = Utc::now();
        match self {
            Db::Sqlite { pool, write_lock } => {
                let settles: Vec<_> = outcomes
                    .iter()
                    .map(|o| (o.id, o.settle(), Some(o.attempt(owner))))
                    .collect();
                let q = settle_sqlite_query(owner, &settles, now);
                sqlite_in_one_call(pool, write_lock, "settle outbox rows", q).await
            }
            Db::Postgres(pool) => sqlx::query_scalar(SETTLE_STAMPED_MANY_PG)
                .bind(column(outcomes, |o| o.id))
                .bind(column(outcomes, |o| o.uuid.as_str()))
                .bind(column(outcomes, |o| o.tfd_xml.as_str()))
                .bind(column(outcomes, |o| o.stamped_xml.as_slice()))
                .bind(column(outcomes, |o| o.fecha_timbrado.as_str()))
                .bind(column(outcomes, |o| o.flag.as_deref()))
                .bind(column(outcomes, |o| o.pac.as_str()))
                .bind(column(outcomes, |o| o.outcome.as_str()))
                .bind(column(outcomes, |o| o.code.as_deref()))
                .bind(column(outcomes, |o| o.http_status))
                .bind(column(outcomes, |o| o.latency_ms))
                .bind(owner)
                .bind(now)
                .bind(owner)
                .fetch_all(pool)
                .await
                .map_err(ctx("settle outbox rows")),
        }
    }
}

impl Db {
    /// One outbox row by its stamp key.
    pub async fn outbox_status(&self, stamp_key: &str) -> Result<Option<OutboxStatus>, StoreError> {
        stmt("SELECT id, state, run_at, attempts, uuid, last_error_code, last_error_message, sealed_xml, \
              stamped_xml FROM outbox WHERE stamp_key = $1")
        .bind(stamp_key)
        .fetch_optional(self, "read an outbox row")
        .await
    }

    /// Stamp attempts per worker process: how the work was shared.
    pub async fn attempts_per_worker(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows: Vec<(Option<String>, i64)> = stmt(
            "SELECT worker, COUNT(*) AS n FROM pac_attempts WHERE operation = 'stamp' GROUP BY worker ORDER BY worker",
        )
        .fetch_all(self, "count attempts per worker")
        .await?;
        Ok(rows
            .into_iter()
            .map(|(w, n)| (w.unwrap_or_default(), n))
            .collect())
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

    /// Stored webhook deliveries per status (`pending_fetch` ones still wait for their payment).
    pub async fn webhook_event_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        stmt("SELECT status AS state, COUNT(*) AS n FROM webhook_events GROUP BY status ORDER BY status")
            .fetch_all(self, "count webhook events")
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::shift_params;

    #[test]
    fn placeholders_are_renumbered_and_nothing_else_changes() {
        assert_eq!(
            shift_params("UPDATE t SET a = $1, b = $12 WHERE c = '$' AND d = $2", 12),
            "UPDATE t SET a = $13, b = $24 WHERE c = '$' AND d = $14"
        );
        assert_eq!(shift_params("SELECT 1", 5), "SELECT 1");
    }
}
