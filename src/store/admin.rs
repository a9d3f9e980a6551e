//! The admin's statements: sessions, dashboard figures, lists, the detail page, and the actions
//! (retry, cancellation requests, refreeze, adoption of a stamp, reconciliation findings).
//!
//! The text is written once with `$n` placeholders and run through [`super::exec`]. Nothing
//! differs between the backends: timestamps are bound as `DateTime<Utc>`, booleans as
//! `bool`, and no statement uses a backend-specific function.

use chrono::{DateTime, NaiveDateTime, Utc};

use super::exec::{Arg, Stmt, stmt};
pub use super::rows::{
    ActionRow, AdminSession, AttemptRow, CancellationRow, DocFull, DocRow, FindingRow, HistoryRow,
    PaymentRow, SealedGeneration, WorkerRow,
};
use super::{Db, StoreError};

/// A cancellation to freeze.
#[derive(Debug, Clone)]
pub struct NewCancellation {
    pub outbox_id: i64,
    pub uuid: String,
    pub rfc_emisor: String,
    pub rfc_receptor: String,
    pub total: String,
    pub motivo: String,
    pub folio_sustitucion: Option<String>,
    pub requires_acceptance: bool,
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

/// Why a cancellation was not frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelConflict {
    /// A request for this UUID exists and is not rejected or failed.
    AlreadyRequested { state: String },
}

/// Which documents an admin list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListView {
    /// pending, stamping, retry_scheduled, unknown.
    Pending,
    /// failed (PAC rejection) and needs_attention (could not be built).
    Failed,
    /// `unknown` past its asking period: the PAC never confirmed whether it stamped them.
    Unresolved,
    Expired,
    Stamped,
    /// Payments waiting for the factura global.
    AwaitingGlobal,
    /// Flagged by reconciliation (adopted stamps, duplicates).
    Flagged,
    All,
}

impl ListView {
    /// The SQL condition on the shown state; constant text, never user input.
    fn condition(self) -> &'static str {
        match self {
            Self::Pending => {
                "COALESCE(o.state, p.status) IN ('pending', 'stamping', 'retry_scheduled', 'unknown')"
            }
            Self::Failed => "COALESCE(o.state, p.status) IN ('failed', 'needs_attention')",
            // The code is super::worker::UNRESOLVED.
            Self::Unresolved => "o.state = 'unknown' AND o.last_error_code = 'UNRESOLVED'",
            Self::Expired => "COALESCE(o.state, p.status) = 'expired'",
            Self::Stamped => "COALESCE(o.state, p.status) = 'stamped'",
            Self::AwaitingGlobal => "COALESCE(o.state, p.status) = 'awaiting_global'",
            Self::Flagged => "o.flag IS NOT NULL",
            Self::All => "1 = 1",
        }
    }
}

impl ListFilter {
    /// Earliest and latest instants a list filter uses when no date is given: inside both
    /// backends' ranges, and four-digit years so SQLite's text comparison orders them right.
    pub fn open_range() -> (DateTime<Utc>, DateTime<Utc>) {
        (
            DateTime::<Utc>::UNIX_EPOCH,
            chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map_or(DateTime::<Utc>::UNIX_EPOCH, |t| t.and_utc()),
        )
    }
}

/// The filters of an admin list.
#[derive(Debug, Clone)]
pub struct ListFilter {
    pub view: ListView,
    /// Payment id, UUID, RFC or serie-folio; empty = any.
    pub query: String,
    /// Paid at or after / before (UTC).
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub limit: i64,
    pub offset: i64,
}

const DOC_COLUMNS: &str = "p.id AS payment_row, p.provider, p.payment_id, p.amount, p.currency, \
    p.paid_at, p.livemode, o.id AS outbox_id, o.kind, COALESCE(o.state, p.status) AS state, o.serie, \
    o.folio, o.uuid, COALESCE(o.attempts, 0) AS attempts, o.last_error_code, \
    COALESCE(o.last_error_message, p.reason) AS last_error_message, o.run_at, \
    COALESCE(o.updated_at, p.updated_at) AS updated_at, o.flag, o.request_json";

/// The search part of a list: the same conditions with the same binds for rows and count.
const LIST_WHERE: &str = " FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id \
    WHERE p.paid_at >= $1 AND p.paid_at < $2 AND ($3 = '' OR p.payment_id = $4 OR UPPER(COALESCE(o.uuid, '')) = $5 \
    OR ($6 <> '' AND o.request_json LIKE $7) \
    OR (COALESCE(o.serie, '') || '-' || COALESCE(o.folio, '')) = $8 OR COALESCE(o.folio, '') = $9)";

