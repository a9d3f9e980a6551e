//! The benchmark suite. `cargo bench` runs every part and ends with one table of results, each
//! ratio against a limit of this machine measured in the same run:
//!
//! - `seal`: sealed invoices per CPU second against `openssl speed rsa2048` sign/s;
//! - `ingest`: accepted webhooks/s against the database's raw limit (the same rows inserted bare),
//!   and p99 acknowledgement latency at half the peak;
//! - `drain`: stamps/s with a sandbox PAC at latency L and W workers against W/L, and at L=0
//!   against the sealing limit of all cores;
//! - `e2e`: signed webhooks in at a fixed rate, stamps out (`serve` and the sandbox PAC as
//!   processes of their own, L = 0 and 50 ms): the highest rate with a flat backlog against the
//!   lower of the ingest and drain limits, and the appliance's CPU per stamp;
//! - `memory`: peak memory of `autofactura serve` draining 10,000 pending rows against the same
//!   process with an empty outbox;
//! - `export`: peak memory of `autofactura export` of a month of 10,000 documents against the
//!   same command on an empty month, and the ZIP's counts.
//!
//! `cargo bench -- drain` (or `seal`, `ingest`, `e2e`, `memory`, `export`) runs one part; PostgreSQL parts need
//! AUTOFACTURA_TEST_DATABASE_URL and print SKIP without it. The table is Markdown, ready for
//! BENCHMARKS.md.

mod drain;
mod e2e;
mod export;
mod ingest;
mod memory;
mod procs;
mod seal;

/// One line of the final table.
#[derive(Debug, Clone)]
pub struct Row {
    pub bench: &'static str,
    pub what: String,
    pub result: String,
    /// The limit measured in the same run, as text, and the result's ratio to it.
    pub limit: Option<(String, f64)>,
    /// The target as text (`>= 0.80`) and whether it was met; none when the row only informs.
    pub target: Option<(String, bool)>,
}

impl Row {
    pub fn new(bench: &'static str, what: impl Into<String>, result: impl Into<String>) -> Self {
        Self {
            bench,
            what: what.into(),
            result: result.into(),
            limit: None,
            target: None,
        }
    }

    pub fn limit(mut self, limit: impl Into<String>, ratio: f64) -> Self {
        self.limit = Some((limit.into(), ratio));
        self
    }

    pub fn target(mut self, target: impl Into<String>, met: bool) -> Self {
        self.target = Some((target.into(), met));
        self
    }
}

/// Sends `rows` signed Stripe payments (ids `{prefix}{i}`) to the appliance at `addr` over 16
/// connections; each must be acknowledged.
pub async fn send_paid_sales(
    addr: &str,
    secret: &'static str,
    prefix: &'static str,
    rows: usize,
) -> anyhow::Result<()> {
    use autofactura::webhooks::{signature, stripe};
    let http = reqwest::Client::new();
    let mut tasks = tokio::task::JoinSet::new();
    let per = rows.div_ceil(16);
    let now = chrono::Utc::now().timestamp();
    for t in 0..16 {
        let (http, addr) = (http.clone(), addr.to_owned());
        tasks.spawn(async move {
            for i in (t * per)..((t + 1) * per).min(rows) {
                let body = stripe::sample_payment_intent(&format!("{prefix}{i}"), now, false);
                let sig = signature::stripe_header(
                    &[secret],
                    chrono::Utc::now().timestamp(),
                    body.as_bytes(),
                );
                let r = http
                    .post(format!("{addr}/webhooks/stripe"))
                    .header("Stripe-Signature", sig)
                    .body(body)
                    .send()
                    .await?;
                anyhow::ensure!(
                    r.status() == 200,
                    "payment {prefix}{i}: HTTP {}",
                    r.status()
                );
            }
            Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// Writes `rows` paid sales through the webhook route of an in-process appliance configured by
/// `settings` (TOML) that runs no workers, so they are all pending when a worker starts.
pub async fn fill_backlog(
    settings: &str,
    secret: &'static str,
    prefix: &'static str,
    rows: usize,
) -> anyhow::Result<()> {
    use autofactura::config::Settings;
    let app = autofactura::startup::Application::build(Settings::from_parts(Some(settings), &[])?)
        .await?;
    let addr = format!("http://127.0.0.1:{}", app.port());
    let db = app.state().db.clone();
    let server = tokio::spawn(app.run_until_stopped());
    send_paid_sales(&addr, secret, prefix, rows).await?;
    server.abort();
    db.close().await;
    Ok(())
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let mem_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "{model}, {cores} cores, {:.0} GiB; load average at start {}",
        mem_kb as f64 / 1_048_576.0,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // Logging as `serve` has it (info, sqlx warnings), written to a sink: its cost is part of
    // every path measured, without flooding the terminal.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info,sqlx=warn"))
        .with_writer(std::io::sink)
        .try_init();
    // `cargo bench` passes `--bench`; any other argument names the parts to run.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let parts = ["seal", "ingest", "drain", "e2e", "memory", "export"];
    let run = |p: &str| {
        wanted.iter().all(|w| !parts.contains(&w.as_str())) || wanted.iter().any(|w| w == p)
    };
    let machine = machine();
    println!("bench: {machine}");
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    if run("seal") {
        rows.extend(
            tokio::task::spawn_blocking(seal::run)
                .await
                .expect("seal bench"),
        );
    }
    if run("ingest") {
        match ingest::run().await {
            Ok(r) => rows.extend(r),
            Err(e) => println!("ingest: FAILED: {e:#}"),
        }
    }
    if run("drain") {
        rows.extend(drain::run(&wanted).await);
    }
    if run("e2e") {
        rows.extend(e2e::run(&wanted).await);
    }
    if run("memory") {
        match memory::run().await {
            Ok(r) => rows.extend(r),
            Err(e) => println!("memory: FAILED: {e:#}"),
        }
    }
    if run("export") {
        match export::run().await {
            Ok(r) => rows.extend(r),
            Err(e) => println!("export: FAILED: {e:#}"),
        }
    }
    println!();
    println!(
        "Benchmarks on {machine}; {} on {} ({:.0} s)",
        env!("CARGO_PKG_VERSION"),
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        started.elapsed().as_secs_f64()
    );
    println!();
    println!("| bench | measurement | result | limit (same run) | ratio | target | |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let (limit, ratio) = match &r.limit {
            Some((text, ratio)) => (text.as_str(), format!("{ratio:.3}")),
            None => ("", String::new()),
        };
        let (target, met) = match &r.target {
            Some((text, met)) => (text.as_str(), if *met { "met" } else { "NOT met" }),
            None => ("", ""),
        };
        let (bench, what, result) = (r.bench, &r.what, &r.result);
        println!("| {bench} | {what} | {result} | {limit} | {ratio} | {target} | {met} |");
    }
}
