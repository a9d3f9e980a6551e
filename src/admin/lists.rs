//! The lists: invoices by view (with search, dates, counts and pages), cancellations, the
//! audit log.

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::format::{Clock, Deadline, Said, When, money, serie_folio};
use super::{Admin, cancel_label, state_label, text_label};
use crate::cfdi::{InvoiceRequest, ReceptorData};
use crate::domain::{CancellationState, DocumentState, cancellation};
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{CancellationRow, DocRow, ListFilter, ListSort, ListView};

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    pub view: Option<String>,
    /// One exact state (a dashboard tile's link).
    pub state: Option<String>,
    pub q: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub page: Option<String>,
    /// `paid_desc`, `paid_asc`, `deadline` or `updated`; missing = the view's own.
    pub sort: Option<String>,
    pub notice: Option<String>,
}

pub struct RowView {
    pub payment_row: i64,
    pub outbox_id: Option<i64>,
    pub provider: String,
    pub payment_id: String,
    pub amount: String,
    pub paid_at: When,
    pub test: bool,
    pub state: &'static str,
    pub label: String,
    pub class: &'static str,
    pub serie_folio: String,
    pub rfc: String,
    pub uuid: String,
    pub attempts: i32,
    pub said: Said,
    pub next_run: String,
    pub deadline: Deadline,
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

/// When a document still waiting is tried next: "in 4 min", "due now"; nothing for one that
/// waits for nobody (a past `run_at` on a final row is not a plan).
pub fn next_run(
    state: Option<DocumentState>,
    run_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> String {
    let waiting = state.is_some_and(DocumentState::claimable);
    match run_at {
        Some(t) if waiting && t > now => format!("next try in {}", super::age(now, t)),
        Some(_) if waiting => "due now".to_owned(),
        _ => String::new(),
    }
}

impl RowView {
    pub(super) fn of(r: DocRow, clock: &Clock) -> Self {
        let (label, class) = state_label(r.state);
        let doc_state = r.state.document();
        // A payment that never became a document keeps its sale's window, from when it was paid.
        let fecha = r.fecha.or_else(|| {
            r.state
                .needs_attention()
                .then(|| crate::domain::time::to_local(r.paid_at))
        });
        RowView {
            rfc: receptor_rfc(r.request_json.as_deref()),
            serie_folio: if r.outbox_id.is_some() {
                serie_folio(r.serie.as_deref(), r.folio.as_deref())
            } else {
                String::new()
            },
            next_run: next_run(doc_state, r.run_at, clock.now),
            deadline: clock.deadline(doc_state, fecha),
            retryable: matches!(
                doc_state,
                Some(DocumentState::Failed | DocumentState::Unknown)
            ) && r.outbox_id.is_some(),
            said: Said::of(
                r.last_error_code.as_deref(),
                r.last_error_message.as_deref(),
                r.outbox_id.is_some()
                    && !r.state.needs_attention()
                    && !doc_state.is_some_and(DocumentState::is_arca),
            ),
            payment_row: r.payment_row,
            outbox_id: r.outbox_id,
            provider: r.provider,
            payment_id: r.payment_id,
            amount: money(&r.amount, &r.currency),
            paid_at: clock.when(r.paid_at),
            test: !r.livemode,
            state: r.state.as_str(),
            label,
            class,
            uuid: r.uuid.unwrap_or_default(),
            attempts: r.attempts,
            flag: r.flag.unwrap_or_default(),
        }
    }
}

/// A tab of the invoices page: a [`ListView`] (or a page of its own), its key in the URL and
/// its label. Tabs that are one state use that state's label.
pub struct Tab {
    pub key: &'static str,
    pub label: &'static str,
    pub view: Option<ListView>,
}

const fn tab(key: &'static str, label: &'static str, view: ListView) -> Tab {
    Tab {
        key,
        label,
        view: Some(view),
    }
}

pub const TABS: &[Tab] = &[
    tab("pending", "In progress", ListView::Pending),
    tab("at_risk", "At risk", ListView::AtRisk),
    tab("failed", "Failed or needs attention", ListView::Failed),
    tab("unresolved", "Unresolved", ListView::Unresolved),
    tab("expired", DocumentState::Expired.label(), ListView::Expired),
    tab("stamped", DocumentState::Stamped.label(), ListView::Stamped),
    tab(
        "global",
        "Awaiting factura global",
        ListView::AwaitingGlobal,
    ),
    tab("flagged", "Flagged", ListView::Flagged),
    tab("all", "All", ListView::All),
    Tab {
        key: "duplicates",
        label: "Duplicates",
        view: None,
    },
    Tab {
        key: "cancellations",
        label: "Cancellations",
        view: None,
    },
];

/// What the "In progress" tab holds, in the states' own words.
pub fn pending_states() -> String {
    use DocumentState as S;
    [S::Pending, S::Stamping, S::RetryScheduled, S::Unknown]
        .map(S::label)
        .join(", ")
}

/// The counts of the tabs that open a page of their own, as those pages list by default: the
/// open duplicate findings, the cancellations still in process.
async fn other_counts(db: &crate::store::Db) -> Result<[(&'static str, i64); 2], AdminError> {
    let duplicates = db
        .open_finding_counts()
        .await?
        .into_iter()
        .filter(|(kind, _)| kind == "duplicate")
        .map(|(_, n)| n)
        .sum();
    let cancellations = db
        .cancellation_counts()
        .await?
        .into_iter()
        .filter(|(state, _, _)| CancellationState::IN_PROCESS.contains(state))
        .map(|(_, _, n)| n)
        .sum();
    Ok([("duplicates", duplicates), ("cancellations", cancellations)])
}

/// A tab as shown: its link (keeping the search and dates) and its count.
pub struct TabView {
    pub key: &'static str,
    pub label: &'static str,
    pub href: String,
    pub count: Option<i64>,
}

#[derive(Template)]
#[template(path = "admin/invoices.html")]
pub struct InvoicesPage {
    pub l: Layout,
    pub tabs: Vec<TabView>,
    pub view: String,
    pub state: String,
    pub state_label: String,
    pub q: String,
    pub from: String,
    pub to: String,
    pub sort: &'static str,
    pub rows: Vec<RowView>,
    pub total: i64,
    pub page: i64,
    pub pages: i64,
    pub past_end: Option<i64>,
    pub prev_link: Option<String>,
    pub next_link: Option<String>,
    pub csv_link: String,
    pub paid_sort_link: Option<String>,
    pub bulk: bool,
    pub back: String,
    pub hint: String,
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
    crate::domain::time::from_local(d.and_hms_opt(0, 0, 0).unwrap_or_default())
        .unwrap_or_else(|| d.and_hms_opt(6, 0, 0).unwrap_or_default().and_utc())
}

fn sort_key(s: ListSort) -> &'static str {
    match s {
        ListSort::Updated => "updated",
        ListSort::Deadline => "deadline",
        ListSort::PaidDesc => "paid_desc",
        ListSort::PaidAsc => "paid_asc",
    }
}

/// A list as asked for: what it shows, in its URL's words.
pub struct Asked {
    pub view_key: String,
    pub filter: ListFilter,
    pub q: String,
    pub from: String,
    pub to: String,
    pub state: String,
    pub sort: Option<String>,
    pub page: i64,
}

impl Asked {
    /// The list `q` asks for. A search without a view looks across every state.
    pub fn of(q: &ListQuery, clock: &Clock) -> Result<Result<Asked, HttpResponse>, AdminError> {
        let search = q.q.clone().unwrap_or_default().trim().to_owned();
        let state = q.state.clone().unwrap_or_default().trim().to_owned();
        let default = if search.is_empty() && state.is_empty() {
            "pending"
        } else {
            "all"
        };
        let view_key = q
            .view
            .as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or(default)
            .to_owned();
        let view = match TABS.iter().find(|t| t.key == view_key) {
            Some(Tab { view: Some(v), .. }) => *v,
            Some(Tab {
                key: "duplicates", ..
            }) => {
                return Ok(Err(see_other("/admin/reconcile?kind=duplicate".into())));
            }
            Some(_) => return Ok(Err(see_other("/admin/cancellations".into()))),
            None => return Err(AdminError::NotFound(format!("no list `{view_key}`"))),
        };
        let from_s = q.from.clone().unwrap_or_default();
        let to_s = q.to.clone().unwrap_or_default();
        let (earliest, latest) = ListFilter::open_range();
        let sort = match q.sort.as_deref().unwrap_or_default() {
            "paid_desc" => Some(ListSort::PaidDesc),
            "paid_asc" => Some(ListSort::PaidAsc),
            "deadline" => Some(ListSort::Deadline),
            "updated" => Some(ListSort::Updated),
            _ => None,
        };
        // A tile's state that still has a window sorts by deadline, as the lists of waiting
        // documents do.
        let by_state = state
            .parse::<DocumentState>()
            .ok()
            .filter(|s| {
                s.claimable() || *s == DocumentState::Stamping || *s == DocumentState::Failed
            })
            .map(|_| ListSort::Deadline);
        let page = page_number(q.page.as_deref());
        let filter = ListFilter {
            view,
            state: state.clone(),
            query: search.clone(),
            from: parse_day(Some(&from_s))?.map_or(earliest, day_start),
            until: parse_day(Some(&to_s))?
                .and_then(|d| d.succ_opt())
                .map_or(latest, day_start),
            risk: ListFilter::risk_bounds(clock.now, clock.window, clock.at_risk),
            sort: sort.or(by_state).unwrap_or(view.default_sort()),
            limit: PAGE_SIZE,
            offset: (page - 1) * PAGE_SIZE,
        };
        Ok(Ok(Asked {
            view_key,
            filter,
            q: search,
            from: from_s,
            to: to_s,
            state,
            sort: sort.map(|s| sort_key(s).to_owned()),
            page,
        }))
    }

    /// This list's URL on `path`, for another view (`None`: the same), page and order.
    pub fn link(&self, path: &str, view: Option<&str>, page: i64, sort: Option<&str>) -> String {
        let enc = percent_encode;
        let view = view.unwrap_or(&self.view_key);
        // Another tab drops the tile's state: the tab says what it shows.
        let state = if view == self.view_key {
            self.state.as_str()
        } else {
            ""
        };
        let mut url = format!("{path}?view={}", enc(view));
        for (k, v) in [
            ("state", state),
            ("q", &self.q),
            ("from", &self.from),
            ("to", &self.to),
            ("sort", sort.or(self.sort.as_deref()).unwrap_or_default()),
        ] {
            if !v.is_empty() {
                url.push_str(&format!("&{k}={}", enc(v)));
            }
        }
        if page > 1 {
            url.push_str(&format!("&page={page}"));
        }
        url
    }
}

pub async fn invoices(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, AdminError> {
    let clock = Clock::of(&admin);
    let mut asked = match Asked::of(&q, &clock)? {
        Ok(a) => a,
        Err(redirect) => return Ok(redirect),
    };
    let pages_of = |total: i64| ((total + PAGE_SIZE - 1) / PAGE_SIZE).max(1);
    let (mut rows, mut total) = state.db.list_documents(&asked.filter).await?;
    let mut past_end = None;
    if asked.page > pages_of(total) {
        // Past the end (an old link, a typed number): show the last page, and say so.
        past_end = Some(asked.page);
        asked.page = pages_of(total);
        asked.filter.offset = (asked.page - 1) * PAGE_SIZE;
        (rows, total) = state.db.list_documents(&asked.filter).await?;
    }
    let counts = state.db.list_counts(&asked.filter).await?;
    let pages_of_their_own = other_counts(&state.db).await?;
    let page = asked.page;
    let pages = pages_of(total);
    let rows: Vec<RowView> = rows.into_iter().map(|r| RowView::of(r, &clock)).collect();
    let tabs = TABS
        .iter()
        .map(|t| TabView {
            key: t.key,
            label: t.label,
            href: asked.link("/admin/invoices", Some(t.key), 1, None),
            count: match t.view {
                Some(v) => counts.iter().find(|(c, _)| *c == v).map(|(_, n)| *n),
                None => pages_of_their_own
                    .iter()
                    .find(|(k, _)| *k == t.key)
                    .map(|(_, n)| *n),
            },
        })
        .collect();
    let tab_label = TABS
        .iter()
        .find(|t| t.key == asked.view_key)
        .map_or("Invoices", |t| t.label);
    let state_label = if asked.state.is_empty() {
        String::new()
    } else {
        text_label(&asked.state).0
    };
    let title = if state_label.is_empty() {
        tab_label.to_owned()
    } else {
        state_label.clone()
    };
    let hint = match asked.filter.view {
        ListView::Pending => format!(
            "{}; the window that closes first comes first.",
            pending_states()
        ),
        ListView::AtRisk => format!(
            "Not stamped yet, and SAT's 72-hour window closes within {} h: act on these first.",
            clock.at_risk.num_hours()
        ),
        _ => String::new(),
    };
    let paid_sort_link = (asked.filter.view == ListView::All).then(|| {
        let next = if asked.filter.sort == ListSort::PaidDesc {
            "paid_asc"
        } else {
            "paid_desc"
        };
        asked.link("/admin/invoices", None, 1, Some(next))
    });
    let mut l = Layout::new(&session, title, "invoices", q.notice.as_deref());
    l.q = asked.q.clone();
    html(&InvoicesPage {
        l,
        tabs,
        bulk: rows.iter().any(|r| r.retryable),
        prev_link: (page > 1).then(|| asked.link("/admin/invoices", None, page - 1, None)),
        next_link: (page < pages).then(|| asked.link("/admin/invoices", None, page + 1, None)),
        csv_link: asked.link("/admin/invoices.csv", None, 1, None),
        back: asked.link("/admin/invoices", None, page, None),
        paid_sort_link,
        sort: sort_key(asked.filter.sort),
        view: asked.view_key,
        state: asked.state,
        state_label,
        q: asked.q,
        from: asked.from,
        to: asked.to,
        rows,
        total,
        page,
        pages,
        past_end,
        hint,
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
    pub said: Said,
    pub requested_by: String,
    pub requested_at: When,
    pub updated_at: When,
    pub has_acuse: bool,
    pub acuse: String,
    pub attempts: i32,
}

impl CancelView {
    pub(super) fn of(c: CancellationRow, payment_row: Option<i64>) -> Self {
        let (label, class) = cancel_label(c.state, c.requires_acceptance);
        let now = Utc::now();
        CancelView {
            id: c.id,
            outbox_id: c.outbox_id,
            payment_row,
            uuid: c.uuid,
            motivo: c.motivo,
            folio_sustitucion: c.folio_sustitucion.unwrap_or_default(),
            state: c.state.to_string(),
            label,
            class,
            requires_acceptance: c.requires_acceptance,
            estatus: c.estatus_cancelacion.unwrap_or_default(),
            sat_estado: c.sat_estado.unwrap_or_default(),
            said: Said::of(
                c.last_error_code.as_deref(),
                c.last_error_message.as_deref(),
                true,
            ),
            requested_by: c.requested_by,
            requested_at: When::of(c.created_at, now),
            updated_at: When::of(c.updated_at, now),
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
    /// A page asked for past the last one.
    pub past_end: bool,
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
        past_end: views.is_empty() && page > 1,
        rows: views,
        page,
        more,
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
