//! What every admin handler shares: the page frame ([`Layout`], [`html`], the notices), the
//! opening of a handler (the row it names, or the 404 that says which) and the redirect back.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::auth::Session;
use super::format::When;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::{ActionRow, DocFull};

/// Rows per list page.
pub const PAGE_SIZE: i64 = 50;

/// The last list page one can ask for: far past any real list, and `(page - 1) × PAGE_SIZE`
/// stays far within an `i64` and what SQLite and PostgreSQL take as an OFFSET.
pub const MAX_PAGE: i64 = 1_000_000;

/// `?page=` as typed (kept as text so that no value is a 400): missing, zero, negative or not a
/// number is the first page; beyond [`MAX_PAGE`] (even beyond an `i64`) is [`MAX_PAGE`].
pub fn page_number(raw: Option<&str>) -> i64 {
    match raw.map(|r| r.trim().parse::<i64>()) {
        Some(Ok(n)) => n.clamp(1, MAX_PAGE),
        Some(Err(e)) if *e.kind() == std::num::IntErrorKind::PosOverflow => MAX_PAGE,
        _ => 1,
    }
}

/// What every page's frame needs.
pub struct Layout {
    pub title: String,
    pub actor: String,
    pub csrf: String,
    pub nav: &'static str,
    pub notice: Option<String>,
    /// What the global search box shows (the search of an invoices list).
    pub q: String,
    /// Seconds between live refreshes of the page; 0 = none.
    pub refresh: u64,
}

impl Layout {
    pub fn new(
        s: &Session,
        title: impl Into<String>,
        nav: &'static str,
        notice: Option<&str>,
    ) -> Self {
        Layout {
            title: title.into(),
            actor: s.actor.clone(),
            csrf: s.csrf.clone(),
            nav,
            notice: notice.and_then(notice_text).map(str::to_owned),
            q: String::new(),
            refresh: s.refresh_seconds,
        }
    }
}

/// The fixed messages a redirect may ask for (`?notice=…`): never text from the URL.
pub fn notice_text(key: &str) -> Option<&'static str> {
    Some(match key {
        "retried" => {
            "Sent back to the queue with the same frozen bytes and key; a worker will stamp it."
        }
        "asked" => {
            "Its outcome at the PAC is unknown: a worker asks the PAC now, by the same key, and sends nothing before it answers."
        }
        "bulk_retried" => {
            "The selected documents were sent back to the queue (those whose outcome is unknown are asked for first)."
        }
        "cancel_requested" => {
            "Cancellation request frozen; a worker sends it to the PAC and follows its status."
        }
        "refrozen" => {
            "A new generation was frozen with today's Fecha; a worker will seal and stamp it."
        }
        "adopted" => {
            "The PAC already held a stamp for this document: it was adopted into the record and flagged."
        }
        "reconciled" => "Reconciliation finished; see the findings below.",
        "global_replacement" => {
            "The replacement global was frozen with the same sales; once a worker stamps it, the global it replaces is cancelled with motivo 01."
        }
        "resolved" => "Finding closed.",
        "arca_reissued" => {
            "The sale goes back to ARCA under its next attempt key; the conflict stays as it was."
        }
        "arca_corrected" => {
            "The buyer was corrected: the sale goes back to ARCA under a new key; the refused one stays as it was."
        }
        "arca_login_now" => "The WSAA wait is over: the next ARCA round logs in.",
        "sat_status" => "SAT status queried; the answer is recorded below.",
        "resent" => "A new email with the XML and the PDF was queued; see Emails below.",
        "logged_out" => "Signed out.",
        "none_selected" => {
            "Nothing was selected: tick the documents to retry first, or use \"select all\"."
        }
        "paused" => "Stamping at this PAC is paused: nothing is claimed until it is resumed.",
        "resumed" => "Stamping at this PAC is resumed.",
        "group_retried" => {
            "Every failed document with this code was sent back to the queue with the same bytes."
        }
        "sent_to_global" => {
            "The sales that could be were sent to the factura global: each goes into its period's global on the next run. Those still listed need another fix (currency, test mode)."
        }
        "reissued" => {
            "The corrected data was frozen as a new document; a worker will seal and stamp it."
        }
        _ => return None,
    })
}

