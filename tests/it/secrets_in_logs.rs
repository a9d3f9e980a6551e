//! No secret ever reaches a log. The real binary runs a full flow at debug level with
//! distinctive secrets configured: `autofactura pac-sim` as the PAC (user and password), `serve`
//! with Stripe and Mercado Pago webhook secrets, a Mercado Pago access token (the payment API is
//! a stand-in in this test that checks the token arrives), a CSD whose key is encrypted with its
//! own password, an admin password, an API key, and the merchant's webhook secret and webhook
//! URL (a token in its query). Signed webhooks from `send-test-webhook`, badly signed ones, the
//! workers stamping, an admin login and a cancellation, an invoice through the API (and a wrong
//! key) and its webhook to the merchant (the first delivery failing) all run; then every line
//! the processes wrote (stdout and stderr) is searched for each secret, raw and trivially
//! encoded. On PostgreSQL the database role's password is one of the secrets too.

use crate::support::pg;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
use sqlx::Connection;

/// The configured secrets, by name. A new kind of secret (e.g. an API key) is one more line here
/// and its place in [`settings`].
const SECRETS: &[(&str, &str)] = &[
    ("stripe webhook secret", "whsec_LEAKCHECK_stripe_7f3a9c0d"),
    ("mercadopago webhook secret", "mpsec_LEAKCHECK_5d1e8b2a"),
    (
        "mercadopago access token",
        "APP_USR-LEAKCHECK-access-token-2c4f6a91",
    ),
    ("csd password", "csdpw_LEAKCHECK_9b2e71c3"),
    ("admin password", "adminpw LEAKCHECK 4a8c5e"),
    ("pac password", "pacpw_LEAKCHECK_e3d5f0b7"),
    // Standard Webhooks form (`whsec_` + base64) of the key below.
    (
        "merchant webhook secret",
        "whsec_TEVBS0NIRUNLX21lcmNoYW50X3doc2VjXzhkMmY=",
    ),
    ("merchant webhook key", "LEAKCHECK_merchant_whsec_8d2f"),
    ("merchant webhook URL token", "urltok_LEAKCHECK_61c0"),
];

fn secret(name: &str) -> &'static str {
    SECRETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .unwrap_or_else(|| panic!("no secret {name}"))
}

/// A child process, killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary at debug level, with no `AUTOFACTURA__…` override from the caller's shell.
fn autofactura(dir: &Path, log: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_autofactura"));
    c.current_dir(dir).env("RUST_LOG", "debug");
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            c.env_remove(k);
        }
    }
    let out = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    c.stdout(Stdio::from(out.try_clone().expect("log")))
        .stderr(Stdio::from(out));
    c
}

/// Runs a CLI command to completion; its output goes to `log` too.
fn run(dir: &Path, log: &Path, args: &[&str]) -> Output {
    let out = autofactura(dir, log)
        .stdout(Stdio::piped())
        .args(args)
        .output()
        .expect("run autofactura");
    std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(&out.stdout))
        .expect("append stdout");
    out
}

/// Header names (lower case) and values.
type Headers = Vec<(String, String)>;

/// One HTTP/1.1 request from `s`: its request line, headers and body (by `Content-Length`).
fn read_request(s: &TcpStream) -> Option<(String, Headers, Vec<u8>)> {
    let mut reader = BufReader::new(s.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let length = header(&headers, "content-length").map_or(0, |v| v.parse().unwrap_or(0));
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((first, headers, body))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A stand-in for Mercado Pago's `GET /v1/payments/{id}`: the sandbox's approved payment for
/// any id; records the `Authorization` headers it receives.
fn fake_mercadopago() -> (String, Arc<Mutex<Vec<String>>>) {
    fake_server(|_, (first, headers, _), seen| {
        if let Some(auth) = header(&headers, "authorization") {
            seen.push(auth.to_owned());
        }
        let id = first
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.rsplit('/').next())
            .unwrap_or_default()
            .to_owned();
        let (status, body) = match autofactura::sandbox::mp_payment(&id) {
            Some(b) => ("200 OK", b),
            None => (
                "404 Not Found",
                "{\"message\":\"Payment not found\"}".to_owned(),
            ),
        };
        Some(format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    })
}

/// A stand-in HTTP server on 127.0.0.1:0, one request per connection: `answer` gets the
/// request's number, the request and what the server records, and gives the response to write
/// (`None`: the connection is dropped unanswered). Its base URL and the record.
fn fake_server(
    answer: impl Fn(usize, (String, Headers, Vec<u8>), &mut Vec<String>) -> Option<String>
    + Send
    + 'static,
) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut s) = stream else { continue };
            let Some(request) = read_request(&s) else {
                continue;
            };
            let response = answer(n, request, &mut seen2.lock().unwrap());
            if let Some(response) = response {
                let _ = s.write_all(response.as_bytes());
            }
        }
    });
    (base, seen)
}

