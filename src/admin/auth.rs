//! Who may use the admin: one password (argon2), sessions in the database (the cookie carries a
//! random token, the table only its SHA-256), a CSRF token per session checked on every form,
//! a limit on login attempts per client address, and a bound on password checks running at
//! once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{FromRequest, HttpRequest, web};
use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use sha2::{Digest, Sha256};

use super::Admin;
use crate::error::AdminError;
use crate::limiter::RateLimiter;
use crate::state::AppState;
use crate::store::Db;

/// The session cookie.
pub const SESSION_COOKIE: &str = "af_session";
/// The login form's CSRF cookie (double submit: there is no session yet).
pub const LOGIN_CSRF_COOKIE: &str = "af_login_csrf";

/// Login attempts allowed per client address within [`LOGIN_WINDOW`] (a success clears them).
pub const LOGIN_MAX_FAILURES: usize = 5;
pub const LOGIN_WINDOW: Duration = Duration::from_secs(15 * 60);

/// 32 random bytes, hex.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Equal strings, compared in time independent of where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// An argon2id PHC string for `password`.
pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the admin password: {e}"))
}

/// Whether `password` matches the PHC string `hash`.
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A readable generated password: 20 characters from an alphabet without look-alikes.
pub fn generate_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    rand::random::<[u8; 20]>()
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

/// Where the admin password comes from, decided once at start.
///
/// `[admin] password_hash` (an argon2 PHC string) wins; `[admin] password` may hold a PHC
/// string too, or a plain password that is hashed in memory. With neither, the hash stored by
/// an earlier start is used; on the very first start a password is generated, its hash stored,
/// and the password printed once on standard error.
pub async fn resolve_password_hash(
    db: &Db,
    configured_hash: Option<&str>,
    configured_password: Option<&str>,
) -> anyhow::Result<String> {
    if let Some(h) = configured_hash.filter(|h| !h.is_empty()) {
        PasswordHash::new(h).map_err(|e| {
            anyhow::anyhow!("[admin] password_hash is not an argon2 PHC string: {e}")
        })?;
        return Ok(h.to_owned());
    }
    if let Some(p) = configured_password.filter(|p| !p.is_empty()) {
        if p.starts_with("$argon2") {
            PasswordHash::new(p)
                .map_err(|e| anyhow::anyhow!("[admin] password is not a valid PHC string: {e}"))?;
            return Ok(p.to_owned());
        }
        return hash_password(p).map_err(|e| anyhow::anyhow!(e));
    }
    if let Some(h) = db.admin_password_hash().await? {
        return Ok(h);
    }
    let password = generate_password();
    let hash = hash_password(&password).map_err(|e| anyhow::anyhow!(e))?;
    if db.store_admin_password_hash(&hash).await? {
        eprintln!(
            "\n  admin:      no [admin] password configured; generated one (shown only this once):\n              {password}\n              log in at /admin with it; set [admin] password_hash to choose your own\n"
        );
        Ok(hash)
    } else {
        // Another instance stored one first: use it (it printed the password).
        db.admin_password_hash()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the admin password hash vanished"))
    }
}

/// The login limiter: [`LOGIN_MAX_FAILURES`] attempts per client address within
/// [`LOGIN_WINDOW`]; a successful login clears its client's count
/// ([`crate::limiter::RateLimiter::forget`]).
pub fn login_limiter() -> RateLimiter {
    RateLimiter::new(LOGIN_MAX_FAILURES, LOGIN_WINDOW)
}

/// Password checks running at once. Each argon2 verification holds about 19 MiB (the
/// default's memory cost), so a burst of logins must queue rather than exhaust a small VM.
pub const LOGIN_VERIFY_CONCURRENCY: usize = 2;
/// How long a login waits for a free verification slot before being told to try again.
pub const LOGIN_VERIFY_WAIT: Duration = Duration::from_secs(10);

/// Runs argon2 verifications, at most [`LOGIN_VERIFY_CONCURRENCY`] at once, off the async
/// workers; counts them (runs, and the most ever running together) for tests.
#[derive(Debug)]
pub struct PasswordGate {
    slots: std::sync::Arc<tokio::sync::Semaphore>,
    running: std::sync::Arc<AtomicUsize>,
    peak: std::sync::Arc<AtomicUsize>,
    runs: AtomicU64,
}

