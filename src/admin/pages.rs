//! The pages: dashboard, lists, the detail page, the cancel and refreeze forms, reconciliation
//! findings, the audit log, and the XML views and downloads.

use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::Deserialize;

use super::auth::{self, Session};
use super::{Admin, age, local, state_label};
use crate::cfdi::{InvoiceRequest, ReceptorData};
use crate::domain::cancellation::{self, CancelFacts};
use crate::error::AdminError;
use crate::startup::AppState;
use crate::store::{
    ActionRow, AttemptRow, CancellationRow, DocFull, DocRow, FindingRow, ListFilter, ListView,
};

/// Rows per list page.
pub const PAGE_SIZE: i64 = 50;

/// The last list page one can ask for: far past any real list, and `(page - 1) × PAGE_SIZE`
/// stays far within an `i64` and what SQLite and PostgreSQL take as an OFFSET.
pub const MAX_PAGE: i64 = 1_000_000;

/// `?page=` as typed (kept as text so that no value is a 400): missing, zero, negative or not a
/// number is the first page; beyond [`MAX_PAGE`] (even beyond an `i64`) is [`MAX_PAGE`].
pub fn page_number(raw: Option<&str>) -> i64 {
    match raw.map(|r| r.trim().parse::<i64>()) {
        Some(Ok(n)) => n.clamp(1, MAX_PAGE),
        Some(Err(e)) if *e.kind() == std::num::IntErrorKind::PosOverflow => MAX_PAGE,
        _ => 1,
    }
}

/// What every page's frame needs.
pub struct Layout {
    pub title: String,
    pub actor: String,
    pub csrf: String,
    pub nav: &'static str,
    pub notice: Option<String>,
}

impl Layout {
    fn new(s: &Session, title: impl Into<String>, nav: &'static str, notice: Option<&str>) -> Self {
        Layout {
            title: title.into(),
            actor: s.actor.clone(),
            csrf: s.csrf.clone(),
            nav,
            notice: notice.and_then(notice_text).map(str::to_owned),
        }
    }
}

/// The fixed messages a redirect may ask for (`?notice=…`): never text from the URL.
fn notice_text(key: &str) -> Option<&'static str> {
    Some(match key {
        "retried" => {
            "Sent back to the queue with the same frozen bytes and key; a worker will stamp it."
        }
        "asked" => {
            "Its outcome at the PAC is unknown: a worker asks the PAC now, by the same key, and sends nothing before it answers."
        }
        "bulk_retried" => {
            "The selected documents were sent back to the queue (those whose outcome is unknown are asked for first)."
        }
        "cancel_requested" => {
            "Cancellation request frozen; a worker sends it to the PAC and follows its status."
        }
        "refrozen" => {
            "A new generation was frozen with today's Fecha; a worker will seal and stamp it."
        }
        "adopted" => {
            "The PAC already held a stamp for this document: it was adopted into the record and flagged."
        }
        "reconciled" => "Reconciliation finished; see the findings below.",
        "resolved" => "Finding closed.",
        "sat_status" => "SAT status queried; the answer is recorded below.",
        "logged_out" => "Signed out.",
        _ => return None,
    })
}

/// An HTML page, never cached, never framed.
pub fn html<T: Template>(t: &T) -> Result<HttpResponse, AdminError> {
    let body = t.render()?;
    let mut r = HttpResponse::Ok();
    r.content_type("text/html; charset=utf-8");
    for h in crate::error::SECURITY_HEADERS {
        r.insert_header(h);
    }
    Ok(r.body(body))
}