/// An HTML page, never cached, never framed.
pub fn html<T: Template>(t: &T) -> Result<HttpResponse, AdminError> {
    let body = t.render()?;
    let mut r = HttpResponse::Ok();
    r.content_type("text/html; charset=utf-8");
    for h in crate::error::SECURITY_HEADERS {
        r.insert_header(h);
    }
    Ok(r.body(body))
}

/// An HTML page answered with `status` (a form shown again with its error).
pub fn html_with<T: Template>(t: &T, status: StatusCode) -> Result<HttpResponse, AdminError> {
    let mut resp = html(t)?;
    *resp.status_mut() = status;
    Ok(resp)
}

#[derive(Debug, Deserialize)]
pub struct NoticeQuery {
    pub notice: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Openings and redirects
pub fn see_other(location: String) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header(("Location", location))
        .finish()
}

/// A form that carries the session's CSRF token.
pub trait HasCsrf {
    fn csrf(&self) -> &str;
}

impl HasCsrf for CsrfForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The opening of every admin action: a signed-in admin's form whose CSRF token is the
/// session's. Takes the place of the `Session` argument; the session and the form are read
/// together, as separate arguments were, so the same request gets the same refusal.
pub struct Posted<T = CsrfForm>(pub Session, pub T);

impl<T: DeserializeOwned + HasCsrf + 'static> FromRequest for Posted<T> {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let both = <(Session, web::Form<T>)>::from_request(req, payload);
        Box::pin(async move {
            let (session, form) = both.await?;
            session.check_csrf(form.csrf())?;
            Ok(Posted(session, form.into_inner()))
        })
    }
}

/// The row a route names by id, or the 404 that says which (`no finding #7`).
pub fn found<T>(row: Option<T>, what: &str, id: i64) -> Result<T, AdminError> {
    row.ok_or_else(|| AdminError::NotFound(format!("no {what} #{id}")))
}

/// The document a route names (`/documents/{id}/…`), or 404.
pub async fn document(state: &AppState, id: i64) -> Result<DocFull, AdminError> {
    found(state.db.document(id).await?, "document", id)
}

/// After an action on a document: back to it on its payment's page, with a fixed notice.
pub fn back_to_document(d: &DocFull, notice: &str) -> HttpResponse {
    see_other(format!(
        "/admin/payments/{}?notice={notice}#doc-{}",
        d.payment_id, d.id
    ))
}

/// `application/x-www-form-urlencoded` pairs, repeated keys kept (checkbox lists).
pub fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |b: u8| (b as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

pub struct ActionView {
    pub at: When,
    pub actor: String,
    pub action: String,
    pub detail: String,
}

impl ActionView {
    pub(super) fn of(a: &ActionRow) -> Self {
        ActionView {
            at: When::of(a.at, chrono::Utc::now()),
            actor: a.actor.clone(),
            action: a.action.clone(),
            detail: a.detail.clone().unwrap_or_default(),
        }
    }
}

/// `s` percent-encoded for a query string or a form body: every byte but the unreserved
/// `A-Z a-z 0-9 - _ .` as `%XX`.
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_pairs_keep_repeated_keys_and_decode() {
        let p = form_pairs(b"csrf=ab%2Bc&ids=1&ids=22&name=Ana+Mar%C3%ADa&x");
        assert_eq!(
            p,
            vec![
                ("csrf".into(), "ab+c".into()),
                ("ids".into(), "1".into()),
                ("ids".into(), "22".into()),
                ("name".into(), "Ana María".into()),
                ("x".into(), String::new()),
            ]
        );
        assert_eq!(form_pairs(b"a=%zz%4")[0].1, "%zz%4");
    }
}