impl Default for PasswordGate {
    fn default() -> Self {
        Self {
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(LOGIN_VERIFY_CONCURRENCY)),
            running: Default::default(),
            peak: Default::default(),
            runs: AtomicU64::new(0),
        }
    }
}

impl PasswordGate {
    /// Whether `password` matches `hash`; `Err(AdminError::Busy)` when no slot frees up in
    /// time.
    pub async fn verify(&self, password: String, hash: String) -> Result<bool, AdminError> {
        let permit = tokio::time::timeout(LOGIN_VERIFY_WAIT, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| AdminError::Busy)?
            .map_err(|_| AdminError::Busy)?;
        self.runs.fetch_add(1, Ordering::Relaxed);
        let running = self.running.clone();
        let peak = self.peak.clone();
        // The permit moves into the blocking task: a login whose client hangs up still holds
        // its slot until argon2 is done with the memory.
        web::block(move || {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let ok = verify_password(&password, &hash);
            running.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            ok
        })
        .await
        .map_err(|_| AdminError::Busy)
    }

    /// Verifications started since the process began.
    pub fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// The most verifications ever running at the same moment.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// The client of an admin request: the TCP peer, or the client a trusted proxy forwards for
/// (`[server] trusted_proxies`). Limits and audit entries use its address.
pub fn client(admin: &Admin, req: &HttpRequest) -> crate::proxy::Client {
    admin.proxies.client(req)
}

/// Whether cookies must be `Secure`: configured, or the client reached a trusted proxy over
/// TLS (we do not terminate TLS ourselves).
pub fn secure(admin: &Admin, req: &HttpRequest) -> bool {
    admin.secure_cookies || client(admin, req).https
}

/// A cookie with the admin's attributes.
pub fn cookie<'c>(
    name: &'c str,
    value: String,
    secure: bool,
    max_age: Option<Duration>,
) -> Cookie<'c> {
    let mut c = Cookie::build(name, value)
        .path("/admin")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .finish();
    if let Some(age) = max_age {
        c.set_max_age(actix_web::cookie::time::Duration::seconds(
            i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
        ));
    }
    c
}

/// A signed-in admin: every admin route but the login page takes one, so a request without a
/// live session never reaches a handler.
#[derive(Debug, Clone)]
pub struct Session {
    pub actor: String,
    pub csrf: String,
    pub token_hash: String,
    /// `[admin] refresh_seconds`, for the pages this session is shown.
    pub refresh_seconds: u64,
}

impl Session {
    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, token: &str) -> Result<(), AdminError> {
        if same(token, &self.csrf) {
            Ok(())
        } else {
            Err(AdminError::Csrf)
        }
    }
}

impl FromRequest for Session {
    type Error = AdminError;
    type Future = Pin<Box<dyn Future<Output = Result<Session, AdminError>>>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let token = req.cookie(SESSION_COOKIE).map(|c| c.value().to_owned());
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let refresh_seconds = req
            .app_data::<web::Data<Admin>>()
            .map_or(0, |a| a.refresh_seconds);
        // Where to come back after signing in: the page asked for (the dashboard is where a
        // login goes anyway), never a form's target.
        let asked = (req.method() == actix_web::http::Method::GET)
            .then(|| req.uri().path_and_query().map_or("/admin", |p| p.as_str()))
            .filter(|pq| *pq != "/admin")
            .map(super::common::percent_encode);
        Box::pin(async move {
            let (Some(token), Some(state)) = (token, state) else {
                return Err(AdminError::LoginRequired(asked));
            };
            let hash = token_hash(&token);
            match state.db.admin_session(&hash).await? {
                Some(s) => Ok(Session {
                    actor: s.actor,
                    csrf: s.csrf_token,
                    token_hash: hash,
                    refresh_seconds,
                }),
                None => Err(AdminError::LoginRequired(asked)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_hash_and_verify() {
        let h = hash_password("correct horse").expect("hash");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("correct horsE", &h));
        assert!(!verify_password("x", "not a hash"));
        assert_eq!(generate_password().len(), 20);
    }

    #[test]
    fn equal_strings_compare_in_constant_time() {
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
