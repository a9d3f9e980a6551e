//! The printable ARCA voucher (Argentina): the PDF of an authorized comprobante with ARCA's QR
//! (RG 4892), by its idempotency key (`/admin/arca/print?key=mercadopago:…`).

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::auth::Session;
use crate::error::AdminError;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct PrintQuery {
    /// The voucher's idempotency key (`mercadopago:{payment}`, `refund:mercadopago:{refund}`).
    pub key: Option<String>,
}

/// The voucher's PDF, shown inline.
pub async fn print(
    state: web::Data<AppState>,
    _session: Session,
    q: web::Query<PrintQuery>,
) -> Result<HttpResponse, AdminError> {
    // Optional, so that a request without it meets the session check, not a query error.
    let key = q.key.as_deref().unwrap_or_default();
    let v = state
        .db
        .arca_voucher(key)
        .await
        .map_err(|e| AdminError::Refused(format!("the voucher cannot be read: {e}")))?
        .ok_or_else(|| AdminError::NotFound(format!("no ARCA voucher under {key:?}")))?;
    let print = crate::arca::print::printable(&v, &state.settings.arca)
        .map_err(|e| AdminError::Refused(format!("{e:#}")))?;
    let opts = state.pdf.clone();
    let bytes = web::block(move || crate::pdf::voucher::render_voucher(&print, &opts))
        .await
        .map_err(|e| AdminError::Refused(format!("the PDF cannot be made: {e}")))?;
    let name = format!("ARCA_{}_{:05}-{:08}.pdf", v.cbte_tipo, v.pto_vta, v.number);
    Ok(HttpResponse::Ok()
        .content_type("application/pdf")
        .insert_header((
            "Content-Disposition",
            format!("inline; filename=\"{name}\""),
        ))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-store"))
        .body(bytes))
}
