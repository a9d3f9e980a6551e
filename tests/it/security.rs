//! Security properties over HTTP, on SQLite and PostgreSQL: every admin route refuses a request
//! without a live session, every admin form refuses a missing or foreign CSRF token, and bodies
//! over the configured limit are refused with 413 as soon as the limit is crossed, before the
//! whole body is read. (Secrets in logs: `tests/it/secrets_in_logs.rs`.)
//!
//! The admin routes are read from the route table in `src/admin/mod.rs`, so a route added there
//! but not classified here fails the test.

use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use autofactura::admin::auth;
use autofactura::webhooks::{signature, stripe};
use chrono::Utc;
use support::admin::{Browser, admin_app, count, pay, rejected, stamped};
use support::{Backend, MP_SECRET, STRIPE_SECRET, TestApp, exec_sql};

/// Who may use an admin route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The login page, its form (own double-submit CSRF) and the embedded assets.
    Public,
    /// A page: needs a live session.
    Page,
    /// A form: needs a live session and its CSRF token.
    Form,
}

/// Every admin route (method, path under `/admin`) and who may use it. Must list exactly the
/// routes registered in `src/admin/mod.rs`.
const ADMIN_ROUTES: &[(&str, &str, Access)] = &[
    ("GET", "", Access::Page),
    ("GET", "/", Access::Page),
    ("GET", "/login", Access::Public),
    ("POST", "/login", Access::Public),
    ("POST", "/logout", Access::Form),
    ("GET", "/static/{file}", Access::Public),
    ("GET", "/invoices", Access::Page),
    ("POST", "/invoices/retry", Access::Form),
    ("GET", "/payments/{id}", Access::Page),
    ("GET", "/documents/{id}/xml/{which}", Access::Page),
    ("POST", "/documents/{id}/retry", Access::Form),
    ("GET", "/documents/{id}/cancel", Access::Page),
    ("POST", "/documents/{id}/cancel", Access::Form),
    ("GET", "/documents/{id}/refreeze", Access::Page),
    ("POST", "/documents/{id}/refreeze", Access::Form),
    ("POST", "/documents/{id}/sat-status", Access::Form),
    ("POST", "/documents/{id}/resend", Access::Form),
    ("GET", "/globals", Access::Page),
    ("GET", "/globals/{id}", Access::Page),
    ("POST", "/globals/{id}/replace", Access::Form),
    ("GET", "/cancellations", Access::Page),
    ("GET", "/cancellations/{id}/acuse", Access::Page),
    ("GET", "/reconcile", Access::Page),
    ("POST", "/reconcile", Access::Form),
    ("POST", "/findings/{id}/cancel-extra", Access::Form),
    ("POST", "/findings/{id}/resolve", Access::Form),
    ("GET", "/audit", Access::Page),
    ("GET", "/invoices.csv", Access::Page),
    ("POST", "/errors/retry", Access::Form),
    ("POST", "/errors/global", Access::Form),
    ("POST", "/pac/pause", Access::Form),
    ("POST", "/pac/resume", Access::Form),
    ("GET", "/payments/{id}/fix", Access::Page),
    ("POST", "/payments/{id}/fix", Access::Form),
    ("GET", "/documents/{id}", Access::Page),
    ("GET", "/documents/{id}/pdf", Access::Page),
    ("GET", "/export/month", Access::Page),
    ("GET", "/arca", Access::Page),
    ("POST", "/arca/reissue", Access::Form),
    ("POST", "/arca/login-now", Access::Form),
    ("POST", "/arca/correct", Access::Form),
    ("GET", "/arca/print", Access::Page),
];