const FULL_DOC: &str = "SELECT o.id, o.payment_id, o.kind, o.stamp_key, o.request_json, o.sealed_xml, \
    o.state, o.attempts, o.run_at, o.lease_owner, o.lease_expires_at, o.last_error_code, \
    o.last_error_message, o.uuid, o.stamped_xml, o.test_mode, o.fecha, o.serie, o.folio, o.created_at, \
    o.updated_at, o.pac_route, o.generation, o.sealed_at, o.stamped_at, o.fecha_timbrado, o.flag, \
    p.provider, p.payment_id AS provider_payment_id \
    FROM outbox o JOIN payments p ON p.id = o.payment_id";

const CANCEL_COLUMNS: &str = "id, outbox_id, uuid, rfc_emisor, rfc_receptor, total, motivo, \
    folio_sustitucion, state, requires_acceptance, attempts, run_at, estatus_cancelacion, sat_estado, \
    acuse_xml, last_error_code, last_error_message, requested_by, created_at, updated_at";

const ATTEMPT_COLUMNS: &str = "id, outbox_id, cancellation_id, operation, pac, outcome, http_status, \
    code, message, latency_ms, uuid, worker, at";

const INSERT_ACTION: &str = "INSERT INTO admin_actions (actor, action, target_kind, target_id, detail, at) \
    VALUES ($1, $2, $3, $4, $5, $6)";

/// [`INSERT_ACTION`]: who did what to which row, and why.
fn admin_action<'a>(
    actor: &'a str,
    action: &'a str,
    target_kind: &'a str,
    target_id: impl Into<Arg<'a>>,
    detail: impl Into<Arg<'a>>,
    now: DateTime<Utc>,
) -> Stmt<'a> {
    stmt(INSERT_ACTION)
        .bind(actor)
        .bind(action)
        .bind(target_kind)
        .bind(target_id)
        .bind(detail)
        .bind(now)
}

/// Cancellation states that are still moving.
pub const CANCEL_IN_PROCESS: &[&str] = &[
    "requested",
    "sending",
    "retry_scheduled",
    "unknown",
    "pending_receiver",
];

impl Db {
    /// The generated admin password hash, if one was stored.
    pub async fn admin_password_hash(&self) -> Result<Option<String>, StoreError> {
        const SQL: &str = "SELECT password_hash FROM admin_credentials WHERE id = 1";
        stmt(SQL)
            .fetch_optional::<(String,)>(self, "read the admin credentials")
            .await
            .map(|r| r.map(|(h,)| h))
    }

    /// Stores a generated password hash unless one exists; `false` when another instance won.
    pub async fn store_admin_password_hash(&self, hash: &str) -> Result<bool, StoreError> {
        const SQL: &str = "INSERT INTO admin_credentials (id, password_hash, created_at) \
            VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING";
        let now = Utc::now();
        stmt(SQL)
            .bind(hash)
            .bind(now)
            .execute(self, "store the admin credentials")
            .await
            .map(|n| n == 1)
    }

    pub async fn create_admin_session(
        &self,
        token_hash: &str,
        csrf_token: &str,
        actor: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const PURGE: &str = "DELETE FROM admin_sessions WHERE expires_at < $1";
        const SQL: &str = "INSERT INTO admin_sessions (token_hash, csrf_token, actor, created_at, expires_at) \
            VALUES ($1, $2, $3, $4, $5)";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        {
            stmt(PURGE)
                .bind(now)
                .execute_in(&mut tx, "purge expired sessions")
                .await?;
            stmt(SQL)
                .bind(token_hash)
                .bind(csrf_token)
                .bind(actor)
                .bind(now)
                .bind(expires_at)
                .execute_in(&mut tx, "create a session")
                .await?;
        };
        tx.commit("create a session").await?;
        Ok(())
    }

    /// The session with this token hash, if it has not expired.
    pub async fn admin_session(
        &self,
        token_hash: &str,
    ) -> Result<Option<AdminSession>, StoreError> {
        const SQL: &str = "SELECT csrf_token, actor, expires_at FROM admin_sessions \
            WHERE token_hash = $1 AND expires_at > $2";
        let now = Utc::now();
        stmt(SQL)
            .bind(token_hash)
            .bind(now)
            .fetch_optional::<AdminSession>(self, "read a session")
            .await
    }

    pub async fn delete_admin_session(&self, token_hash: &str) -> Result<(), StoreError> {
        const SQL: &str = "DELETE FROM admin_sessions WHERE token_hash = $1";
        stmt(SQL)
            .bind(token_hash)
            .execute(self, "delete a session")
            .await?;
        Ok(())
    }

