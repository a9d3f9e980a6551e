//! The operator path through the real binary: `autofactura serve` on a settings file, then
//! `send-test-webhook` for Stripe and Mercado Pago, then `invoices list` (JSON and table) against
//! the same settings, on SQLite (temp dir) and PostgreSQL (a fresh database).

use crate::support::pg;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::Connection;

/// The `serve` process; killed and reaped when dropped, so a failing test leaves nothing behind.
pub struct Server {
    pub child: Child,
    log: PathBuf,
}

impl Server {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary with a clean environment for settings: no `AUTOFACTURA__…` override from the
/// caller's shell changes what the test configured.
pub fn autofactura(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_autofactura"));
    c.current_dir(dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            c.env_remove(k);
        }
    }
    c
}

pub fn run(dir: &Path, args: &[&str]) -> Output {
    let out = autofactura(dir)
        .args(args)
        .output()
        .expect("run autofactura");
    eprintln!(
        "$ autofactura {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `autofactura send-test-webhook` of `provider` to the server at `url`.
pub fn send_test_webhook(dir: &Path, config: &str, provider: &str, url: &str) -> Output {
    run(
        dir,
        &[
            "send-test-webhook",
            "--config",
            config,
            "--provider",
            provider,
            "--url",
            url,
        ],
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `GET path` over a fresh connection; the status code, `None` when nothing answers.
pub fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// Writes the settings, starts `serve` and waits for `/healthz`. Retries on another port when
/// the one picked was taken in between.
fn start(dir: &Path, database_url: &str) -> (Server, PathBuf, u16) {
    start_with(dir, database_url, "")
}

/// As [`start`], with `extra` TOML appended to the settings.
pub fn start_with(dir: &Path, database_url: &str, extra: &str) -> (Server, PathBuf, u16) {
    for _ in 0..3 {
        let port = crate::support::free_port();
        let config = dir.join("autofactura.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:{port}\"\n[database]\nurl = \"{database_url}\"\nmax_connections = 4\n{extra}"
            ),
        )
        .expect("write settings");
        let log = dir.join(format!("serve-{port}.log"));
        let child = autofactura(dir)
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::from(std::fs::File::create(&log).expect("log")))
            .stderr(Stdio::from(
                std::fs::File::options()
                    .append(true)
                    .open(&log)
                    .expect("log"),
            ))
            .spawn()
            .expect("start autofactura serve");
        let mut server = Server { child, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = server.child.try_wait() {
                eprintln!("serve exited ({status}):\n{}", server.log());
                break;
            }
            if get_status(port, "/healthz") == Some(200) {
                return (server, config, port);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if server.child.try_wait().ok().flatten().is_none() {
            panic!("serve never answered /healthz:\n{}", server.log());
        }
    }
    panic!("serve could not start on three ports in a row");
}

fn operator_path(database_url: &str, dir: &Path) {
    let (server, config, port) = start(dir, database_url);
    let config = config.to_str().expect("utf-8 path");
    let url = format!("http://127.0.0.1:{port}");
    // Ready once the background loops have beaten for the first time, moments after /healthz.
    let ready_by = Instant::now() + Duration::from_secs(30);
    while get_status(port, "/readyz") != Some(200) && Instant::now() < ready_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get_status(port, "/readyz"), Some(200), "{}", server.log());

    for provider in ["stripe", "mercadopago"] {
        let out = send_test_webhook(dir, config, provider, &url);
        let text = stdout(&out);
        assert!(out.status.success(), "{provider}: {text}\n{}", server.log());
        assert!(
            text.contains("200 OK") && text.contains("\"invoice_queued\""),
            "{provider}: {text}"
        );
    }

    // The worker pool inside `serve` stamps both with the sandbox PAC within moments.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let rows: Vec<Value> = loop {
        let out = run(dir, &["invoices", "list", "--json", "--config", config]);
        assert!(out.status.success());
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
        assert_eq!(rows.len(), 2, "{rows:#?}");
        if rows.iter().all(|r| r["status"] == "stamped") {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not stamped: {rows:#?}\n{}",
            server.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let by = |provider: &str| -> &Value {
        rows.iter()
            .find(|r| r["provider"] == provider)
            .unwrap_or_else(|| panic!("no {provider} payment in {rows:#?}"))
    };
    let (stripe, mp) = (by("stripe"), by("mercadopago"));
    assert!(
        stripe["payment_id"]
            .as_str()
            .is_some_and(|p| p.starts_with("pi_test_")),
        "{stripe}"
    );
    assert!(
        mp["payment_id"]
            .as_str()
            .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())),
        "{mp}"
    );
    for r in [stripe, mp] {
        // Stamped: serie-folio allocated, receptor with the customer's RFC, a UUID.
        assert_eq!(r["status"], "stamped", "{r}");
        assert!(r["uuid"].as_str().is_some_and(|u| u.len() == 36), "{r}");
        assert_eq!(r["serie"], "A", "{r}");
        assert_eq!(r["receptor_rfc"], "XIQB891116QE4", "{r}");
        assert_eq!(
            (r["amount"].as_str(), r["currency"].as_str()),
            (Some("116.00"), Some("MXN"))
        );
        assert_eq!(r["livemode"], false, "{r}");
        assert!(
            r["stamp_key"]
                .as_str()
                .is_some_and(|k| k.starts_with("af1-")),
            "{r}"
        );
    }
    let mut folios = [stripe["folio"].clone(), mp["folio"].clone()];
    folios.sort_by_key(|f| f.as_str().map(str::to_owned));
    assert_eq!(folios, ["1", "2"], "one folio each, consecutive");

    let table = stdout(&run(dir, &["invoices", "list", "--config", config]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("PAYMENT") && lines[0].contains("FOLIO"),
        "{table}"
    );
    for r in [stripe, mp] {
        let line = lines
            .iter()
            .find(|l| l.starts_with(r["payment_id"].as_str().unwrap_or("?")))
            .unwrap_or_else(|| panic!("{} missing from\n{table}", r["payment_id"]));
        let folio = format!("A-{}", r["folio"].as_str().unwrap_or("?"));
        for part in [
            r["provider"].as_str().unwrap_or("?"),
            "stamped (test)",
            folio.as_str(),
            "XIQB891116QE4",
            r["uuid"].as_str().unwrap_or("?"),
        ] {
            assert!(line.contains(part), "{part:?} not in {line:?}");
        }
    }

    let filtered = run(
        dir,
        &[
            "invoices",
            "list",
            "--json",
            "--status",
            "awaiting_global",
            "--config",
            config,
        ],
    );
    assert_eq!(
        serde_json::from_slice::<Vec<Value>>(&filtered.stdout).expect("JSON"),
        Vec::<Value>::new()
    );

    // Once the server is gone, the test command says so and fails.
    drop(server);
    let out = send_test_webhook(dir, config, "stripe", &url);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is `autofactura serve` running?"),
        "{out:?}"
    );
}

#[test]
fn operator_path_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}",
        dir.path().join("data/autofactura.db").display()
    );
    operator_path(&url, dir.path());
}

#[test]
fn operator_path_on_postgres() {
    let Some(admin) = pg::admin_url("the operator path") else {
        return;
    };
    let name = format!("af_test_{}", uuid::Uuid::new_v4().simple());
    admin_sql(&admin, &format!("CREATE DATABASE {name}")).expect("create the test database");
    let _drop = DropDatabase {
        admin: admin.clone(),
        name: name.clone(),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    operator_path(
        &autofactura::store::postgres_url_with_database(&admin, &name),
        dir.path(),
    );
}

/// One statement on the admin connection (CREATE/DROP DATABASE cannot run in a transaction).
fn admin_sql(admin: &str, sql: &str) -> Result<(), sqlx::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(sqlx::Error::Io)?;
    rt.block_on(async {
        let mut c = sqlx::PgConnection::connect(admin).await?;
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut c)
            .await
            .map(|_| ())
    })
}

/// Drops the test database even when the test fails (best effort: a leftover is harmless).
struct DropDatabase {
    admin: String,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let _ = admin_sql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}
