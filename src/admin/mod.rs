//! The admin dashboard in the browser: what is pending, failed, duplicated or being cancelled,
//! and the fixes (retry, cancel, refreeze, reconcile) without SQL.
//!
//! Server-rendered with askama (`templates/admin/`); the CSS and the little JavaScript are
//! embedded (`static/`). Every route but the login page and the static files takes a
//! [`auth::Session`], and every form carries the session's CSRF token. Every action is recorded
//! in `admin_actions` with who and when.
//!
//! Who may import it: only `startup` (to mount [`routes`] and start [`reconcile::periodic`]),
//! `ops` (`autofactura reconcile`) and the tests. The API, the worker and the sandbox import
//! nothing from here: what they share with the admin lives in [`crate::domain`] (the
//! cancellation rules) and [`crate::cancel`] (the cancel request).
//!
//! - [`auth`]: password, sessions, CSRF, the login limiter.
//! - [`format`]: times ("hora CDMX", relative with the exact time on hover), amounts,
//!   deadlines, who said a message; [`codes`]: the one table of known SAT and PAC codes.
//! - [`common`]: the page frame, the handler openings ([`common::Posted`]: session and CSRF
//!   checked; the row or its 404) and the redirect back to a document.
//! - [`login`]: the login page, sign in and out.
//! - [`dashboard`]: what is at risk, counts, failures by code, workers, the PAC's health;
//!   [`deadlines`]: the facturas globales due and the receptors' answers awaited.
//! - [`operate`]: pausing and resuming the PAC, the chart of stamps and errors per minute.
//! - [`lists`]: invoices by view, cancellations, the audit log; [`export`]: a list as CSV, and the
//!   accountant's month as a ZIP.
//! - [`documents`]: a payment's detail page, the XML and acuse, retry (one or many), SAT status;
//!   [`emails`]: a document's emails to its customer and *Resend*.
//! - [`cancel`]: the cancel form and request.
//! - [`refreeze`]: the refreeze form and action; [`fix`]: the fix form of a payment that
//!   needs attention, which issues its document once, or sends them all to the global.
//! - [`globals`]: the facturas globales, one with its sales, its replacement (motivo 01).
//! - [`findings`]: the reconciliation page and its actions.
//! - [`arca`]: the ARCA vouchers of Argentina (state, number, CAE), open ones first; blocked
//!   sequences, WSAA login refusals, and the actions on conflicts and refusals.
//! - [`arca_fix`]: an ARS sale held or refused, its buyer corrected and issued again.
//! - [`arca_print`]: an authorized ARCA voucher's PDF with ARCA's QR.
//! - [`reconcile`]: compares what the PAC holds for our keys and RFC with our records.

pub mod arca;
pub mod arca_fix;
pub mod arca_print;
pub mod auth;
pub mod cancel;
pub mod codes;
pub mod common;
pub mod dashboard;
pub mod deadlines;
pub mod documents;
pub mod emails;
pub mod export;
pub mod findings;
pub mod fix;
pub mod format;
pub mod globals;
pub mod lists;
pub mod login;
pub mod operate;
pub mod reconcile;
pub mod refreeze;

use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpResponse, web};

use crate::config::{AdminSettings, SecretString, Settings};
use crate::domain::LineState;
use crate::pac::PacClient;
use crate::pacsim::Sim;
use crate::store::Db;

/// The admin's own settings, from the `[admin]` table.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub password_hash: Option<String>,
    pub password: Option<String>,
    /// Always mark cookies `Secure` (also done per request when it came over TLS).
    pub secure_cookies: bool,
    pub session_ttl: Duration,
    /// How often reconciliation runs in the background; `None` = only on demand.
    pub reconcile_interval: Option<Duration>,
    /// A window closing within this is "at risk".
    pub at_risk: chrono::Duration,
    /// How often pages refresh themselves; 0 = never.
    pub refresh_seconds: u64,
}

impl AdminConfig {
    /// `[admin]`, checked when the settings were loaded.
    pub fn from_settings(s: &AdminSettings) -> AdminConfig {
        let expose = |p: &Option<SecretString>| p.as_ref().map(|p| p.expose().to_owned());
        let every = s.reconcile_interval_seconds;
        AdminConfig {
            password_hash: expose(&s.password_hash),
            password: expose(&s.password),
            secure_cookies: s.secure_cookies,
            session_ttl: Duration::from_secs(s.session_hours.max(1).saturating_mul(3600)),
            reconcile_interval: (every > 0).then(|| Duration::from_secs(every)),
            // A year is far past any window; the bound keeps the Duration finite.
            at_risk: chrono::Duration::hours(
                i64::try_from(s.at_risk_hours.min(8760)).unwrap_or(8760),
            ),
            refresh_seconds: s.refresh_seconds,
        }
    }
}

