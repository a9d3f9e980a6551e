//! Refreezing an expired or rejected document: a new generation with today's Fecha (and a
//! corrected receptor), only once the PAC confirms the old bytes were never stamped.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::{Admin, reconcile, state_label};
use crate::cfdi::{InvoiceRequest, ReceptorData, Rfc};
use crate::domain::StampKey;
use crate::error::AdminError;
use crate::pac::Recovery;
use crate::state::AppState;
use crate::store::DocFull;

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
    /// c_RegimenFiscal and c_UsoCFDI as `(code, description)`: the form's pick lists.
    pub regimenes: Vec<(String, String)>,
    pub usos: Vec<(String, String)>,
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

/// The document to refreeze, or why it cannot be: only an expired or rejected one that never
/// got a UUID.
async fn refreezable(state: &AppState, id: i64) -> Result<DocFull, AdminError> {
    let d = document(state, id).await?;
    if !matches!(d.state.as_str(), "failed" | "expired") || d.uuid.is_some() {
        return Err(AdminError::Refused(format!(
            "document #{id} is {}: only expired or rejected documents are refrozen",
            d.state
        )));
    }
    Ok(d)
}

pub async fn refreeze_page(
    state: &AppState,
    session: &Session,
    id: i64,
    form: Option<&ReceptorForm>,
    error: Option<String>,
) -> Result<RefreezePage, AdminError> {
    let d = refreezable(state, id).await?;
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
    let (label, _) = state_label(d.state);
    Ok(RefreezePage {
        l: Layout::new(session, "Refreeze", "invoices", None),
        doc_id: d.id,
        payment_row: d.payment_id,
        state: d.state.to_string(),
        label,
        code: d.last_error_code.unwrap_or_default(),
        message: d.last_error_message.unwrap_or_default(),
        generation: d.generation,
        fecha: super::format::local_naive(d.fecha),
        nominativo: current.is_some(),
        rfc: shown.rfc,
        nombre: shown.nombre,
        domicilio_fiscal: shown.domicilio_fiscal,
        regimen_fiscal: shown.regimen_fiscal,
        uso_cfdi: shown.uso_cfdi,
        error,
        sealed: d.sealed_xml.is_some(),
        regimenes: crate::cfdi::catalogs::options(crate::cfdi::catalogs::regimenes()),
        usos: crate::cfdi::catalogs::options(crate::cfdi::catalogs::usos()),
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
// Action

#[derive(Debug, Deserialize)]
pub struct RefreezeForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub confirm: String,
    #[serde(flatten)]
    pub receptor: ReceptorForm,
}

impl HasCsrf for RefreezeForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The corrected receptor, validated; `None` when the document has none to correct.
fn corrected_receptor(old: &ReceptorData, f: &ReceptorForm) -> Result<ReceptorData, String> {
    match old {
        ReceptorData::PublicoEnGeneral => Ok(ReceptorData::PublicoEnGeneral),
        ReceptorData::Nominativo { .. } => {
            let rfc = Rfc::parse(f.rfc.trim()).map_err(|e| format!("RFC: {e}"))?;
            let digits = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_digit());
            let nombre = f.nombre.trim().to_uppercase();
            if nombre.is_empty() {
                return Err(
                    "Nombre: write the receptor's name as in its Constancia de Situación Fiscal"
                        .into(),
                );
            }
            let cp = f.domicilio_fiscal.trim();
            if !digits(cp, 5) {
                return Err(format!(
                    "DomicilioFiscalReceptor `{cp}` is not a 5-digit postal code"
                ));
            }
            let regimen = f.regimen_fiscal.trim();
            if !digits(regimen, 3) {
                return Err(format!(
                    "RegimenFiscalReceptor `{regimen}` is not a 3-digit c_RegimenFiscal code"
                ));
            }
            let uso = f.uso_cfdi.trim().to_uppercase();
            if !(3..=4).contains(&uso.len()) || !uso.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(format!("UsoCFDI `{uso}` is not a c_UsoCFDI code"));
            }
            Ok(ReceptorData::Nominativo {
                rfc,
                nombre,
                domicilio_fiscal: cp.to_owned(),
                regimen_fiscal: regimen.to_owned(),
                uso_cfdi: uso,
            })
        }
    }
}

pub async fn refreeze(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, form): Posted<RefreezeForm>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let again = |error: String, status: StatusCode| {
        let state = state.clone();
        let session = session.clone();
        let receptor = form.receptor.clone();
        async move {
            let page = refreeze_page(&state, &session, id, Some(&receptor), Some(error)).await?;
            html_with(&page, status)
        }
    };
    let d = refreezable(&state, id).await?;
    if form.confirm != "yes" {
        return again(
            "Tick the confirmation: a refreeze issues a new comprobante with today's Fecha.".into(),
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    let old: InvoiceRequest = serde_json::from_str(&d.request_json)
        .map_err(|e| AdminError::Refused(format!("the frozen request is unreadable: {e}")))?;
    let receptor = match corrected_receptor(&old.receptor, &form.receptor) {
        Ok(r) => r,
        Err(e) => return again(e, StatusCode::BAD_REQUEST).await,
    };

    // Only once the PAC confirms the old bytes were never stamped (no transaction held here).
    if let Some(sealed) = &d.sealed_xml {
        let key = StampKey::parse(&d.stamp_key)
            .map_err(|e| AdminError::Refused(format!("stored stamp key: {e}")))?;
        let by = format!("admin:{}", session.actor);
        let recovery = reconcile::recover(&state.db, &admin.pac, id, sealed, &key, &by).await?;
        match recovery {
            Recovery::NotFound => {}
            Recovery::Found(stamp) => {
                let flag = format!(
                    "adopted at refreeze: the PAC held stamp {} of generation {} that was never recorded",
                    stamp.uuid, d.generation
                );
                state
                    .db
                    .adopt_stamp(
                        id,
                        &stamp.uuid,
                        &stamp.xml,
                        &stamp.tfd.fecha_timbrado,
                        &flag,
                        &session.actor,
                        state.settings.email.message_domain().as_deref(),
                    )
                    .await?;
                return Ok(back_to_document(&d, "adopted"));
            }
            Recovery::Unresolved { reason, .. } => {
                return again(
                    format!(
                        "Not refrozen: the PAC could not confirm that the current document was never stamped ({reason}). Try again later."
                    ),
                    StatusCode::CONFLICT,
                )
                .await;
            }
        }
    }

    let generation = d.generation + 1;
    let mut new = old;
    new.receptor = receptor;
    new.fecha = crate::domain::time::now_at(&new.emisor.lugar_expedicion);
    let json = serde_json::to_string(&new)
        .map_err(|e| AdminError::Invalid(format!("cannot serialize the request: {e}")))?;
    let key = StampKey::derive(
        &d.provider,
        &d.provider_payment_id,
        &format!("{}:g{generation}", d.kind),
    );
    let reason = match (&d.last_error_code, &d.last_error_message) {
        (Some(c), Some(m)) => format!("{} ({c} {m})", d.state),
        (None, Some(m)) => format!("{} ({m})", d.state),
        _ => d.state.to_string(),
    };
    if !state
        .db
        .refreeze(
            id,
            d.generation,
            &json,
            key.as_str(),
            new.fecha,
            &reason,
            &session.actor,
        )
        .await?
    {
        return Err(AdminError::Refused(format!(
            "document #{id} changed meanwhile; reload and check it again"
        )));
    }
    Ok(back_to_document(&d, "refrozen"))
}
