//! Outbox drain rate.
//!
//! 1. With the sandbox PAC answering after a fixed latency L and a pool of W workers, the ideal
//!    rate is W/L stamps per second; the ratio to it is printed (target ≥ 0.8 at W=32, L=50 ms).
//! 2. With L=0, the ratio to this machine's sealing limit, measured in the same run (sealing on
//!    every core at once). The in-process sandbox shares those cores: it verifies each Sello and
//!    signs each TFD, so a drain costs about three RSA operations where sealing costs one.
//!
//! Run with `cargo bench -- drain` (SQLite; PostgreSQL too when
//! AUTOFACTURA_TEST_DATABASE_URL is set).

use std::sync::Arc;
use std::time::{Duration, Instant};

use autofactura::cfdi::{self, InvoiceRequest};
use autofactura::config::Settings;
use autofactura::pacsim::Sandbox;
use autofactura::pacsim::faults::FaultSpec;
use autofactura::startup::Application;
use sqlx::Connection;

use super::Row;

const SECRET: &str = "whsec_bench";

struct Run {
    label: String,
    rows: usize,
    secs: f64,
    /// Process CPU seconds (user + system) spent while draining: the appliance and the
    /// in-process sandbox together.
    cpu: f64,
    /// Share of the whole machine's CPU time that was busy meanwhile (every process).
    busy: f64,
}

/// The database to drain: a file in `dir`, or a new PostgreSQL database (its name returned too,
/// to drop it afterwards).
pub(super) async fn database_url(
    backend: &str,
    dir: &std::path::Path,
) -> Option<(String, Option<String>)> {
    if backend == "sqlite" {
        return Some((format!("sqlite://{}", dir.join("bench.db").display()), None));
    }
    let admin = std::env::var("AUTOFACTURA_TEST_DATABASE_URL").ok()?;
    let name = format!("af_bench_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .ok()?;
    let (base, _) = admin.rsplit_once('/')?;
    Some((format!("{base}/{name}"), Some(name)))
}

/// Drops a PostgreSQL database [`database_url`] created.
pub(super) async fn drop_database(name: &str) {
    let Ok(admin) = std::env::var("AUTOFACTURA_TEST_DATABASE_URL") else {
        return;
    };
    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await;
    }
}

/// Fills the outbox with `rows` paid sales over HTTP, then drains it with `workers` slots
/// against a sandbox answering after `latency`.
async fn drain(backend: &str, workers: usize, latency: Duration, rows: usize) -> Option<Run> {
    let dir = tempfile::tempdir().ok()?;
    let Some((db_url, pg_name)) = database_url(backend, dir.path()).await else {
        println!("drain: *** SKIP {backend}: AUTOFACTURA_TEST_DATABASE_URL is not set ***");
        return None;
    };
    let faults = if latency.is_zero() {
        FaultSpec::default()
    } else {
        FaultSpec::parse(&format!("latency={}ms", latency.as_millis())).expect("spec")
    };
    let (url, _sim) = Sandbox::start_in_process(&dir.path().join("sim.jsonl"), faults)
        .await
        .expect("sandbox");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{db_url}\"\n\
         [stripe]\nwebhook_secrets = [\"{SECRET}\"]\n[pac]\nkind = \"sandbox\"\nurl = \"{url}\"\n\
         [worker]\nconcurrency = {workers}\nidle_poll_ms = 20\n"
    );
    let settings = Settings::from_parts(Some(&text), &[]).expect("settings");
    let app = Application::build(settings.clone()).await.expect("app");
    let addr = format!("http://127.0.0.1:{}", app.port());
    let db = app.state().db.clone();
    tokio::spawn(app.run_until_stopped());

    // Fill (not measured).
    super::send_paid_sales(&addr, SECRET, "drain", rows)
        .await
        .expect("fill the outbox");

    // Drain (measured).
    eprintln!(
        "drain: {backend}: {rows} rows filled; draining (pid {})",
        std::process::id()
    );
    let services = autofactura::startup::worker_services(&settings, db.clone())
        .await
        .expect("services");
    let start = Instant::now();
    let started = chrono::Utc::now();
    let cpu0 = super::procs::cpu_seconds("self");
    let machine0 = super::procs::machine_cpu();
    let pool = services
        .worker
        .clone()
        .start(tokio_util::sync::CancellationToken::new(), None);
    loop {
        let counts = db.outbox_counts().await.expect("counts");
        let stamped = counts
            .iter()
            .find(|(s, _)| s == "stamped")
            .map_or(0, |c| c.1);
        if usize::try_from(stamped).unwrap_or(0) >= rows {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "drain stalled: {counts:?}"
        );
        // The end is read from the last stamp's time below, so polling can be slow and light.
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let secs = match db.last_stamped_at().await.expect("last stamp") {
        Some(end) => (end - started).as_seconds_f64(),
        None => start.elapsed().as_secs_f64(),
    };
    let cpu = super::procs::cpu_seconds("self") - cpu0;
    let machine1 = super::procs::machine_cpu();
    let ticks = (machine1.1 - machine0.1).max(1) as f64;
    let busy = (machine1.0 - machine0.0) as f64 / ticks;
    let stolen = (machine1.2 - machine0.2) as f64 / ticks;
    pool.shutdown().await;
    let lat = db.attempt_latencies("stamp").await.expect("latencies");
    db.close().await;
    if let Some(name) = pg_name {
        drop_database(&name).await;
    }
    println!(
        "drain: {backend}: CPU per stamp {:.2} ms (this process: appliance + sandbox); the machine's CPUs were {:.0} % busy (every process; {:.0} % taken by the host)",
        cpu * 1000.0 / rows as f64,
        busy * 100.0,
        stolen * 100.0
    );
    if !lat.is_empty() {
        let total: i64 = lat.iter().sum();
        println!(
            "drain: {backend}: PAC call latency seen by the workers: mean {:.1} ms, p50 {} ms, p99 {} ms; \
             calls in flight {:.1} of {workers} on average",
            total as f64 / lat.len() as f64,
            lat[lat.len() / 2],
            lat[lat.len() * 99 / 100],
            total as f64 / 1000.0 / secs
        );
    }
    Some(Run {
        label: format!("{backend} W={workers} L={}ms", latency.as_millis()),
        rows,
        secs,
        cpu,
        busy,
    })
}

