//! `/healthz` (the process answers) and `/readyz` (database reachable, background workers alive),
//! and `/metrics` (Prometheus; [`crate::metrics`] holds the process's metrics, this adds the
//! gauges read from the database, cached for [`GAUGES_TTL`]).
//!
//! Background loops register a heartbeat with the longest silence that is still healthy and beat
//! it each round; `/readyz` reports every heartbeat. The outbox worker pool plugs in the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, web};

use crate::metrics::{self, DocumentGauges};
use crate::state::AppState;
use crate::store::{Db, StoreError};

/// Heartbeat of the Mercado Pago fetch-retry loop.
pub const MP_FETCH_RETRY: &str = "mp_fetch_retry";
/// Heartbeat of the outbox worker pool.
pub const WORKER: &str = "worker";

/// Per loop: the last beat (none yet) and the longest healthy silence.
type Beats = BTreeMap<&'static str, (Option<Instant>, Duration)>;

/// How long the database gauges of `/metrics` are reused: a scrape storm reads the database at
/// most once per period, whatever the number of scrapers.
pub const GAUGES_TTL: Duration = Duration::from_secs(5);

/// The last database gauges and when they were read.
type CachedGauges = Option<(Instant, DocumentGauges)>;

/// Last beat of each background loop, and the cached gauges of `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Health {
    beats: Arc<Mutex<Beats>>,
    /// An async lock: concurrent scrapes wait for the one read under way instead of each
    /// starting their own.
    gauges: Arc<tokio::sync::Mutex<CachedGauges>>,
}

impl Health {
    /// Declares a loop that must beat at least every `max_silence`.
    pub fn register(&self, name: &'static str, max_silence: Duration) {
        if let Ok(mut b) = self.beats.lock() {
            b.insert(name, (None, max_silence));
        }
    }

    pub fn beat(&self, name: &'static str) {
        if let Ok(mut b) = self.beats.lock()
            && let Some(entry) = b.get_mut(name)
        {
            entry.0 = Some(Instant::now());
        }
    }

    /// `(name, seconds since the last beat, alive)` for every registered loop.
    pub fn report(&self) -> Vec<(&'static str, Option<u64>, bool)> {
        let Ok(b) = self.beats.lock() else {
            return Vec::new();
        };
        b.iter()
            .map(|(name, (last, max))| {
                let age = last.map(|t| t.elapsed());
                (
                    *name,
                    age.map(|a| a.as_secs()),
                    age.is_some_and(|a| a <= *max),
                )
            })
            .collect()
    }
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}

/// `GET /metrics`, served where the admin is (its own listener when `[admin] listen` is set).
pub fn metrics_route(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(metrics_text));
}

async fn metrics_text(state: web::Data<AppState>) -> HttpResponse {
    let window =
        chrono::Duration::hours(i64::try_from(state.settings.worker.window_hours).unwrap_or(72));
    let gauges = state.health.document_gauges(&state.db, window).await;
    HttpResponse::Ok()
        .content_type(metrics::CONTENT_TYPE)
        .body(metrics::render(gauges.as_ref()))
}

impl Health {
    /// The database gauges, read at most once per [`GAUGES_TTL`]; `None` (and a warning) when
    /// the database does not answer, so the process's own metrics are still served.
    pub async fn document_gauges(
        &self,
        db: &Db,
        window: chrono::Duration,
    ) -> Option<DocumentGauges> {
        let mut cached = self.gauges.lock().await;
        if let Some((at, g)) = cached.as_ref()
            && at.elapsed() < GAUGES_TTL
        {
            return Some(g.clone());
        }
        match read_gauges(db, window).await {
            Ok(g) => {
                *cached = Some((Instant::now(), g.clone()));
                Some(g)
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: cannot read the document gauges; serving the process's metrics only");
                None
            }
        }
    }
}

/// `(state, count)` rows with the state spelled, for a gauge's label.
fn by_text<S: std::fmt::Display>(counts: Vec<(S, i64)>) -> Vec<(String, i64)> {
    counts
        .into_iter()
        .map(|(s, n)| (s.to_string(), n))
        .collect()
}

/// `window`: SAT's window after Fecha (`[worker] window_hours`).
async fn read_gauges(db: &Db, window: chrono::Duration) -> Result<DocumentGauges, StoreError> {
    let now = chrono::Utc::now();
    let mut g = DocumentGauges {
        documents: db.document_counts().await?,
        deliveries: by_text(db.delivery_counts().await?),
        arca_vouchers: by_text(db.arca_voucher_counts().await?),
        ..DocumentGauges::default()
    };
    let mut oldest: BTreeMap<String, i64> = BTreeMap::new();
    for (kind, state, created) in db.oldest_queued_by_kind().await? {
        let age = (now - created).num_seconds().max(0);
        let e = oldest.entry(kind.clone()).or_insert(age);
        *e = (*e).max(age);
        if state == crate::domain::DocumentState::Unknown.as_str() {
            g.oldest_unknown.push((kind, age));
        }
    }
    g.oldest_pending = oldest.into_iter().collect();
    // Fecha is Mexico City time: the deadline is compared in that time too.
    let local_now = crate::domain::time::to_local(now);
    g.window_remaining = db
        .closest_deadline(local_now - window)
        .await?
        .map(|(fecha, _, _)| (fecha + window - local_now).num_seconds());
    Ok(g)
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let db = state.db.ping().await;
    let workers = state.health.report();
    let ready = db.is_ok() && workers.iter().all(|(_, _, alive)| *alive);
    let body = serde_json::json!({
        "status": if ready { "ready" } else { "not_ready" },
        "database": match &db { Ok(()) => "ok".to_owned(), Err(e) => { tracing::warn!(error = %e, "readiness: database"); "unreachable".to_owned() } },
        "backend": state.db.backend(),
        "workers": workers.iter().map(|(n, age, alive)| serde_json::json!({ "name": n, "seconds_since_beat": age, "alive": alive })).collect::<Vec<_>>(),
    });
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}