/// The SAT test CSD's key re-encrypted with the test's CSD password.
fn csd_key_with_password(dir: &Path) -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/csd");
    let der = std::fs::read(root.join("EKU9003173C9.key")).expect("test key");
    let key =
        openssl::pkey::PKey::private_key_from_pkcs8_passphrase(&der, b"12345678a").expect("open");
    let reencrypted = key
        .private_key_to_pkcs8_passphrase(
            openssl::symm::Cipher::des_ede3_cbc(),
            secret("csd password").as_bytes(),
        )
        .expect("encrypt");
    let path = dir.join("csd.key");
    std::fs::write(&path, reencrypted).expect("write key");
    (root.join("EKU9003173C9.cer"), path)
}

fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.starts_with("HTTP/1.1 200")
}

/// The `[…]` tables of the settings file, every secret in its place.
fn settings(
    port: u16,
    database_url: &str,
    mp_api: &str,
    pac_url: &str,
    merchant: &str,
    dir: &Path,
) -> String {
    let (cer, key) = csd_key_with_password(dir);
    format!(
        r#"[server]
listen = "127.0.0.1:{port}"
[database]
url = "{database_url}"
max_connections = 4
[stripe]
webhook_secrets = ["{stripe}"]
[mercadopago]
webhook_secret = "{mp}"
access_token = "{token}"
api_base = "{mp_api}"
[emisor]
csd_cer = "{cer}"
csd_key = "{key}"
csd_password = "{csd}"
[pac]
kind = "sandbox"
url = "{pac_url}"
user = "leakcheck"
password = "{pac}"
[admin]
password = "{admin}"
[api]
webhook_url = "{merchant}/hooks?token={url_token}"
webhook_secret = "{whsec}"
webhook_retry_seconds = [1, 1, 1, 1, 1]
"#,
        stripe = secret("stripe webhook secret"),
        mp = secret("mercadopago webhook secret"),
        token = secret("mercadopago access token"),
        cer = cer.display(),
        key = key.display(),
        csd = secret("csd password"),
        pac = secret("pac password"),
        admin = secret("admin password"),
        url_token = secret("merchant webhook URL token"),
        whsec = secret("merchant webhook secret"),
    )
}

