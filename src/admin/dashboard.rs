//! The dashboard: what is at risk first, counts by state (each linking to exactly its rows),
//! the closest SAT window, workers, the PAC's recent health, the latest errors.

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::format::{Clock, Deadline, Said, When};
use super::{Admin, age, state_label};
use crate::domain::DocumentState;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{AttemptRow, ListFilter, ListView};

pub struct CountView {
    pub state: &'static str,
    pub label: String,
    pub class: &'static str,
    pub count: i64,
    /// The list of exactly the rows counted.
    pub href: String,
}

pub struct WorkerView {
    pub id: String,
    pub host: String,
    pub pid: i64,
    pub load: String,
    pub seen: When,
    pub alive: bool,
}

pub struct AttemptView {
    pub at: When,
    pub operation: String,
    pub pac: String,
    pub outcome: String,
    pub class: &'static str,
    pub http_status: String,
    pub said: Said,
    pub latency_ms: i64,
    pub uuid: String,
    pub worker: String,
    pub outbox_id: Option<i64>,
}

impl AttemptView {
    pub(super) fn of(a: &AttemptRow, now: DateTime<Utc>) -> Self {
        let class = match a.outcome.as_str() {
            "stamped" | "already_stamped" | "found" | "requested" | "canceled" => "ok",
            "rejected" | "unresolved" => "bad",
            "unknown" | "retryable" => "warn",
            _ => "muted",
        };
        // SAT's status service is SAT's; every other call is the PAC's.
        let said = Said::of(a.code.as_deref(), a.message.as_deref(), a.pac != "sat");
        AttemptView {
            at: When::of(a.at, now),
            operation: a.operation.clone(),
            pac: a.pac.clone(),
            outcome: a.outcome.clone(),
            class,
            http_status: a.http_status.map(|s| s.to_string()).unwrap_or_default(),
            said,
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
    pub said: Said,
    pub when: When,
}

/// Failures that share a code, with what it means and the one action for all of them.
pub struct GroupView {
    pub code: String,
    pub count: i64,
    pub source: &'static str,
    pub title: &'static str,
    pub hint: &'static str,
    /// "retry", "refreeze" or "" (nothing to press).
    pub fix: &'static str,
    /// The failed documents of this code.
    pub href: String,
}

impl GroupView {
    fn of(code: String, count: i64) -> GroupView {
        use super::codes::{self, Fix};
        let known = codes::lookup(&code);
        let said = Said::of(Some(&code), None, true);
        GroupView {
            href: if code.is_empty() {
                "/admin/invoices?state=failed".into()
            } else {
                format!("/admin/invoices?state=failed&q={}", percent_encode(&code))
            },
            source: said.source,
            title: known.map_or("", |k| k.title),
            hint: known.map_or("", |k| k.hint),
            fix: match codes::fix(&code) {
                Fix::Retry => "retry",
                Fix::Refreeze => "refreeze",
                Fix::Global => "global",
                Fix::None => "",
            },
            code,
            count,
        }
    }
}

/// The document whose SAT window closes first.
pub struct ClosestView {
    pub payment_row: i64,
    pub payment_id: String,
    pub deadline: Deadline,
}

#[derive(Template)]
#[template(path = "admin/dashboard.html")]
pub struct DashboardPage {
    pub l: Layout,
    pub at_risk: i64,
    pub at_risk_hours: i64,
    pub counts: Vec<CountView>,
    pub total: i64,
    pub closest: Option<ClosestView>,
    pub cancellations: Vec<(String, i64)>,
    pub duplicates: i64,
    pub orphans: i64,
    pub workers: Vec<WorkerView>,
    pub pac_summary: String,
    pub pac_class: &'static str,
    pub attempts: Vec<AttemptView>,
    pub errors: Vec<ErrorView>,
    pub groups: Vec<GroupView>,
    /// Payments that need attention (each has its fix form).
    pub attention: i64,
    pub pac_name: String,
    /// Its environment and which payments it stamps (the others are held).
    pub pac_environment: String,
    pub paused: Option<super::operate::PauseView>,
    pub backup: Option<super::operate::BackupView>,
    pub chart: super::operate::Chart,
    pub deadlines: super::deadlines::Deadlines,
}

/// The PAC's health is judged on the calls of this last stretch, so that it turns green again
/// once the PAC recovers.
pub const HEALTH_WINDOW_MINUTES: i64 = 15;

pub async fn dashboard(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let db = &state.db;
    let clock = Clock::of(&admin);
    let now = clock.now;
    let counts: Vec<CountView> = db
        .state_counts()
        .await?
        .into_iter()
        .map(|(s, n)| {
            let (label, class) = state_label(s);
            CountView {
                // Their vouchers, numbers and CAEs are on the ARCA page.
                href: if s.is_arca() {
                    "/admin/arca".to_owned()
                } else {
                    format!("/admin/invoices?state={}", s.as_str())
                },
                state: s.as_str(),
                label,
                class,
                count: n,
            }
        })
        .collect();
    let total = counts.iter().map(|c| c.count).sum();
    let mut risk = ListFilter::of(ListView::AtRisk);
    risk.risk = ListFilter::risk_bounds(now, clock.window, clock.at_risk);
    let at_risk = db
        .list_counts(&risk)
        .await?
        .iter()
        .find(|(v, _)| *v == ListView::AtRisk)
        .map_or(0, |(_, n)| *n);
    let closest = db
        .closest_deadline(crate::domain::time::to_local(now - clock.window))
        .await?
        .map(|(fecha, payment_row, payment_id)| ClosestView {
            payment_row,
            payment_id,
            deadline: clock.deadline(Some(DocumentState::Pending), Some(fecha)),
        });
    // By label: a cancellation that needs no acceptance and one that does read the same once
    // cancelled, and differently while waiting.
    let mut cancellations: Vec<(String, i64)> = Vec::new();
    for (s, acceptance, n) in db.cancellation_counts().await? {
        let label = s.label(acceptance);
        match cancellations.iter_mut().find(|(l, _)| l == label) {
            Some((_, m)) => *m += n,
            None => cancellations.push((label.to_owned(), n)),
        }
    }
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
            seen: When::of(w.last_seen, now),
        })
        .collect();
    let recent = db
        .attempts_since(now - Duration::minutes(HEALTH_WINDOW_MINUTES), 500)
        .await?;
    let (pac_summary, pac_class) = pac_health(&recent, now);
    let latest = db.recent_attempts(8).await?;
    let errors = db
        .recent_errors(10)
        .await?
        .into_iter()
        .map(|r| {
            let (label, class) = state_label(r.state);
            ErrorView {
                said: Said::of(
                    r.last_error_code.as_deref(),
                    r.last_error_message.as_deref(),
                    true,
                ),
                payment_row: r.payment_row,
                payment_id: r.payment_id,
                state: label,
                class,
                when: When::of(r.updated_at, now),
            }
        })
        .collect();
    let groups = db
        .failure_groups()
        .await?
        .into_iter()
        .map(|(code, n)| GroupView::of(code, n))
        .collect();
    let attention = counts
        .iter()
        .filter(|c| c.state == "needs_attention")
        .map(|c| c.count)
        .sum();
    let paused = super::operate::pause_of(db, &admin.pac_name).await?;
    let backup = super::operate::backup_of(db, &admin).await?;
    let chart = super::operate::chart(db, now).await?;
    let deadlines = super::deadlines::deadlines(db, &state.settings, &clock).await?;
    html(&DashboardPage {
        deadlines,
        pac_name: admin.pac_name.clone(),
        pac_environment: state.settings.pac_environment_label(),
        paused,
        backup,
        chart,
        groups,
        attention,
        l: Layout::new(&session, "Dashboard", "dashboard", q.notice.as_deref()),
        at_risk,
        at_risk_hours: clock.at_risk.num_hours(),
        counts,
        total,
        closest,
        cancellations,
        duplicates: count_of("duplicate"),
        orphans: count_of("orphan"),
        workers,
        pac_summary,
        pac_class,
        attempts: latest.iter().map(|a| AttemptView::of(a, now)).collect(),
        errors,
    })
}

