//! The reconciliation page and its actions: run now, cancel a duplicate's extra UUID, close a
//! finding. The comparison itself is [`super::reconcile`].

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{Duration, Utc};
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::format::When;
use super::{Admin, age, cancel_label, reconcile};
use crate::domain::cancellation::{self, CancelFacts, Motivo};
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{CancelConflict, FindingRow};

pub struct FindingView {
    pub id: i64,
    pub kind: String,
    pub outbox_id: Option<i64>,
    pub payment_row: Option<i64>,
    pub uuid: String,
    pub kept_uuid: String,
    pub detail: String,
    pub open: bool,
    pub found_at: When,
    pub resolved_at: When,
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
            .map(|c| cancel_label(c.state, c.requires_acceptance).0)
            .unwrap_or_default();
        let facts: Option<CancelFacts> =
            serde_json::from_str::<reconcile::FindingDetail>(&f.detail)
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
        let detail = serde_json::from_str::<reconcile::FindingDetail>(&f.detail)
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
            found_at: When::of(f.found_at, now),
            resolved_at: When::opt(f.resolved_at, now),
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
// Actions

pub async fn reconcile_now(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, _): Posted,
) -> Result<HttpResponse, AdminError> {
    reconcile::run(
        &state.db,
        &admin.pac,
        admin.sandbox.as_deref(),
        &admin.reconcile_lock,
        &admin.emisor_rfc,
        &session.actor,
        admin.mail_domain.as_deref(),
    )
    .await
    .map_err(|e| AdminError::Refused(format!("reconciliation did not finish: {e}")))?;
    Ok(see_other("/admin/reconcile?notice=reconciled".into()))
}

/// One click on a duplicate: cancel the extra UUID with motivo 02, keeping the one recorded on
/// the document (the one the customer received).
pub async fn cancel_extra(
    state: web::Data<AppState>,
    Posted(session, _): Posted,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let f = found(state.db.finding(id).await?, "finding", id)?;
    if f.kind != "duplicate" || f.status != "open" {
        return Err(AdminError::Refused(format!(
            "finding #{id} is a {} finding, {}: only open duplicates are cancelled from here",
            f.kind, f.status
        )));
    }
    let outbox_id = f
        .outbox_id
        .ok_or_else(|| AdminError::Refused("the duplicate is not tied to a document".into()))?;
    let doc = document(&state, outbox_id).await?;
    if doc
        .uuid
        .as_deref()
        .is_none_or(|u| u.eq_ignore_ascii_case(&f.uuid))
    {
        return Err(AdminError::Refused(
            "this UUID is the one recorded for the sale (the one the customer received); it is kept"
                .into(),
        ));
    }
    let facts = serde_json::from_str::<reconcile::FindingDetail>(&f.detail)
        .ok()
        .and_then(|d| d.facts)
        .ok_or_else(|| {
            AdminError::Refused("the finding does not carry the duplicate's data".into())
        })?;
    let order = facts.order(Motivo::SinRelacion, None, Utc::now());
    match crate::cancel::record(&state.db, outbox_id, order, &session.actor).await? {
        Ok(()) => {
            state
                .db
                .resolve_finding(
                    id,
                    &session.actor,
                    &format!(
                        "cancellation of the extra UUID {} requested (motivo 02); kept {}",
                        facts.uuid,
                        doc.uuid.unwrap_or_default()
                    ),
                )
                .await?;
            Ok(see_other("/admin/reconcile?notice=cancel_requested".into()))
        }
        Err(CancelConflict::AlreadyRequested { state: s }) => Err(AdminError::Refused(format!(
            "a cancellation of {} was already requested ({s})",
            facts.uuid
        ))),
    }
}

pub async fn resolve_finding(
    state: web::Data<AppState>,
    Posted(session, _): Posted,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    if !state
        .db
        .resolve_finding(id, &session.actor, "closed by hand")
        .await?
    {
        return Err(AdminError::Refused(format!("finding #{id} is not open")));
    }
    Ok(see_other("/admin/reconcile?notice=resolved".into()))
}
