//! Accepted webhooks per second at 32 concurrent keep-alive connections, on SQLite and on
//! PostgreSQL, as a ratio to the database's raw limit measured in the same run: the same three
//! rows (the event with its body, the payment, the outbox row with its frozen comprobante; same
//! tables, sizes and indexes) inserted by 32 concurrent tasks with the thinnest client, a
//! prepared statement per row in one transaction, no folio and no duplicate handling
//! (`Db::insert_delivery_rows`). Target: at least 0.7. SQLite runs in WAL mode, one writer at a
//! time (`BEGIN IMMEDIATE`), every acknowledged row on disk on both sides: the raw client
//! commits each transaction with `synchronous = FULL`; the appliance commits groups of sales
//! with `synchronous = NORMAL` and syncs the log before acknowledging them, outside its lock.
//! Then an open-loop load at half the measured HTTP peak: p50 and p99 acknowledgement latency,
//! measured from each request's scheduled send time (so a stall counts against every request
//! queued behind it). Target: p99 under 50 ms.
//!
//! Run with `cargo bench -- ingest`. PostgreSQL needs AUTOFACTURA_TEST_DATABASE_URL (a
//! fresh database per phase is created and dropped); without it that half prints SKIP.
//! `INGEST_BENCH_SECONDS` (default 4) and `INGEST_BENCH_ROUNDS` (default 3) tune the run;
//! `INGEST_BENCH_BACKENDS=sqlite` (or `postgres`) runs one backend only.
//!
//! The load generator runs in this process: a minimal HTTP/1.1 client over tokio sockets, so
//! the client takes as little of the machine as it can from the server it measures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use autofactura::config::Settings;
use autofactura::domain::StampKey;
use autofactura::ingest::Ingestor;
use autofactura::startup::Application;
use autofactura::store::{self, Db, NewEvent, NewPayment, OutboxDraft};
use autofactura::webhooks::{signature, stripe};
use sqlx::Connection;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

use super::Row;

const CONNECTIONS: usize = 32;
pub(super) const SECRET: &str = "whsec_bench_secret";
const TARGET_RATIO: f64 = 0.7;
const TARGET_P99_MS: f64 = 50.0;
/// Stands for the unique part of the ids in the body template.
const MARK: &str = "SUFFIXMARK";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub async fn run() -> anyhow::Result<Vec<Row>> {
    let secs = env_u64("INGEST_BENCH_SECONDS", 4).max(1);
    let rounds = env_u64("INGEST_BENCH_ROUNDS", 3).max(1);
    println!(
        "ingest: {CONNECTIONS} connections, {rounds} rounds of {secs} s raw + {secs} s HTTP per backend, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut rows = Vec::new();
    let only = std::env::var("INGEST_BENCH_BACKENDS").unwrap_or_default();
    for backend in [Backend::Sqlite, Backend::Postgres] {
        if !only.is_empty() && !only.contains(backend.name()) {
            continue;
        }
        if let Some(r) = run_backend(backend, secs, rounds).await? {
            rows.extend(r);
        }
    }
    Ok(rows)
}

#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// Fresh databases for one backend: SQLite files in a temp dir, or PostgreSQL databases
/// created on the test server and dropped at the end.
struct Databases {
    backend: Backend,
    dir: tempfile::TempDir,
    admin_url: Option<String>,
    created: Vec<String>,
}

impl Databases {
    async fn new(backend: Backend) -> anyhow::Result<Option<Self>> {
        let admin_url = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => match std::env::var("AUTOFACTURA_TEST_DATABASE_URL") {
                Ok(u) => Some(u),
                Err(_) => {
                    println!(
                        "\n*** SKIP PostgreSQL: AUTOFACTURA_TEST_DATABASE_URL is not set; the ingest bench ran on SQLite only ***\n"
                    );
                    return Ok(None);
                }
            },
        };
        Ok(Some(Self {
            backend,
            dir: tempfile::tempdir()?,
            admin_url,
            created: Vec::new(),
        }))
    }

    /// The URL of a new, empty database named after `label`.
    async fn fresh(&mut self, label: &str) -> anyhow::Result<String> {
        match (&self.backend, &self.admin_url) {
            (Backend::Postgres, Some(admin)) => {
                let name = format!("af_bench_{label}_{}", uuid::Uuid::new_v4().simple());
                let mut conn = sqlx::PgConnection::connect(admin)
                    .await
                    .context("connect to AUTOFACTURA_TEST_DATABASE_URL")?;
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await?;
                self.created.push(name.clone());
                Ok(autofactura::store::postgres_url_with_database(admin, &name))
            }
            _ => Ok(format!(
                "sqlite://{}",
                self.dir.path().join(format!("{label}.db")).display()
            )),
        }
    }

    async fn drop_all(&mut self) {
        let Some(admin) = &self.admin_url else {
            return;
        };
        if let Ok(mut c) = sqlx::PgConnection::connect(admin).await {
            for name in self.created.drain(..) {
                let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut c)
                .await;
            }
        }
    }
}

