//! Who may use the admin: one password (argon2), sessions in the database (the cookie carries a
//! random token, the table only its SHA-256), a CSRF token per session checked on every form,
//! and a limit on failed logins per client address.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{FromRequest, HttpRequest, web};
use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use sha2::{Digest, Sha256};

use super::Admin;
use crate::error::AdminError;
use crate::startup::AppState;
use crate::store::Db;

/// The session cookie.
pub const SESSION_COOKIE: &str = "af_session";
/// The login form's CSRF cookie (double submit: there is no session yet).
pub const LOGIN_CSRF_COOKIE: &str = "af_login_csrf";

/// Failed logins allowed per client address within [`LOGIN_WINDOW`].
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

/// Failed logins per client address, in this process.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    failures: Mutex<HashMap<IpAddr, Vec<Instant>>>,
}

impl LoginLimiter {
    /// `Some(wait)` when `ip` has used up its attempts.
    pub fn blocked(&self, ip: IpAddr) -> Option<Duration> {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let list = map.entry(ip).or_default();
        list.retain(|t| now.duration_since(*t) < LOGIN_WINDOW);
        if list.len() >= LOGIN_MAX_FAILURES {
            list.first()
                .map(|first| LOGIN_WINDOW.saturating_sub(now.duration_since(*first)))
        } else {
            None
        }
    }

    pub fn failed(&self, ip: IpAddr) {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(ip).or_default().push(Instant::now());
        // Keep the table small under a spray of addresses.
        if map.len() > 10_000 {
            let now = Instant::now();
            map.retain(|_, v| v.iter().any(|t| now.duration_since(*t) < LOGIN_WINDOW));
        }
    }

    pub fn succeeded(&self, ip: IpAddr) {
        let mut map = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&ip);
    }
}

/// The client address the limiter counts: the TCP peer (headers can be forged).
pub fn client_ip(req: &HttpRequest) -> IpAddr {
    req.peer_addr()
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

/// Whether cookies must be `Secure`: configured, or the request came over TLS (directly or
/// through a proxy that says so).
pub fn secure(admin: &Admin, req: &HttpRequest) -> bool {
    admin.secure_cookies || req.connection_info().scheme() == "https"
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
        Box::pin(async move {
            let (Some(token), Some(state)) = (token, state) else {
                return Err(AdminError::LoginRequired);
            };
            let hash = token_hash(&token);
            match state.db.admin_session(&hash).await? {
                Some(s) => Ok(Session {
                    actor: s.actor,
                    csrf: s.csrf_token,
                    token_hash: hash,
                }),
                None => Err(AdminError::LoginRequired),
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
    fn the_limiter_blocks_after_the_allowed_failures() {
        let l = LoginLimiter::default();
        let ip = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..LOGIN_MAX_FAILURES {
            assert!(l.blocked(ip).is_none());
            l.failed(ip);
        }
        assert!(l.blocked(ip).is_some());
        assert!(l.blocked(IpAddr::from([10, 0, 0, 2])).is_none());
        l.succeeded(ip);
        assert!(l.blocked(ip).is_none());
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