#[derive(Debug, Deserialize)]
pub struct NoticeQuery {
    pub notice: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Login

#[derive(Template)]
#[template(path = "admin/login.html")]
pub struct LoginPage {
    pub csrf: String,
    pub error: Option<String>,
    pub notice: Option<String>,
}

pub async fn login_page(
    req: HttpRequest,
    admin: web::Data<Admin>,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    login_response(
        &req,
        &admin,
        None,
        q.notice.as_deref(),
        actix_web::http::StatusCode::OK,
    )
}

/// The login form with a fresh double-submit CSRF cookie.
pub fn login_response(
    req: &HttpRequest,
    admin: &Admin,
    error: Option<String>,
    notice: Option<&str>,
    status: actix_web::http::StatusCode,
) -> Result<HttpResponse, AdminError> {
    let csrf = auth::random_token();
    let page = LoginPage {
        csrf: csrf.clone(),
        error,
        notice: notice.and_then(notice_text).map(str::to_owned),
    };
    let mut resp = html(&page)?;
    *resp.status_mut() = status;
    resp.add_cookie(&auth::cookie(
        auth::LOGIN_CSRF_COOKIE,
        csrf,
        auth::secure(admin, req),
        Some(std::time::Duration::from_secs(3600)),
    ))
    .map_err(|e| AdminError::Invalid(e.to_string()))?;
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------
// Dashboard

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
    fn of(a: &AttemptRow) -> Self {
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

// ---------------------------------------------------------------------------------------------
// Lists

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    pub view: Option<String>,
    pub q: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub page: Option<String>,
    pub notice: Option<String>,
}

pub struct RowView {
    pub payment_row: i64,
    pub outbox_id: Option<i64>,
    pub provider: String,
    pub payment_id: String,
    pub amount: String,
    pub paid_at: String,
    pub test: bool,
    pub state: String,
    pub label: String,
    pub class: &'static str,
    pub serie_folio: String,
    pub rfc: String,
    pub uuid: String,
    pub attempts: i32,
    pub code: String,
    pub message: String,
    pub next_run: String,
    pub flag: String,
    pub retryable: bool,
}

/// The receptor's RFC in a frozen request.
pub fn receptor_rfc(request_json: Option<&str>) -> String {
    request_json
        .and_then(|j| serde_json::from_str::<InvoiceRequest>(j).ok())
        .map(|r| match r.receptor {
            ReceptorData::Nominativo { rfc, .. } => rfc.as_str().to_owned(),
            ReceptorData::PublicoEnGeneral => cancellation::RFC_PUBLICO_GENERAL.to_owned(),
        })
        .unwrap_or_default()
}

fn serie_folio(serie: Option<&str>, folio: Option<&str>) -> String {
    match (serie, folio) {
        (Some(s), Some(f)) if !s.is_empty() => format!("{s}-{f}"),
        (_, Some(f)) => f.to_owned(),
        _ => String::new(),
    }
}

impl RowView {
    fn of(r: DocRow, now: DateTime<Utc>) -> Self {
        let (label, class) = state_label(&r.state);
        RowView {
            rfc: receptor_rfc(r.request_json.as_deref()),
            serie_folio: serie_folio(r.serie.as_deref(), r.folio.as_deref()),
            next_run: match (r.state.as_str(), r.run_at) {
                ("retry_scheduled" | "pending" | "unknown", Some(t)) if t > now => {
                    format!("in {}", age(now, t))
                }
                _ => String::new(),
            },
            retryable: (r.state == "failed" || r.state == "unknown") && r.outbox_id.is_some(),
            payment_row: r.payment_row,
            outbox_id: r.outbox_id,
            provider: r.provider,
            payment_id: r.payment_id,
            amount: format!("{} {}", r.amount, r.currency),
            paid_at: local(r.paid_at),
            test: !r.livemode,
            state: r.state,
            label,
            class,
            uuid: r.uuid.unwrap_or_default(),
            attempts: r.attempts,
            code: r.last_error_code.unwrap_or_default(),
            message: r.last_error_message.unwrap_or_default(),
            flag: r.flag.unwrap_or_default(),
        }
    }
}

pub struct Tab {
    pub key: &'static str,
    pub label: &'static str,
}

pub const TABS: &[Tab] = &[
    Tab {
        key: "pending",
        label: "Pending",
    },
    Tab {
        key: "failed",
        label: "Failed",
    },
    Tab {
        key: "unresolved",
        label: "Unresolved",
    },
    Tab {
        key: "duplicates",
        label: "Duplicates",
    },
    Tab {
        key: "expired",
        label: "Expired",
    },
    Tab {
        key: "cancellations",
        label: "Cancellations",
    },
    Tab {
        key: "stamped",
        label: "Stamped",
    },
    Tab {
        key: "global",
        label: "Awaiting global",
    },
    Tab {
        key: "flagged",
        label: "Flagged",
    },
    Tab {
        key: "all",
        label: "All",
    },
];

#[derive(Template)]
#[template(path = "admin/invoices.html")]
pub struct InvoicesPage {
    pub l: Layout,
    pub tabs: &'static [Tab],
    pub view: String,
    pub q: String,
    pub from: String,
    pub to: String,
    pub rows: Vec<RowView>,
    pub total: i64,
    pub page: i64,
    pub pages: i64,
    pub prev_link: Option<String>,
    pub next_link: Option<String>,
    pub bulk: bool,
}

fn parse_day(s: Option<&str>) -> Result<Option<NaiveDate>, AdminError> {
    match s.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(d) => NaiveDate::parse_from_str(d, "%Y-%m-%d")
            .map(Some)
            .map_err(|_| AdminError::Invalid(format!("`{d}` is not a date (YYYY-MM-DD)"))),
    }
}

/// The start of a Mexico City day, in UTC.
fn day_start(d: NaiveDate) -> DateTime<Utc> {
    crate::pacsim::clock::from_local(d.and_hms_opt(0, 0, 0).unwrap_or_default())
        .unwrap_or_else(|| d.and_hms_opt(6, 0, 0).unwrap_or_default().and_utc())
}

fn query_link(view: &str, q: &str, from: &str, to: &str, page: i64) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    format!(
        "/admin/invoices?view={}&q={}&from={}&to={}&page={page}",
        enc(view),
        enc(q),
        enc(from),
        enc(to)
    )
}