pub(super) fn settings_for(url: &str) -> anyhow::Result<Settings> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{url}\"\n\
         [stripe]\nwebhook_secrets = [\"{SECRET}\"]\n"
    );
    Ok(Settings::from_parts(Some(&text), &[])?)
}

/// The backend's rows of the table; `None` when the backend was skipped.
async fn run_backend(backend: Backend, secs: u64, rounds: u64) -> anyhow::Result<Option<Vec<Row>>> {
    let Some(mut dbs) = Databases::new(backend).await? else {
        return Ok(None);
    };
    let result = measure(backend, &mut dbs, secs, rounds).await;
    dbs.drop_all().await;
    result.map(Some)
}

async fn measure(
    backend: Backend,
    dbs: &mut Databases,
    secs: u64,
    rounds: u64,
) -> anyhow::Result<Vec<Row>> {
    let name = backend.name();
    let raw_settings = settings_for(&dbs.fresh("raw").await?)?;
    let raw_db = store::connect(&raw_settings.database).await?;
    raw_db.migrate().await?;
    let template = Arc::new(Template::new(&raw_settings)?);

    let app = Application::build(settings_for(&dbs.fresh("http").await?)?).await?;
    let port = app.port();
    let app_db = app.state().db.clone();
    let server = tokio::spawn(app.run_until_stopped());

    let run = Duration::from_secs(secs);
    let warm = Duration::from_secs(1);
    let ids = Arc::new(AtomicU64::new(0));
    // (ratio, HTTP rate, raw rate) per round.
    let mut results: Vec<(f64, f64, f64)> = Vec::new();
    let mut peaks = Vec::new();
    for round in 1..=rounds {
        let (raw, raw_cpu) = cpu_per_op(&ids, raw_rate(&raw_db, &template, &ids, warm, run)).await;
        let (http, http_cpu) = cpu_per_op(&ids, http_rate(port, &template, &ids, warm, run)).await;
        let (raw, http) = (raw?, http?);
        let ratio = http.accepted_per_sec / raw;
        println!(
            "{name}: round {round}: raw {raw:.1} ingests/s; HTTP {:.1} accepted/s ({} not accepted); ratio {ratio:.3}; \
             in-process CPU per delivery: raw {raw_cpu:.0} µs, HTTP {http_cpu:.0} µs (client included)",
            http.accepted_per_sec, http.refused
        );
        results.push((ratio, http.accepted_per_sec, raw));
        peaks.push(http.accepted_per_sec);
    }
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    peaks.sort_by(f64::total_cmp);
    let (ratio, http_rate, raw_rate) = results[results.len() / 2];
    let peak = peaks[peaks.len() - 1];
    let ratio_met = ratio >= TARGET_RATIO;
    println!(
        "{name}: median ratio HTTP/raw {ratio:.3} (target >= {TARGET_RATIO}): {}",
        met(ratio_met)
    );

    // The same open loop with the raw inserts first, for reference: what the database alone
    // gives at this rate on this machine now.
    let rate = peak / 2.0;
    let direct = latency_at(Via::Store(&raw_db), &template, &ids, rate, run).await?;
    println!(
        "{name}: open loop at {rate:.1}/s of raw inserts (reference): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        direct.p50_ms, direct.p99_ms, direct.max_ms
    );
    let lat = latency_at(Via::Http(port), &template, &ids, rate, run).await?;
    let p99_met = lat.p99_ms < TARGET_P99_MS && lat.refused == 0;
    println!(
        "{name}: open loop at {rate:.1}/s (half the peak {peak:.1}/s): {} sent, {} not accepted; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (target p99 < {TARGET_P99_MS} ms): {}",
        lat.sent,
        lat.refused,
        lat.p50_ms,
        lat.p99_ms,
        lat.max_ms,
        met(p99_met)
    );

    server.abort();
    app_db.close().await;
    raw_db.close().await;
    Ok(vec![
        Row::new(
            "ingest",
            format!("{name}: accepted webhooks/s, {CONNECTIONS} connections (median round)"),
            format!("{http_rate:.0}/s"),
        )
        .limit(
            format!("raw inserts of the same rows: {raw_rate:.0}/s"),
            ratio,
        )
        .target(format!(">= {TARGET_RATIO}"), ratio_met),
        Row::new(
            "ingest",
            format!("{name}: p99 acknowledgement at half the peak ({rate:.0}/s)"),
            format!("{:.1} ms (p50 {:.1} ms)", lat.p99_ms, lat.p50_ms),
        )
        .target(format!("< {TARGET_P99_MS} ms"), p99_met),
    ])
}

