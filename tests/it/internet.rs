//! What faces the internet: the login limiter and the password checks it guards, the real
//! client behind a trusted proxy, the admin on a listener of its own, the sandbox conveniences
//! refused beyond loopback, and PostgreSQL over TLS. The real server on 127.0.0.1:0 (and the
//! real binary for `serve`'s refusals).

use crate::support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use autofactura::admin::auth::{LOGIN_MAX_FAILURES, LOGIN_VERIFY_CONCURRENCY};
use support::admin::{Browser, PASSWORD};
use support::{Backend, TestApp, spawn_app_with_env};

async fn admin_app_env(b: Backend, extra: &str, env: &[(&str, &str)]) -> Option<TestApp> {
    spawn_app_with_env(
        b,
        &format!("[admin]\npassword = \"{PASSWORD}\"\n{extra}"),
        env,
    )
    .await
}

const TRUST_LOCAL_PROXY: (&str, &str) = ("AUTOFACTURA__SERVER__TRUSTED_PROXIES", "127.0.0.1/32");

/// Browsers with a login form each (a GET counts nothing), then every wrong password at once,
/// each on its own task; the statuses.
async fn parallel_wrong_logins(browsers: Vec<Browser>) -> Vec<u16> {
    let mut ready = Vec::new();
    for br in browsers {
        let form = br.get("/admin/login").await;
        assert_eq!(form.status, 200, "{}", form.body);
        ready.push((Arc::new(br), form.csrf()));
    }
    let tasks: Vec<_> = ready
        .into_iter()
        .enumerate()
        .map(|(i, (br, csrf))| {
            tokio::spawn(async move {
                let guess = format!("guess {i}");
                br.post(
                    "/admin/login",
                    &[
                        ("csrf", csrf.as_str()),
                        ("name", "Mallory"),
                        ("password", &guess),
                    ],
                )
                .await
                .status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.expect("login task"));
    }
    statuses
}

async fn failed_logins_from(app: &TestApp, client: &str) -> usize {
    app.db
        .recent_actions(1000)
        .await
        .expect("audit")
        .iter()
        .filter(|a| a.action == "login_failed" && a.target_id == client)
        .count()
}

/// Sixteen wrong passwords at once from one client: only the limiter's allowance reaches
/// argon2, the rest are refused before it; never more than the gate's slots run at once.
async fn parallel_wrong_logins_run_at_most_the_allowed_password_checks(b: Backend) {
    let Some(app) = admin_app_env(b, "", &[]).await else {
        return;
    };
    let statuses = parallel_wrong_logins((0..16).map(|_| Browser::new(&app)).collect()).await;
    let wrong = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(
        (wrong, refused),
        (LOGIN_MAX_FAILURES, 16 - LOGIN_MAX_FAILURES),
        "{statuses:?}"
    );
    let gate = &app.admin.password_gate;
    assert_eq!(gate.runs(), LOGIN_MAX_FAILURES as u64, "argon2 runs");
    assert!(
        gate.peak() <= LOGIN_VERIFY_CONCURRENCY,
        "peak {}",
        gate.peak()
    );
    assert_eq!(
        failed_logins_from(&app, "127.0.0.1").await,
        LOGIN_MAX_FAILURES
    );
    // The right password from the same client is refused too, until the window passes.
    assert_eq!(
        Browser::new(&app).login_as("Ana", PASSWORD).await.status,
        429
    );
}

/// Twelve clients behind a trusted proxy, one wrong password each, all at once: every one is
/// checked (each is within its allowance), but at most the gate's slots at a time.
async fn password_checks_are_bounded_across_clients(b: Backend) {
    let Some(app) = admin_app_env(b, "", &[TRUST_LOCAL_PROXY]).await else {
        return;
    };
    let browsers: Vec<Browser> = (0..12)
        .map(|i| forwarded(&app, &format!("198.51.100.{}", i + 1)))
        .collect();
    let statuses = parallel_wrong_logins(browsers).await;
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    let gate = &app.admin.password_gate;
    assert_eq!(gate.runs(), 12);
    assert!(
        gate.peak() <= LOGIN_VERIFY_CONCURRENCY,
        "{} argon2 runs at once",
        gate.peak()
    );
}

/// A browser whose requests say, as Fly's proxy does, that they come from `client_ip`.
fn forwarded(app: &TestApp, client_ip: &str) -> Browser {
    let mut b = Browser::new(app);
    b.headers.push(("Fly-Client-IP".into(), client_ip.into()));
    b
}

/// As many wrong passwords from `b` as the limiter allows, each refused with 401.
async fn fail_logins(b: &Browser) {
    for i in 0..LOGIN_MAX_FAILURES {
        let r = b.login_as("Mallory", &format!("guess {i}")).await;
        assert_eq!(r.status, 401, "attempt {i}");
    }
}

/// Behind a trusted proxy each forwarded client has its own allowance, the audit log names it,
/// and its TLS makes the cookie Secure; without trust the same headers change nothing.
async fn forwarded_clients_are_limited_apart_only_behind_a_trusted_proxy(b: Backend) {
    let Some(app) = admin_app_env(b, "", &[TRUST_LOCAL_PROXY]).await else {
        return;
    };
    let mallory = forwarded(&app, "198.51.100.66");
    fail_logins(&mallory).await;
    assert_eq!(mallory.login_as("Mallory", "guess").await.status, 429);
    assert_eq!(
        failed_logins_from(&app, "198.51.100.66").await,
        LOGIN_MAX_FAILURES
    );
    // Another client behind the same proxy is not locked out, over Fly-Client-IP or XFF.
    let mut ana = forwarded(&app, "203.0.113.7");
    ana.forwarded_proto = Some("https".into());
    let ok = ana.login_as("Ana", PASSWORD).await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert!(
        ana.set_cookies
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.starts_with("af_session=") && c.contains("Secure")),
        "TLS at the trusted proxy makes the session cookie Secure"
    );
    let mut bo = Browser::new(&app);
    bo.headers.push((
        "X-Forwarded-For".into(),
        "198.51.100.66, 203.0.113.8".into(),
    ));
    assert_eq!(bo.login_as("Bo", "wrong").await.status, 401);
    assert_eq!(failed_logins_from(&app, "203.0.113.8").await, 1);
    let actions = app.db.recent_actions(100).await.expect("audit");
    assert!(
        actions
            .iter()
            .any(|a| a.action == "login" && a.target_id == "203.0.113.7"),
        "{actions:#?}"
    );

    // The same headers from a peer that is not trusted are ignored: one client, the peer.
    let Some(plain) = admin_app_env(b, "", &[]).await else {
        return;
    };
    let mallory = forwarded(&plain, "198.51.100.66");
    fail_logins(&mallory).await;
    assert_eq!(
        failed_logins_from(&plain, "127.0.0.1").await,
        LOGIN_MAX_FAILURES
    );
    let ana = forwarded(&plain, "203.0.113.7");
    assert_eq!(ana.login_as("Ana", PASSWORD).await.status, 429);
}

/// `[admin] listen`: the admin and the API answer only there; the webhook listener answers
/// 404 for them and keeps the webhooks, which the admin listener does not serve.
async fn the_admin_listen_key_serves_admin_and_api_apart_from_the_webhooks(b: Backend) {
    let Some(app) = admin_app_env(b, "listen = \"127.0.0.1:0\"\n", &[]).await else {
        return;
    };
    assert_ne!(app.address, app.admin_address);
    let get = |base: &str, path: &str| {
        let url = format!("{base}{path}");
        let http = app.http.clone();
        async move { http.get(url).send().await.expect("GET").status().as_u16() }
    };
    for path in [
        "/admin",
        "/admin/login",
        "/admin/static/admin.css",
        "/v1/openapi.json",
    ] {
        assert_eq!(
            get(&app.address, path).await,
            404,
            "webhook listener {path}"
        );
    }
    let r = app
        .http
        .post(format!("{}/v1/invoices", app.address))
        .header("Authorization", "Bearer afk_nope")
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 404);
    assert_eq!(get(&app.admin_address, "/admin/login").await, 200);
    assert_eq!(get(&app.admin_address, "/v1/openapi.json").await, 200);
    for base in [&app.address, &app.admin_address] {
        assert_eq!(get(base, "/healthz").await, 200);
    }
    let browser = Browser::new(&app);
    browser.login().await;
    // Webhooks: only on the public listener.
    let body = autofactura::webhooks::stripe::sample_payment_intent("net1", 1, false);
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
    let r = app
        .http
        .post(format!("{}/webhooks/stripe", app.admin_address))
        .body(body)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 404);
}

