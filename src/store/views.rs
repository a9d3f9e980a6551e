//! Read-only views for the admin pages and reconciliation: documents (a payment with its
//! outbox row), their lists and searches, the dashboard's figures, the generations and stamp
//! keys reconciliation compares with the PAC. They join several aggregates and change
//! nothing, so they live apart from the files that own the writes.

use chrono::{DateTime, NaiveDateTime, Utc};

use super::exec::{Dialected, Stmt, stmt};
pub use super::rows::{DocFull, DocRow, HistoryRow, SealedGeneration};
use super::{Db, StoreError};
use crate::domain::LineState;

/// Which documents an admin list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListView {
    /// pending, stamping, retry_scheduled, unknown.
    Pending,
    /// Not final, and SAT's window closes within the at-risk threshold ([`ListFilter::risk`]).
    AtRisk,
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

/// The states whose SAT window still matters: a worker or an operator can still stamp them.
const OPEN_STATES: &str = "('pending', 'stamping', 'retry_scheduled', 'unknown', 'failed')";

impl ListView {
    pub const ALL: &'static [ListView] = &[
        Self::Pending,
        Self::AtRisk,
        Self::Failed,
        Self::Unresolved,
        Self::Expired,
        Self::Stamped,
        Self::AwaitingGlobal,
        Self::Flagged,
        Self::All,
    ];

    /// The SQL condition on the shown rows; constant text, never user input. Only
    /// [`ListView::AtRisk`] reads the window bounds, `$6` and `$7`.
    fn condition(self) -> String {
        match self {
            Self::Pending => {
                "COALESCE(o.state, p.status) IN ('pending', 'stamping', 'retry_scheduled', 'unknown')".into()
            }
            Self::AtRisk => format!("o.state IN {OPEN_STATES} AND o.fecha > $6 AND o.fecha <= $7"),
            Self::Failed => "COALESCE(o.state, p.status) IN ('failed', 'needs_attention')".into(),
            // The code is super::worker::UNRESOLVED.
            Self::Unresolved => "o.state = 'unknown' AND o.last_error_code = 'UNRESOLVED'".into(),
            Self::Expired => "COALESCE(o.state, p.status) = 'expired'".into(),
            Self::Stamped => "COALESCE(o.state, p.status) = 'stamped'".into(),
            Self::AwaitingGlobal => "COALESCE(o.state, p.status) = 'awaiting_global'".into(),
            Self::Flagged => "o.flag IS NOT NULL".into(),
            Self::All => "1 = 1".into(),
        }
    }

    /// How the view sorts when the request names no order: what is closest to its deadline
    /// first where a deadline matters, the latest payment first in "All", else the latest
    /// change first.
    pub fn default_sort(self) -> ListSort {
        match self {
            Self::Pending | Self::AtRisk | Self::Unresolved => ListSort::Deadline,
            Self::All => ListSort::PaidDesc,
            _ => ListSort::Updated,
        }
    }
}

/// The order of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListSort {
    /// Latest change first.
    Updated,
    /// Earliest Fecha first: the window that closes first comes first.
    Deadline,
    /// Latest payment first.
    PaidDesc,
    /// Earliest payment first.
    PaidAsc,
}