/// A stand-in for the merchant's webhook endpoint: drops the first request unanswered (a
/// failed delivery, retried), answers 200 to the others; the events it received.
fn fake_merchant() -> (String, Arc<Mutex<Vec<String>>>) {
    fake_server(|n, (_, _, body), seen| {
        if n == 0 {
            return None;
        }
        seen.push(String::from_utf8_lossy(&body).into_owned());
        Some("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned())
    })
}

/// Starts `autofactura pac-sim` accepting the test's PAC credentials; its URL.
fn start_pac_sim(dir: &Path, log: &Path) -> (Proc, String) {
    let mut child = autofactura(dir, log)
        .stdout(Stdio::piped())
        .args([
            "pac-sim",
            "--listen",
            "127.0.0.1:0",
            "--state",
            "pacsim.jsonl",
            "--user",
            "leakcheck",
            "--password",
            secret("pac password"),
        ])
        .spawn()
        .expect("start pac-sim");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("pac-sim banner");
    std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .expect("append");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in the pac-sim banner {line:?}"))
        .to_owned();
    (Proc(child), url)
}

/// A cookie-keeping admin client (no redirects followed).
struct Admin {
    base: String,
    http: reqwest::Client,
    cookies: Vec<(String, String)>,
}

impl Admin {
    fn cookie(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn call(&mut self, post: Option<&[(&str, &str)]>, path: &str) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        let req = match post {
            Some(form) => self
                .http
                .post(url)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(crate::support::admin::form_body(form)),
            None => self.http.get(url),
        };
        let r = req
            .header("Cookie", self.cookie())
            .send()
            .await
            .expect("admin request");
        for sc in r.headers().get_all("set-cookie") {
            let pair = sc
                .to_str()
                .unwrap_or_default()
                .split(';')
                .next()
                .unwrap_or_default();
            if let Some((k, v)) = pair.split_once('=') {
                self.cookies.retain(|(n, _)| n != k);
                if !v.is_empty() {
                    self.cookies.push((k.to_owned(), v.to_owned()));
                }
            }
        }
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }
}

fn hidden_csrf(page: &str) -> String {
    let needle = "name=\"csrf\" value=\"";
    let start = page.find(needle).expect("a csrf field") + needle.len();
    page[start..start + page[start..].find('"').expect("end")].to_owned()
}

/// The first `{prefix}N` in `page`: N.
fn first_id(page: &str, prefix: &str) -> String {
    let start = page
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix} in:\n{page}"))
        + prefix.len();
    page[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

async fn full_flow_leaks_no_secret(database_url: &str, extra_secrets: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let log = dir.join("all.log");
    let (mp_api, mp_auth) = fake_mercadopago();
    let (merchant, merchant_seen) = fake_merchant();
    let (_sim, pac_url) = start_pac_sim(dir, &log);
    let config = dir.join("autofactura.toml");
    let config = config.to_str().expect("utf-8").to_owned();
    // The port was free a moment ago; another test may take it in between, so try a few.
    let mut started = None;
    for _ in 0..3 {
        let port = crate::support::free_port();
        std::fs::write(
            &config,
            settings(port, database_url, &mp_api, &pac_url, &merchant, dir),
        )
        .expect("settings");
        let mut serve = Proc(
            autofactura(dir, &log)
                .args(["serve", "--config", &config])
                .spawn()
                .expect("serve"),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while !healthy(port) {
            if let Ok(Some(st)) = serve.0.try_wait() {
                eprintln!(
                    "serve exited ({st}):\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                break;
            }
            assert!(Instant::now() < deadline, "serve never became healthy");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if healthy(port) {
            started = Some((serve, port));
            break;
        }
    }
    let (serve, port) = started.expect("serve started on one of three ports");
    let base = format!("http://127.0.0.1:{port}");

    // Signed deliveries through the operator's own tool, then badly signed ones.
    for provider in ["stripe", "mercadopago"] {
        let out = run(
            dir,
            &log,
            &[
                "send-test-webhook",
                "--config",
                &config,
                "--provider",
                provider,
                "--url",
                &base,
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("invoice_queued"), "{provider}: {text}");
    }
    let http = reqwest::Client::new();
    let body = autofactura::webhooks::stripe::sample_payment_intent("forged", 1, false);
    let forged_stripe = http
        .post(format!("{base}/webhooks/stripe"))
        .header("Stripe-Signature", "t=1,v1=00")
        .body(body);
    assert_eq!(send(forged_stripe, "forged stripe").await.status(), 400);
    let forged_mp = http
        .post(format!(
            "{base}/webhooks/mercadopago?data.id=1&type=payment"
        ))
        .header("x-signature", "ts=1,v1=00")
        .body("{}");
    assert_eq!(send(forged_mp, "forged mp").await.status(), 400);

    // The workers stamp both with the PAC, authenticating with the PAC password.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = run(
            dir,
            &log,
            &["invoices", "list", "--json", "--config", &config],
        );
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
        if rows.len() == 2 && rows.iter().all(|r| r["status"] == "stamped") {
            break;
        }
        assert!(Instant::now() < deadline, "not stamped: {rows:#?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        mp_auth
            .lock()
            .unwrap()
            .iter()
            .any(|a| a == &format!("Bearer {}", secret("mercadopago access token"))),
        "the payment API received the access token"
    );

    // The admin: a wrong password, the right one, then a cancellation the workers carry out.
    let mut admin = Admin {
        base: base.clone(),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client"),
        cookies: Vec::new(),
    };
    for (password, expect) in [("not-the-password", 401), (secret("admin password"), 303)] {
        let (_, page) = admin.call(None, "/admin/login").await;
        let csrf = hidden_csrf(&page);
        let (status, body) = admin
            .call(
                Some(&[("csrf", &csrf), ("name", "Ana"), ("password", password)]),
                "/admin/login",
            )
            .await;
        assert_eq!(status, expect, "{body}");
    }
    let (_, dash) = admin.call(None, "/admin").await;
    let csrf = hidden_csrf(&dash);
    let (_, list) = admin.call(None, "/admin/invoices?view=all").await;
    let payment = first_id(&list, "/admin/payments/");
    let (_, page) = admin
        .call(None, &format!("/admin/payments/{payment}"))
        .await;
    let doc = first_id(&page, "/admin/documents/");
    let (status, body) = admin
        .call(
            Some(&[("csrf", &csrf), ("motivo", "02")]),
            &format!("/admin/documents/{doc}/cancel"),
        )
        .await;
    assert_eq!(status, 303, "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, page) = admin.call(None, "/admin/cancellations?all=1").await;
        if page.contains("Cancelled") {
            break;
        }
        assert!(Instant::now() < deadline, "not cancelled:\n{page}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The API: a key (shown once on stdout, the one place it may appear, so not logged here),
    // an invoice with it, a wrong key; the merchant webhook of the stamp, after one failure.
    let out = autofactura(dir, &log)
        .stdout(Stdio::piped())
        .args([
            "api-key",
            "create",
            "--config",
            &config,
            "--name",
            "leakcheck",
        ])
        .output()
        .expect("api-key create");
    assert!(out.status.success(), "api-key create failed");
    let api_key = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("the key")
        .trim()
        .to_owned();
    assert!(api_key.starts_with("afk_"), "not a key: {api_key:?}");
    let invoice = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/api/invoice.json"),
    )
    .expect("fixture");
    let r = http
        .post(format!("{base}/v1/invoices"))
        .bearer_auth(&api_key)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", "leakcheck-1")
        .body(invoice.clone());
    let r = send(r, "api invoice").await;
    let (status, text) = (r.status().as_u16(), r.text().await.unwrap_or_default());
    assert!(status == 201 || status == 202, "{status} {text}");
    let wrong_key = http
        .post(format!("{base}/v1/invoices"))
        .bearer_auth(format!("{api_key}x"))
        .header("Content-Type", "application/json")
        .body(invoice);
    assert_eq!(send(wrong_key, "wrong key").await.status(), 401);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !merchant_seen
        .lock()
        .unwrap()
        .iter()
        .any(|b| b.contains("invoice.stamped"))
    {
        assert!(
            Instant::now() < deadline,
            "the merchant never got invoice.stamped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The merchant's server sees the body before the appliance reads the reply and logs the
    // delivery: wait for that line rather than stopping the server in between.
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("merchant webhook delivered")
    {
        assert!(
            Instant::now() < deadline,
            "the delivery of invoice.stamped was never logged"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let session = admin
        .cookies
        .iter()
        .find(|(k, _)| k == "af_session")
        .map(|(_, v)| v.clone())
        .expect("a session");
    drop(serve);
    let text = strip_ansi(&std::fs::read_to_string(&log).expect("log"));

    // The logs are the real thing: debug level, the flow's steps. Written to a file, they are
    // JSON lines by default ([log] format = "auto"): the secrets are looked for in that form.
    assert!(
        text.contains("\"level\":\"DEBUG\""),
        "no JSON debug line in the logs:\n{text}"
    );
    for expected in [
        "stripe payment",
        "mercadopago payment",
        "/admin/login",
        "api invoice queued",
        "merchant webhook will be retried",
        "merchant webhook delivered",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} not in the logs:\n{text}"
        );
    }
    let mut secrets: Vec<(&str, String)> = SECRETS
        .iter()
        .chain(extra_secrets)
        .map(|(n, s)| (*n, (*s).to_owned()))
        .collect();
    secrets.push(("admin session token", session));
    secrets.push(("api key", api_key));
    secrets.push(("admin CSRF token", csrf));
    for (name, value) in &secrets {
        for (form, needle) in encodings(value) {
            assert!(
                !text.contains(&needle),
                "the {name} appears in the logs ({form}: {needle}):\n{}",
                text.lines()
                    .filter(|l| l.contains(&needle))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

/// `text` without terminal colour sequences (`ESC [ … letter`), which could split a value.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The secret as written, and the encodings a careless log line would use.
fn encodings(secret: &str) -> Vec<(&'static str, String)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let url: String = secret
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    vec![
        ("raw", secret.to_owned()),
        ("url-encoded", url),
        ("base64", b64.encode(secret)),
        ("hex", hex::encode(secret)),
        ("debug-escaped", format!("{secret:?}")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_the_logs_of_a_full_flow_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("af.db").display());
    full_flow_leaks_no_secret(&url, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_the_logs_of_a_full_flow_on_postgres() {
    let Some(admin) = pg::admin_url("the log check") else {
        return;
    };
    // A role of its own, so the database password is distinctive and searched for too.
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let (role, name) = (format!("af_leak_{suffix}"), format!("af_test_{suffix}"));
    let password = format!("pgpw_LEAKCHECK_{}", &suffix[..12]);
    let mut c = sqlx::PgConnection::connect(&admin)
        .await
        .expect("connect to the test PostgreSQL");
    for sql in [
        format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"),
        format!("CREATE DATABASE {name} OWNER {role}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .expect("create the test role and database");
    }
    let opts: sqlx::postgres::PgConnectOptions = admin.parse().expect("pg url");
    let url = format!(
        "postgres://{role}:{password}@{}:{}/{name}",
        opts.get_host(),
        opts.get_port()
    );
    full_flow_leaks_no_secret(&url, &[("database password", password.as_str())]).await;
    for sql in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("DROP ROLE IF EXISTS {role}"),
    ] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut c).await;
    }
}

/// Sends `req`, panicking with `what` if it cannot be sent at all.
async fn send(req: reqwest::RequestBuilder, what: &str) -> reqwest::Response {
    req.send().await.unwrap_or_else(|e| panic!("{what}: {e}"))
}