/// What the admin routes share besides [`crate::state::AppState`].
pub struct Admin {
    pub password_hash: String,
    pub limiter: crate::limiter::RateLimiter,
    /// Bounds the argon2 verifications running at once.
    pub password_gate: auth::PasswordGate,
    /// `[server] trusted_proxies`: whose forwarding headers name the real client.
    pub proxies: crate::proxy::TrustedProxies,
    pub secure_cookies: bool,
    pub session_ttl: Duration,
    pub reconcile_interval: Option<Duration>,
    pub pac: Arc<PacClient>,
    /// The in-process sandbox PAC, whose stamp list reconciliation can read by RFC.
    pub sandbox: Option<Arc<Sim>>,
    /// One reconciliation at a time per process.
    pub reconcile_lock: tokio::sync::Mutex<()>,
    /// Our RFC: reconciliation matches the PAC's stamps for it.
    pub emisor_rfc: String,
    /// SAT's window from Fecha to stamp (`[worker] window_hours`).
    pub window: chrono::Duration,
    /// `[admin] at_risk_hours`.
    pub at_risk: chrono::Duration,
    /// `[admin] refresh_seconds`.
    pub refresh_seconds: u64,
    /// The name of the PAC this appliance stamps with (`sandbox`, `sw`, `finkok`): what the
    /// admin pauses and resumes.
    pub pac_name: String,
    /// The backup PAC's pause name (`[pac.backup]`), paused and resumed on its own.
    pub backup_name: Option<String>,
    /// With `[email]` on, the domain of its `from`: a stamp adopted by reconciliation queues
    /// the customer's email.
    pub mail_domain: Option<String>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("secure_cookies", &self.secure_cookies)
            .field("session_ttl", &self.session_ttl)
            .field("pac", &self.pac)
            .finish_non_exhaustive()
    }
}

impl Admin {
    /// Resolves the password (generating one on the very first start) and keeps the PAC handle.
    pub async fn new(
        settings: &Settings,
        db: &Db,
        pac: Arc<PacClient>,
        sandbox: Option<Arc<Sim>>,
    ) -> anyhow::Result<Admin> {
        let cfg = AdminConfig::from_settings(&settings.admin);
        let password_hash =
            auth::resolve_password_hash(db, cfg.password_hash.as_deref(), cfg.password.as_deref())
                .await?;
        Ok(Admin {
            password_hash,
            limiter: auth::login_limiter(),
            password_gate: auth::PasswordGate::default(),
            proxies: crate::proxy::TrustedProxies::parse(&settings.server.trusted_proxies)
                .map_err(|e| anyhow::anyhow!("[server] trusted_proxies: {e}"))?,
            secure_cookies: cfg.secure_cookies,
            session_ttl: cfg.session_ttl,
            reconcile_interval: cfg.reconcile_interval,
            pac,
            sandbox,
            reconcile_lock: tokio::sync::Mutex::new(()),
            emisor_rfc: settings.emisor.rfc.clone(),
            window: chrono::Duration::hours(
                i64::try_from(settings.worker.window_hours).unwrap_or(72),
            ),
            at_risk: cfg.at_risk,
            refresh_seconds: cfg.refresh_seconds,
            pac_name: settings
                .pac_config()
                .map(|c| c.kind.name().to_owned())
                .unwrap_or_else(|_| "pac".to_owned()),
            backup_name: settings.pac_config().ok().and_then(|c| c.backup_name()),
            mail_domain: settings.email.message_domain(),
        })
    }
}

/// The largest admin form body accepted; larger ones are refused with 413 before being read.
pub const FORM_LIMIT_BYTES: usize = 64 * 1024;