    /// Records who did what (outside any other change, e.g. a login or a failed action).
    pub async fn record_admin_action(
        &self,
        actor: &str,
        action: &str,
        target_kind: &str,
        target_id: &str,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        admin_action(actor, action, target_kind, target_id, detail, now)
            .execute(self, "record an admin action")
            .await?;
        Ok(())
    }

    /// `(state, count)` over documents, plus payments that have no document yet.
    pub async fn state_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        const SQL: &str = "SELECT COALESCE(o.state, p.status) AS state, COUNT(*) AS n \
            FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id \
            GROUP BY COALESCE(o.state, p.status) ORDER BY 1";
        stmt(SQL)
            .fetch_all::<(String, i64)>(self, "count documents by state")
            .await
    }

    /// When the oldest document still waiting for a stamp was queued.
    pub async fn oldest_pending(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        const SQL: &str = "SELECT created_at FROM outbox \
            WHERE state IN ('pending', 'stamping', 'retry_scheduled', 'unknown') ORDER BY created_at LIMIT 1";
        stmt(SQL)
            .fetch_optional::<(DateTime<Utc>,)>(self, "find the oldest pending document")
            .await
            .map(|r| r.map(|(t,)| t))
    }

    /// `(state, count)` of cancellations.
    pub async fn cancellation_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        const SQL: &str =
            "SELECT state, COUNT(*) AS n FROM cancellations GROUP BY state ORDER BY state";
        stmt(SQL)
            .fetch_all::<(String, i64)>(self, "count cancellations")
            .await
    }

    /// Open reconciliation findings by kind.
    pub async fn open_finding_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        const SQL: &str = "SELECT kind, COUNT(*) AS n FROM reconciliation_findings \
            WHERE status = 'open' GROUP BY kind ORDER BY kind";
        stmt(SQL)
            .fetch_all::<(String, i64)>(self, "count findings")
            .await
    }

    /// Worker processes that have not stopped, most recent heartbeat first.
    pub async fn workers(&self) -> Result<Vec<WorkerRow>, StoreError> {
        const SQL: &str = "SELECT id, hostname, pid, concurrency, in_flight, started_at, last_seen, stopped_at \
            FROM workers ORDER BY last_seen DESC LIMIT 20";
        stmt(SQL).fetch_all::<WorkerRow>(self, "list workers").await
    }

    /// The latest PAC calls, newest first.
    pub async fn recent_attempts(&self, limit: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!("SELECT {ATTEMPT_COLUMNS} FROM pac_attempts ORDER BY id DESC LIMIT $1");
        stmt(sql)
            .bind(limit)
            .fetch_all::<AttemptRow>(self, "list PAC attempts")
            .await
    }

    /// The latest PAC calls that did not succeed, newest first.
    pub async fn recent_failed_attempts(&self, limit: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM pac_attempts \
             WHERE outcome IN ('rejected', 'retryable', 'unknown', 'unresolved') ORDER BY id DESC LIMIT $1"
        );
        stmt(sql)
            .bind(limit)
            .fetch_all::<AttemptRow>(self, "list failed PAC attempts")
            .await
    }

    /// Documents with a recorded error, most recent change first.
    pub async fn recent_errors(&self, limit: i64) -> Result<Vec<DocRow>, StoreError> {
        let sql = format!(
            "SELECT {DOC_COLUMNS} FROM payments p JOIN outbox o ON o.payment_id = p.id \
             WHERE o.last_error_code IS NOT NULL OR o.last_error_message IS NOT NULL \
             ORDER BY o.updated_at DESC LIMIT $1"
        );
        stmt(sql)
            .bind(limit)
            .fetch_all::<DocRow>(self, "list recent errors")
            .await
    }

    /// One page of a list and the number of rows over all pages.
    pub async fn list_documents(&self, f: &ListFilter) -> Result<(Vec<DocRow>, i64), StoreError> {
        let q = f.query.trim().to_owned();
        let upper = q.to_uppercase();
        // An RFC is searched inside the frozen request, where it is stored upper case.
        let like = if looks_like_rfc(&upper) {
            format!("%\"{upper}\"%")
        } else {
            String::new()
        };
        let cond = f.view.condition();
        let rows_sql = format!(
            "SELECT {DOC_COLUMNS}{LIST_WHERE} AND {cond} \
             ORDER BY COALESCE(o.updated_at, p.updated_at) DESC, p.id DESC LIMIT $10 OFFSET $11"
        );
        let count_sql = format!("SELECT COUNT(*){LIST_WHERE} AND {cond}");
        macro_rules! bind_search {
            ($query:expr) => {
                $query
                    .bind(f.from)
                    .bind(f.until)
                    .bind(&q)
                    .bind(&q)
                    .bind(&upper)
                    .bind(&like)
                    .bind(&like)
                    .bind(&q)
                    .bind(&q)
            };
        }
        let rows = bind_search!(stmt(rows_sql))
            .bind(f.limit)
            .bind(f.offset)
            .fetch_all::<DocRow>(self, "list documents")
            .await?;
        let (total,): (i64,) = bind_search!(stmt(count_sql))
            .fetch_one(self, "count documents")
            .await?;
        Ok((rows, total))
    }

    pub async fn payment(&self, id: i64) -> Result<Option<PaymentRow>, StoreError> {
        const SQL: &str = "SELECT id, provider, payment_id, event_id, amount, currency, method, forma_pago, \
            customer_json, paid_at, livemode, status, reason, created_at FROM payments WHERE id = $1";
        stmt(SQL)
            .bind(id)
            .fetch_optional::<PaymentRow>(self, "read a payment")
            .await
    }

    pub async fn documents_of_payment(&self, payment_row: i64) -> Result<Vec<DocFull>, StoreError> {
        let sql = format!("{FULL_DOC} WHERE o.payment_id = $1 ORDER BY o.id");
        stmt(sql)
            .bind(payment_row)
            .fetch_all::<DocFull>(self, "read the documents of a payment")
            .await
    }

    pub async fn document(&self, outbox_id: i64) -> Result<Option<DocFull>, StoreError> {
        let sql = format!("{FULL_DOC} WHERE o.id = $1");
        stmt(sql)
            .bind(outbox_id)
            .fetch_optional::<DocFull>(self, "read a document")
            .await
    }

    /// The stamped document carrying `uuid`, if we recorded one.
    pub async fn document_by_uuid(&self, uuid: &str) -> Result<Option<DocFull>, StoreError> {
        let sql = format!("{FULL_DOC} WHERE UPPER(o.uuid) = $1");
        stmt(sql)
            .bind(uuid.to_uppercase())
            .fetch_optional::<DocFull>(self, "find a document by UUID")
            .await
    }

    /// Stamped documents whose frozen request relates to `uuid` (CfdiRelacionados), other than
    /// `except`. They must be cancelled first: SAT answers `No cancelable` while they live.
    pub async fn documents_relating_to(
        &self,
        uuid: &str,
        except: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "SELECT o.uuid FROM outbox o \
            WHERE o.uuid IS NOT NULL AND o.state = 'stamped' AND o.request_json LIKE $1 \
            AND UPPER(o.uuid) <> $2 AND NOT EXISTS (SELECT 1 FROM cancellations c \
                WHERE UPPER(c.uuid) = UPPER(o.uuid) AND c.state = 'canceled')";
        let like = format!("%{}%", uuid.to_uppercase());
        let except = except.unwrap_or_default().to_uppercase();
        let rows: Vec<(String,)> = stmt(SQL)
            .bind(like)
            .bind(except)
            .fetch_all(self, "find related documents")
            .await?;
        Ok(rows
            .into_iter()
            .map(|(u,)| u)
            .filter(|u| !u.eq_ignore_ascii_case(uuid))
            .collect())
    }

    /// The PAC calls about a document and its cancellations, oldest first.
    pub async fn attempts_of(&self, outbox_id: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM pac_attempts WHERE outbox_id = $1 \
             OR cancellation_id IN (SELECT id FROM cancellations WHERE outbox_id = $2) ORDER BY id"
        );
        stmt(sql)
            .bind(outbox_id)
            .bind(outbox_id)
            .fetch_all::<AttemptRow>(self, "read the attempt log")
            .await
    }

    pub async fn history_of(&self, outbox_id: i64) -> Result<Vec<HistoryRow>, StoreError> {
        const SQL: &str = "SELECT outbox_id, generation, stamp_key, request_json, sealed_xml, reason, actor, at \
            FROM outbox_history WHERE outbox_id = $1 ORDER BY generation";
        stmt(SQL)
            .bind(outbox_id)
            .fetch_all::<HistoryRow>(self, "read the generations of a document")
            .await
    }

    pub async fn cancellations_of(
        &self,
        outbox_id: i64,
    ) -> Result<Vec<CancellationRow>, StoreError> {
        let sql =
            format!("SELECT {CANCEL_COLUMNS} FROM cancellations WHERE outbox_id = $1 ORDER BY id");
        stmt(sql)
            .bind(outbox_id)
            .fetch_all::<CancellationRow>(self, "read cancellations")
            .await
    }

    pub async fn cancellation_by_uuid(
        &self,
        uuid: &str,
    ) -> Result<Option<CancellationRow>, StoreError> {
        let sql = format!("SELECT {CANCEL_COLUMNS} FROM cancellations WHERE UPPER(uuid) = $1");
        stmt(sql)
            .bind(uuid.to_uppercase())
            .fetch_optional::<CancellationRow>(self, "read a cancellation")
            .await
    }

    pub async fn cancellation(&self, id: i64) -> Result<Option<CancellationRow>, StoreError> {
        let sql = format!("SELECT {CANCEL_COLUMNS} FROM cancellations WHERE id = $1");
        stmt(sql)
            .bind(id)
            .fetch_optional::<CancellationRow>(self, "read a cancellation")
            .await
    }

    /// Appends a PAC call the admin made (recover before a refreeze, reconciliation, a SAT
    /// status query) to the attempt log the workers write.
    pub async fn log_admin_pac_call(&self, call: &AdminPacCall<'_>) -> Result<(), StoreError> {
        const SQL: &str = "INSERT INTO pac_attempts (outbox_id, cancellation_id, operation, pac, outcome, \
            http_status, code, message, latency_ms, uuid, worker, at) VALUES ($1, NULL, $2, $3, $4, NULL, $5, $6, $7, $8, $9, $10)";
        let now = Utc::now();
        stmt(SQL)
            .bind(call.outbox_id)
            .bind(call.operation)
            .bind(call.pac)
            .bind(call.outcome)
            .bind(call.code)
            .bind(call.message)
            .bind(call.latency_ms)
            .bind(call.uuid)
            .bind(call.by)
            .bind(now)
            .execute(self, "log a PAC call")
            .await?;
        Ok(())
    }

    /// Cancellations, newest first; `in_process` keeps the ones still moving.
    pub async fn list_cancellations(
        &self,
        in_process: bool,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<CancellationRow>, StoreError> {
        let cond = if in_process {
            "state IN ('requested', 'sending', 'retry_scheduled', 'unknown', 'pending_receiver')"
        } else {
            "1 = 1"
        };
        let sql = format!(
            "SELECT {CANCEL_COLUMNS} FROM cancellations WHERE {cond} ORDER BY updated_at DESC, id DESC LIMIT $1 OFFSET $2"
        );
        stmt(sql)
            .bind(limit)
            .bind(offset)
            .fetch_all::<CancellationRow>(self, "list cancellations")
            .await
    }

    pub async fn actions_on(
        &self,
        target_kind: &str,
        target_id: &str,
    ) -> Result<Vec<ActionRow>, StoreError> {
        const SQL: &str = "SELECT id, actor, action, target_kind, target_id, detail, at FROM admin_actions \
            WHERE target_kind = $1 AND target_id = $2 ORDER BY id";
        stmt(SQL)
            .bind(target_kind)
            .bind(target_id)
            .fetch_all::<ActionRow>(self, "read admin actions")
            .await
    }

    pub async fn recent_actions(&self, limit: i64) -> Result<Vec<ActionRow>, StoreError> {
        const SQL: &str = "SELECT id, actor, action, target_kind, target_id, detail, at FROM admin_actions \
            ORDER BY id DESC LIMIT $1";
        stmt(SQL)
            .bind(limit)
            .fetch_all::<ActionRow>(self, "read admin actions")
            .await
    }

    /// Sends a document back to the worker, due now, the frozen bytes and key untouched:
    /// - `failed`: attempts reset (the attempt log keeps the history), state `pending`, or
    ///   `unknown` when the last PAC call about it went unanswered, so that the worker asks the
    ///   PAC before anything is sent again (every send after an unknown outcome asks first);
    /// - `unknown` (an outcome the PAC has not confirmed, e.g. past its asking period): asked
    ///   for now.
    ///
    /// Returns what was done (for the audit and the notice); `None` when the row is in neither
    /// state (any more).
    pub async fn retry_document(
        &self,
        outbox_id: i64,
        actor: &str,
    ) -> Result<Option<&'static str>, StoreError> {
        const FAILED: &str = "UPDATE outbox SET state = CASE WHEN (SELECT a.outcome FROM pac_attempts a \
            WHERE a.outbox_id = outbox.id AND a.operation IN ('stamp', 'recover') ORDER BY a.id DESC LIMIT 1) \
            IN ('unknown', 'unresolved') THEN 'unknown' ELSE 'pending' END, run_at = $1, attempts = 0, \
            lease_owner = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $3 AND state = 'failed' \
            RETURNING state";
        const UNKNOWN: &str = "UPDATE outbox SET run_at = $1, updated_at = $2 WHERE id = $3 AND state = 'unknown' RETURNING state";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let mut done = None;
            for (sql, from) in [(FAILED, "failed"), (UNKNOWN, "unknown")] {
                let to: Option<(String,)> = stmt(sql)
                    .bind(now)
                    .bind(now)
                    .bind(outbox_id)
                    .fetch_optional_in(&mut tx, "retry a document")
                    .await?;
                done = match (from, to.as_ref().map(|t| t.0.as_str())) {
                    (_, None) => continue,
                    ("failed", Some("pending")) => {
                        Some("failed → pending, same frozen bytes and key")
                    }
                    ("failed", Some(_)) => Some(
                        "failed → unknown: its last PAC call went unanswered, so the PAC is asked before anything is sent; same frozen bytes and key",
                    ),
                    _ => Some("unknown: the PAC is asked now whether it stamped the document"),
                };
                break;
            }
            if let Some(detail) = done {
                admin_action(
                    actor,
                    "retry",
                    "outbox",
                    outbox_id.to_string(),
                    Some(detail),
                    now,
                )
                .execute_in(&mut tx, "record an admin action")
                .await?;
            }
            Ok::<_, StoreError>(done)
        };
        tx.commit("commit a retry").await?;
        out
    }

    /// Freezes a cancellation request for the worker (state `requested`, due now). A UUID whose
    /// earlier request ended `rejected` or `failed` is asked again on the same row.
    pub async fn request_cancellation(
        &self,
        c: &NewCancellation,
        actor: &str,
    ) -> Result<Result<i64, CancelConflict>, StoreError> {
        const EXISTING: &str = "SELECT id, state FROM cancellations WHERE UPPER(uuid) = $1";
        const INSERT: &str = "INSERT INTO cancellations (outbox_id, uuid, rfc_emisor, rfc_receptor, total, \
            motivo, folio_sustitucion, state, requires_acceptance, attempts, run_at, requested_by, created_at, updated_at) \
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'requested', $8, 0, $9, $10, $11, $12) RETURNING id";
        const AGAIN: &str = "UPDATE cancellations SET motivo = $1, folio_sustitucion = $2, state = 'requested', \
            requires_acceptance = $3, attempts = 0, run_at = $4, lease_owner = NULL, lease_expires_at = NULL, \
            last_error_code = NULL, last_error_message = NULL, requested_by = $5, updated_at = $6 \
            WHERE id = $7 AND state IN ('rejected', 'failed')";
        let now = Utc::now();
        let uuid = c.uuid.to_uppercase();
        let mut tx = self.begin().await?;
        let out = {
            let existing: Option<(i64, String)> = stmt(EXISTING)
                .bind(&uuid)
                .fetch_optional_in(&mut tx, "look for an earlier cancellation")
                .await?;
            let id = match existing {
                Some((id, state)) if state == "rejected" || state == "failed" => {
                    stmt(AGAIN)
                        .bind(&c.motivo)
                        .bind(&c.folio_sustitucion)
                        .bind(c.requires_acceptance)
                        .bind(now)
                        .bind(actor)
                        .bind(now)
                        .bind(id)
                        .execute_in(&mut tx, "request a cancellation again")
                        .await?;
                    id
                }
                Some((_, state)) => {
                    return Ok(Err(CancelConflict::AlreadyRequested { state }));
                }
                None => {
                    let (id,): (i64,) = stmt(INSERT)
                        .bind(c.outbox_id)
                        .bind(&uuid)
                        .bind(&c.rfc_emisor)
                        .bind(&c.rfc_receptor)
                        .bind(&c.total)
                        .bind(&c.motivo)
                        .bind(&c.folio_sustitucion)
                        .bind(c.requires_acceptance)
                        .bind(now)
                        .bind(actor)
                        .bind(now)
                        .bind(now)
                        .fetch_one_in(&mut tx, "freeze a cancellation")
                        .await?;
                    id
                }
            };
            let detail = format!(
                "UUID {uuid}, motivo {}{}, {}",
                c.motivo,
                c.folio_sustitucion
                    .as_deref()
                    .map(|f| format!(", sustituido por {f}"))
                    .unwrap_or_default(),
                if c.requires_acceptance {
                    "the receptor must accept"
                } else {
                    "no acceptance needed"
                }
            );
            admin_action(
                actor,
                "cancel",
                "outbox",
                c.outbox_id.to_string(),
                Some(detail),
                now,
            )
            .execute_in(&mut tx, "record an admin action")
            .await?;
            Ok::<_, StoreError>(Ok(id))
        };
        tx.commit("commit a cancellation request").await?;
        out
    }

    /// Starts a new generation of an `expired` or `failed` document: the current one goes to
    /// `outbox_history`, the row gets the new request and key, no sealed bytes, state `pending`.
    /// `false` when the row changed meanwhile (other state or generation).
    #[allow(clippy::too_many_arguments)]
    pub async fn refreeze(
        &self,
        outbox_id: i64,
        expected_generation: i32,
        new_request_json: &str,
        new_key: &str,
        new_fecha: NaiveDateTime,
        reason: &str,
        actor: &str,
    ) -> Result<bool, StoreError> {
        const ARCHIVE: &str = "INSERT INTO outbox_history (outbox_id, generation, stamp_key, request_json, \
            sealed_xml, reason, actor, at) SELECT id, generation, stamp_key, request_json, sealed_xml, $1, $2, $3 \
            FROM outbox WHERE id = $4 AND generation = $5 AND state IN ('expired', 'failed') AND uuid IS NULL";
        const RENEW: &str = "UPDATE outbox SET request_json = $1, stamp_key = $2, generation = generation + 1, \
            sealed_xml = NULL, sealed_at = NULL, state = 'pending', attempts = 0, run_at = $3, fecha = $4, \
            lease_owner = NULL, lease_expires_at = NULL, last_error_code = NULL, last_error_message = NULL, \
            pac_route = NULL, updated_at = $5 \
            WHERE id = $6 AND generation = $7 AND state IN ('expired', 'failed') AND uuid IS NULL";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let archived = stmt(ARCHIVE)
                .bind(reason)
                .bind(actor)
                .bind(now)
                .bind(outbox_id)
                .bind(expected_generation)
                .execute_in(&mut tx, "archive a generation")
                .await?;
            if archived != 1 {
                return Ok(false);
            }
            stmt(RENEW)
                .bind(new_request_json)
                .bind(new_key)
                .bind(now)
                .bind(new_fecha)
                .bind(now)
                .bind(outbox_id)
                .bind(expected_generation)
                .execute_in(&mut tx, "refreeze a document")
                .await?;
            admin_action(actor, "refreeze", "outbox", outbox_id.to_string(), Some(format!(
                    "generation {expected_generation} archived, generation {} frozen with Fecha {new_fecha} and key {new_key}: {reason}",
                    expected_generation + 1
                )), now)
.execute_in(&mut tx, "record an admin action")
.await?;
            Ok::<bool, StoreError>(true)
        };
        tx.commit("commit a refreeze").await?;
        out
    }

    /// Records a stamp the PAC holds for a document we never recorded it on, and flags the row
    /// for a human. `false` when the row already has a UUID.
    pub async fn adopt_stamp(
        &self,
        outbox_id: i64,
        uuid: &str,
        stamped_xml: &[u8],
        fecha_timbrado: &str,
        flag: &str,
        actor: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE outbox SET uuid = $1, stamped_xml = $2, fecha_timbrado = $3, state = 'stamped', \
            stamped_at = $4, flag = $5, lease_owner = NULL, lease_expires_at = NULL, updated_at = $6 \
            WHERE id = $7 AND uuid IS NULL";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let done = stmt(SQL)
                .bind(uuid.to_uppercase())
                .bind(stamped_xml)
                .bind(fecha_timbrado)
                .bind(now)
                .bind(flag)
                .bind(now)
                .bind(outbox_id)
                .execute_in(&mut tx, "adopt a stamp")
                .await?;
            if done == 1 {
                admin_action(
                    actor,
                    "adopt_stamp",
                    "outbox",
                    outbox_id.to_string(),
                    Some(format!("UUID {uuid}: {flag}")),
                    now,
                )
                .execute_in(&mut tx, "record an admin action")
                .await?;
                // An API invoice's merchant hears of the adopted stamp like of any other.
                stmt(super::worker::API_EVENT)
                    .bind("invoice.stamped")
                    .bind(now)
                    .bind(outbox_id)
                    .execute_in(&mut tx, "queue the merchant webhook")
                    .await?;
            }
            Ok::<bool, StoreError>(done == 1)
        };
        tx.commit("commit an adopted stamp").await?;
        out
    }

    /// Every sealed generation we hold without a stamp recorded for it: the current one of rows
    /// whose outcome is open (`unknown`) or was settled by its window (`expired`), and every
    /// archived one. (`failed` rows are definite non-stamps: the worker never fails a row whose
    /// outcome it could not confirm.)
    pub async fn sealed_generations_to_reconcile(
        &self,
    ) -> Result<Vec<SealedGeneration>, StoreError> {
        const SQL: &str = "SELECT o.id AS outbox_id, o.generation, o.stamp_key, o.sealed_xml, \
            o.generation AS current_generation, o.uuid AS recorded_uuid, o.state FROM outbox o \
            WHERE o.sealed_xml IS NOT NULL AND o.uuid IS NULL AND o.state IN ('unknown', 'expired') \
            UNION ALL \
            SELECT h.outbox_id, h.generation, h.stamp_key, h.sealed_xml, o.generation AS current_generation, \
            o.uuid AS recorded_uuid, o.state FROM outbox_history h JOIN outbox o ON o.id = h.outbox_id \
            WHERE h.sealed_xml IS NOT NULL ORDER BY 1, 2";
        stmt(SQL)
            .fetch_all::<SealedGeneration>(self, "list sealed generations")
            .await
    }

    /// Every stamp key we ever froze (current and archived) → `(outbox_id, generation, current)`.
    pub async fn all_stamp_keys(&self) -> Result<Vec<(String, i64, i32, bool)>, StoreError> {
        const SQL: &str = "SELECT stamp_key, id, generation, 1 = 1 AS current FROM outbox \
            UNION ALL SELECT stamp_key, outbox_id, generation, 1 = 0 AS current FROM outbox_history";
        stmt(SQL)
            .fetch_all::<(String, i64, i32, bool)>(self, "list stamp keys")
            .await
    }

    /// Notes a finding once per `(kind, uuid)`; `true` when it is new.
    pub async fn record_finding(
        &self,
        kind: &str,
        outbox_id: Option<i64>,
        uuid: &str,
        stamp_key: Option<&str>,
        detail: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "INSERT INTO reconciliation_findings (kind, outbox_id, uuid, stamp_key, detail, status, found_at) \
            VALUES ($1, $2, $3, $4, $5, 'open', $6) ON CONFLICT (kind, uuid) DO NOTHING";
        let now = Utc::now();
        stmt(SQL)
            .bind(kind)
            .bind(outbox_id)
            .bind(uuid.to_uppercase())
            .bind(stamp_key)
            .bind(detail)
            .bind(now)
            .execute(self, "record a finding")
            .await
            .map(|n| n == 1)
    }

    /// Findings, newest first; `status` filters (`open`, `resolved`).
    pub async fn findings(
        &self,
        kind: Option<&str>,
        status: Option<&str>,
    ) -> Result<Vec<FindingRow>, StoreError> {
        const SQL: &str = "SELECT id, kind, outbox_id, uuid, stamp_key, detail, status, found_at, resolved_at \
            FROM reconciliation_findings WHERE ($1 = '' OR kind = $2) AND ($3 = '' OR status = $4) ORDER BY id DESC";
        let kind = kind.unwrap_or_default();
        let status = status.unwrap_or_default();
        stmt(SQL)
            .bind(kind)
            .bind(kind)
            .bind(status)
            .bind(status)
            .fetch_all::<FindingRow>(self, "list findings")
            .await
    }

    pub async fn finding(&self, id: i64) -> Result<Option<FindingRow>, StoreError> {
        const SQL: &str = "SELECT id, kind, outbox_id, uuid, stamp_key, detail, status, found_at, resolved_at \
            FROM reconciliation_findings WHERE id = $1";
        stmt(SQL)
            .bind(id)
            .fetch_optional::<FindingRow>(self, "read a finding")
            .await
    }

    /// Closes a finding and records who did it.
    pub async fn resolve_finding(
        &self,
        id: i64,
        actor: &str,
        detail: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE reconciliation_findings SET status = 'resolved', resolved_at = $1 \
            WHERE id = $2 AND status = 'open'";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let done = stmt(SQL)
                .bind(now)
                .bind(id)
                .execute_in(&mut tx, "resolve a finding")
                .await?;
            if done == 1 {
                admin_action(
                    actor,
                    "resolve_finding",
                    "finding",
                    id.to_string(),
                    Some(detail),
                    now,
                )
                .execute_in(&mut tx, "record an admin action")
                .await?;
            }
            Ok::<bool, StoreError>(done == 1)
        };
        tx.commit("commit a resolved finding").await?;
        out
    }
}

/// 12 or 13 letters and digits: the shape of an RFC (validated properly elsewhere).
fn looks_like_rfc(s: &str) -> bool {
    (12..=13).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '&')
}
