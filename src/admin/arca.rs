//! The ARCA vouchers (Argentina, docs/arca.md): state, number, CAE and its due date; the
//! open ones (an outcome not known yet, blocking their sequence) and conflicts first, each
//! with what a human can do; the sequences blocked now and WSAA's standing login refusal.
//! Actions (audited, with the session's CSRF token): re-issue a conflict's sale under its
//! next attempt key, end a WSAA login refusal's wait, and correct the buyer of a sale held
//! or refused ([`super::arca_fix`]).

use actix_web::{HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::auth::Session;
use super::common::{HasCsrf, Layout, NoticeQuery, Posted, html, see_other};
use crate::arca::CbteTipo;
use crate::arca::issue::{attempt_key, sale_of};
use crate::domain::ArcaVoucherState;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{ArcaLoginRefusal, ArcaVoucherRow};

/// Vouchers shown.
const LIMIT: i64 = 200;

pub struct VoucherView {
    pub key: String,
    /// `Factura B`, `Nota de Crédito B`.
    pub tipo: String,
    /// `00003-00000001`, as printed on a voucher.
    pub number: String,
    pub state: ArcaVoucherState,
    /// The badge's class.
    pub class: &'static str,
    pub cbte_fch: String,
    pub cae: String,
    pub cae_due: String,
    /// What ARCA said or what was found, and what to do.
    pub note: String,
    /// A conflict a human may move the sale on from (the re-issue button).
    pub reissue: bool,
    /// The printable voucher's link, once it is authorized.
    pub print: Option<String>,
}

/// A sequence that issues nothing new until its last claim is settled.
pub struct BlockedView {
    /// `Factura B 00003`.
    pub sequence: String,
    pub number: String,
    pub by: String,
    pub state: ArcaVoucherState,
    pub why: String,
}

/// A standing WSAA login refusal.
pub struct RefusalView {
    pub environment: String,
    pub fingerprint: String,
    pub refusals: i32,
    pub refused_at: String,
    pub retry_at: String,
}

fn tipo_name(code: i32) -> String {
    CbteTipo::from_code(code).map_or_else(|| format!("type {code}"), CbteTipo::name)
}

fn view(v: &ArcaVoucherRow) -> VoucherView {
    let tipo = tipo_name(v.cbte_tipo);
    let (class, note) = match v.state {
        ArcaVoucherState::Authorized if v.recovered => (
            "ok",
            "recovered by consulting ARCA after a lost answer".into(),
        ),
        ArcaVoucherState::Authorized => ("ok", String::new()),
        ArcaVoucherState::Reserved => (
            "warn",
            "numbered and being sent; its sequence waits for the answer".into(),
        ),
        ArcaVoucherState::Unknown => (
            "warn",
            format!(
                "sent, no answer to trust: resolved by consulting ARCA for this number, never by \
                 a new one; its sequence is blocked until then ({})",
                v.detail.as_deref().unwrap_or("no detail")
            ),
        ),
        ArcaVoucherState::Conflict => match &v.superseded_by {
            Some(next) => (
                "bad",
                format!(
                    "ARCA holds another voucher at this number; the sale was re-issued as {next} \
                     ({})",
                    v.detail.as_deref().unwrap_or("")
                ),
            ),
            None => (
                "bad",
                format!(
                    "ARCA holds another voucher at this number: check who else issues on this \
                     punto de venta (it must be the appliance's alone), then re-issue the sale \
                     under a new key; never resent ({})",
                    v.detail.as_deref().unwrap_or("")
                ),
            ),
        },
        ArcaVoucherState::Superseded => (
            "muted",
            match v.superseded_by.as_deref() {
                Some(by) => format!(
                    "ARCA proved this number empty and no send of it could land any more: the \
                     number went to {by}; never resent, the sale goes on under its next key \
                     (nothing to do)"
                ),
                // Left unprocessed in a batch after an earlier voucher was refused.
                None => format!("{} (nothing to do)", v.detail.as_deref().unwrap_or("")),
            },
        ),
        ArcaVoucherState::Rejected => (
            "bad",
            format!(
                "refused by ARCA, number left free: {}",
                v.errors.as_deref().unwrap_or("")
            ),
        ),
    };
    VoucherView {
        key: v.key.clone(),
        tipo,
        number: format!("{:05}-{:08}", v.pto_vta, v.number),
        state: v.state,
        class,
        cbte_fch: v.cbte_fch.clone(),
        cae: v.cae.clone().unwrap_or_default(),
        cae_due: v.cae_due.clone().unwrap_or_default(),
        note,
        reissue: v.state == ArcaVoucherState::Conflict && v.superseded_by.is_none(),
        print: (v.state == ArcaVoucherState::Authorized).then(|| {
            format!(
                "/admin/arca/print?key={}",
                super::common::percent_encode(&v.key)
            )
        }),
    }
}

fn blocked(v: &ArcaVoucherRow) -> BlockedView {
    let why = if v.state == ArcaVoucherState::Reserved {
        "being sent: settled by its answer, or consulted once its sender's window is over".into()
    } else {
        format!(
            "its answer was lost ({}): every ARCA round consults the number; found → authorized, \
             empty → sent again or, once no send can land, given to the next sale (superseded); \
             ARCA down → waits. If it stays here, check ARCA's FECompConsultar for the number \
             and the punto de venta in ARCA's portal",
            v.detail.as_deref().unwrap_or("no detail")
        )
    };
    BlockedView {
        sequence: format!("{} {:05}", tipo_name(v.cbte_tipo), v.pto_vta),
        number: format!("{:08}", v.number),
        by: v.key.clone(),
        state: v.state,
        why,
    }
}

fn refusal(r: &ArcaLoginRefusal) -> RefusalView {
    let at = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    RefusalView {
        environment: r.environment.clone(),
        fingerprint: r.cert_fingerprint.clone(),
        refusals: r.refusals,
        refused_at: at(r.refused_at),
        retry_at: at(r.retry_at),
    }
}

#[derive(Template)]
#[template(path = "admin/arca.html")]
pub struct ArcaPage {
    pub l: Layout,
    pub vouchers: Vec<VoucherView>,
    pub open: usize,
    pub blocked: Vec<BlockedView>,
    pub refusals: Vec<RefusalView>,
    /// ARS sales held or refused, each with its correction form ([`super::arca_fix`]).
    pub held: Vec<super::arca_fix::HeldView>,
}

/// `GET /admin/arca`.
pub async fn vouchers(
    state: web::Data<AppState>,
    session: Session,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let rows = state.db.arca_recent_vouchers(LIMIT).await?;
    let vouchers: Vec<VoucherView> = rows.iter().map(view).collect();
    // A sequence hands out a number only once its last claim is settled: every open voucher
    // is its sequence's last claim.
    let blocked: Vec<BlockedView> = rows
        .iter()
        .filter(|v| v.state.is_open())
        .map(blocked)
        .collect();
    let refusals = state.db.arca_login_refusals().await?;
    let held = state.db.arca_held_sales(super::arca_fix::LIMIT).await?;
    html(&ArcaPage {
        l: Layout::new(&session, "ARCA vouchers", "arca", q.notice.as_deref()),
        vouchers,
        open: blocked.len(),
        blocked,
        refusals: refusals.iter().map(refusal).collect(),
        held: held.iter().map(super::arca_fix::held).collect(),
    })
}

#[derive(Debug, Deserialize)]
pub struct ReissueForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub key: String,
}

