//! The facturas globales: the list (period, sales, total, state), one global with its sales, and
//! its replacement for a cancellation with motivo 01 ([`crate::global::replace`]). Retry,
//! cancel with another motivo, refreeze and the XML are the document's own page
//! (`/admin/payments/{id}`), as for any document.

use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::{local, state_label};
use crate::error::AdminError;
use crate::global::Planner;
use crate::state::AppState;
use crate::store::GlobalRow;

/// One global as a list row and the head of its page.
pub struct GlobalView {
    pub id: i64,
    pub payment_row: i64,
    pub period: String,
    pub periodicidad: String,
    pub moneda: String,
    pub seq: i32,
    pub payments: i32,
    pub total: String,
    pub label: String,
    pub class: &'static str,
    pub stamped: bool,
    pub folio: String,
    pub uuid: String,
    pub error: String,
    pub replaces: Option<i64>,
    pub replaced_by: Option<i64>,
    pub created_at: String,
}

impl GlobalView {
    fn of(g: GlobalRow) -> Self {
        let (label, class) = state_label(g.state);
        let id = g.identity;
        let period = if id.period_start == id.period_end {
            id.period_start.clone()
        } else {
            format!("{} – {}", id.period_start, id.period_end)
        };
        GlobalView {
            id: g.outbox_id,
            payment_row: g.payment_row,
            period,
            periodicidad: id.periodicidad,
            moneda: id.moneda,
            seq: id.seq,
            payments: g.payments,
            total: g.total,
            label,
            class,
            stamped: g.state.as_str() == "stamped",
            folio: match (g.serie, g.folio) {
                (Some(s), Some(f)) => format!("{s}-{f}"),
                (_, f) => f.unwrap_or_default(),
            },
            uuid: g.uuid.unwrap_or_default(),
            error: g.last_error_message.unwrap_or_default(),
            replaces: g.replaces,
            replaced_by: g.replaced_by,
            created_at: local(g.created_at),
        }
    }
}

#[derive(Template)]
#[template(path = "admin/globals.html")]
pub struct GlobalsPage {
    pub l: Layout,
    pub rows: Vec<GlobalView>,
    pub periodicidad: String,
}

pub async fn globals(
    state: web::Data<AppState>,
    session: Session,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let rows = state.db.list_globals().await?;
    html(&GlobalsPage {
        l: Layout::new(
            &session,
            "Facturas globales",
            "globals",
            q.notice.as_deref(),
        ),
        rows: rows.into_iter().map(GlobalView::of).collect(),
        periodicidad: state.settings.global.periodicidad.name().to_owned(),
    })
}

pub struct SaleView {
    pub payment_row: i64,
    pub provider: String,
    pub payment_id: String,
    pub amount: String,
    pub paid_at: String,
}

#[derive(Template)]
#[template(path = "admin/global.html")]
pub struct GlobalPage {
    pub l: Layout,
    pub g: GlobalView,
    pub sales: Vec<SaleView>,
}

pub async fn global(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let g = found(state.db.global(id).await?, "factura global", id)?;
    let sales = state.db.global_members(id).await?;
    let g = GlobalView::of(g);
    html(&GlobalPage {
        l: Layout::new(
            &session,
            format!("Factura global {}", g.period),
            "globals",
            q.notice.as_deref(),
        ),
        sales: sales
            .into_iter()
            .map(|s| SaleView {
                payment_row: s.id,
                provider: s.provider,
                payment_id: s.payment_id,
                amount: format!("{} {}", s.amount, s.currency),
                paid_at: local(s.paid_at),
            })
            .collect(),
        g,
    })
}

#[derive(Debug, Deserialize)]
pub struct ReplaceForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub confirm: String,
}

impl HasCsrf for ReplaceForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Freezes the replacement of global `id` for the signed-in admin and shows it; the old global
/// is cancelled with motivo 01 once the replacement is stamped.
pub async fn replace_global(
    state: &AppState,
    session: &Session,
    id: i64,
) -> Result<HttpResponse, AdminError> {
    let planner = Planner::new(&state.settings).map_err(AdminError::Refused)?;
    let actor = format!("admin:{}", session.actor);
    match crate::global::replace(&state.db, &planner, id, &actor).await? {
        Ok(new) => Ok(see_other(format!(
            "/admin/globals/{new}?notice=global_replacement"
        ))),
        Err(why) => Err(AdminError::Refused(why)),
    }
}

pub async fn replace(
    state: web::Data<AppState>,
    Posted(session, form): Posted<ReplaceForm>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    if form.confirm != "yes" {
        return Err(AdminError::Invalid(
            "Tick the confirmation: a replacement is a new global with today's Fecha, and the \
             old one is cancelled (motivo 01) once it is stamped."
                .into(),
        ));
    }
    replace_global(&state, &session, id.into_inner()).await
}