on_both_backends!(
    parallel_wrong_logins_run_at_most_the_allowed_password_checks,
    password_checks_are_bounded_across_clients,
    forwarded_clients_are_limited_apart_only_behind_a_trusted_proxy,
    the_admin_listen_key_serves_admin_and_api_apart_from_the_webhooks,
);

// ---------------------------------------------------------------------------------------------
// `serve` beyond loopback

/// `autofactura serve` in `dir` with only `env` as settings; its exit status and stderr, or
/// `None` if it was still running after `wait` (then it is stopped).
fn serve_with(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    wait: Duration,
) -> Option<(i32, String)> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_autofactura"));
    c.current_dir(dir).arg("serve");
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("start serve");
    let deadline = Instant::now() + wait;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return Some((
                st.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_beyond_loopback_refuses_the_sandbox_secrets_the_stand_in_and_the_example_password() {
    let dir = tempfile::tempdir().expect("dir");
    let listen = format!("0.0.0.0:{}", crate::support::free_port());
    let public = ("AUTOFACTURA__SERVER__LISTEN", listen.as_str());
    let (code, err) = serve_with(dir.path(), &[public], Duration::from_secs(20))
        .expect("serve must refuse, not start");
    assert_ne!(code, 0, "{err}");
    for what in [
        "AUTOFACTURA__STRIPE__WEBHOOK_SECRETS",
        "AUTOFACTURA__MERCADOPAGO__WEBHOOK_SECRET",
        "AUTOFACTURA__MERCADOPAGO__ACCESS_TOKEN",
        "reachable from beyond this machine",
    ] {
        assert!(err.contains(what), "{what} not named in:\n{err}");
    }
    assert!(
        !dir.path().join("data").exists(),
        "refused before touching the database"
    );
    let own = [
        public,
        ("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS", "whsec_mine"),
        ("AUTOFACTURA__MERCADOPAGO__WEBHOOK_SECRET", "mp-mine"),
        ("AUTOFACTURA__MERCADOPAGO__ACCESS_TOKEN", "APP_USR-mine"),
    ];
    let mut example = own.to_vec();
    example.push(("AUTOFACTURA__ADMIN__PASSWORD", "change-me"));
    let (code, err) = serve_with(dir.path(), &example, Duration::from_secs(20))
        .expect("serve must refuse the example password");
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("AUTOFACTURA__ADMIN__PASSWORD") && err.contains("change-me"),
        "{err}"
    );
    assert!(!err.contains("STRIPE__WEBHOOK_SECRETS"), "{err}");
    // With its own secrets and password it starts (and is still running when stopped).
    let mut mine = own.to_vec();
    mine.push(("AUTOFACTURA__ADMIN__PASSWORD", "a password of my own"));
    assert_eq!(
        serve_with(dir.path(), &mine, Duration::from_secs(3)),
        None,
        "serve with real secrets keeps running"
    );
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL over TLS

/// `url` with `key=value` added to its query.
fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_connects_over_tls_with_sslmode_require() {
    let Some(url) = support::pg::admin_url("nothing (the TLS check)") else {
        return;
    };
    use autofactura::config::{DatabaseSettings, SecretString};
    use autofactura::store::{self, Db};
    let settings = |url: String| DatabaseSettings {
        url: SecretString::new(url),
        max_connections: 2,
    };
    // Does the server offer TLS at all? Ask it over a plain connection.
    let plain = store::connect(&settings(with_param(&url, "sslmode", "disable")))
        .await
        .expect("plain connection");
    let Db::Postgres(pool, ..) = &plain else {
        panic!("not PostgreSQL")
    };
    let (ssl, cert): (String, String) = (
        sqlx::query_scalar("SHOW ssl")
            .fetch_one(pool)
            .await
            .expect("show ssl"),
        sqlx::query_scalar("SHOW ssl_cert_file")
            .fetch_one(pool)
            .await
            .expect("show ssl_cert_file"),
    );
    if ssl != "on" {
        let msg = format!(
            "the PostgreSQL server at {} has ssl = off, so sslmode=require cannot be tested; \
             scripts/test-env turns it on for the local cluster (ALTER SYSTEM SET ssl = on with \
             the snakeoil certificate, then a reload)",
            autofactura::config::redact_url(&url)
        );
        assert!(
            std::env::var("AUTOFACTURA_REQUIRE_PG_TLS").is_err(),
            "{msg}"
        );
        eprintln!("\n*** SKIP PostgreSQL TLS: {msg} ***\n");
        return;
    }
    // sslmode=require: encrypted (the server says so for this very connection).
    let tls = store::connect(&settings(with_param(&url, "sslmode", "require")))
        .await
        .expect("sslmode=require connects");
    let Db::Postgres(pool, ..) = &tls else {
        panic!("not PostgreSQL")
    };
    let on: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(pool)
        .await
        .expect("pg_stat_ssl");
    assert!(on, "sslmode=require gave an unencrypted connection");
    // Migrations over TLS, on a database of the test's own: the server's shared one may hold
    // another checkout's later migrations.
    let name = format!("af_tls_{}", uuid::Uuid::new_v4().simple());
    store::create_postgres_database(&url, &name)
        .await
        .expect("create a database for the TLS check");
    let own = store::connect(&settings(with_param(
        &store::postgres_url_with_database(&url, &name),
        "sslmode",
        "require",
    )))
    .await
    .expect("sslmode=require connects to the new database");
    own.migrate().await.expect("migrations run over TLS");
    own.close().await;
    store::drop_postgres_database(&url, &name)
        .await
        .expect("drop the TLS check's database");
    // verify-full checks the certificate: a self-signed one nobody vouches for is refused.
    let err = store::connect(&settings(with_param(&url, "sslmode", "verify-full")))
        .await
        .expect_err("an unknown self-signed certificate must be refused")
        .to_string();
    assert!(
        err.to_lowercase().contains("certificate") || err.to_lowercase().contains("tls"),
        "{err}"
    );
    // …and accepted once its certificate is the root we name (when this machine can read it).
    if std::fs::read(&cert).is_ok() {
        let ca = with_param(
            &with_param(&url, "sslmode", "verify-ca"),
            "sslrootcert",
            &cert,
        );
        store::connect(&settings(ca))
            .await
            .expect("verify-ca with the server's certificate as the root");
    }
}