pub(super) fn met(ok: bool) -> &'static str {
    if ok { "MET" } else { "NOT MET" }
}

/// What one delivery writes, taken from a real sample event through the same parser, classifier
/// and planner as the webhook route; only the ids change per delivery.
pub(super) struct Template {
    body: String,
    event: NewEvent,
    payment: NewPayment,
    draft: OutboxDraft,
}

impl Template {
    pub(super) fn new(settings: &Settings) -> anyhow::Result<Self> {
        let body = stripe::sample_payment_intent(MARK, chrono::Utc::now().timestamp(), false);
        let ev = stripe::parse(body.as_bytes()).map_err(anyhow::Error::msg)?;
        let stripe::Meaning::Paid(facts) = stripe::classify(&ev) else {
            bail!("the sample event is not a paid sale");
        };
        let ingestor = Ingestor::new(settings).map_err(anyhow::Error::msg)?;
        let (payment, draft) = ingestor.plan(&facts);
        let draft = draft.context("the sample payment is not invoiceable")?;
        let t = chrono::Utc::now().timestamp();
        let headers_json = serde_json::json!({
            "content-type": "application/json",
            "stripe-signature": signature::stripe_header(&[SECRET], t, body.as_bytes()),
        })
        .to_string();
        let event = NewEvent {
            provider: stripe::PROVIDER.into(),
            event_id: ev.id.clone(),
            event_type: ev.kind.clone(),
            status: "processed".into(),
            reason: None,
            payment_ref: Some(facts.payment_id.clone()),
            livemode: Some(ev.livemode),
            api_version: ev.api_version.clone(),
            account: ev.account,
            headers_json,
            raw_body: body.clone().into_bytes(),
            next_attempt_at: None,
        };
        Ok(Self {
            body,
            event,
            payment,
            draft,
        })
    }

    /// The values the webhook route would write for delivery number `n`.
    fn values(&self, n: u64) -> (NewEvent, NewPayment, OutboxDraft) {
        let suffix = format!("b{n}");
        let payment_id = format!("pi_test_{suffix}");
        let mut event = self.event.clone();
        event.event_id = format!("evt_test_{suffix}");
        event.payment_ref = Some(payment_id.clone());
        let mut payment = self.payment.clone();
        payment.event_id = event.event_id.clone();
        payment.payment_id = payment_id;
        let mut draft = self.draft.clone();
        draft.stamp_key = StampKey::derive(stripe::PROVIDER, &payment.payment_id, "ingreso");
        (event, payment, draft)
    }

    /// The signed body of delivery number `n`: `(body, Stripe-Signature)`.
    fn delivery(&self, n: u64) -> (String, String) {
        let body = self.body.replace(MARK, &format!("b{n}"));
        let sig =
            signature::stripe_header(&[SECRET], chrono::Utc::now().timestamp(), body.as_bytes());
        (body, sig)
    }
}

