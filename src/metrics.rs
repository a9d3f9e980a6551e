//! Prometheus metrics: the process's counters, histograms and gauges (one registry per
//! process, as Prometheus scrapes a process), and the text of `GET /metrics` with the gauges read
//! from the database added at scrape time ([`DocumentGauges`]). Names and meanings are listed in
//! `docs/ops/metrics.md`; the runbook (`docs/ops/runbook.md`) says what to do about each alert.
//!
//! A leaf: it imports nothing of the crate, so the store, the worker, the webhooks and the PAC
//! log can all record into it. Who reads the database for the gauges is [`crate::health`].

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The content type of [`render`]'s text (OpenMetrics, which Prometheus reads natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PacLabels {
    pac: String,
    operation: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PacOpLabels {
    pac: String,
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    provider: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ArcaLabels {
    operation: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    write: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ArcaOpLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DocLabels {
    state: String,
    kind: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, from 5 ms to about 80 s: a PAC answers in tens of milliseconds to tens of seconds.
fn pac_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.005, 2.0, 15,
    ))
}

/// Seconds, from 1 ms to about 4 s: a webhook is acknowledged once it is stored.
fn ack_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 13,
    ))
}

/// Seconds, from 50 µs to about 1.6 s: one SQLite write takes a fraction of a millisecond,
/// a commit that waits for the disk a few.
fn lock_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_05, 2.0, 16,
    ))
}

struct Metrics {
    registry: Registry,
    log_sync: Histogram,
    sales_per_commit: Histogram,
    write_lock_wait: Histogram,
    write_lock_hold: Histograms<WriteLabels>,
    pac_requests: Family<PacLabels, Counter>,
    pac_duration: Histograms<PacOpLabels>,
    webhooks: Family<WebhookLabels, Counter>,
    webhook_ack: Histograms<ProviderLabels>,
    worker_slots: Family<StateLabels, Gauge>,
    stamps: Family<KindLabels, Counter>,
    merchant_webhooks: Family<OutcomeLabels, Counter>,
    emails: Family<OutcomeLabels, Counter>,
    arca_requests: Family<ArcaLabels, Counter>,
    arca_duration: Histograms<ArcaOpLabels>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let pac_requests = Family::<PacLabels, Counter>::default();
    registry.register(
        "autofactura_pac_requests",
        "PAC calls by PAC, operation (stamp, recover, cancel, sat_status) and outcome",
        pac_requests.clone(),
    );
    let pac_duration: Histograms<PacOpLabels> = Family::new_with_constructor(pac_buckets);
    registry.register(
        "autofactura_pac_request_duration_seconds",
        "How long each PAC call took, by PAC and operation",
        pac_duration.clone(),
    );
    let webhooks = Family::<WebhookLabels, Counter>::default();
    registry.register(
        "autofactura_webhooks",
        "Payment webhooks received, by provider and outcome (accepted, rejected: 4xx, failed: 5xx)",
        webhooks.clone(),
    );
    let webhook_ack: Histograms<ProviderLabels> = Family::new_with_constructor(ack_buckets);
    registry.register(
        "autofactura_webhook_ack_duration_seconds",
        "How long a payment webhook took to be answered, by provider",
        webhook_ack.clone(),
    );
    let worker_slots = Family::<StateLabels, Gauge>::default();
    registry.register(
        "autofactura_worker_slots",
        "Worker pool slots of this process: configured, and in_flight (a PAC call out)",
        worker_slots.clone(),
    );
    let stamps = Family::<KindLabels, Counter>::default();
    registry.register(
        "autofactura_stamps",
        "Documents this process recorded as stamped, by kind",
        stamps.clone(),
    );
    let merchant_webhooks = Family::<OutcomeLabels, Counter>::default();
    registry.register(
        "autofactura_merchant_webhooks",
        "Signed webhooks to the merchant, by outcome (delivered, gone, retry, given_up)",
        merchant_webhooks.clone(),
    );
    let emails = Family::<OutcomeLabels, Counter>::default();
    registry.register(
        "autofactura_emails_sent",
        "Customer emails the courier tried to send, by outcome (sent, bounced, retry, failed)",
        emails.clone(),
    );
    let arca_requests = Family::<ArcaLabels, Counter>::default();
    registry.register(
        "autofactura_arca_requests",
        "ARCA calls (Argentina) by operation (loginCms, FECAESolicitar, FECompConsultar, FECompUltimoAutorizado, FEParamGetPtosVenta) and outcome (answered, transport, status, fault, malformed, refused)",
        arca_requests.clone(),
    );
    let arca_duration: Histograms<ArcaOpLabels> = Family::new_with_constructor(pac_buckets);
    registry.register(
        "autofactura_arca_request_duration_seconds",
        "How long each ARCA call took, by operation",
        arca_duration.clone(),
    );
    let write_lock_wait = lock_buckets();
    registry.register(
        "autofactura_sqlite_write_lock_wait_seconds",
        "SQLite: how long each write waited for this process's one writer",
        write_lock_wait.clone(),
    );
    let write_lock_hold: Histograms<WriteLabels> = Family::new_with_constructor(lock_buckets);
    registry.register(
        "autofactura_sqlite_write_lock_hold_seconds",
        "SQLite: how long each write held this process's one writer (statements and commit), by write as the store names it",
        write_lock_hold.clone(),
    );
    let log_sync = lock_buckets();
    registry.register(
        "autofactura_sqlite_log_sync_seconds",
        "SQLite: how long each sync of the write-ahead log took, made outside the write lock after a durable write (a group of new sales, an admin action, an API call, a claim of ARCA numbers) committed, and before the worker pool sends a claimed batch to the PAC",
        log_sync.clone(),
    );
    let sales_per_commit = Histogram::new(
        prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 8),
    );
    registry.register(
        "autofactura_sqlite_sales_per_commit",
        "SQLite: how many new sales (webhooks) each group commit wrote to the disk at once",
        sales_per_commit.clone(),
    );
    Metrics {
        registry,
        log_sync,
        sales_per_commit,
        write_lock_wait,
        write_lock_hold,
        pac_requests,
        pac_duration,
        webhooks,
        webhook_ack,
        worker_slots,
        stamps,
        merchant_webhooks,
        emails,
        arca_requests,
        arca_duration,
    }
});

