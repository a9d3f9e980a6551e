//! Read-only views for the admin pages and reconciliation: documents (a payment with its
//! outbox row), their lists and searches, the dashboard's figures, the generations and stamp
//! keys reconciliation compares with the PAC. They join several aggregates and change
//! nothing, so they live apart from the files that own the writes.

use chrono::{DateTime, Utc};

use super::exec::{Stmt, stmt};
pub use super::rows::{DocFull, DocRow, HistoryRow, SealedGeneration};
use super::{Db, StoreError};

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

/// Whole documents where `cond` (constant text, never user input).
fn documents_where<'a>(cond: &str) -> Stmt<'a> {
    stmt(format!("{FULL_DOC} WHERE {cond}"))
}

impl Db {
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

    pub async fn documents_of_payment(&self, payment_row: i64) -> Result<Vec<DocFull>, StoreError> {
        documents_where("o.payment_id = $1 ORDER BY o.id")
            .bind(payment_row)
            .fetch_all::<DocFull>(self, "read the documents of a payment")
            .await
    }

    pub async fn document(&self, outbox_id: i64) -> Result<Option<DocFull>, StoreError> {
        documents_where("o.id = $1")
            .bind(outbox_id)
            .fetch_optional::<DocFull>(self, "read a document")
            .await
    }

    /// The stamped document carrying `uuid`, if we recorded one.
    pub async fn document_by_uuid(&self, uuid: &str) -> Result<Option<DocFull>, StoreError> {
        documents_where("UPPER(o.uuid) = $1")
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

    pub async fn history_of(&self, outbox_id: i64) -> Result<Vec<HistoryRow>, StoreError> {
        const SQL: &str = "SELECT outbox_id, generation, stamp_key, request_json, sealed_xml, reason, actor, at \
            FROM outbox_history WHERE outbox_id = $1 ORDER BY generation";
        stmt(SQL)
            .bind(outbox_id)
            .fetch_all::<HistoryRow>(self, "read the generations of a document")
            .await
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
}

/// 12 or 13 letters and digits: the shape of an RFC (validated properly elsewhere).
fn looks_like_rfc(s: &str) -> bool {
    (12..=13).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '&')
}