/// CPU time this process has used, all threads (`/proc/self/task/*/schedstat`, Linux), in ns.
/// Threads that have ended are not counted; the server, runtime and database threads live for
/// the whole run.
fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Runs `phase` and returns its result with the CPU time this process spent per delivery issued
/// meanwhile, in µs.
async fn cpu_per_op<T>(ids: &AtomicU64, phase: impl Future<Output = T>) -> (T, f64) {
    let (n0, c0) = (ids.load(Ordering::Relaxed), process_cpu_ns());
    let out = phase.await;
    let (n1, c1) = (ids.load(Ordering::Relaxed), process_cpu_ns());
    let per_op = (c1.saturating_sub(c0)) as f64 / 1e3 / (n1 - n0).max(1) as f64;
    (out, per_op)
}

/// The raw limit on a new database at `url`: rows of deliveries inserted per second over `run`
/// after a second of warm-up.
pub(super) async fn raw_limit(url: &str, run: Duration) -> anyhow::Result<f64> {
    let settings = settings_for(url)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let template = Arc::new(Template::new(&settings)?);
    let rate = raw_rate(
        &db,
        &template,
        &Arc::new(AtomicU64::new(0)),
        Duration::from_secs(1),
        run,
    )
    .await;
    db.close().await;
    rate
}

/// The raw limit: deliveries' rows inserted per second, `CONNECTIONS` tasks at once, counted
/// after `warm`.
async fn raw_rate(
    db: &Db,
    template: &Arc<Template>,
    ids: &Arc<AtomicU64>,
    warm: Duration,
    run: Duration,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let (from, until) = (start + warm, start + warm + run);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (db, template, ids) = (db.clone(), template.clone(), ids.clone());
        set.spawn(async move {
            let mut counted = 0u64;
            loop {
                let (event, payment, draft) = template.values(ids.fetch_add(1, Ordering::Relaxed));
                db.insert_delivery_rows(&event, &payment, &draft).await?;
                let now = Instant::now();
                if now >= until {
                    return anyhow::Ok(counted);
                }
                if now >= from {
                    counted += 1;
                }
            }
        });
    }
    let mut total = 0;
    while let Some(r) = set.join_next().await {
        total += r??;
    }
    Ok(total as f64 / run.as_secs_f64())
}

/// A keep-alive HTTP/1.1 connection that posts signed Stripe deliveries.
struct Conn {
    port: u16,
    stream: Option<BufStream<TcpStream>>,
    line: String,
    body: Vec<u8>,
}

impl Conn {
    fn new(port: u16) -> Self {
        Self {
            port,
            stream: None,
            line: String::new(),
            body: Vec::new(),
        }
    }

    async fn connect(&mut self) -> std::io::Result<()> {
        if self.stream.is_none() {
            let s = TcpStream::connect(("127.0.0.1", self.port)).await?;
            s.set_nodelay(true)?;
            self.stream = Some(BufStream::new(s));
        }
        Ok(())
    }

    /// Posts one delivery; `true` when it was acknowledged with the invoice queued. A connection
    /// the server closed while idle is reopened and the delivery sent again (a redelivery is
    /// harmless by design).
    async fn post(&mut self, body: &str, sig: &str) -> anyhow::Result<bool> {
        match self.exchange(body, sig).await {
            Ok(ok) => Ok(ok),
            Err(_) => {
                self.stream = None;
                self.exchange(body, sig).await
            }
        }
    }

    async fn exchange(&mut self, body: &str, sig: &str) -> anyhow::Result<bool> {
        self.connect().await?;
        let port = self.port;
        let s = self.stream.as_mut().context("connected")?;
        let head = format!(
            "POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
             Stripe-Signature: {sig}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        s.write_all(body.as_bytes()).await?;
        s.flush().await?;
        self.line.clear();
        if s.read_line(&mut self.line).await? == 0 {
            bail!("connection closed");
        }
        let status: u16 = self
            .line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("status line")?;
        let mut length = 0usize;
        let mut close = false;
        loop {
            self.line.clear();
            if s.read_line(&mut self.line).await? == 0 {
                bail!("connection closed in the headers");
            }
            let l = self.line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().context("content-length")?;
                } else if k.eq_ignore_ascii_case("connection") && v.trim() == "close" {
                    close = true;
                } else if k.eq_ignore_ascii_case("transfer-encoding") {
                    bail!("unexpected transfer-encoding {v}");
                }
            }
        }
        self.body.resize(length, 0);
        s.read_exact(&mut self.body).await?;
        if close {
            self.stream = None;
        }
        let queued = status == 200
            && std::str::from_utf8(&self.body).is_ok_and(|b| b.contains("\"invoice_queued\""));
        Ok(queued)
    }
}