impl HasCsrf for ReissueForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /admin/arca/reissue`: a conflict's sale goes back to ARCA under its next attempt key
/// (the conflict stays settled and is never resent; ARCA holds no voucher of ours at its
/// number, so the sale has none yet).
pub async fn reissue(
    state: web::Data<AppState>,
    Posted(session, form): Posted<ReissueForm>,
) -> Result<HttpResponse, AdminError> {
    let key = form.key.trim();
    let (sale, attempt) = sale_of(key);
    let Some((provider, payment_id)) = sale.split_once(':') else {
        return Err(AdminError::Invalid(format!(
            "{key:?} is not a sale's ARCA key"
        )));
    };
    let next = attempt_key(sale, attempt + 1);
    if !state
        .db
        .arca_reissue_conflict(key, &next, (provider, payment_id), &session.actor)
        .await?
    {
        return Err(AdminError::Refused(format!(
            "{key} is not a conflict waiting for a human"
        )));
    }
    tracing::warn!(%key, %next, actor = %session.actor, "admin: ARCA conflict re-issued");
    Ok(see_other("/admin/arca?notice=arca_reissued".into()))
}

#[derive(Debug, Deserialize)]
pub struct LoginNowForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub environment: String,
    #[serde(default)]
    pub fingerprint: String,
}

impl HasCsrf for LoginNowForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /admin/arca/login-now`: the WSAA refusal's wait ends; the next round logs in (for
/// when ARCA is known to accept a login again, e.g. the lost ticket expired).
pub async fn login_now(
    state: web::Data<AppState>,
    Posted(session, form): Posted<LoginNowForm>,
) -> Result<HttpResponse, AdminError> {
    let ended = state
        .db
        .arca_end_login_refusal(&form.environment, &form.fingerprint, &session.actor)
        .await?;
    if !ended {
        return Err(AdminError::Refused("no WSAA login refusal stands".into()));
    }
    tracing::warn!(actor = %session.actor, "admin: WSAA login refusal ended");
    Ok(see_other("/admin/arca?notice=arca_login_now".into()))
}
