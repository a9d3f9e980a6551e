//! The admin's own tables: the generated password, sessions, the audit log of who did what,
//! and reconciliation's findings.

use chrono::{DateTime, Utc};

use super::exec::{Arg, Stmt, Tx, stmt};
pub use super::rows::{ActionRow, AdminSession, FindingRow};
use super::{Db, StoreError};

const INSERT_ACTION: &str = "INSERT INTO admin_actions (actor, action, target_kind, target_id, detail, at) \
    VALUES ($1, $2, $3, $4, $5, $6)";

/// [`INSERT_ACTION`]: who did what to which row, and why (in the transaction of the change
/// it records, where there is one).
pub(super) fn admin_action<'a>(
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

/// In `tx`, with the change it records: who did `action` to the row `target` (table, id), and
/// why.
pub(super) async fn audit_in(
    tx: &mut Tx<'_>,
    actor: &str,
    action: &str,
    target: (&str, i64),
    detail: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (kind, id) = target;
    admin_action(actor, action, kind, id.to_string(), Some(detail), now)
        .execute_in(tx, "record an admin action")
        .await?;
    Ok(())
}

/// [`audit_in`] for an action taken by a form that carried a `submission` token (migration
/// 0021), so that a second send of that form can find it with [`Db::submitted`].
pub(super) async fn audit_submitted_in(
    tx: &mut Tx<'_>,
    actor: &str,
    action: &str,
    target: (&str, i64),
    detail: &str,
    submission: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    const SQL: &str = "INSERT INTO admin_actions \
        (actor, action, target_kind, target_id, detail, at, submission) \
        VALUES ($1, $2, $3, $4, $5, $6, $7)";
    let (kind, id) = target;
    stmt(SQL)
        .bind(actor)
        .bind(action)
        .bind(kind)
        .bind(id.to_string())
        .bind(detail)
        .bind(now)
        .bind(Some(submission).filter(|s| !s.is_empty()))
        .execute_in(tx, "record an admin action")
        .await?;
    Ok(())
}

const ACTION_COLUMNS: &str = "id, actor, action, target_kind, target_id, detail, at";

const FINDING_COLUMNS: &str =
    "id, kind, outbox_id, uuid, stamp_key, detail, status, found_at, resolved_at";

impl Db {
    /// Whether `action` was already taken on `target` by a form that carried `submission`.
    pub async fn submitted(
        &self,
        action: &str,
        target: (&str, i64),
        submission: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "SELECT COUNT(*) FROM admin_actions \
            WHERE target_kind = $1 AND target_id = $2 AND submission = $3 AND action = $4";
        if submission.is_empty() {
            return Ok(false);
        }
        let (kind, id) = target;
        let (n,): (i64,) = stmt(SQL)
            .bind(kind)
            .bind(id.to_string())
            .bind(submission)
            .bind(action)
            .fetch_one(self, "look up a form's submission")
            .await?;
        Ok(n > 0)
    }

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

    pub async fn actions_on(
        &self,
        target_kind: &str,
        target_id: &str,
    ) -> Result<Vec<ActionRow>, StoreError> {
        stmt(format!(
            "SELECT {ACTION_COLUMNS} FROM admin_actions WHERE target_kind = $1 AND target_id = $2 ORDER BY id"
        ))
            .bind(target_kind)
            .bind(target_id)
            .fetch_all::<ActionRow>(self, "read admin actions")
            .await
    }

    pub async fn recent_actions(&self, limit: i64) -> Result<Vec<ActionRow>, StoreError> {
        stmt(format!(
            "SELECT {ACTION_COLUMNS} FROM admin_actions ORDER BY id DESC LIMIT $1"
        ))
        .bind(limit)
        .fetch_all::<ActionRow>(self, "read admin actions")
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
        let sql = format!(
            "SELECT {FINDING_COLUMNS} FROM reconciliation_findings \
             WHERE ($1 = '' OR kind = $2) AND ($3 = '' OR status = $4) ORDER BY id DESC"
        );
        let kind = kind.unwrap_or_default();
        let status = status.unwrap_or_default();
        stmt(sql)
            .bind(kind)
            .bind(kind)
            .bind(status)
            .bind(status)
            .fetch_all::<FindingRow>(self, "list findings")
            .await
    }

    pub async fn finding(&self, id: i64) -> Result<Option<FindingRow>, StoreError> {
        stmt(format!(
            "SELECT {FINDING_COLUMNS} FROM reconciliation_findings WHERE id = $1"
        ))
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
                audit_in(
                    &mut tx,
                    actor,
                    "resolve_finding",
                    ("finding", id),
                    detail,
                    now,
                )
                .await?;
            }
            Ok::<bool, StoreError>(done == 1)
        };
        tx.commit("commit a resolved finding").await?;
        out
    }

    /// Open reconciliation findings by kind.
    pub async fn open_finding_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        const SQL: &str = "SELECT kind, COUNT(*) AS n FROM reconciliation_findings \
            WHERE status = 'open' GROUP BY kind ORDER BY kind";
        stmt(SQL)
            .fetch_all::<(String, i64)>(self, "count findings")
            .await
    }

    /// Pauses stamping at `pac` (no claim takes a document or a cancellation for it) and
    /// records who and why, in one transaction; `false` when it was already paused.
    pub async fn pause_pac(
        &self,
        pac: &str,
        actor: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "INSERT INTO pac_pauses (pac, paused_by, reason, paused_at) \
            VALUES ($1, $2, $3, $4) ON CONFLICT (pac) DO NOTHING";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let done = stmt(SQL)
            .bind(pac)
            .bind(actor)
            .bind(reason)
            .bind(now)
            .execute_in(&mut tx, "pause a PAC")
            .await?;
        if done == 1 {
            admin_action(actor, "pause_pac", "pac", pac, Some(reason), now)
                .execute_in(&mut tx, "record an admin action")
                .await?;
        }
        tx.commit("commit a PAC pause").await?;
        Ok(done == 1)
    }

    /// Resumes stamping at `pac`, recorded; `false` when it was not paused.
    pub async fn resume_pac(&self, pac: &str, actor: &str) -> Result<bool, StoreError> {
        const SQL: &str = "DELETE FROM pac_pauses WHERE pac = $1";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let done = stmt(SQL)
            .bind(pac)
            .execute_in(&mut tx, "resume a PAC")
            .await?;
        if done == 1 {
            admin_action(actor, "resume_pac", "pac", pac, None::<&str>, now)
                .execute_in(&mut tx, "record an admin action")
                .await?;
        }
        tx.commit("commit a PAC resume").await?;
        Ok(done == 1)
    }

    /// The pause of `pac`, if it is paused: who, why and since when.
    pub async fn pac_pause(
        &self,
        pac: &str,
    ) -> Result<Option<(String, String, DateTime<Utc>)>, StoreError> {
        const SQL: &str = "SELECT paused_by, reason, paused_at FROM pac_pauses WHERE pac = $1";
        stmt(SQL)
            .bind(pac)
            .fetch_optional::<(String, String, DateTime<Utc>)>(self, "read a PAC pause")
            .await
    }
}
