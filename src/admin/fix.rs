//! The fix form of a payment that needs attention (an invalid or incomplete RFC, a currency
//! the appliance does not invoice by itself): the operator types the receptor's data and, for
//! another currency, the exchange rate; the submit freezes one document through the outbox,
//! exactly once however often the form is sent. Or, for every such sale at once, "send to
//! the factura global": the sales that cannot be invoiced to their customer go into their
//! period's global instead.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::Admin;
use super::auth::Session;
use super::common::*;
use super::format::{Clock, Deadline, Said, money};
use crate::domain::{DocumentState, PaymentStatus};
use crate::error::AdminError;
use crate::ingest::CustomerData;
use crate::state::AppState;
use crate::store::PaymentRow;

#[derive(Template)]
#[template(path = "admin/fix.html")]
pub struct FixPage {
    pub l: Layout,
    pub id: i64,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub said: Said,
    pub deadline: Deadline,
    pub form: FixForm,
    pub error: Option<String>,
    pub regimenes: Vec<(String, String)>,
    pub usos: Vec<(String, String)>,
}

/// What the operator corrects.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FixForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub rfc: String,
    #[serde(default)]
    pub nombre: String,
    #[serde(default)]
    pub codigo_postal: String,
    #[serde(default)]
    pub regimen_fiscal: String,
    #[serde(default)]
    pub uso_cfdi: String,
    #[serde(default)]
    pub email: String,
    /// TipoCambio: MXN per unit of the payment's currency; empty for MXN.
    #[serde(default)]
    pub tipo_cambio: String,
    /// Drawn once when the form is first shown and sent with it: a second send of the same
    /// form after its document was frozen (a double click, a resend) is shown that result.
    #[serde(default)]
    pub submission: String,
}

impl HasCsrf for FixForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The payment, only while it needs attention.
async fn fixable(state: &AppState, id: i64) -> Result<PaymentRow, AdminError> {
    let p = found(state.db.payment(id).await?, "payment", id)?;
    if p.payment.status != PaymentStatus::NeedsAttention {
        return Err(AdminError::Refused(format!(
            "payment #{id} does not need attention any more ({}): its document is already frozen",
            p.payment.status.label()
        )));
    }
    Ok(p)
}

fn page(
    p: PaymentRow,
    session: &Session,
    clock: &Clock,
    form: Option<FixForm>,
    error: Option<String>,
) -> FixPage {
    let pay = p.payment;
    let form = form.unwrap_or_else(|| {
        let c: CustomerData = serde_json::from_str(&pay.customer_json).unwrap_or_default();
        FixForm {
            rfc: c.rfc.unwrap_or_default(),
            nombre: c.nombre.unwrap_or_default(),
            codigo_postal: c.codigo_postal.unwrap_or_default(),
            regimen_fiscal: c.regimen_fiscal.unwrap_or_default(),
            uso_cfdi: c.uso_cfdi.unwrap_or_else(|| "G03".into()),
            email: c.email.unwrap_or_default(),
            submission: uuid::Uuid::new_v4().simple().to_string(),
            ..FixForm::default()
        }
    });
    FixPage {
        l: Layout::new(session, format!("Fix {}", pay.payment_id), "invoices", None),
        id: p.id,
        amount: money(&pay.amount, &pay.currency),
        deadline: clock.deadline(
            Some(DocumentState::NeedsAttention),
            Some(crate::domain::time::to_local(pay.paid_at)),
        ),
        said: Said::of(None, pay.reason.as_deref(), false),
        payment_id: pay.payment_id,
        currency: pay.currency,
        form,
        error,
        regimenes: crate::cfdi::catalogs::options(crate::cfdi::catalogs::regimenes()),
        usos: crate::cfdi::catalogs::options(crate::cfdi::catalogs::usos()),
    }
}

pub async fn fix_form(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let p = fixable(&state, id.into_inner()).await?;
    html(&page(p, &session, &Clock::of(&admin), None, None))
}

/// Fecha of the fixed document: the payment's time while SAT's window still has an hour left,
/// else now (a document dated too long ago cannot be stamped).
fn fecha_for(
    ingestor: &crate::ingest::Ingestor,
    paid_at: chrono::DateTime<chrono::Utc>,
    clock: &Clock,
) -> chrono::NaiveDateTime {
    if paid_at + clock.window - chrono::Duration::hours(1) > clock.now {
        ingestor.fecha(paid_at)
    } else {
        ingestor.fecha(clock.now)
    }
}