impl ListSort {
    fn order_by(self) -> &'static str {
        match self {
            Self::Updated => "COALESCE(o.updated_at, p.updated_at) DESC, p.id DESC",
            // Rows without a document (no Fecha) last on both backends.
            Self::Deadline => "CASE WHEN o.fecha IS NULL THEN 1 ELSE 0 END, o.fecha, p.id",
            Self::PaidDesc => "p.paid_at DESC, p.id DESC",
            Self::PaidAsc => "p.paid_at, p.id",
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

    /// `view`, every row of it (no search, no dates, no state), its default order, the first
    /// page; nothing at risk until [`ListFilter::risk`] is set.
    pub fn of(view: ListView) -> ListFilter {
        let (from, until) = Self::open_range();
        let epoch = DateTime::<Utc>::UNIX_EPOCH.naive_utc();
        ListFilter {
            view,
            state: String::new(),
            query: String::new(),
            from,
            until,
            risk: (epoch, epoch),
            sort: view.default_sort(),
            limit: 50,
            offset: 0,
        }
    }

    /// The Fecha bounds (Mexico City) of documents whose `window` closes within `at_risk` of
    /// `now` and is still open.
    pub fn risk_bounds(
        now: DateTime<Utc>,
        window: chrono::Duration,
        at_risk: chrono::Duration,
    ) -> (NaiveDateTime, NaiveDateTime) {
        use crate::domain::time::to_local;
        (to_local(now - window), to_local(now - window + at_risk))
    }
}

/// The filters of an admin list.
#[derive(Debug, Clone)]
pub struct ListFilter {
    pub view: ListView,
    /// One exact state (what a dashboard tile counts), or empty for any.
    pub state: String,
    /// Part of a payment id, UUID, serie-folio, stamp key, RFC, receptor name, email or error
    /// code, in any case; empty = any.
    pub query: String,
    /// Paid at or after / before (UTC).
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Fecha after `.0` and at or before `.1`: what [`ListView::AtRisk`] shows
    /// ([`ListFilter::risk_bounds`]).
    pub risk: (NaiveDateTime, NaiveDateTime),
    pub sort: ListSort,
    pub limit: i64,
    pub offset: i64,
}

const DOC_COLUMNS: &str = "p.id AS payment_row, p.provider, p.payment_id, p.amount, p.currency, \
    p.paid_at, p.livemode, o.id AS outbox_id, o.kind, COALESCE(o.state, p.status) AS state, o.serie, \
    o.folio, o.uuid, COALESCE(o.attempts, 0) AS attempts, o.last_error_code, \
    COALESCE(o.last_error_message, p.reason) AS last_error_message, o.run_at, \
    COALESCE(o.updated_at, p.updated_at) AS updated_at, o.flag, o.request_json, o.fecha";

/// The search part of a list: the same conditions with the same binds for rows, count and tab
/// counts. `$3` is the search as typed (empty = any), `$4` the same lowered, with LIKE's
/// wildcards escaped, between `%`; `$5` one exact state or empty. The receptor's RFC and name
/// are read out of the frozen request, and out of the customer data as received for a payment
/// without a document; each backend reads JSON with its own function.
static LIST_WHERE: Dialected = Dialected::new(
    " FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id \
    WHERE p.paid_at >= $1 AND p.paid_at < $2 AND ($3 = '' \
    OR LOWER(p.payment_id) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE(o.uuid, '')) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE(o.serie, '') || '-' || COALESCE(o.folio, '')) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE(o.stamp_key, '')) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE(o.last_error_code, '')) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE({R_RFC}, {C_RFC}, '')) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE({R_NOMBRE}, {C_NOMBRE}, '')) LIKE $4 ESCAPE '!' \
    OR LOWER(COALESCE({C_EMAIL}, '')) LIKE $4 ESCAPE '!') \
    AND ($5 = '' OR COALESCE(o.state, p.status) = $5)",
    &[
        (
            "{R_RFC}",
            "json_extract(o.request_json, '$.receptor.rfc')",
            "o.request_json::jsonb #>> '{receptor,rfc}'",
        ),
        (
            "{R_NOMBRE}",
            "json_extract(o.request_json, '$.receptor.nombre')",
            "o.request_json::jsonb #>> '{receptor,nombre}'",
        ),
        (
            "{C_RFC}",
            "json_extract(p.customer_json, '$.rfc')",
            "p.customer_json::jsonb #>> '{rfc}'",
        ),
        (
            "{C_NOMBRE}",
            "json_extract(p.customer_json, '$.nombre')",
            "p.customer_json::jsonb #>> '{nombre}'",
        ),
        (
            "{C_EMAIL}",
            "json_extract(p.customer_json, '$.email')",
            "p.customer_json::jsonb #>> '{email}'",
        ),
    ],
);

/// `q` as a LIKE pattern that finds it anywhere, in any case: lowered, `!` (the escape), `%`
/// and `_` escaped.
fn contains_pattern(q: &str) -> String {
    let mut p = String::with_capacity(q.len() + 2);
    p.push('%');
    for c in q.to_lowercase().chars() {
        if matches!(c, '!' | '%' | '_') {
            p.push('!');
        }
        p.push(c);
    }
    p.push('%');
    p
}

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
    pub async fn state_counts(&self) -> Result<Vec<(LineState, i64)>, StoreError> {
        const SQL: &str = "SELECT COALESCE(o.state, p.status) AS state, COUNT(*) AS n \
            FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id \
            GROUP BY COALESCE(o.state, p.status) ORDER BY 1";
        stmt(SQL)
            .fetch_all::<(LineState, i64)>(self, "count documents by state")
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

    /// `(state, kind, count)` over every outbox row (the `autofactura_documents` gauge).
    pub async fn document_counts(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        const SQL: &str =
            "SELECT state, kind, COUNT(*) AS n FROM outbox GROUP BY state, kind ORDER BY 1, 2";
        stmt(SQL)
            .fetch_all::<(String, String, i64)>(self, "count documents by state and kind")
            .await
    }

    /// `(kind, state, oldest created_at)` of the rows still to be stamped, or for an ARS
    /// sale authorized (the age gauges).
    pub async fn oldest_queued_by_kind(
        &self,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
        const SQL: &str = "SELECT kind, state, MIN(created_at) AS t FROM outbox \
            WHERE state IN ('pending', 'stamping', 'retry_scheduled', 'unknown', 'arca_pending') \
            GROUP BY kind, state ORDER BY 1, 2";
        stmt(SQL)
            .fetch_all::<(String, String, DateTime<Utc>)>(self, "find the oldest queued documents")
            .await
    }

    /// The document whose SAT window closes first among those a worker or an operator can
    /// still stamp and whose window is still open (Fecha after `open_after`, Mexico City): its
    /// Fecha, payment row and payment id.
    pub async fn closest_deadline(
        &self,
        open_after: NaiveDateTime,
    ) -> Result<Option<(NaiveDateTime, i64, String)>, StoreError> {
        let sql = format!(
            "SELECT o.fecha, p.id, p.payment_id FROM outbox o JOIN payments p ON p.id = o.payment_id \
             WHERE o.state IN {OPEN_STATES} AND o.fecha > $1 ORDER BY o.fecha, o.id LIMIT 1"
        );
        stmt(sql)
            .bind(open_after)
            .fetch_optional::<(NaiveDateTime, i64, String)>(self, "find the closest deadline")
            .await
    }

    /// Failed documents grouped by their code, the largest group first: `(code, count)` (an
    /// empty code for failures without one).
    pub async fn failure_groups(&self) -> Result<Vec<(String, i64)>, StoreError> {
        const SQL: &str = "SELECT COALESCE(last_error_code, '') AS code, COUNT(*) AS n FROM outbox \
            WHERE state = 'failed' GROUP BY COALESCE(last_error_code, '') ORDER BY 2 DESC, 1";
        stmt(SQL)
            .fetch_all::<(String, i64)>(self, "group failures by code")
            .await
    }

    /// The failed documents whose code is `code`.
    pub async fn failed_with_code(&self, code: &str) -> Result<Vec<i64>, StoreError> {
        const SQL: &str = "SELECT id FROM outbox WHERE state = 'failed' \
            AND COALESCE(last_error_code, '') = $1 ORDER BY id";
        let rows: Vec<(i64,)> = stmt(SQL)
            .bind(code)
            .fetch_all(self, "list the failures of a code")
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
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
        let like = contains_pattern(&q);
        let from = LIST_WHERE.text(self.dialect());
        let cond = f.view.condition();
        // Only the at-risk view names the window bounds; PostgreSQL refuses a parameter that
        // no statement names, so they are bound only then and the page's numbers follow them.
        let risk = f.view == ListView::AtRisk;
        let page = if risk { 8 } else { 6 };
        let rows_sql = format!(
            "SELECT {DOC_COLUMNS}{from} AND {cond} ORDER BY {} LIMIT ${page} OFFSET ${}",
            f.sort.order_by(),
            page + 1
        );
        let count_sql = format!("SELECT COUNT(*){from} AND {cond}");
        let bind = |s: Stmt<'static>| {
            let s = s
                .bind(f.from)
                .bind(f.until)
                .bind(q.clone())
                .bind(like.clone())
                .bind(f.state.clone());
            if risk {
                s.bind(f.risk.0).bind(f.risk.1)
            } else {
                s
            }
        };
        let rows = bind(stmt(rows_sql))
            .bind(f.limit)
            .bind(f.offset)
            .fetch_all::<DocRow>(self, "list documents")
            .await?;
        let (total,): (i64,) = bind(stmt(count_sql))
            .fetch_one(self, "count documents")
            .await?;
        Ok((rows, total))
    }

