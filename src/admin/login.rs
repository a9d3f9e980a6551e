//! Signing in and out: the login page with its double-submit CSRF cookie, the password check
//! behind the limiter, and logout.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::Utc;
use serde::Deserialize;

use super::Admin;
use super::auth;
use super::common::*;
use crate::error::AdminError;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "admin/login.html")]
pub struct LoginPage {
    pub csrf: String,
    pub error: Option<String>,
    pub notice: Option<String>,
    /// The name typed before (kept after a wrong password).
    pub name: String,
    /// Where to go after signing in (an admin page), or empty for the dashboard.
    pub next: String,
}

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    pub notice: Option<String>,
    pub next: Option<String>,
}

/// `next` when it is a page of this admin (a path under `/admin`, not the login itself), so
/// that a crafted link cannot send a fresh session elsewhere.
pub fn safe_next(next: &str) -> Option<&str> {
    let path = next.split(['?', '#']).next().unwrap_or_default();
    let ours = path == "/admin" || path.starts_with("/admin/");
    let plain = next
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'\\' && b != b'"' && b != b'<');
    (ours && plain && !path.starts_with("/admin/login") && !path.starts_with("/admin/logout"))
        .then_some(next)
}

pub async fn login_page(
    req: HttpRequest,
    admin: web::Data<Admin>,
    q: web::Query<LoginQuery>,
) -> Result<HttpResponse, AdminError> {
    let next = q.next.as_deref().and_then(safe_next).unwrap_or_default();
    login_response(
        &req,
        &admin,
        LoginPage {
            csrf: String::new(),
            error: None,
            notice: q.notice.as_deref().and_then(notice_text).map(str::to_owned),
            name: String::new(),
            next: next.to_owned(),
        },
        actix_web::http::StatusCode::OK,
    )
}

/// The login form `page` with a fresh double-submit CSRF cookie.
pub fn login_response(
    req: &HttpRequest,
    admin: &Admin,
    mut page: LoginPage,
    status: actix_web::http::StatusCode,
) -> Result<HttpResponse, AdminError> {
    let csrf = auth::random_token();
    page.csrf = csrf.clone();
    let mut resp = html_with(&page, status)?;
    resp.add_cookie(&auth::cookie(
        auth::LOGIN_CSRF_COOKIE,
        csrf,
        auth::secure(admin, req),
        Some(std::time::Duration::from_secs(3600)),
    ))
    .map_err(|e| AdminError::Invalid(e.to_string()))?;
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------
// Actions

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub next: String,
}

pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, AdminError> {
    let ip = auth::client(&admin, &req).ip;
    if let Some(wait) = admin.limiter.blocked(ip) {
        return Err(AdminError::TooManyAttempts(wait));
    }
    let cookie = req
        .cookie(auth::LOGIN_CSRF_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    if cookie.is_empty() || !auth::same(&cookie, &form.csrf) {
        return Err(AdminError::Csrf);
    }
    let next = safe_next(&form.next).unwrap_or("/admin").to_owned();
    let name = form.name.trim().to_owned();
    // The login page again, with why the attempt was refused; the name and the page asked
    // for are kept, the password is not.
    let refused = |error: &str, status| {
        let page = LoginPage {
            csrf: String::new(),
            error: Some(error.into()),
            notice: None,
            name: name.chars().take(64).collect(),
            next: next.clone(),
        };
        login_response(&req, &admin, page, status)
    };
    if name.is_empty() || name.chars().count() > 64 {
        return refused(
            "Give your name (up to 64 characters): every action is recorded with it.",
            StatusCode::BAD_REQUEST,
        );
    }
    // Counted before argon2 runs: parallel guesses cannot all slip past the check above.
    admin
        .limiter
        .attempt(ip)
        .map_err(AdminError::TooManyAttempts)?;
    let ok = admin
        .password_gate
        .verify(form.password.clone(), admin.password_hash.clone())
        .await?;
    if !ok {
        tracing::warn!(%ip, "admin: failed login");
        state
            .db
            .record_admin_action(&name, "login_failed", "session", &ip.to_string(), None)
            .await?;
        return refused("Wrong password.", StatusCode::UNAUTHORIZED);
    }
    admin.limiter.forget(ip);
    let token = auth::random_token();
    let csrf = auth::random_token();
    let expires = Utc::now()
        + chrono::Duration::from_std(admin.session_ttl).unwrap_or(chrono::Duration::hours(12));
    state
        .db
        .create_admin_session(&auth::token_hash(&token), &csrf, &name, expires)
        .await?;
    state
        .db
        .record_admin_action(&name, "login", "session", &ip.to_string(), None)
        .await?;
    let secure = auth::secure(&admin, &req);
    let mut resp = see_other(next.clone());
    let set = |resp: &mut HttpResponse, c| {
        resp.add_cookie(&c)
            .map_err(|e| AdminError::Invalid(e.to_string()))
    };
    set(
        &mut resp,
        auth::cookie(auth::SESSION_COOKIE, token, secure, Some(admin.session_ttl)),
    )?;
    set(
        &mut resp,
        auth::cookie(
            auth::LOGIN_CSRF_COOKIE,
            String::new(),
            secure,
            Some(std::time::Duration::ZERO),
        ),
    )?;
    Ok(resp)
}

pub async fn logout(
    req: HttpRequest,
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, _): Posted,
) -> Result<HttpResponse, AdminError> {
    state.db.delete_admin_session(&session.token_hash).await?;
    state
        .db
        .record_admin_action(&session.actor, "logout", "session", "", None)
        .await?;
    let mut resp = see_other("/admin/login?notice=logged_out".into());
    resp.add_cookie(&auth::cookie(
        auth::SESSION_COOKIE,
        String::new(),
        auth::secure(&admin, &req),
        Some(std::time::Duration::ZERO),
    ))
    .map_err(|e| AdminError::Invalid(e.to_string()))?;
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn only_admin_pages_are_returned_to() {
        assert_eq!(
            safe_next("/admin/invoices?view=all&q=ab"),
            Some("/admin/invoices?view=all&q=ab")
        );
        assert_eq!(safe_next("/admin"), Some("/admin"));
        for bad in [
            "https://evil.example/admin",
            "//evil.example/admin",
            "/adminx",
            "/admin/login?next=/admin",
            "/admin/logout",
            "/admin/\\evil",
            "/admin/a b",
            "",
        ] {
            assert_eq!(safe_next(bad), None, "{bad}");
        }
    }
}
