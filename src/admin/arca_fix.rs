//! An ARS sale the ARCA loop held (no identification above `[arca] anonymous_limit`, a bad
//! CUIT or DNI, …) or ARCA refused, corrected in the admin: the buyer's identification and IVA
//! condition, checked by [`crate::arca::buyer::corrected`], and the sale issued again under a
//! key it never used (`{sale}#{attempt}`); the refused key stays settled as it was. Listed on
//! `/admin/arca`; audited, with the session's CSRF token.

use actix_web::{HttpResponse, web};
use rust_decimal::Decimal;
use serde::Deserialize;

use super::common::{HasCsrf, Posted, see_other};
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{ArcaCorrection, ArcaHeldSale};

/// Held sales shown.
pub const LIMIT: i64 = 100;

/// A held or refused sale and its correction form.
pub struct HeldView {
    pub provider: String,
    pub payment_id: String,
    /// The sale's page.
    pub href: String,
    pub amount: String,
    pub reason: String,
}

pub fn held(s: &ArcaHeldSale) -> HeldView {
    HeldView {
        provider: s.provider.clone(),
        payment_id: s.payment_id.clone(),
        href: format!("/admin/payments/{}", s.id),
        amount: s.amount.clone(),
        reason: s.reason.clone().unwrap_or_default(),
    }
}

#[derive(Debug, Deserialize)]
pub struct CorrectForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub payment_id: String,
    /// `CUIT`, `CUIL`, `DNI` or empty.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub number: String,
    #[serde(default)]
    pub condicion_iva: String,
}

impl HasCsrf for CorrectForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /admin/arca/correct`: the buyer corrected, the sale back to ARCA under its next
/// attempt key.
pub async fn correct(
    state: web::Data<AppState>,
    Posted(session, form): Posted<CorrectForm>,
) -> Result<HttpResponse, AdminError> {
    let (provider, payment_id) = (form.provider.trim(), form.payment_id.trim());
    let sale = state
        .db
        .arca_held_sale(provider, payment_id)
        .await?
        .ok_or_else(|| {
            AdminError::Refused(format!(
                "{provider}:{payment_id} is not an ARS sale held or refused for ARCA"
            ))
        })?;
    let total: Decimal = sale
        .amount
        .parse()
        .map_err(|_| AdminError::Refused(format!("amount {:?} is not a number", sale.amount)))?;
    let (kind, number, receptor) = crate::arca::buyer::corrected(
        &form.kind,
        &form.number,
        &form.condicion_iva,
        total,
        &state.settings.arca,
    )
    .map_err(AdminError::Invalid)?;
    let fix = ArcaCorrection {
        doc_kind: kind,
        doc_number: number,
        condicion_iva: receptor.name().to_owned(),
        attempt: 0,
    };
    // Frozen now, as ingest freezes a sale: the voucher for the buyer the human gave.
    let given = crate::arca::order::Correction {
        doc_kind: &fix.doc_kind,
        doc_number: &fix.doc_number,
        condicion_iva: &fix.condicion_iva,
    };
    let order = crate::arca::order::freeze(&state.settings.arca, &sale.amount, "{}", Some(given))
        .map_err(AdminError::Invalid)?
        .to_json();
    let key = state
        .db
        .arca_correct_sale((provider, payment_id), (&fix, &order), &session.actor)
        .await?
        .ok_or_else(|| AdminError::Refused(format!("{provider}:{payment_id} is no longer held")))?;
    tracing::warn!(%provider, %payment_id, %key, actor = %session.actor, "admin: ARS sale corrected and issued again");
    Ok(see_other("/admin/arca?notice=arca_corrected".into()))
}
