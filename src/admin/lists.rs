//! The lists: invoices by view (with search, dates and pages), cancellations, the audit log.

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::{age, local, state_label};
use crate::cfdi::{InvoiceRequest, ReceptorData};
use crate::domain::cancellation;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{CancellationRow, DocRow, ListFilter, ListView};

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

/// Serie-folio; `—` for a folio not assigned yet (a comprobante is numbered when a worker
/// seals it).
pub(super) fn serie_folio(serie: Option<&str>, folio: Option<&str>) -> String {
    let folio = folio.unwrap_or("—");
    match serie {
        Some(s) if !s.is_empty() => format!("{s}-{folio}"),
        _ => folio.to_owned(),
    }
}

impl RowView {
    pub(super) fn of(r: DocRow, now: DateTime<Utc>) -> Self {
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
    crate::domain::time::from_local(d.and_hms_opt(0, 0, 0).unwrap_or_default())
        .unwrap_or_else(|| d.and_hms_opt(6, 0, 0).unwrap_or_default().and_utc())
}

fn query_link(view: &str, q: &str, from: &str, to: &str, page: i64) -> String {
    let enc = percent_encode;
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
    pub(super) fn of(c: CancellationRow, payment_row: Option<i64>) -> Self {
        let (label, class) = state_label(c.state.as_str());
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