/// One PAC call, as the attempt log records it.
pub fn pac_request(pac: &str, operation: &str, outcome: &str, latency: Duration) {
    let m = &*METRICS;
    m.pac_requests
        .get_or_create(&PacLabels {
            pac: pac.to_owned(),
            operation: operation.to_owned(),
            outcome: outcome.to_owned(),
        })
        .inc();
    m.pac_duration
        .get_or_create(&PacOpLabels {
            pac: pac.to_owned(),
            operation: operation.to_owned(),
        })
        .observe(latency.as_secs_f64());
}

/// One payment webhook answered: `outcome` is `accepted`, `rejected` or `failed`.
pub fn webhook(provider: &str, outcome: &str, took: Duration) {
    let m = &*METRICS;
    m.webhooks
        .get_or_create(&WebhookLabels {
            provider: provider.to_owned(),
            outcome: outcome.to_owned(),
        })
        .inc();
    m.webhook_ack
        .get_or_create(&ProviderLabels {
            provider: provider.to_owned(),
        })
        .observe(took.as_secs_f64());
}

/// A stamp recorded for a document of `kind` (ingreso, egreso, global).
pub fn stamped(kind: &str) {
    METRICS
        .stamps
        .get_or_create(&KindLabels {
            kind: kind.to_owned(),
        })
        .inc();
}

/// A merchant webhook delivery ended with `outcome`.
pub fn merchant_webhook(outcome: &str) {
    METRICS
        .merchant_webhooks
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .inc();
}

/// A customer email's send ended with `outcome` (`sent`, `bounced`, `retry`, `failed`).
pub fn email(outcome: &str) {
    METRICS
        .emails
        .get_or_create(&OutcomeLabels {
            outcome: outcome.to_owned(),
        })
        .inc();
}

/// One call to ARCA (WSAA or WSFEv1): `operation` as ARCA names it, `outcome` as the client
/// classified the answer.
pub fn arca_request(operation: &str, outcome: &str, latency: Duration) {
    METRICS
        .arca_requests
        .get_or_create(&ArcaLabels {
            operation: operation.to_owned(),
            outcome: outcome.to_owned(),
        })
        .inc();
    METRICS
        .arca_duration
        .get_or_create(&ArcaOpLabels {
            operation: operation.to_owned(),
        })
        .observe(latency.as_secs_f64());
}

/// Adds `delta` to the worker slots in `state` (`configured` when a pool starts and stops,
/// `in_flight` around each PAC call).
pub fn worker_slots(state: &str, delta: i64) {
    METRICS
        .worker_slots
        .get_or_create(&StateLabels {
            state: state.to_owned(),
        })
        .inc_by(delta);
}