/// Mounts `/admin`.
pub fn routes(cfg: &mut web::ServiceConfig, admin: web::Data<Admin>) {
    cfg.service(
        web::scope("/admin")
            .app_data(admin)
            .app_data(web::FormConfig::default().limit(FORM_LIMIT_BYTES))
            // The forms read as raw bytes (bulk retry) get the same limit.
            .app_data(web::PayloadConfig::new(FORM_LIMIT_BYTES))
            .route("", web::get().to(dashboard::dashboard))
            .route("/", web::get().to(dashboard::dashboard))
            .route("/login", web::get().to(login::login_page))
            .route("/login", web::post().to(login::login))
            .route("/logout", web::post().to(login::logout))
            .route("/static/{file}", web::get().to(static_file))
            .route("/invoices", web::get().to(lists::invoices))
            .route("/invoices.csv", web::get().to(export::invoices_csv))
            .route("/export/month", web::get().to(export::month_zip))
            .route("/errors/retry", web::post().to(dashboard::retry_group))
            .route("/errors/global", web::post().to(fix::send_to_global))
            .route("/pac/pause", web::post().to(operate::pause))
            .route("/pac/resume", web::post().to(operate::resume))
            .route("/invoices/retry", web::post().to(documents::bulk_retry))
            .route("/payments/{id}", web::get().to(documents::payment))
            .route("/payments/{id}/fix", web::get().to(fix::fix_form))
            .route("/payments/{id}/fix", web::post().to(fix::fix))
            .route("/documents/{id}", web::get().to(documents::document_page))
            .route("/documents/{id}/xml/{which}", web::get().to(documents::xml))
            .route("/documents/{id}/pdf", web::get().to(documents::pdf))
            .route("/documents/{id}/retry", web::post().to(documents::retry))
            .route("/documents/{id}/resend", web::post().to(emails::resend))
            .route("/documents/{id}/cancel", web::get().to(cancel::cancel_form))
            .route("/documents/{id}/cancel", web::post().to(cancel::cancel))
            .route(
                "/documents/{id}/refreeze",
                web::get().to(refreeze::refreeze_form),
            )
            .route(
                "/documents/{id}/refreeze",
                web::post().to(refreeze::refreeze),
            )
            .route(
                "/documents/{id}/sat-status",
                web::post().to(documents::sat_status),
            )
            .route("/globals", web::get().to(globals::globals))
            .route("/globals/{id}", web::get().to(globals::global))
            .route("/globals/{id}/replace", web::post().to(globals::replace))
            .route("/cancellations", web::get().to(lists::cancellations))
            .route("/cancellations/{id}/acuse", web::get().to(documents::acuse))
            .route("/reconcile", web::get().to(findings::reconcile))
            .route("/reconcile", web::post().to(findings::reconcile_now))
            .route(
                "/findings/{id}/cancel-extra",
                web::post().to(findings::cancel_extra),
            )
            .route(
                "/findings/{id}/resolve",
                web::post().to(findings::resolve_finding),
            )
            .route("/audit", web::get().to(lists::audit))
            .route("/arca", web::get().to(arca::vouchers))
            .route("/arca/reissue", web::post().to(arca::reissue))
            .route("/arca/login-now", web::post().to(arca::login_now))
            .route("/arca/correct", web::post().to(arca_fix::correct))
            .route("/arca/print", web::get().to(arca_print::print)),
    );
}

const ADMIN_CSS: &str = include_str!("../../static/admin.css");
const ADMIN_JS: &str = include_str!("../../static/admin.js");
const FAVICON: &str = include_str!("../../static/favicon.svg");

/// The embedded assets (no CDN; public, as the login page needs them).
async fn static_file(file: web::Path<String>) -> HttpResponse {
    let (body, ty) = match file.as_str() {
        "admin.css" => (ADMIN_CSS, "text/css; charset=utf-8"),
        "admin.js" => (ADMIN_JS, "text/javascript; charset=utf-8"),
        "favicon.svg" => (FAVICON, "image/svg+xml"),
        _ => return HttpResponse::NotFound().finish(),
    };
    HttpResponse::Ok()
        .content_type(ty)
        .insert_header(("Cache-Control", "public, max-age=3600"))
        .body(body)
}

pub use format::{age, local};

/// How a state reads in the admin, and its badge colour class: the one map tiles, tabs,
/// badges and detail pages use: a document's state, or the status of a payment without a
/// document (their labels are [`LineState::label`]).
pub fn state_label(state: impl Into<LineState>) -> (String, &'static str) {
    use crate::domain::{DocumentState as S, PaymentStatus as P};
    let state = state.into();
    let class = match state {
        LineState::Document(s) => match s {
            S::Pending | S::Stamping | S::ArcaPending => "info",
            S::RetryScheduled | S::Unknown => "warn",
            S::Stamped | S::Authorized => "ok",
            S::Failed | S::Expired | S::NeedsAttention | S::ArcaHeld => "bad",
            S::Superseded | S::Canceled => "muted",
        },
        LineState::Payment(p) => match p {
            P::InvoicePending | P::ArcaPending => "info",
            P::InGlobal | P::ArcaAuthorized => "ok",
            P::NeedsAttention | P::ArcaHeld => "bad",
            P::AwaitingGlobal | P::Refunded => "muted",
        },
    };
    (state.label().to_owned(), class)
}

/// The label and class of a state as text from a link (`?state=`): a text that names no state
/// stands for itself.
pub fn text_label(text: &str) -> (String, &'static str) {
    text.parse::<LineState>()
        .map_or_else(|_| (text.to_owned(), "muted"), state_label)
}

/// A cancellation's label (which depends on whether the receptor must accept) and class.
pub fn cancel_label(
    state: crate::domain::CancellationState,
    requires_acceptance: bool,
) -> (String, &'static str) {
    use crate::domain::CancellationState as C;
    let class = match state {
        C::Requested | C::Sending => "info",
        C::RetryScheduled | C::Unknown | C::PendingReceiver => "warn",
        C::Canceled => "muted",
        C::Rejected | C::Failed => "bad",
    };
    (state.label(requires_acceptance).to_owned(), class)
}