struct HttpRate {
    accepted_per_sec: f64,
    refused: u64,
}

/// Accepted deliveries per second over HTTP, `CONNECTIONS` connections, counted after `warm`.
async fn http_rate(
    port: u16,
    template: &Arc<Template>,
    ids: &Arc<AtomicU64>,
    warm: Duration,
    run: Duration,
) -> anyhow::Result<HttpRate> {
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut c = Conn::new(port);
        c.connect().await?;
        conns.push(c);
    }
    let start = Instant::now();
    let (from, until) = (start + warm, start + warm + run);
    let mut set = tokio::task::JoinSet::new();
    for mut conn in conns {
        let (template, ids) = (template.clone(), ids.clone());
        set.spawn(async move {
            let (mut accepted, mut refused) = (0u64, 0u64);
            loop {
                let (body, sig) = template.delivery(ids.fetch_add(1, Ordering::Relaxed));
                let ok = conn.post(&body, &sig).await?;
                let now = Instant::now();
                if now >= until {
                    return anyhow::Ok((accepted, refused));
                }
                if now >= from {
                    if ok {
                        accepted += 1;
                    } else {
                        refused += 1;
                    }
                }
            }
        });
    }
    let (mut accepted, mut refused) = (0, 0);
    while let Some(r) = set.join_next().await {
        let (a, f) = r??;
        accepted += a;
        refused += f;
    }
    Ok(HttpRate {
        accepted_per_sec: accepted as f64 / run.as_secs_f64(),
        refused,
    })
}

pub(super) struct Latency {
    pub sent: usize,
    pub refused: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Where the open loop sends deliveries: the HTTP endpoint, or straight to the store.
#[derive(Clone, Copy)]
pub(super) enum Via<'a> {
    Http(u16),
    Store(&'a Db),
}

enum Sender {
    Http(Conn),
    Store(Db),
}

/// Open loop: deliveries are scheduled at `rate` per second whatever the answers do, and each
/// latency runs from its scheduled time to the end of its acknowledgement.
pub(super) async fn latency_at(
    via: Via<'_>,
    template: &Arc<Template>,
    ids: &Arc<AtomicU64>,
    rate: f64,
    run: Duration,
) -> anyhow::Result<Latency> {
    let total = (rate * run.as_secs_f64()).round().max(1.0) as u64;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<tokio::time::Instant>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let mut sender = match via {
            Via::Http(port) => {
                let mut conn = Conn::new(port);
                conn.connect().await?;
                Sender::Http(conn)
            }
            Via::Store(db) => Sender::Store(db.clone()),
        };
        let (template, ids, rx) = (template.clone(), ids.clone(), rx.clone());
        set.spawn(async move {
            let mut out = Vec::new();
            loop {
                let Some(scheduled) = rx.lock().await.recv().await else {
                    return anyhow::Ok(out);
                };
                let n = ids.fetch_add(1, Ordering::Relaxed);
                let ok = match &mut sender {
                    Sender::Http(conn) => {
                        let (body, sig) = template.delivery(n);
                        conn.post(&body, &sig).await?
                    }
                    Sender::Store(db) => {
                        let (event, payment, draft) = template.values(n);
                        db.insert_delivery_rows(&event, &payment, &draft).await?;
                        true
                    }
                };
                out.push((scheduled.elapsed(), ok));
            }
        });
    }
    let t0 = tokio::time::Instant::now();
    for i in 0..total {
        let at = t0 + Duration::try_from_secs_f64(i as f64 / rate).unwrap_or_default();
        tokio::time::sleep_until(at).await;
        tx.send(at)?;
    }
    drop(tx);
    let mut samples = Vec::new();
    while let Some(r) = set.join_next().await {
        samples.extend(r??);
    }
    let refused = samples.iter().filter(|(_, ok)| !ok).count();
    let mut ms: Vec<f64> = samples.iter().map(|(d, _)| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let i = ((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1;
        ms[i]
    };
    Ok(Latency {
        sent: ms.len(),
        refused,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: ms[ms.len() - 1],
    })
}