/// SQLite: a write waited `took` for the process's write lock.
pub fn sqlite_write_lock_wait(took: Duration) {
    METRICS.write_lock_wait.observe(took.as_secs_f64());
}

/// SQLite: the write the store calls `write` held the process's write lock for `took`.
pub fn sqlite_write_lock_hold(write: &str, took: Duration) {
    METRICS
        .write_lock_hold
        .get_or_create(&WriteLabels {
            write: write.to_owned(),
        })
        .observe(took.as_secs_f64());
}

/// SQLite: a sync of the write-ahead log took `took`.
pub fn sqlite_log_sync(took: Duration) {
    METRICS.log_sync.observe(took.as_secs_f64());
}

/// SQLite: a group commit wrote `sales` new sales at once.
pub fn sqlite_sales_per_commit(sales: usize) {
    #[allow(clippy::cast_precision_loss)] // at most 64
    METRICS.sales_per_commit.observe(sales as f64);
}

/// What the database says at scrape time (cached by the caller for a few seconds).
#[derive(Debug, Clone, Default)]
pub struct DocumentGauges {
    /// `(state, kind, count)` of every outbox row.
    pub documents: Vec<(String, String, i64)>,
    /// `(kind, seconds)`: the oldest row still to be stamped (pending, stamping,
    /// retry_scheduled, unknown), by creation.
    pub oldest_pending: Vec<(String, i64)>,
    /// `(kind, seconds)`: the oldest row whose outcome is unknown, by creation.
    pub oldest_unknown: Vec<(String, i64)>,
    /// Seconds until the SAT window of the open document closest to it closes (none open:
    /// `None`, and the gauge is left out).
    pub window_remaining: Option<i64>,
    /// `(state, count)` of the customer's emails (`deliveries`).
    pub deliveries: Vec<(String, i64)>,
    /// `(state, count)` of the ARCA vouchers (Argentina; empty when ARCA was never used).
    pub arca_vouchers: Vec<(String, i64)>,
}

/// The whole exposition: the process's metrics, then `gauges` (when the database answered).
pub fn render(gauges: Option<&DocumentGauges>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; a metric that could not be encoded is left out.
    let _ = encode_registry(&mut out, &METRICS.registry);
    if let Some(g) = gauges {
        let _ = encode_registry(&mut out, &gauge_registry(g));
    }
    let _ = encode_eof(&mut out);
    out
}

fn gauge_registry(g: &DocumentGauges) -> Registry {
    let mut r = Registry::default();
    let documents = Family::<DocLabels, Gauge>::default();
    for (state, kind, n) in &g.documents {
        documents
            .get_or_create(&DocLabels {
                state: state.clone(),
                kind: kind.clone(),
            })
            .set(*n);
    }
    r.register(
        "autofactura_documents",
        "Outbox documents by state and kind (read from the database)",
        documents,
    );
    for (name, help, rows) in [
        (
            "autofactura_oldest_pending_seconds",
            "Age of the oldest document not yet stamped (pending, stamping, retry_scheduled, unknown) or authorized (arca_pending), by kind",
            &g.oldest_pending,
        ),
        (
            "autofactura_oldest_unknown_seconds",
            "Age of the oldest document whose PAC outcome is unknown, by kind",
            &g.oldest_unknown,
        ),
    ] {
        let family = Family::<KindLabels, Gauge>::default();
        for (kind, secs) in rows {
            family
                .get_or_create(&KindLabels { kind: kind.clone() })
                .set(*secs);
        }
        r.register(name, help, family);
    }
    let deliveries = Family::<StateLabels, Gauge>::default();
    for (state, n) in &g.deliveries {
        deliveries
            .get_or_create(&StateLabels {
                state: state.clone(),
            })
            .set(*n);
    }
    r.register(
        "autofactura_deliveries",
        "Customer emails by state: pending, retry, sent, bounced, failed (read from the database)",
        deliveries,
    );
    let arca = Family::<StateLabels, Gauge>::default();
    for (state, n) in &g.arca_vouchers {
        arca.get_or_create(&StateLabels {
            state: state.clone(),
        })
        .set(*n);
    }
    r.register(
        "autofactura_arca_vouchers",
        "ARCA vouchers (Argentina) by state: reserved, unknown, authorized, rejected, conflict (read from the database)",
        arca,
    );
    if let Some(secs) = g.window_remaining {
        let gauge = Gauge::<i64>::default();
        gauge.set(secs);
        r.register(
            "autofactura_window_remaining_seconds",
            "Seconds until SAT's window closes for the open document closest to its deadline",
            gauge,
        );
    }
    r
}
