//! The ARCA vouchers (Argentina, docs/arca.md): state, number, CAE and its due date; the
//! open ones (an outcome not known yet, blocking their sequence) and conflicts first, each
//! with what a human can do.

use actix_web::{HttpResponse, web};
use askama::Template;

use super::auth::Session;
use super::common::{Layout, html};
use crate::arca::CbteTipo;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::ArcaVoucherRow;

/// Vouchers shown.
const LIMIT: i64 = 200;

pub struct VoucherView {
    pub key: String,
    /// `Factura B`.
    pub tipo: String,
    /// `00003-00000001`, as printed on a voucher.
    pub number: String,
    pub state: String,
    /// The badge's class.
    pub class: &'static str,
    pub cbte_fch: String,
    pub cae: String,
    pub cae_due: String,
    /// What ARCA said or what was found, and what to do.
    pub note: String,
}

fn view(v: &ArcaVoucherRow) -> VoucherView {
    let tipo = CbteTipo::from_code(v.cbte_tipo).map_or_else(
        || format!("type {}", v.cbte_tipo),
        |t| format!("Factura {}", t.class()),
    );
    let (class, note) = match v.state.as_str() {
        "authorized" if v.recovered => (
            "ok",
            "recovered by consulting ARCA after a lost answer".into(),
        ),
        "authorized" => ("ok", String::new()),
        "reserved" => (
            "warn",
            "numbered and being sent; its sequence waits for the answer".into(),
        ),
        "unknown" => (
            "warn",
            format!(
                "sent, no answer to trust: resolved by consulting ARCA for this number, never by \
                 a new one; its sequence is blocked until then ({})",
                v.detail.as_deref().unwrap_or("no detail")
            ),
        ),
        "conflict" => (
            "bad",
            format!(
                "ARCA holds another voucher at this number: check who else issues on this punto \
                 de venta; never resent ({})",
                v.detail.as_deref().unwrap_or("")
            ),
        ),
        "rejected" => (
            "bad",
            format!(
                "refused by ARCA, number left free: {}",
                v.errors.as_deref().unwrap_or("")
            ),
        ),
        _ => ("", v.detail.clone().unwrap_or_default()),
    };
    VoucherView {
        key: v.key.clone(),
        tipo,
        number: format!("{:05}-{:08}", v.pto_vta, v.number),
        state: v.state.clone(),
        class,
        cbte_fch: v.cbte_fch.clone(),
        cae: v.cae.clone().unwrap_or_default(),
        cae_due: v.cae_due.clone().unwrap_or_default(),
        note,
    }
}

#[derive(Template)]
#[template(path = "admin/arca.html")]
pub struct ArcaPage {
    pub l: Layout,
    pub vouchers: Vec<VoucherView>,
    pub open: usize,
}

/// `GET /admin/arca`.
pub async fn vouchers(
    state: web::Data<AppState>,
    session: Session,
) -> Result<HttpResponse, AdminError> {
    let rows = state.db.arca_recent_vouchers(LIMIT).await?;
    let vouchers: Vec<VoucherView> = rows.iter().map(view).collect();
    let open = rows.iter().filter(|v| v.is_open()).count();
    html(&ArcaPage {
        l: Layout::new(&session, "ARCA vouchers", "arca", None),
        vouchers,
        open,
    })
}
