//! Cancelling a stamped document: the form (motivos, who must accept, what still relates to
//! it) and the request, checked and recorded by [`crate::cancel`].

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::Utc;
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::state_label;
use crate::cancel::Refusal;
use crate::domain::DocumentState;
use crate::domain::cancellation::{self, CancelFacts, Refused};
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::DocFull;

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
    let d = document(state, id).await?;
    let facts = match (&d.uuid, &d.stamped_xml) {
        (Some(_), Some(xml)) if d.state == DocumentState::Stamped => CancelFacts::from_stamped(xml),
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
        .map(|c| state_label(c.state.as_str()).0);
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
// Action

#[derive(Debug, Deserialize)]
pub struct CancelForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub motivo: String,
    #[serde(default)]
    pub folio_sustitucion: String,
}

impl HasCsrf for CancelForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn cancel(
    state: web::Data<AppState>,
    Posted(session, form): Posted<CancelForm>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let (d, facts) = stamped_doc(&state, id).await?;
    // A global cancelled with motivo 01 and no replacement named: the replacement is issued
    // first, and this one is cancelled once it is stamped.
    if facts.global && form.motivo.trim() == "01" && form.folio_sustitucion.trim().is_empty() {
        return super::globals::replace_global(&state, &session, d.id).await;
    }
    let folio = Some(form.folio_sustitucion.as_str());
    let done = crate::cancel::request(&state.db, d.id, &facts, &form.motivo, folio, &session.actor);
    let refusal = match done.await? {
        Ok(()) => return Ok(back_to_document(&d, "cancel_requested")),
        Err(r) => r,
    };
    let (error, status) = match refusal {
        Refusal::Request(Refused::NotAMotivo(m)) => (
            format!("`{m}` is not a motivo: choose 01, 02, 03 or 04"),
            StatusCode::BAD_REQUEST,
        ),
        Refusal::Request(Refused::Motivo(e)) => (e.to_string(), StatusCode::BAD_REQUEST),
        // SAT answers `No cancelable` while a live document relates to this one: name them.
        Refusal::Related(related) => (
            format!(
                "No cancelable: these live documents relate to {}; cancel them first: {}",
                facts.uuid,
                related.join(", ")
            ),
            StatusCode::CONFLICT,
        ),
        Refusal::AlreadyRequested(s) => (
            format!(
                "a cancellation of {} was already requested ({s}); follow it on the detail page",
                facts.uuid
            ),
            StatusCode::CONFLICT,
        ),
    };
    let page = cancel_page(
        &state,
        &session,
        id,
        &form.motivo,
        &form.folio_sustitucion,
        Some(error),
    )
    .await?;
    html_with(&page, status)
}
