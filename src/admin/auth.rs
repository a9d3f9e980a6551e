//! Who may use the admin: one password (argon2), sessions in the database (the cookie carries a
//! random token, the table only its SHA-256), a CSRF token per session checked on every form,
//! a limit on login attempts per client address, and a bound on password checks running at
//! once.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{FromRequest, HttpRequest, web};
use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use sha2::{Digest, Sha256};

use super::Admin;
use crate::error::AdminError;
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

/// Login attempts per client, in this process. An attempt is counted when it starts, before
/// the password is checked, so parallel guesses cannot all pass the check; a successful login
/// clears its client's count. Memory is bounded: expired attempts are dropped on every call
/// (oldest first, from one time-ordered queue), and at most [`LOGIN_MAX_CLIENTS`] clients are
/// tracked, the one whose oldest attempt is oldest giving way first.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    inner: Mutex<LimiterState>,
}

/// Clients tracked at once by the limiter.
pub const LOGIN_MAX_CLIENTS: usize = 10_000;

#[derive(Debug, Default)]
struct LimiterState {
    /// Per client (its [`crate::proxy::limiter_key`]): the sequence numbers and times of its
    /// attempts still in the window, oldest first.
    clients: HashMap<IpAddr, VecDeque<(u64, Instant)>>,
    /// Every counted attempt in order: (sequence, client, time).
    queue: VecDeque<(u64, IpAddr, Instant)>,
    next: u64,
}

impl LimiterState {
    /// Drops what left the window; then, while over `max` clients (or `max` clients' worth of
    /// attempts), the client with the oldest attempt.
    fn prune(&mut self, now: Instant, max: usize) {
        while let Some(&(seq, ip, at)) = self.queue.front() {
            let expired = now.duration_since(at) >= LOGIN_WINDOW;
            let over = self.clients.len() > max
                || self.queue.len() > max.saturating_mul(LOGIN_MAX_FAILURES);
            if !expired && !over {
                break;
            }
            self.queue.pop_front();
            let Some(list) = self.clients.get_mut(&ip) else {
                continue;
            };
            // Entries of a client cleared since (a success, an eviction) match nothing.
            if list.front().is_some_and(|(s, _)| *s == seq) {
                if expired {
                    list.pop_front();
                } else {
                    list.clear();
                }
                if list.is_empty() {
                    self.clients.remove(&ip);
                }
            }
        }
    }

    fn wait(list: &VecDeque<(u64, Instant)>, now: Instant) -> Option<Duration> {
        (list.len() >= LOGIN_MAX_FAILURES).then(|| {
            list.front().map_or(LOGIN_WINDOW, |(_, first)| {
                LOGIN_WINDOW.saturating_sub(now.duration_since(*first))
            })
        })
    }
}

impl LoginLimiter {
    fn state(&self) -> std::sync::MutexGuard<'_, LimiterState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some(wait)` when `ip` has used up its attempts (nothing is counted).
    pub fn blocked(&self, ip: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let mut st = self.state();
        st.prune(now, LOGIN_MAX_CLIENTS);
        st.clients
            .get(&crate::proxy::limiter_key(ip))
            .and_then(|list| LimiterState::wait(list, now))
    }

    /// Counts an attempt by `ip`, or refuses it with the wait when its attempts are used up.
    pub fn attempt(&self, ip: IpAddr) -> Result<(), Duration> {
        self.attempt_bounded(ip, LOGIN_MAX_CLIENTS)
    }

    fn attempt_bounded(&self, ip: IpAddr, max_clients: usize) -> Result<(), Duration> {
        let key = crate::proxy::limiter_key(ip);
        let now = Instant::now();
        let mut st = self.state();
        st.prune(now, max_clients);
        if let Some(wait) = st
            .clients
            .get(&key)
            .and_then(|list| LimiterState::wait(list, now))
        {
            return Err(wait);
        }
        let seq = st.next;
        st.next += 1;
        st.clients.entry(key).or_default().push_back((seq, now));
        st.queue.push_back((seq, key, now));
        // A new client may have made one too many.
        st.prune(now, max_clients);
        Ok(())
    }

    pub fn succeeded(&self, ip: IpAddr) {
        self.state().clients.remove(&crate::proxy::limiter_key(ip));
    }

    /// Clients tracked now (for tests and diagnostics).
    pub fn tracked(&self) -> usize {
        self.state().clients.len()
    }
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
    fn the_limiter_counts_attempts_before_the_password_is_checked() {
        let l = LoginLimiter::default();
        let ip = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..LOGIN_MAX_FAILURES {
            assert!(l.blocked(ip).is_none());
            assert!(l.attempt(ip).is_ok());
        }
        // The next attempt is refused before any password is looked at.
        assert!(l.blocked(ip).is_some());
        assert!(l.attempt(ip).is_err());
        assert!(l.blocked(IpAddr::from([10, 0, 0, 2])).is_none());
        l.succeeded(ip);
        assert!(l.blocked(ip).is_none());
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }

    #[test]
    fn the_limiter_never_tracks_more_than_its_bound() {
        let l = LoginLimiter::default();
        for i in 0..500u32 {
            assert!(
                l.attempt_bounded(IpAddr::from(i.to_be_bytes()), 100)
                    .is_ok()
            );
            assert!(l.tracked() <= 100, "{} clients tracked", l.tracked());
        }
        assert!(l.state().queue.len() <= 100 * LOGIN_MAX_FAILURES);
        // The newest clients are the ones kept, with their counts.
        let last = IpAddr::from(499u32.to_be_bytes());
        for _ in 1..LOGIN_MAX_FAILURES {
            assert!(l.attempt_bounded(last, 100).is_ok());
        }
        assert!(l.attempt_bounded(last, 100).is_err());
        // A client cleared by a success and coming back is counted afresh, not by its old
        // entries still in the queue.
        let again = IpAddr::from(498u32.to_be_bytes());
        l.succeeded(again);
        for _ in 0..LOGIN_MAX_FAILURES {
            assert!(l.attempt_bounded(again, 100).is_ok());
        }
        assert!(l.attempt_bounded(again, 100).is_err());
        // One IPv6 /64 is one client.
        let a: IpAddr = "2001:db8:0:1::1".parse().expect("v6");
        let b: IpAddr = "2001:db8:0:1::2".parse().expect("v6");
        for _ in 0..LOGIN_MAX_FAILURES {
            assert!(l.attempt(a).is_ok());
        }
        assert!(l.attempt(b).is_err());
    }

    #[test]
    fn expired_attempts_are_dropped_on_every_call() {
        let mut st = LimiterState::default();
        let long_ago = Instant::now()
            .checked_sub(LOGIN_WINDOW + Duration::from_secs(1))
            .expect("an instant 15 minutes back");
        for i in 0..50u32 {
            let ip = IpAddr::from(i.to_be_bytes());
            st.clients
                .entry(ip)
                .or_default()
                .push_back((u64::from(i), long_ago));
            st.queue.push_back((u64::from(i), ip, long_ago));
        }
        st.next = 50;
        let l = LoginLimiter {
            inner: Mutex::new(st),
        };
        assert!(l.blocked(IpAddr::from([192, 0, 2, 1])).is_none());
        assert_eq!(l.tracked(), 0);
        assert!(l.state().queue.is_empty());
    }
}