/// Sealed invoices per second with every core sealing at once.
fn sealing_limit() -> f64 {
    let csd = Arc::new(autofactura::sandbox::csd().expect("csd"));
    let (_, json) = autofactura::sandbox::SAMPLE_REQUESTS[0];
    let mut req: InvoiceRequest = serde_json::from_str(json).expect("sample");
    req.fecha = autofactura::domain::time::now_in_mexico();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (csd, req) = (csd.clone(), req.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while start.elapsed() < Duration::from_secs(2) {
                    cfdi::seal(&req, &csd).expect("seal");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    total as f64 / start.elapsed().as_secs_f64()
}

impl Run {
    /// The report row of this run, stamping at `rate` per second.
    fn row(&self, rate: f64) -> Row {
        Row::new(
            "drain",
            format!(
                "{}: stamps/s ({:.1} ms CPU each; machine {:.0} % busy)",
                self.label,
                self.cpu * 1000.0 / self.rows as f64,
                self.busy * 100.0
            ),
            format!("{rate:.0}/s"),
        )
    }
}

/// `args` may name a backend (`sqlite`, `postgres`) and a scenario (`wl`, `l0`) to run only those.
pub async fn run(args: &[String]) -> Vec<Row> {
    let named = |group: &[&str], what: &str| {
        !args.iter().any(|a| group.contains(&a.as_str())) || args.iter().any(|a| a == what)
    };
    let backends: Vec<&str> = ["sqlite", "postgres"]
        .into_iter()
        .filter(|b| named(&["sqlite", "postgres"], b))
        .collect();
    let mut rows = Vec::new();
    let (w, l) = (32usize, Duration::from_millis(50));
    let ideal = w as f64 / l.as_secs_f64();
    if named(&["wl", "l0"], "wl") {
        for backend in &backends {
            let Some(r) = drain(backend, w, l, 3000).await else {
                continue;
            };
            let rate = r.rows as f64 / r.secs;
            let ratio = rate / ideal;
            println!(
                "drain: {}: {} rows in {:.2} s = {rate:.1}/s; W/L = {ideal:.0}/s; ratio {ratio:.3} (target >= 0.80): {}",
                r.label,
                r.rows,
                r.secs,
                if ratio >= 0.8 { "MET" } else { "NOT MET" }
            );
            rows.push(
                r.row(rate)
                    .limit(format!("W/L = {ideal:.0}/s"), ratio)
                    .target(">= 0.80", ratio >= 0.8),
            );
        }
    }
    if named(&["wl", "l0"], "l0") {
        let limit = sealing_limit();
        for backend in &backends {
            let Some(r) = drain(backend, w, Duration::ZERO, 2000).await else {
                continue;
            };
            let rate = r.rows as f64 / r.secs;
            println!(
                "drain: {}: {} rows in {:.2} s = {rate:.1}/s; sealing limit {limit:.1}/s on all cores; ratio {:.3}",
                r.label,
                r.rows,
                r.secs,
                rate / limit
            );
            rows.push(
                r.row(rate)
                    .limit(format!("sealing, all cores: {limit:.0}/s"), rate / limit),
            );
        }
    }
    rows
}
