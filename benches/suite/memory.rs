//! Memory of `autofactura serve` (the real binary) with 10,000 pending rows in its outbox,
//! drained by 32 workers, against the same binary with an empty outbox in the same run. Peak
//! resident memory (`VmHWM`) is read from /proc. The claim it checks: a backlog costs disk, not
//! memory (target: peak with the backlog at most 1.5 × empty). The sandbox PAC runs as its own
//! process (`autofactura pac-sim`), as a real PAC is remote: the sandbox keeps every stamp it
//! issued in memory, which is its own cost, reported beside.
//!
//! Run with `cargo bench -- memory` (SQLite).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use autofactura::config::Settings;
use autofactura::startup::Application;

use super::Row;

const ROWS: usize = 10_000;
const SECRET: &str = "whsec_bench_memory";
const TARGET: f64 = 1.5;

/// The child; killed when dropped.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn settings_text(db: &Path, port: u16, admin: u16, pac_url: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[database]\nurl = \"sqlite://{}\"\n\
         [stripe]\nwebhook_secrets = [\"{SECRET}\"]\n[pac]\nkind = \"sandbox\"\nurl = \"{pac_url}\"\n\
         [worker]\nconcurrency = 32\nidle_poll_ms = 50\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n",
        db.display()
    )
}

fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_autofactura"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// `GET url` answers 2xx within a minute.
async fn wait_ready(url: &str, dir: &Path) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(r) = http.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{url} did not answer; see {}", dir.display())
}

/// The sandbox PAC as its own process, answering after 20 ms.
async fn start_pac(dir: &Path) -> anyhow::Result<(Serve, String)> {
    let port = free_port()?;
    let log = std::fs::File::create(dir.join("pac-sim.log"))?;
    let child = command()
        .args([
            "pac-sim",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--faults",
            "latency=20ms",
            "--state",
        ])
        .arg(dir.join("pac-sim.jsonl"))
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("start autofactura pac-sim")?;
    let sim = Serve(child);
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&format!("{url}/_sim/stamps"), dir).await?;
    Ok((sim, url))
}

/// `VmHWM` and `VmRSS` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

async fn start(dir: &Path, db: &Path, name: &str, pac_url: &str) -> anyhow::Result<Serve> {
    let (port, admin) = (free_port()?, free_port()?);
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, settings_text(db, port, admin, pac_url))?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = command()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("start autofactura serve")?;
    let serve = Serve(child);
    wait_ready(&format!("http://127.0.0.1:{port}/healthz"), dir).await?;
    Ok(serve)
}

/// Writes `ROWS` paid sales into the database at `db` through the webhook route of an
/// in-process appliance without workers, so they are all pending when `serve` starts.
async fn fill(db: &Path, pac_url: &str) -> anyhow::Result<()> {
    let text = settings_text(db, 0, 0, pac_url);
    let app = Application::build(Settings::from_parts(Some(&text), &[])?).await?;
    let addr = format!("http://127.0.0.1:{}", app.port());
    let state_db = app.state().db.clone();
    let server = tokio::spawn(app.run_until_stopped());
    super::send_paid_sales(&addr, SECRET, "mem", ROWS).await?;
    server.abort();
    state_db.close().await;
    Ok(())
}

async fn stamped(db: &autofactura::store::Db) -> i64 {
    db.outbox_count(autofactura::domain::DocumentState::Stamped)
        .await
        .unwrap_or(0)
}

pub async fn run() -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let (pac, pac_url) = start_pac(dir.path()).await?;

    // The same binary and settings with nothing to do.
    let empty_db = dir.path().join("empty.db");
    let empty = start(dir.path(), &empty_db, "empty", &pac_url).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (empty_peak, empty_rss) = memory_kib(empty.0.id());
    drop(empty);
    println!(
        "memory: serve with an empty outbox: peak {:.1} MiB, now {:.1} MiB",
        empty_peak as f64 / 1024.0,
        empty_rss as f64 / 1024.0
    );

    let db_path = dir.path().join("backlog.db");
    let t = Instant::now();
    fill(&db_path, &pac_url).await?;
    println!(
        "memory: {ROWS} pending rows written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let serve = start(dir.path(), &db_path, "backlog", &pac_url).await?;
    let pid = serve.0.id();
    let watch = autofactura::store::connect(
        &Settings::from_parts(Some(&settings_text(&db_path, 0, 0, &pac_url)), &[])?.database,
    )
    .await?;
    let t = Instant::now();
    let mut rss_max = 0;
    loop {
        rss_max = rss_max.max(memory_kib(pid).1);
        if stamped(&watch).await >= i64::try_from(ROWS)? {
            break;
        }
        if t.elapsed() > Duration::from_secs(900) {
            bail!(
                "the backlog did not drain in 15 minutes; see {}",
                dir.path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    let (peak, _) = memory_kib(pid);
    let (pac_peak, _) = memory_kib(pac.0.id());
    drop(serve);
    drop(pac);
    watch.close().await;
    let ratio = peak as f64 / empty_peak.max(1) as f64;
    println!(
        "memory: serve draining {ROWS} pending rows ({:.0}/s): peak {:.1} MiB (RSS sampled up to {:.1} MiB); empty {:.1} MiB; ratio {ratio:.2} (target <= {TARGET}): {}",
        ROWS as f64 / secs,
        peak as f64 / 1024.0,
        rss_max as f64 / 1024.0,
        empty_peak as f64 / 1024.0,
        if ratio <= TARGET { "MET" } else { "NOT MET" }
    );
    println!(
        "memory: the sandbox PAC (its own process, every stamp kept in memory): peak {:.1} MiB",
        pac_peak as f64 / 1024.0
    );
    Ok(vec![
        Row::new(
            "memory",
            format!("serve draining {ROWS} pending rows (SQLite, 32 workers): peak RSS"),
            format!("{:.1} MiB", peak as f64 / 1024.0),
        )
        .limit(
            format!(
                "same binary, empty outbox: {:.1} MiB",
                empty_peak as f64 / 1024.0
            ),
            ratio,
        )
        .target(format!("<= {TARGET}"), ratio <= TARGET),
    ])
}