/// A one-line verdict on the PAC from its calls of the last [`HEALTH_WINDOW_MINUTES`].
fn pac_health(recent: &[AttemptRow], now: DateTime<Utc>) -> (String, &'static str) {
    let Some(last) = recent.first() else {
        return (
            format!("No PAC calls in the last {HEALTH_WINDOW_MINUTES} min."),
            "muted",
        );
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
    let answered = last_ok.map_or("no answer".to_owned(), |a| {
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
            "Last {HEALTH_WINDOW_MINUTES} min: {} call(s), {bad} timed out or failed in transit; {answered}; last call {} ago ({}).",
            recent.len(),
            age(last.at, now),
            last.outcome
        ),
        class,
    )
}

// ---------------------------------------------------------------------------------------------
// Group actions

#[derive(Debug, Deserialize)]
pub struct GroupForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub code: String,
}

impl HasCsrf for GroupForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// "Retry all" of a group: every failed document with the code goes back to the queue with
/// its same bytes (each audited as a retry); only for codes whose documents may pass as they
/// are.
pub async fn retry_group(
    state: web::Data<AppState>,
    Posted(session, form): Posted<GroupForm>,
) -> Result<HttpResponse, AdminError> {
    if super::codes::fix(&form.code) != super::codes::Fix::Retry {
        return Err(AdminError::Refused(format!(
            "documents failed with `{}` need their data fixed, not the same bytes again: refreeze them one by one",
            form.code
        )));
    }
    let ids = state.db.failed_with_code(&form.code).await?;
    let mut done = 0;
    for id in &ids {
        if state
            .db
            .retry_document(*id, &session.actor)
            .await?
            .is_some()
        {
            done += 1;
        }
    }
    tracing::info!(code = %form.code, done, actor = %session.actor, "admin: group retried");
    Ok(see_other("/admin?notice=group_retried".into()))
}
