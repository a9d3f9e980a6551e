//! The dashboard: counts by state, workers, the PAC's recent health, the latest errors.

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{DateTime, Duration, Utc};

use super::auth::Session;
use super::common::*;
use super::{age, local, state_label};
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::AttemptRow;

pub struct CountView {
    pub state: String,
    pub label: String,
    pub class: &'static str,
    pub count: i64,
    pub view: &'static str,
}

pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub load: String,
    pub seen: String,
    pub alive: bool,
}

pub struct AttemptView {
    pub at: String,
    pub operation: String,
    pub pac: String,
    pub outcome: String,
    pub class: &'static str,
    pub http_status: String,
    pub code: String,
    pub message: String,
    pub latency_ms: i64,
    pub uuid: String,
    pub worker: String,
    pub outbox_id: Option<i64>,
}

impl AttemptView {
    pub(super) fn of(a: &AttemptRow) -> Self {
        let class = match a.outcome.as_str() {
            "stamped" | "already_stamped" | "found" | "requested" | "canceled" => "ok",
            "rejected" | "unresolved" => "bad",
            "unknown" | "retryable" => "warn",
            _ => "muted",
        };
        AttemptView {
            at: local(a.at),
            operation: a.operation.clone(),
            pac: a.pac.clone(),
            outcome: a.outcome.clone(),
            class,
            http_status: a.http_status.map(|s| s.to_string()).unwrap_or_default(),
            code: a.code.clone().unwrap_or_default(),
            message: a.message.clone().unwrap_or_default(),
            latency_ms: a.latency_ms,
            uuid: a.uuid.clone().unwrap_or_default(),
            worker: a.worker.clone().unwrap_or_default(),
            outbox_id: a.outbox_id,
        }
    }
}

pub struct ErrorView {
    pub payment_row: i64,
    pub payment_id: String,
    pub state: String,
    pub class: &'static str,
    pub code: String,
    pub message: String,
    pub when: String,
}

#[derive(Template)]
#[template(path = "admin/dashboard.html")]
pub struct DashboardPage {
    pub l: Layout,
    pub counts: Vec<CountView>,
    pub total: i64,
    pub oldest_pending: Option<String>,
    pub cancellations: Vec<(String, i64)>,
    pub duplicates: i64,
    pub orphans: i64,
    pub workers: Vec<WorkerView>,
    pub pac_summary: String,
    pub pac_class: &'static str,
    pub attempts: Vec<AttemptView>,
    pub errors: Vec<ErrorView>,
}

fn view_of_state(state: &str) -> &'static str {
    match state {
        "pending" | "stamping" | "retry_scheduled" | "unknown" => "pending",
        "failed" | "needs_attention" => "failed",
        "expired" => "expired",
        "stamped" => "stamped",
        "awaiting_global" => "global",
        _ => "all",
    }
}

pub async fn dashboard(
    state: web::Data<AppState>,
    session: Session,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let db = &state.db;
    let now = Utc::now();
    let counts: Vec<CountView> = db
        .state_counts()
        .await?
        .into_iter()
        .map(|(s, n)| {
            let (label, class) = state_label(&s);
            CountView {
                view: view_of_state(&s),
                state: s,
                label,
                class,
                count: n,
            }
        })
        .collect();
    let total = counts.iter().map(|c| c.count).sum();
    let oldest_pending = db.oldest_pending().await?.map(|t| age(t, now));
    let cancellations = db
        .cancellation_counts()
        .await?
        .into_iter()
        .map(|(s, n)| (state_label(&s).0, n))
        .collect();
    let findings = db.open_finding_counts().await?;
    let count_of = |k: &str| {
        findings
            .iter()
            .find(|(kind, _)| kind == k)
            .map_or(0, |(_, n)| *n)
    };
    let workers = db
        .workers()
        .await?
        .into_iter()
        .filter(|w| w.stopped_at.is_none() || now - w.last_seen < Duration::hours(1))
        .map(|w| WorkerView {
            alive: w.stopped_at.is_none() && now - w.last_seen < Duration::seconds(60),
            id: w.id,
            host: w.hostname,
            pid: w.pid,
            load: format!("{}/{}", w.in_flight, w.concurrency),
            seen: format!("{} ago", age(w.last_seen, now)),
        })
        .collect();
    let recent = db.recent_attempts(20).await?;
    let (pac_summary, pac_class) = pac_health(&recent, now);
    let errors = db
        .recent_errors(10)
        .await?
        .into_iter()
        .map(|r| {
            let (label, class) = state_label(&r.state);
            ErrorView {
                payment_row: r.payment_row,
                payment_id: r.payment_id,
                state: label,
                class,
                code: r.last_error_code.unwrap_or_default(),
                message: r.last_error_message.unwrap_or_default(),
                when: local(r.updated_at),
            }
        })
        .collect();
    html(&DashboardPage {
        l: Layout::new(&session, "Dashboard", "dashboard", q.notice.as_deref()),
        counts,
        total,
        oldest_pending,
        cancellations,
        duplicates: count_of("duplicate"),
        orphans: count_of("orphan"),
        workers,
        pac_summary,
        pac_class,
        attempts: recent.iter().take(8).map(AttemptView::of).collect(),
        errors,
    })
}

/// A one-line verdict on the PAC from its latest calls.
fn pac_health(recent: &[AttemptRow], now: DateTime<Utc>) -> (String, &'static str) {
    let Some(last) = recent.first() else {
        return ("No PAC calls recorded yet.".into(), "muted");
    };
    let bad = recent
        .iter()
        .filter(|a| matches!(a.outcome.as_str(), "unknown" | "retryable" | "unresolved"))
        .count();
    let last_ok = recent.iter().find(|a| {
        matches!(
            a.outcome.as_str(),
            "stamped" | "already_stamped" | "found" | "not_found" | "requested" | "rejected"
        )
    });
    let answered = last_ok.map_or("no answer in the latest calls".to_owned(), |a| {
        format!("last answer {} ago", age(a.at, now))
    });
    let class = if bad == 0 {
        "ok"
    } else if bad * 2 < recent.len() {
        "warn"
    } else {
        "bad"
    };
    (
        format!(
            "{answered}; {bad} of the last {} calls timed out or failed in transit; last call {} ago ({}).",
            recent.len(),
            age(last.at, now),
            last.outcome
        ),
        class,
    )
}
