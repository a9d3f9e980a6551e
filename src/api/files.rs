//! `GET /v1/invoices/{id}/xml` (the stamped XML, byte for byte as the PAC returned it) and
//! `GET /v1/invoices/{id}/pdf` (the representación impresa); both once the invoice is stamped
//! (and still after a cancellation: the CFDI exists).

use actix_web::{HttpResponse, web};

use super::invoices::invoice_of;
use super::keys::Caller;
use crate::error::ApiError;
use crate::pdf;
use crate::state::AppState;

/// The caller's invoice's stamped XML, or 409 while it has none.
async fn stamped(state: &AppState, caller: &Caller, id: &str) -> Result<Vec<u8>, ApiError> {
    let inv = invoice_of(state, caller, id).await?;
    inv.stamped_xml.ok_or_else(|| {
        ApiError::Conflict(format!(
            "invoice {id} is {} and has no stamped XML yet; GET /v1/invoices/{id} says when it is stamped",
            super::view::api_status(inv.state)
        ))
    })
}

fn file(bytes: Vec<u8>, content_type: &str, name: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .body(bytes)
}

/// `GET /v1/invoices/{id}/xml`.
pub async fn xml(
    state: web::Data<AppState>,
    id: web::Path<String>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let xml = stamped(&state, &caller, &id).await?;
    let name = pdf::file_name(&xml, "xml").map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(file(xml, "application/xml", &name))
}

/// `GET /v1/invoices/{id}/pdf`.
pub async fn pdf(
    state: web::Data<AppState>,
    id: web::Path<String>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let xml = stamped(&state, &caller, &id).await?;
    let name = pdf::file_name(&xml, "pdf").map_err(|e| ApiError::Internal(e.to_string()))?;
    let bytes = pdf::render_blocking(xml, state.pdf.clone())
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(file(bytes, "application/pdf", &name))
}