pub async fn invoices(
    state: web::Data<AppState>,
    session: Session,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, AdminError> {
    let view_key = q.view.as_deref().unwrap_or("pending").to_owned();
    let view = match view_key.as_str() {
        "pending" => ListView::Pending,
        "failed" => ListView::Failed,
        "unresolved" => ListView::Unresolved,
        "expired" => ListView::Expired,
        "stamped" => ListView::Stamped,
        "global" => ListView::AwaitingGlobal,
        "flagged" => ListView::Flagged,
        "all" => ListView::All,
        "duplicates" => {
            return Ok(HttpResponse::SeeOther()
                .insert_header(("Location", "/admin/reconcile?kind=duplicate"))
                .finish());
        }
        "cancellations" => {
            return Ok(HttpResponse::SeeOther()
                .insert_header(("Location", "/admin/cancellations"))
                .finish());
        }
        other => return Err(AdminError::NotFound(format!("no list `{other}`"))),
    };
    let search = q.q.clone().unwrap_or_default();
    let from_s = q.from.clone().unwrap_or_default();
    let to_s = q.to.clone().unwrap_or_default();
    let (earliest, latest) = ListFilter::open_range();
    let from = parse_day(Some(&from_s))?.map_or(earliest, day_start);
    let until = parse_day(Some(&to_s))?
        .and_then(|d| d.succ_opt())
        .map_or(latest, day_start);
    let mut page = page_number(q.page.as_deref());
    let mut filter = ListFilter {
        view,
        query: search.clone(),
        from,
        until,
        limit: PAGE_SIZE,
        offset: (page - 1) * PAGE_SIZE,
    };
    let pages_of = |total: i64| ((total + PAGE_SIZE - 1) / PAGE_SIZE).max(1);
    let (mut rows, mut total) = state.db.list_documents(&filter).await?;
    if page > pages_of(total) {
        // Past the end (an old link, a typed number): show the last page instead.
        page = pages_of(total);
        filter.offset = (page - 1) * PAGE_SIZE;
        (rows, total) = state.db.list_documents(&filter).await?;
    }
    let pages = pages_of(total);
    let now = Utc::now();
    let rows: Vec<RowView> = rows.into_iter().map(|r| RowView::of(r, now)).collect();
    let title = TABS
        .iter()
        .find(|t| t.key == view_key)
        .map_or("Invoices", |t| t.label);
    html(&InvoicesPage {
        l: Layout::new(&session, title, "invoices", q.notice.as_deref()),
        tabs: TABS,
        bulk: rows.iter().any(|r| r.retryable),
        prev_link: (page > 1).then(|| query_link(&view_key, &search, &from_s, &to_s, page - 1)),
        next_link: (page < pages).then(|| query_link(&view_key, &search, &from_s, &to_s, page + 1)),
        view: view_key,
        q: search,
        from: from_s,
        to: to_s,
        rows,
        total,
        page,
        pages,
    })
}

// ---------------------------------------------------------------------------------------------
// Cancellations

pub struct CancelView {
    pub id: i64,
    pub outbox_id: Option<i64>,
    pub payment_row: Option<i64>,
    pub uuid: String,
    pub motivo: String,
    pub folio_sustitucion: String,
    pub state: String,
    pub label: String,
    pub class: &'static str,
    pub requires_acceptance: bool,
    pub estatus: String,
    pub sat_estado: String,
    pub error: String,
    pub requested_by: String,
    pub requested_at: String,
    pub updated_at: String,
    pub has_acuse: bool,
    pub acuse: String,
    pub attempts: i32,
}

impl CancelView {
    fn of(c: CancellationRow, payment_row: Option<i64>) -> Self {
        let (label, class) = state_label(&c.state);
        CancelView {
            id: c.id,
            outbox_id: c.outbox_id,
            payment_row,
            uuid: c.uuid,
            motivo: c.motivo,
            folio_sustitucion: c.folio_sustitucion.unwrap_or_default(),
            state: c.state,
            label,
            class,
            requires_acceptance: c.requires_acceptance,
            estatus: c.estatus_cancelacion.unwrap_or_default(),
            sat_estado: c.sat_estado.unwrap_or_default(),
            error: [c.last_error_code, c.last_error_message]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" "),
            requested_by: c.requested_by,
            requested_at: local(c.created_at),
            updated_at: local(c.updated_at),
            has_acuse: c.acuse_xml.is_some(),
            acuse: c.acuse_xml.unwrap_or_default(),
            attempts: c.attempts,
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct CancellationsQuery {
    pub all: Option<String>,
    pub page: Option<String>,
}

#[derive(Template)]
#[template(path = "admin/cancellations.html")]
pub struct CancellationsPage {
    pub l: Layout,
    pub all: bool,
    pub rows: Vec<CancelView>,
    pub page: i64,
    pub more: bool,
}

pub async fn cancellations(
    state: web::Data<AppState>,
    session: Session,
    q: web::Query<CancellationsQuery>,
) -> Result<HttpResponse, AdminError> {
    let all = q.all.is_some();
    let page = page_number(q.page.as_deref());
    let rows = state
        .db
        .list_cancellations(!all, PAGE_SIZE + 1, (page - 1) * PAGE_SIZE)
        .await?;
    let more = rows.len() as i64 > PAGE_SIZE;
    let mut views = Vec::new();
    for c in rows.into_iter().take(PAGE_SIZE as usize) {
        let payment_row = match c.outbox_id {
            Some(o) => state.db.document(o).await?.map(|d| d.payment_id),
            None => None,
        };
        views.push(CancelView::of(c, payment_row));
    }
    html(&CancellationsPage {
        l: Layout::new(&session, "Cancellations", "cancellations", None),
        all,
        rows: views,
        page,
        more,
    })
}

// ---------------------------------------------------------------------------------------------
// Detail

pub struct GenerationView {
    pub generation: i32,
    pub stamp_key: String,
    pub reason: String,
    pub actor: String,
    pub at: String,
    pub sealed: bool,
}

pub struct ActionView {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub detail: String,
}

impl ActionView {
    fn of(a: &ActionRow) -> Self {
        ActionView {
            at: local(a.at),
            actor: a.actor.clone(),
            action: a.action.clone(),
            detail: a.detail.clone().unwrap_or_default(),
        }
    }
}

pub struct DocView {
    pub id: i64,
    pub kind: String,
    pub state: String,
    pub label: String,
    pub class: &'static str,
    pub stamp_key: String,
    pub generation: i32,
    pub serie_folio: String,
    pub fecha: String,
    pub uuid: String,
    pub fecha_timbrado: String,
    pub attempts: i32,
    pub run_at: String,
    pub lease: String,
    pub code: String,
    pub message: String,
    pub flag: String,
    pub pac_route: String,
    pub test_mode: bool,
    pub request_pretty: String,
    pub sealed_xml: Option<String>,
    pub stamped_xml: Option<String>,
    pub attempts_log: Vec<AttemptView>,
    pub history: Vec<GenerationView>,
    pub cancellations: Vec<CancelView>,
    pub actions: Vec<ActionView>,
    pub can_retry: bool,
    pub can_cancel: bool,
    pub can_refreeze: bool,
    pub sat_status: Option<ActionView>,
}

#[derive(Template)]
#[template(path = "admin/payment.html")]
pub struct PaymentPage {
    pub l: Layout,
    pub id: i64,
    pub provider: String,
    pub payment_id: String,
    pub event_id: String,
    pub amount: String,
    pub method: String,
    pub forma_pago: String,
    pub paid_at: String,
    pub test: bool,
    pub status: String,
    pub reason: String,
    pub customer_pretty: String,
    pub docs: Vec<DocView>,
}

fn pretty_json(s: &str) -> String {
    serde_json::from_str::<serde_json::Value>(s)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| s.to_owned())
}

async fn doc_view(state: &AppState, d: DocFull) -> Result<DocView, AdminError> {
    let db = &state.db;
    let now = Utc::now();
    let attempts_log = db
        .attempts_of(d.id)
        .await?
        .iter()
        .map(AttemptView::of)
        .collect();
    let history = db
        .history_of(d.id)
        .await?
        .into_iter()
        .map(|h| GenerationView {
            generation: h.generation,
            stamp_key: h.stamp_key,
            reason: h.reason,
            actor: h.actor,
            at: local(h.at),
            sealed: h.sealed_xml.is_some(),
        })
        .collect();
    let cancels: Vec<CancellationRow> = db.cancellations_of(d.id).await?;
    let live_cancel = cancels.iter().any(|c| {
        c.uuid
            .eq_ignore_ascii_case(d.uuid.as_deref().unwrap_or_default())
            && !matches!(c.state.as_str(), "rejected" | "failed")
    });
    let actions: Vec<ActionRow> = db.actions_on("outbox", &d.id.to_string()).await?;
    let sat_status = actions
        .iter()
        .rev()
        .find(|a| a.action == "sat_status")
        .map(ActionView::of);
    let (label, class) = state_label(&d.state);
    Ok(DocView {
        can_retry: d.state == "failed" || d.state == "unknown",
        can_cancel: d.state == "stamped" && d.uuid.is_some() && !live_cancel,
        can_refreeze: matches!(d.state.as_str(), "failed" | "expired") && d.uuid.is_none(),
        id: d.id,
        kind: d.kind,
        label,
        class,
        stamp_key: d.stamp_key,
        generation: d.generation,
        serie_folio: serie_folio(d.serie.as_deref(), d.folio.as_deref()),
        fecha: d.fecha.format("%Y-%m-%dT%H:%M:%S").to_string(),
        uuid: d.uuid.unwrap_or_default(),
        fecha_timbrado: d.fecha_timbrado.unwrap_or_default(),
        attempts: d.attempts,
        run_at: if d.run_at > now {
            format!("{} (in {})", local(d.run_at), age(now, d.run_at))
        } else {
            local(d.run_at)
        },
        lease: match (d.lease_owner, d.lease_expires_at) {
            (Some(o), Some(t)) if t > now => format!("{o} until {}", local(t)),
            _ => String::new(),
        },
        code: d.last_error_code.unwrap_or_default(),
        message: d.last_error_message.unwrap_or_default(),
        flag: d.flag.unwrap_or_default(),
        pac_route: d.pac_route.unwrap_or_default(),
        test_mode: d.test_mode,
        request_pretty: pretty_json(&d.request_json),
        sealed_xml: d
            .sealed_xml
            .as_deref()
            .map(|x| String::from_utf8_lossy(x).into_owned()),
        stamped_xml: d
            .stamped_xml
            .as_deref()
            .map(|x| String::from_utf8_lossy(x).into_owned()),
        state: d.state,
        attempts_log,
        history,
        cancellations: cancels
            .into_iter()
            .map(|c| CancelView::of(c, Some(d.payment_id)))
            .collect(),
        actions: actions.iter().map(ActionView::of).collect(),
        sat_status,
    })
}

pub async fn payment(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let p = state
        .db
        .payment(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no payment #{id}")))?;
    let mut docs = Vec::new();
    for d in state.db.documents_of_payment(id).await? {
        docs.push(doc_view(&state, d).await?);
    }
    html(&PaymentPage {
        l: Layout::new(
            &session,
            format!("Payment {}", p.payment_id),
            "invoices",
            q.notice.as_deref(),
        ),
        id: p.id,
        provider: p.provider,
        payment_id: p.payment_id,
        event_id: p.event_id,
        amount: format!("{} {}", p.amount, p.currency),
        method: p.method,
        forma_pago: p.forma_pago.unwrap_or_default(),
        paid_at: local(p.paid_at),
        test: !p.livemode,
        status: p.status,
        reason: p.reason.unwrap_or_default(),
        customer_pretty: pretty_json(&p.customer_json),
        docs,
    })
}

#[derive(Debug, Deserialize)]
pub struct XmlQuery {
    pub download: Option<String>,
}

/// `sealed` (the frozen bytes) or `stamped`, shown as XML or downloaded as a file.
pub async fn xml(
    state: web::Data<AppState>,
    _session: Session,
    path: web::Path<(i64, String)>,
    q: web::Query<XmlQuery>,
) -> Result<HttpResponse, AdminError> {
    let (id, which) = path.into_inner();
    let d = state
        .db
        .document(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{id}")))?;
    let (bytes, name) = match which.as_str() {
        "sealed" => (d.sealed_xml, format!("{}-sealed.xml", d.stamp_key)),
        "stamped" => (
            d.stamped_xml,
            format!("{}.xml", d.uuid.as_deref().unwrap_or(&d.stamp_key)),
        ),
        other => return Err(AdminError::NotFound(format!("no XML `{other}`"))),
    };
    let bytes =
        bytes.ok_or_else(|| AdminError::NotFound(format!("document #{id} has no {which} XML")))?;
    xml_response(bytes, &name, q.download.is_some())
}

fn xml_response(bytes: Vec<u8>, name: &str, download: bool) -> Result<HttpResponse, AdminError> {
    let disposition = if download {
        format!("attachment; filename=\"{name}\"")
    } else {
        format!("inline; filename=\"{name}\"")
    };
    Ok(HttpResponse::Ok()
        // Shown as text so a browser never runs anything embedded in it.
        .content_type(if download {
            "application/xml"
        } else {
            "text/plain; charset=utf-8"
        })
        .insert_header(("Content-Disposition", disposition))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-store"))
        .body(bytes))
}

/// The acuse of a cancellation, as a download.
pub async fn acuse(
    state: web::Data<AppState>,
    _session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let c = state
        .db
        .cancellation(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no cancellation #{id}")))?;
    let acuse = c
        .acuse_xml
        .ok_or_else(|| AdminError::NotFound("no acuse stored yet".into()))?;
    xml_response(acuse.into_bytes(), &format!("acuse-{}.xml", c.uuid), true)
}

// ---------------------------------------------------------------------------------------------
// Cancel form

#[derive(Template)]
#[template(path = "admin/cancel.html")]
pub struct CancelPage {
    pub l: Layout,
    pub doc_id: i64,
    pub payment_row: i64,
    pub uuid: String,
    pub rfc_receptor: String,
    pub total: String,
    pub tipo: String,
    pub fecha_timbrado: String,
    pub exemptions: Vec<cancellation::Exemption>,
    pub requires_acceptance: bool,
    pub related_live: Vec<String>,
    pub existing: Option<String>,
    pub motivos: &'static [(&'static str, &'static str)],
    pub motivo: String,
    pub folio: String,
    pub error: Option<String>,
    pub global: bool,
    /// SAT's last recorded answer (`EsCancelable` among it), when someone asked.
    pub sat_status: Option<ActionView>,
}

/// The stamped document and its facts, or why it cannot be cancelled from here.
pub async fn stamped_doc(state: &AppState, id: i64) -> Result<(DocFull, CancelFacts), AdminError> {
    let d = state
        .db
        .document(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{id}")))?;
    let facts = match (&d.uuid, &d.stamped_xml) {
        (Some(_), Some(xml)) if d.state == "stamped" => CancelFacts::from_stamped(xml),
        _ => None,
    }
    .ok_or_else(|| {
        AdminError::Refused(format!(
            "document #{id} is {}: only a stamped document can be cancelled",
            d.state
        ))
    })?;
    Ok((d, facts))
}

pub async fn cancel_page(
    state: &AppState,
    session: &Session,
    id: i64,
    motivo: &str,
    folio: &str,
    error: Option<String>,
) -> Result<CancelPage, AdminError> {
    let (d, f) = stamped_doc(state, id).await?;
    let now = Utc::now();
    let exemptions = cancellation::exemptions(&f, now);
    let except = (motivo == "01" && !folio.trim().is_empty()).then(|| folio.trim().to_uppercase());
    let related_live = state
        .db
        .documents_relating_to(&f.uuid, except.as_deref())
        .await?;
    let existing = state
        .db
        .cancellation_by_uuid(&f.uuid)
        .await?
        .map(|c| state_label(&c.state).0);
    let sat_status = state
        .db
        .actions_on("outbox", &d.id.to_string())
        .await?
        .iter()
        .rev()
        .find(|a| a.action == "sat_status")
        .map(ActionView::of);
    Ok(CancelPage {
        sat_status,
        l: Layout::new(session, format!("Cancel {}", f.uuid), "invoices", None),
        doc_id: d.id,
        payment_row: d.payment_id,
        requires_acceptance: exemptions.is_empty(),
        exemptions,
        related_live,
        existing,
        motivos: cancellation::MOTIVOS,
        motivo: motivo.to_owned(),
        folio: folio.to_owned(),
        error,
        global: f.global,
        uuid: f.uuid,
        rfc_receptor: f.rfc_receptor,
        total: format!("{} {}", f.total, f.moneda),
        tipo: f.tipo,
        fecha_timbrado: f.fecha_timbrado,
    })
}

pub async fn cancel_form(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let page = cancel_page(&state, &session, id.into_inner(), "02", "", None).await?;
    html(&page)
}

// ---------------------------------------------------------------------------------------------
// Refreeze form

#[derive(Template)]
#[template(path = "admin/refreeze.html")]
pub struct RefreezePage {
    pub l: Layout,
    pub doc_id: i64,
    pub payment_row: i64,
    pub state: String,
    pub label: String,
    pub code: String,
    pub message: String,
    pub generation: i32,
    pub fecha: String,
    pub nominativo: bool,
    pub rfc: String,
    pub nombre: String,
    pub domicilio_fiscal: String,
    pub regimen_fiscal: String,
    pub uso_cfdi: String,
    pub error: Option<String>,
    pub sealed: bool,
}

/// The receptor fields the refreeze form can correct.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ReceptorForm {
    #[serde(default)]
    pub rfc: String,
    #[serde(default)]
    pub nombre: String,
    #[serde(default)]
    pub domicilio_fiscal: String,
    #[serde(default)]
    pub regimen_fiscal: String,
    #[serde(default)]
    pub uso_cfdi: String,
}

pub async fn refreeze_page(
    state: &AppState,
    session: &Session,
    id: i64,
    form: Option<&ReceptorForm>,
    error: Option<String>,
) -> Result<RefreezePage, AdminError> {
    let d = state
        .db
        .document(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{id}")))?;
    if !matches!(d.state.as_str(), "failed" | "expired") || d.uuid.is_some() {
        return Err(AdminError::Refused(format!(
            "document #{id} is {}: only expired or rejected documents are refrozen",
            d.state
        )));
    }
    let req: InvoiceRequest = serde_json::from_str(&d.request_json)
        .map_err(|e| AdminError::Refused(format!("the frozen request is unreadable: {e}")))?;
    let current = match &req.receptor {
        ReceptorData::Nominativo {
            rfc,
            nombre,
            domicilio_fiscal,
            regimen_fiscal,
            uso_cfdi,
        } => Some(ReceptorForm {
            rfc: rfc.as_str().to_owned(),
            nombre: nombre.clone(),
            domicilio_fiscal: domicilio_fiscal.clone(),
            regimen_fiscal: regimen_fiscal.clone(),
            uso_cfdi: uso_cfdi.clone(),
        }),
        ReceptorData::PublicoEnGeneral => None,
    };
    let shown = form.cloned().or(current.clone()).unwrap_or_default();
    let (label, _) = state_label(&d.state);
    Ok(RefreezePage {
        l: Layout::new(session, "Refreeze", "invoices", None),
        doc_id: d.id,
        payment_row: d.payment_id,
        state: d.state,
        label,
        code: d.last_error_code.unwrap_or_default(),
        message: d.last_error_message.unwrap_or_default(),
        generation: d.generation,
        fecha: d.fecha.format("%Y-%m-%dT%H:%M:%S").to_string(),
        nominativo: current.is_some(),
        rfc: shown.rfc,
        nombre: shown.nombre,
        domicilio_fiscal: shown.domicilio_fiscal,
        regimen_fiscal: shown.regimen_fiscal,
        uso_cfdi: shown.uso_cfdi,
        error,
        sealed: d.sealed_xml.is_some(),
    })
}

pub async fn refreeze_form(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    html(&refreeze_page(&state, &session, id.into_inner(), None, None).await?)
}

// ---------------------------------------------------------------------------------------------
// Reconciliation

pub struct FindingView {
    pub id: i64,
    pub kind: String,
    pub outbox_id: Option<i64>,
    pub payment_row: Option<i64>,
    pub uuid: String,
    pub kept_uuid: String,
    pub detail: String,
    pub open: bool,
    pub found_at: String,
    pub resolved_at: String,
    pub cancel_state: String,
    pub acceptance: String,
}

#[derive(Debug, Deserialize)]
pub struct FindingsQuery {
    pub kind: Option<String>,
    pub all: Option<String>,
    pub notice: Option<String>,
}

#[derive(Template)]
#[template(path = "admin/reconcile.html")]
pub struct ReconcilePage {
    pub l: Layout,
    pub kind: String,
    pub all: bool,
    pub findings: Vec<FindingView>,
    pub last_run: Option<ActionView>,
    pub periodic: String,
}

pub async fn reconcile(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    q: web::Query<FindingsQuery>,
) -> Result<HttpResponse, AdminError> {
    let kind = q.kind.clone().unwrap_or_default();
    let all = q.all.is_some();
    let rows: Vec<FindingRow> = state
        .db
        .findings(
            Some(kind.as_str()).filter(|k| !k.is_empty()),
            (!all).then_some("open"),
        )
        .await?;
    let now = Utc::now();
    let mut findings = Vec::new();
    for f in rows {
        let doc = match f.outbox_id {
            Some(o) => state.db.document(o).await?,
            None => None,
        };
        let cancel_state = state
            .db
            .cancellation_by_uuid(&f.uuid)
            .await?
            .map(|c| state_label(&c.state).0)
            .unwrap_or_default();
        let facts: Option<CancelFacts> =
            serde_json::from_str::<super::reconcile::FindingDetail>(&f.detail)
                .ok()
                .and_then(|d| d.facts);
        let acceptance = match &facts {
            Some(fa) => {
                let ex = cancellation::exemptions(fa, now);
                if ex.is_empty() {
                    "the receptor must accept".to_owned()
                } else {
                    format!(
                        "no acceptance needed (fr. {})",
                        ex.iter().map(|e| e.fraction).collect::<Vec<_>>().join(", ")
                    )
                }
            }
            None => String::new(),
        };
        let detail = serde_json::from_str::<super::reconcile::FindingDetail>(&f.detail)
            .map(|d| d.summary)
            .unwrap_or(f.detail.clone());
        findings.push(FindingView {
            id: f.id,
            kind: f.kind,
            outbox_id: f.outbox_id,
            payment_row: doc.as_ref().map(|d| d.payment_id),
            kept_uuid: doc.and_then(|d| d.uuid).unwrap_or_default(),
            uuid: f.uuid,
            detail,
            open: f.status == "open",
            found_at: local(f.found_at),
            resolved_at: f.resolved_at.map(local).unwrap_or_default(),
            cancel_state,
            acceptance,
        });
    }
    let last_run = state
        .db
        .actions_on("reconciliation", "run")
        .await?
        .last()
        .map(ActionView::of);
    let periodic = match admin.reconcile_interval {
        Some(d) => format!(
            "Runs by itself every {}.",
            age(now - Duration::seconds(d.as_secs() as i64), now)
        ),
        None => "Periodic runs are off ([admin] reconcile_interval_seconds = 0).".into(),
    };
    html(&ReconcilePage {
        l: Layout::new(&session, "Reconciliation", "reconcile", q.notice.as_deref()),
        kind,
        all,
        findings,
        last_run,
        periodic,
    })
}

// ---------------------------------------------------------------------------------------------
// Audit

#[derive(Template)]
#[template(path = "admin/audit.html")]
pub struct AuditPage {
    pub l: Layout,
    pub rows: Vec<(ActionView, String)>,
}

pub async fn audit(
    state: web::Data<AppState>,
    session: Session,
) -> Result<HttpResponse, AdminError> {
    let rows = state
        .db
        .recent_actions(200)
        .await?
        .iter()
        .map(|a| {
            (
                ActionView::of(a),
                format!("{} {}", a.target_kind, a.target_id),
            )
        })
        .collect();
    html(&AuditPage {
        l: Layout::new(&session, "Audit log", "audit", None),
        rows,
    })
}