/// The `(METHOD, path)` pairs registered by `admin::routes`, read from its source: each
/// `.route("path", web::method()…)` call.
fn registered_admin_routes() -> BTreeSet<(String, String)> {
    let src = include_str!("../../src/admin/mod.rs");
    let start = src
        .find("pub fn routes(")
        .expect("admin::routes in src/admin/mod.rs");
    let body = &src[start..];
    let end = body.find("\n}\n").expect("end of admin::routes");
    let mut found = BTreeSet::new();
    for call in body[..end].split(".route(").skip(1) {
        let call = call.trim_start();
        let path = call
            .strip_prefix('"')
            .and_then(|rest| rest.split_once('"'))
            .map(|(p, _)| p.to_owned())
            .unwrap_or_else(|| panic!("a route whose path is not a literal: {call}"));
        let method = ["get", "post", "put", "patch", "delete", "head"]
            .iter()
            .find(|m| call.contains(&format!("web::{m}()")))
            .unwrap_or_else(|| panic!("route {path}: method not recognised"))
            .to_ascii_uppercase();
        found.insert((method, path));
    }
    found
}

#[test]
fn the_route_list_here_is_every_route_the_admin_registers() {
    let registered = registered_admin_routes();
    assert!(
        registered.len() > 20,
        "parsed too few routes: {registered:?}"
    );
    let listed: BTreeSet<(String, String)> = ADMIN_ROUTES
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(listed.len(), ADMIN_ROUTES.len(), "a route is listed twice");
    let missing: Vec<_> = registered.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&registered).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "classify new admin routes in ADMIN_ROUTES (missing: {missing:?}; no longer registered: {stale:?})"
    );
}

/// Ids that make each route pattern concrete and meaningful: with a session, each action would
/// really do something to these rows.
struct Fixture {
    failed: i64,
    stamped: i64,
    payment: i64,
    finding: i64,
}

async fn fixture(app: &TestApp) -> Fixture {
    let failed = rejected(app, "sec-failed", "CFDI40108", "El TipoDeComprobante …").await;
    let stamped_id = pay(app, "sec-stamped").await;
    let uuid = stamped(app, stamped_id).await;
    let payment = app
        .db
        .document(stamped_id)
        .await
        .expect("db")
        .expect("document")
        .payment_id;
    app.db
        .record_finding(
            "duplicate",
            Some(stamped_id),
            &uuid,
            None,
            "a second live UUID",
        )
        .await
        .expect("finding");
    let finding = app.db.findings(None, None).await.expect("findings")[0].id;
    Fixture {
        failed,
        stamped: stamped_id,
        payment,
        finding,
    }
}

impl Fixture {
    /// The concrete path for a route pattern.
    fn path(&self, pattern: &str) -> String {
        let id = if pattern.starts_with("/documents/{id}/retry")
            || pattern.starts_with("/documents/{id}/refreeze")
        {
            self.failed
        } else if pattern.starts_with("/payments/") {
            self.payment
        } else if pattern.starts_with("/findings/") {
            self.finding
        } else {
            self.stamped
        };
        format!(
            "/admin{}",
            pattern
                .replace("{id}", &id.to_string())
                .replace("{which}", "stamped")
                .replace("{file}", "admin.css")
        )
    }

    /// A form that the route would act on if the session and token were right.
    fn form<'a>(&self, pattern: &str, csrf: Option<&'a str>) -> Vec<(&'a str, String)> {
        let mut f: Vec<(&str, String)> = csrf.map(|c| ("csrf", c.to_owned())).into_iter().collect();
        match pattern {
            "/invoices/retry" => f.push(("ids", self.failed.to_string())),
            "/documents/{id}/cancel" => f.push(("motivo", "02".into())),
            "/errors/retry" => f.push(("code", "CFDI40108".into())),
            "/pac/pause" => f.push(("reason", "an incident".into())),
            "/payments/{id}/fix" => {
                f.push(("rfc", "XIQB891116QE4".into()));
                f.push(("tipo_cambio", "17".into()));
            }
            "/login" => {
                f.push(("name", "Mallory".into()));
                f.push(("password", support::admin::PASSWORD.into()));
            }
            _ => {}
        }
        f
    }
}