    /// How many rows each view holds under `f`'s search, dates and window bounds (its view,
    /// state and page aside), in [`ListView::ALL`]'s order: the counts on the tabs.
    pub async fn list_counts(&self, f: &ListFilter) -> Result<Vec<(ListView, i64)>, StoreError> {
        let q = f.query.trim().to_owned();
        let like = contains_pattern(&q);
        let counts = ListView::ALL
            .iter()
            .map(|v| format!("COUNT(CASE WHEN {} THEN 1 END)", v.condition()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!("SELECT {counts}{}", LIST_WHERE.text(self.dialect()));
        let row: CountsRow = stmt(sql)
            .bind(f.from)
            .bind(f.until)
            .bind(q)
            .bind(like)
            .bind(String::new())
            .bind(f.risk.0)
            .bind(f.risk.1)
            .fetch_one(self, "count the lists")
            .await?;
        Ok(ListView::ALL.iter().copied().zip(row.0).collect())
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

/// One count per [`ListView`], read from a row of as many columns.
struct CountsRow(Vec<i64>);

impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for CountsRow
where
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        (0..row.len())
            .map(|i| row.try_get::<i64, _>(i))
            .collect::<Result<_, _>>()
            .map(CountsRow)
    }
}

#[cfg(test)]
mod tests {
    use super::contains_pattern;

    #[test]
    fn a_search_is_lowered_and_its_wildcards_escaped() {
        assert_eq!(contains_pattern("Pi_Test%1!"), "%pi!_test!%1!!%");
        assert_eq!(contains_pattern(""), "%%");
    }
}
