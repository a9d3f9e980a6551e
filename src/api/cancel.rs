//! `POST /v1/invoices/{id}/cancel`: the API's door to the one cancel path ([`crate::cancel`]).

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::invoices::invoice_of;
use super::keys::Caller;
use super::view::{api_status, invoice_json};
use crate::cancel::{self, Refusal};
use crate::domain::DocumentState;
use crate::domain::cancellation::{CancelFacts, Refused};
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelInput {
    /// c_Motivo: `01` (with `folio_sustitucion`), `02`, `03` or `04`.
    pub motivo: String,
    #[serde(default)]
    pub folio_sustitucion: Option<String>,
}

/// `POST /v1/invoices/{id}/cancel`: freezes the cancellation for the worker; 202 with the
/// invoice. `invoice.canceled` is sent when SAT confirms it.
pub async fn cancel(
    state: web::Data<AppState>,
    id: web::Path<String>,
    body: web::Bytes,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let input: CancelInput = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not a cancellation: {e}")))?;
    let inv = invoice_of(&state, &caller, &id).await?;
    if inv.state != DocumentState::Stamped {
        return Err(ApiError::Conflict(format!(
            "invoice {} is {}: only a stamped invoice can be cancelled",
            inv.public_id,
            api_status(inv.state)
        )));
    }
    let facts = inv
        .stamped_xml
        .as_deref()
        .and_then(CancelFacts::from_stamped)
        .ok_or_else(|| ApiError::Conflict("the stamped XML cannot be read".into()))?;
    let actor = format!("api:{}", caller.name);
    let folio = input.folio_sustitucion.as_deref();
    let done = cancel::request(
        &state.db,
        inv.outbox_id,
        &facts,
        &input.motivo,
        folio,
        &actor,
    );
    match done.await? {
        Ok(()) => {}
        Err(Refusal::Request(Refused::NotAMotivo(m))) => {
            return Err(ApiError::Validation(format!(
                "`{m}` is not a motivo: 01, 02, 03 or 04"
            )));
        }
        Err(Refusal::Request(Refused::Motivo(e))) => {
            return Err(ApiError::Validation(e.to_string()));
        }
        Err(Refusal::Related(related)) => {
            return Err(ApiError::Conflict(format!(
                "No cancelable: live documents relate to {}: {}",
                facts.uuid,
                related.join(", ")
            )));
        }
        Err(Refusal::AlreadyRequested(s)) => {
            return Err(ApiError::Conflict(format!(
                "a cancellation of {} was already requested ({s})",
                facts.uuid
            )));
        }
    }
    let inv = invoice_of(&state, &caller, &id).await?;
    Ok(HttpResponse::Accepted().json(invoice_json(&inv, None)))
}