/// Everything an admin action could change, as one comparable value.
async fn snapshot(app: &TestApp) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    for (name, sql) in [
        ("payments", "SELECT COUNT(*) FROM payments"),
        ("PAC pauses", "SELECT COUNT(*) FROM pac_pauses"),
        ("outbox rows", "SELECT COUNT(*) FROM outbox"),
        (
            "failed rows",
            "SELECT COUNT(*) FROM outbox WHERE state = 'failed'",
        ),
        (
            "stamped rows",
            "SELECT COUNT(*) FROM outbox WHERE state = 'stamped'",
        ),
        (
            "attempts",
            "SELECT CAST(COALESCE(SUM(attempts), 0) AS BIGINT) FROM outbox",
        ),
        ("outbox history", "SELECT COUNT(*) FROM outbox_history"),
        ("cancellations", "SELECT COUNT(*) FROM cancellations"),
        (
            "open findings",
            "SELECT COUNT(*) FROM reconciliation_findings WHERE status = 'open'",
        ),
        ("findings", "SELECT COUNT(*) FROM reconciliation_findings"),
        ("admin actions", "SELECT COUNT(*) FROM admin_actions"),
        ("sessions", "SELECT COUNT(*) FROM admin_sessions"),
    ] {
        out.push((name, count(app, sql).await));
    }
    out
}

struct Answer {
    status: u16,
    location: Option<String>,
    body: String,
}

/// One request with exactly the given cookie header (no jar), never following redirects.
async fn send(
    app: &TestApp,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: &[(&str, String)],
) -> Answer {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let url = format!("{}{path}", app.address);
    let mut req = match method {
        "GET" => http.get(url),
        "POST" => http
            .post(url)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(crate::support::admin::form_body(form)),
        other => panic!("no requests with {other}"),
    };
    if let Some(c) = cookie {
        req = req.header("Cookie", c);
    }
    let r = req.send().await.expect("request");
    Answer {
        status: r.status().as_u16(),
        location: r
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned),
        body: r.text().await.unwrap_or_default(),
    }
}

/// The fixture, and a browser signed in as Ana with its CSRF token and session cookie.
async fn fixture_and_ana(app: &TestApp) -> (Fixture, Browser, String, String) {
    let fx = fixture(app).await;
    let ana = Browser::new(app);
    let csrf = ana.login().await;
    let cookie = session_cookie(&ana);
    (fx, ana, csrf, cookie)
}

/// Runs `exchanges` (raw, blocking HTTP) off the runtime; each one `(what, status, answer)`
/// must have been refused with 413.
async fn all_refused_413(exchanges: impl FnOnce() -> Vec<(String, u16, String)> + Send + 'static) {
    let results = tokio::task::spawn_blocking(exchanges)
        .await
        .expect("raw exchanges");
    for (what, status, text) in &results {
        assert_eq!(*status, 413, "{what}: {text}");
    }
}

/// The session cookie a browser received at login.
fn session_cookie(b: &Browser) -> String {
    let set = b.set_cookies.lock().unwrap();
    let c = set
        .iter()
        .rev()
        .find(|c| c.starts_with("af_session=") && !c.starts_with("af_session=;"))
        .expect("a session cookie");
    c.split(';').next().unwrap_or_default().to_owned()
}

