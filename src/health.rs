//! `/healthz` (the process answers) and `/readyz` (database reachable, background workers alive).
//!
//! Background loops register a heartbeat with the longest silence that is still healthy and beat
//! it each round; `/readyz` reports every heartbeat. The outbox worker pool plugs in the same way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, web};

use crate::state::AppState;

/// Heartbeat of the Mercado Pago fetch-retry loop.
pub const MP_FETCH_RETRY: &str = "mp_fetch_retry";
/// Heartbeat of the outbox worker pool.
pub const WORKER: &str = "worker";

/// Per loop: the last beat (none yet) and the longest healthy silence.
type Beats = BTreeMap<&'static str, (Option<Instant>, Duration)>;

/// Last beat of each background loop.
#[derive(Debug, Clone, Default)]
pub struct Health {
    beats: Arc<Mutex<Beats>>,
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