pub async fn fix(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, form): Posted<FixForm>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let clock = Clock::of(&admin);
    let p = match fixable(&state, id).await {
        Ok(p) => p,
        // This very form was already taken: show what it did, not an error.
        Err(AdminError::Refused(_))
            if state
                .db
                .submitted("reissue", ("payment", id), form.submission.trim())
                .await? =>
        {
            return Ok(see_other(format!("/admin/payments/{id}?notice=reissued")));
        }
        Err(e) => return Err(e),
    };
    let refused = |p: PaymentRow, error: String| {
        html_with(
            &page(p, &session, &clock, Some(form.clone()), Some(error)),
            StatusCode::BAD_REQUEST,
        )
    };
    let tipo_cambio = match form.tipo_cambio.trim() {
        "" if p.payment.currency == "MXN" => None,
        "" => {
            return refused(
                p.clone(),
                format!(
                    "TipoCambio: give the exchange rate of {} to MXN (e.g. the DOF rate of the payment's day)",
                    p.payment.currency
                ),
            );
        }
        t => match t.parse::<Decimal>() {
            Ok(r) if r > Decimal::ZERO => Some(r),
            _ => {
                return refused(
                    p.clone(),
                    format!("TipoCambio `{t}` is not a positive number"),
                );
            }
        },
    };
    let trimmed = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let customer = CustomerData {
        rfc: trimmed(&form.rfc.to_uppercase()),
        nombre: trimmed(&form.nombre),
        regimen_fiscal: trimmed(&form.regimen_fiscal),
        codigo_postal: trimmed(&form.codigo_postal),
        uso_cfdi: trimmed(&form.uso_cfdi),
        email: trimmed(&form.email),
        identification: None,
    };
    if customer.rfc.is_none() {
        return refused(p, "RFC: give the customer's RFC".into());
    }
    let fecha = fecha_for(&state.ingestor, p.payment.paid_at, &clock);
    let mut draft = match state
        .ingestor
        .replan(&p.payment, customer.clone(), tipo_cambio, fecha)
    {
        Ok(d) => d,
        Err(e) => return refused(p, e),
    };
    let customer_json = serde_json::to_string(&customer)
        .map_err(|e| AdminError::Invalid(format!("cannot store the customer data: {e}")))?;
    let detail = format!(
        "receptor {} corrected{}",
        customer.rfc.as_deref().unwrap_or_default(),
        tipo_cambio.map_or(String::new(), |t| format!(", TipoCambio {t}"))
    );
    match state
        .db
        .reissue_payment(
            id,
            &customer_json,
            &mut draft,
            &session.actor,
            &detail,
            form.submission.trim(),
        )
        .await?
    {
        Some(outbox_id) => {
            tracing::info!(payment = id, outbox_id, actor = %session.actor, "admin: payment fixed and re-issued");
            Ok(see_other(format!(
                "/admin/payments/{id}?notice=reissued#doc-{outbox_id}"
            )))
        }
        // Another submit of the same form got there first: its document is the one.
        None => Ok(see_other(format!("/admin/payments/{id}?notice=reissued"))),
    }
}

/// The form of [`send_to_global`]: the failure code of the group, or none for the sales that
/// need attention.
#[derive(Debug, Deserialize)]
pub struct GlobalForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    code: String,
}

impl HasCsrf for GlobalForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The dashboard's group action on the sales that need attention: every one that a factura
/// global can hold (a currency the appliance invoices, not a test payment kept from a
/// production PAC) becomes `awaiting_global`, audited; the others stay, still listed.
///
/// With a `code` (a group of failures such as CFDI40146), it is the sales whose ingreso failed
/// with that code instead: each failed document is set aside (`superseded`; the PAC stamped
/// nothing for it) and its sale waits for the global, in one transaction.
pub async fn send_to_global(
    state: web::Data<AppState>,
    Posted(session, form): Posted<GlobalForm>,
) -> Result<HttpResponse, AdminError> {
    if !form.code.is_empty() {
        let moved = state
            .db
            .send_failed_to_global(&form.code, &session.actor)
            .await?;
        tracing::info!(sales = ?moved, code = %form.code, actor = %session.actor, "admin: failed sales sent to the factura global");
        return Ok(see_other("/admin?notice=sent_to_global".into()));
    }
    let sandbox = state.settings.is_sandbox();
    let eligible: Vec<i64> = state
        .db
        .needs_attention_sales()
        .await?
        .into_iter()
        .filter(|p| {
            let amount = p.payment.amount.parse::<Decimal>().unwrap_or_default();
            (p.payment.livemode || sandbox)
                && state
                    .ingestor
                    .invoiceable(amount, &p.payment.currency, None)
                    .is_ok()
        })
        .map(|p| p.id)
        .collect();
    let moved = state.db.send_to_global(&eligible, &session.actor).await?;
    tracing::info!(sales = ?moved, actor = %session.actor, "admin: sent to the factura global");
    Ok(see_other("/admin?notice=sent_to_global".into()))
}