async fn every_admin_route_refuses_without_a_live_session(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let fx = fixture(&app).await;
    // A real token from a real session, sent without that session's cookie: the refusal must
    // come from the missing session, not from a bad token.
    let someone = Browser::new(&app);
    let real_csrf = someone.login().await;
    // A session that has expired, and a cookie no session was ever issued for.
    let expired_token = auth::random_token();
    app.db
        .create_admin_session(
            &auth::token_hash(&expired_token),
            &real_csrf,
            "Eve",
            Utc::now() - chrono::Duration::minutes(1),
        )
        .await
        .expect("expired session");
    let cookies = [
        None,
        Some(format!("af_session={}", auth::random_token())),
        Some(format!("af_session={expired_token}")),
        Some("af_session=".to_owned()),
    ];
    let before = snapshot(&app).await;
    let mut checked = 0;
    for (method, pattern, access) in ADMIN_ROUTES {
        if *access == Access::Public {
            continue;
        }
        let path = fx.path(pattern);
        for cookie in &cookies {
            let a = send(
                &app,
                method,
                &path,
                cookie.as_deref(),
                &fx.form(pattern, Some(&real_csrf)),
            )
            .await;
            // A page comes back after the login; a form's target never does.
            let login = match *method {
                "GET" if path != "/admin" => format!(
                    "/admin/login?next={}",
                    autofactura::admin::common::percent_encode(&path)
                ),
                _ => "/admin/login".to_owned(),
            };
            assert_eq!(
                (a.status, a.location.as_deref()),
                (303, Some(login.as_str())),
                "{method} {path} with cookie {cookie:?} was not sent to the login: {}",
                a.body
            );
            assert!(
                a.body.is_empty(),
                "{method} {path}: content without a session"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * 39, "every non-public route, every cookie");
    assert_eq!(snapshot(&app).await, before, "nothing changed");

    // The public routes: the login page and assets are served; the login form itself refuses a
    // post without its own CSRF cookie, creating no session.
    for (method, pattern, access) in ADMIN_ROUTES {
        if *access != Access::Public {
            continue;
        }
        let path = fx.path(pattern);
        let a = send(&app, method, &path, None, &fx.form(pattern, Some("x"))).await;
        match *method {
            "GET" => assert_eq!(a.status, 200, "{path}"),
            _ => assert_eq!(a.status, 403, "{method} {path}: {}", a.body),
        }
    }
    assert_eq!(snapshot(&app).await, before, "no session was created");
}

async fn every_admin_form_refuses_a_missing_or_foreign_csrf_token(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let (fx, _ana, ana_csrf, ana_cookie) = fixture_and_ana(&app).await;
    let bo = Browser::new(&app);
    let bo_csrf = bo.login().await;
    assert_ne!(ana_csrf, bo_csrf);
    let before = snapshot(&app).await;
    let wrong = "0".repeat(ana_csrf.len());
    let mut checked = 0;
    for (method, pattern, access) in ADMIN_ROUTES {
        if *access != Access::Form {
            continue;
        }
        assert_eq!(*method, "POST");
        let path = fx.path(pattern);
        for token in [None, Some(""), Some(wrong.as_str()), Some(bo_csrf.as_str())] {
            let a = send(
                &app,
                method,
                &path,
                Some(&ana_cookie),
                &fx.form(pattern, token),
            )
            .await;
            assert_eq!(a.status, 403, "{path} with token {token:?}: {}", a.body);
            assert!(a.body.contains("CSRF"), "{path}: {}", a.body);
            checked += 1;
        }
    }
    assert_eq!(checked, 4 * 19, "every form, every bad token");
    assert_eq!(snapshot(&app).await, before, "nothing changed");

    // The login form: its token is the double-submit cookie, which a forger does not have.
    let mallory = Browser::new(&app);
    let page = mallory.get("/admin/login").await;
    let token = page.csrf();
    mallory.forget_cookie(auth::LOGIN_CSRF_COOKIE);
    let r = mallory
        .post(
            "/admin/login",
            &[
                ("csrf", &token),
                ("name", "Mallory"),
                ("password", support::admin::PASSWORD),
            ],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(!mallory.has_cookie(auth::SESSION_COOKIE));
    assert_eq!(snapshot(&app).await, before, "no session was created");

    // The same requests with the right token do act: the refusals above were the token's.
    for pattern in ["/documents/{id}/retry", "/documents/{id}/cancel"] {
        let form = fx.form(pattern, Some(&ana_csrf));
        let a = send(&app, "POST", &fx.path(pattern), Some(&ana_cookie), &form).await;
        assert_eq!(a.status, 303, "{pattern}: {}", a.body);
    }
    let after = snapshot(&app).await;
    let get = |s: &[(&str, i64)], k: &str| s.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    assert_eq!(get(&after, "failed rows"), Some(0), "retried");
    assert_eq!(get(&after, "cancellations"), Some(1), "cancel requested");
}

// ---------------------------------------------------------------------------------------------
// Oversized bodies

/// A raw HTTP/1.1 exchange: writes `head`, then the body pieces `pieces` one by one (stopping at
/// the first write the server no longer takes), then reads the status line. The body is never
/// completed, so an answer proves the server decided without waiting for all of it.
fn raw_exchange(address: &str, head: &str, pieces: &[Vec<u8>]) -> (u16, String) {
    let addr = address.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // A server that neither reads nor answers makes a write block: stop writing, then read.
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("write head");
    for p in pieces {
        if s.write_all(p).is_err() {
            break;
        }
    }
    let _ = s.flush();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the head of the answer is in; a timeout means the server was waiting for the
    // rest of the body.
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!(
                "no answer to {head:?} before the body was complete ({e}); got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text)
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", data.len()).into_bytes();
    c.extend_from_slice(data);
    c.extend_from_slice(b"\r\n");
    c
}

/// Chunks totalling `total` bytes (the terminating zero chunk is never sent).
fn chunks(total: usize) -> Vec<Vec<u8>> {
    let piece = vec![b' '; 16 * 1024];
    (0..total.div_ceil(piece.len()))
        .map(|_| chunk(&piece))
        .collect()
}

fn post_head(path: &str, extra: &str, length: Option<usize>) -> String {
    let framing = match length {
        Some(n) => format!("Content-Length: {n}\r\n"),
        None => "Transfer-Encoding: chunked\r\n".to_owned(),
    };
    format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}{framing}\r\n")
}

async fn oversized_webhook_bodies_are_refused_before_they_are_read_whole(b: Backend) {
    let Some(app) = support::spawn_app(b).await else {
        return;
    };
    let limit = app.settings.server.body_limit_bytes;
    let address = app.address.clone();
    let t = Utc::now().timestamp();
    // A genuine signature (over a body we never finish) and a genuine MP manifest.
    let stripe_sig = signature::stripe_header(&[STRIPE_SECRET], t, b"{}");
    let mp_v1 = signature::mp_sign(MP_SECRET, Some("1"), Some("r1"), &t.to_string());
    let targets = [
        (
            "/webhooks/stripe".to_owned(),
            format!("Stripe-Signature: {stripe_sig}\r\nContent-Type: application/json\r\n"),
        ),
        (
            "/webhooks/mercadopago?data.id=1&type=payment".to_owned(),
            format!(
                "x-signature: ts={t},v1={mp_v1}\r\nx-request-id: r1\r\nContent-Type: application/json\r\n"
            ),
        ),
    ];
    all_refused_413(move || {
        let mut out = Vec::new();
        for (path, headers) in &targets {
            // Announced far over the limit, then only a little sent.
            let (status, text) = raw_exchange(
                &address,
                &post_head(path, headers, Some(limit * 400)),
                &[vec![b'{'; 1024]],
            );
            out.push((format!("{path} content-length"), status, text));
            // Announced one byte over the limit, all but that byte sent.
            let (status, text) = raw_exchange(
                &address,
                &post_head(path, headers, Some(limit + 1)),
                &[vec![b' '; limit]],
            );
            out.push((format!("{path} content-length limit+1"), status, text));
            // Chunked: no length announced; the chunks cross the limit and never end.
            let (status, text) = raw_exchange(
                &address,
                &post_head(path, headers, None),
                &chunks(limit + 32 * 1024),
            );
            out.push((format!("{path} chunked"), status, text));
        }
        out
    })
    .await;
    assert!(app.events().await.is_empty(), "nothing was stored");
    assert!(app.invoices().await.is_empty());

    // Just under the limit is read and handled as usual.
    let mut body = stripe::sample_payment_intent("big", Utc::now().timestamp(), false);
    body.push_str(&" ".repeat(limit - body.len()));
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    assert_eq!(app.invoices().await.len(), 1);
}

async fn oversized_admin_forms_are_refused_before_they_are_read_whole(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let (fx, _ana, csrf, cookie) = fixture_and_ana(&app).await;
    let before = snapshot(&app).await;
    // The admin's forms are small; 64 KiB is the most any of them takes.
    let limit = autofactura::admin::FORM_LIMIT_BYTES;
    let address = app.address.clone();
    let form_type = "Content-Type: application/x-www-form-urlencoded\r\n";
    let with_session = format!("{form_type}Cookie: {cookie}\r\n");
    let targets = [
        ("/admin/login".to_owned(), form_type.to_owned()),
        ("/admin/invoices/retry".to_owned(), with_session.clone()),
        (fx.path("/documents/{id}/cancel"), with_session.clone()),
        (fx.path("/documents/{id}/retry"), with_session),
    ];
    let prefix = format!("csrf={csrf}&ids={}&motivo=02&pad=", fx.failed).into_bytes();
    all_refused_413(move || {
        let mut out = Vec::new();
        for (path, headers) in &targets {
            let (status, text) = raw_exchange(
                &address,
                &post_head(path, headers, Some(100 * 1024 * 1024)),
                std::slice::from_ref(&prefix),
            );
            out.push((format!("{path} content-length"), status, text));
            let (status, text) = raw_exchange(
                &address,
                &post_head(path, headers, Some(limit + 1)),
                &[prefix.clone(), vec![b'a'; limit - prefix.len()]],
            );
            out.push((format!("{path} content-length limit+1"), status, text));
            let mut pieces = vec![chunk(&prefix)];
            pieces.extend(chunks(limit + 32 * 1024));
            let (status, text) = raw_exchange(&address, &post_head(path, headers, None), &pieces);
            out.push((format!("{path} chunked"), status, text));
        }
        out
    })
    .await;
    assert_eq!(snapshot(&app).await, before, "nothing changed");
}

// ---------------------------------------------------------------------------------------------
// Security headers on error pages

/// The security headers a normal admin page carries.
const SECURITY_HEADERS: [&str; 4] = [
    "cache-control",
    "x-frame-options",
    "x-content-type-options",
    "content-security-policy",
];

/// The value of header `name` in a raw HTTP answer head.
fn raw_header(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

// Every kind of error page (404, 400, 401, 413, 503; from our handlers and from actix itself;
// admin, API and webhooks) carries the security headers of a normal page: CSP with
// frame-ancestors, nosniff, no framing, no caching.
async fn error_pages_carry_the_security_headers(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let key = autofactura::api::keys::create_api_key(&app.db, "sec", "EKU9003173C9")
        .await
        .expect("api key");
    let ana = Browser::new(&app);
    ana.login().await;
    let normal = ana.get("/admin/login").await;
    assert_eq!(normal.status, 200);
    let expected: Vec<String> = SECURITY_HEADERS
        .iter()
        .map(|h| {
            normal
                .headers
                .get(*h)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_else(|| panic!("a normal page without {h}"))
                .to_owned()
        })
        .collect();
    assert!(expected[2] == "nosniff" && expected[3].contains("frame-ancestors 'none'"));

    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", app.address);
    let bearer = format!("Bearer {}", key.expose());
    let invoice: serde_json::Value =
        serde_json::from_str(include_str!("../../fixtures/api/invoice.json")).expect("fixture");
    let mut huge = invoice.clone();
    huge["conceptos"][0]["cantidad"] = "79228162514264337593543950335".into();
    let api_post = |body: String| {
        http.post(url("/v1/invoices"))
            .header("Authorization", bearer.clone())
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", "k-sec")
            .body(body)
    };
    let mut answers: Vec<(&str, u16, reqwest::header::HeaderMap)> = Vec::new();
    for (what, path, status) in [
        ("admin: no such list", "/admin/invoices?view=nope", 404),
        ("admin: not a date", "/admin/invoices?from=yesterday", 400),
        ("admin: no such payment", "/admin/payments/999999", 404),
        ("admin: not an id", "/admin/payments/abc", 404),
        ("admin: no such asset", "/admin/static/nope.css", 404),
        ("no such route", "/nope", 404),
    ] {
        let p = ana.get(path).await;
        assert_eq!(p.status, status, "{what}: {}", p.body);
        answers.push((what, p.status, p.headers));
    }
    let requests = [
        ("api: bad JSON", api_post("{not json".into()), 400),
        (
            "api: no such invoice",
            http.get(url("/v1/invoices/inv_nope"))
                .header("Authorization", bearer.clone()),
            404,
        ),
        (
            "api: no key",
            http.post(url("/v1/invoices")).body("{}"),
            401,
        ),
        ("api: amount out of range", api_post(huge.to_string()), 422),
        (
            "webhook: unsigned",
            http.post(url("/webhooks/stripe")).body("{}"),
            400,
        ),
    ];
    for (what, req, status) in requests {
        let r = req.send().await.expect("request");
        assert_eq!(r.status().as_u16(), status, "{what}");
        answers.push((what, status, r.headers().clone()));
    }
    // Storage unavailable: 503 from the admin and from the API.
    exec_sql(&app.db, "ALTER TABLE payments RENAME TO payments_away").await;
    let admin_down = ana.get("/admin/invoices?view=all").await;
    exec_sql(&app.db, "ALTER TABLE payments_away RENAME TO payments").await;
    assert_eq!(admin_down.status, 503, "{}", admin_down.body);
    answers.push(("admin: storage unavailable", 503, admin_down.headers));
    exec_sql(
        &app.db,
        "ALTER TABLE api_idempotency RENAME TO api_idempotency_away",
    )
    .await;
    let api_down = api_post(invoice.to_string()).send().await.expect("request");
    exec_sql(
        &app.db,
        "ALTER TABLE api_idempotency_away RENAME TO api_idempotency",
    )
    .await;
    assert_eq!(api_down.status().as_u16(), 503);
    answers.push(("api: storage unavailable", 503, api_down.headers().clone()));
    for (what, status, headers) in &answers {
        for (h, want) in SECURITY_HEADERS.iter().zip(&expected) {
            assert_eq!(
                headers.get(*h).and_then(|v| v.to_str().ok()),
                Some(want.as_str()),
                "{what} ({status}): {h}"
            );
        }
    }

    // 413, decided before the body is read, from the admin, the API and the webhooks.
    let address = app.address.clone();
    let auth = format!("Authorization: {bearer}\r\nContent-Type: application/json\r\n");
    let heads = tokio::task::spawn_blocking(move || {
        [
            (
                "/admin/login",
                "Content-Type: application/x-www-form-urlencoded\r\n".to_owned(),
            ),
            ("/v1/invoices", auth),
            (
                "/webhooks/stripe",
                "Content-Type: application/json\r\n".to_owned(),
            ),
        ]
        .into_iter()
        .map(|(path, extra)| {
            let (status, head) = raw_exchange(
                &address,
                &post_head(path, &extra, Some(100 * 1024 * 1024)),
                &[vec![b'{'; 1024]],
            );
            (path, status, head)
        })
        .collect::<Vec<_>>()
    })
    .await
    .expect("raw exchanges");
    for (path, status, head) in &heads {
        assert_eq!(*status, 413, "{path}: {head}");
        for (h, want) in SECURITY_HEADERS.iter().zip(&expected) {
            assert_eq!(
                raw_header(head, h).as_deref(),
                Some(want.as_str()),
                "{path} (413): {h}\n{head}"
            );
        }
    }
}

on_both_backends!(
    every_admin_route_refuses_without_a_live_session,
    every_admin_form_refuses_a_missing_or_foreign_csrf_token,
    oversized_webhook_bodies_are_refused_before_they_are_read_whole,
    oversized_admin_forms_are_refused_before_they_are_read_whole,
    error_pages_carry_the_security_headers,
);
