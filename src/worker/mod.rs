//! The worker pool: drains the outbox at least once into an idempotent PAC, which makes each
//! sale's stamp happen exactly once.
//!
//! # States of an outbox row
//!
//! ```text
//! pending ──claim──▶ stamping ──Stamped / AlreadyStamped──▶ stamped
//!                       │ ├──Retryable (nothing happened)──▶ retry_scheduled ──(run_at)──▶ stamping
//!                       │ ├──Unknown (may have happened)───▶ unknown ──(run_at)──▶ stamping: recover first
//!                       │ ├──Rejected (code, message)──────▶ failed        (a human fixes the data)
//!                       │ ├──definite retries exhausted────▶ failed        (dead letter)
//!                       │ └──Fecha past the 72 h window────▶ expired       (only an admin refreeze)
//!                       └──lease expired (process died)────▶ reclaimed by any worker: recover first
//! ```
//!
//! Rules that make "exactly once" hold:
//! - A row is claimed with a lease in one short statement; no transaction or row lock is held
//!   while the PAC call runs, and a keepalive extends the lease meanwhile.
//! - The document is sealed once from the frozen request and the sealed bytes are stored before
//!   the first PAC call; every attempt sends those bytes under the row's stamp key. Its folio
//!   (unless explicit) is assigned just before, for the whole claimed batch, and committed
//!   first: the sealed bytes carry it, and a re-claimed row keeps it.
//! - A row that may have reached the PAC (`unknown`, or a `stamping` row whose worker died) is
//!   first *recovered* by key; only if the PAC holds no stamp are the same bytes sent again.
//! - `failed` and `expired` mean the PAC did not stamp the document, for sure. An outcome the
//!   PAC could not confirm stays `unknown` whatever the window or the attempts: it is asked with
//!   backoff (at most an hour apart) until 72 hours after its window closed, then once a day,
//!   marked [`UNRESOLVED`] for the admin ([`Worker::still_unknown`]).
//! - Every PAC call is appended to `pac_attempts`.
//!
//! Cancellations ([`cancel`]) are drained by the same loops with the same discipline.
//!
//! The PAC is the pool's [`crate::domain::Authority`] ([`crate::pac::Stamper`]): the send
//! decides from its four verdicts. With `[arca]` on, the pool also runs the ARCA lane
//! ([`crate::arca::drain`]), whose issuer is the other authority, with the same verdicts.
//!
//! # What lives here
//!
//! - `mod.rs`: the public face: [`Worker`], [`WorkerConfig`], [`Pool`], [`Services`] and
//!   [`worker_for`]; the pool's run (loops, heartbeat, shutdown).
//! - `pool.rs`: the slots, the turn to claim (one claim at a time), the ready queue of sealed
//!   rows, the rows claimed and not sent yet (released on shutdown).
//! - `prepare.rs`: claim ahead and seal ahead: claiming rows (in batches, one claim at a time),
//!   reading their frozen requests, numbering those without a folio, sealing them, storing the
//!   sealed bytes before any send.
//! - `send.rs`: the PAC call (recovery by key first when it may have been sent, the lease
//!   keepalive), the attempt log, and turning the outcome into a settle; [`DbRouteLog`].
//! - `settle.rs`: storing outcomes, and the settler task that batches fresh stamps from its
//!   channel; `Answered`, passed down each send, tells its slot the PAC call is over.
//! - [`cancel`]: cancellations; [`retry`]: backoff.
//!
//! Only the files here use the stage modules. From outside, startup builds a pool
//! ([`worker_for`], [`Services`]) and runs it ([`Worker::start`]); the admin uses
//! [`DbRouteLog`] for its recoveries; tests read [`UNRESOLVED`]. The worker uses
//! the store, the PAC clients, the document engine, the settings, the sandbox CSD and the
//! health registry.

pub mod cancel;
mod pool;
mod prepare;
pub mod retry;
mod send;
mod settle;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cfdi::Csd;
use crate::pac::{self, PacClient};
use crate::store::Db;
use prepare::Prepared;

pub use crate::store::UNRESOLVED;
pub use retry::RetryPolicy;
pub use send::DbRouteLog;

/// `[worker]` settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Rows processed at once by this process.
    pub concurrency: usize,
    /// How long a claim lasts without a keepalive; a dead worker's rows return after this.
    pub lease: Duration,
    /// Sleep between polls when there is nothing to do.
    pub idle_poll: Duration,
    /// On shutdown, how long in-flight PAC calls may take before their rows are released.
    pub shutdown_grace: Duration,
    /// The SAT window between Fecha and stamping.
    pub window: Duration,
    /// Treat a row as expired this long before the window closes (the PAC checks on arrival).
    pub window_margin: Duration,
    /// First delay between status polls of a cancellation awaiting the receptor.
    pub cancel_poll: Duration,
    pub retry: RetryPolicy,
}

impl WorkerConfig {
    /// `[worker]`, checked when the settings were loaded.
    pub fn from_settings(s: &crate::config::WorkerSettings) -> Self {
        let secs = Duration::from_secs;
        Self {
            concurrency: s.concurrency,
            lease: secs(s.lease_seconds),
            idle_poll: Duration::from_millis(s.idle_poll_ms),
            shutdown_grace: secs(s.shutdown_grace_seconds),
            window: secs(s.window_hours.saturating_mul(3600)),
            window_margin: secs(s.window_margin_seconds),
            cancel_poll: secs(s.cancel_poll_seconds),
            retry: RetryPolicy {
                base: secs(s.backoff_base_seconds),
                cap: secs(s.backoff_cap_seconds),
                max_attempts: i32::try_from(s.max_attempts).unwrap_or(i32::MAX),
            },
        }
    }
}

/// What every worker loop shares.
pub struct Worker {
    pub db: Db,
    pub pac: Arc<PacClient>,
    /// The issuer's CSD, to seal frozen requests.
    pub csd: Arc<Csd>,
    pub cfg: WorkerConfig,
    /// Label of the configured PAC in the attempt log (`sandbox`, `sw`, `finkok`).
    pub pac_label: String,
    /// The name the backup PAC is paused under, when there is one (`[pac.backup]`).
    pub backup_label: Option<String>,
    /// With `[email]` on, the domain of its `from`: a stamp then queues the customer's email
    /// in the write that records it (Message-IDs end with it).
    pub mail_domain: Option<String>,
    /// Whether the PAC issues real CFDIs: test-mode payments are never sent to it.
    pub pac_is_production: bool,
    /// With `[arca]` on, the lane that issues ARS sales as ARCA vouchers ([`crate::arca::drain`]):
    /// the pool runs it beside its slots, under the same token and shutdown deadline.
    pub arca: Option<crate::arca::drain::Drainer>,
    /// This process's id in leases, heartbeats and the attempt log.
    pub id: String,
    /// Rows being processed right now (reported by the heartbeat).
    in_flight: pool::InFlight,
    /// When the next claim also looks for rows whose lease expired (about once a second).
    next_expired_look: prepare::Look,
    /// When an idle slot next looks for a cancellation to send (about twice per idle poll).
    next_cancel_look: prepare::Look,
    /// Rows claimed and not sent yet (id → the state claimed from).
    unsent: Mutex<HashMap<i64, crate::domain::DocumentState>>,
    /// Rows claimed together and sealed, waiting for a slot to send them.
    ready: Mutex<VecDeque<Prepared>>,
    /// Told when a claim ends (the turn passes) and when its batch has been prepared (or came
    /// to nothing).
    ready_notify: tokio::sync::Notify,
    /// The turn to claim stamps, one slot at a time, and what the last claim found.
    claims: pool::Claims,
    /// Stamped outcomes on their way to the database: the pool's settler stores whatever has
    /// queued up in one write ([`Worker::settler_loop`]).
    settler: settle::Settler,
    /// Rows claimed at most at once when no prepared row is waiting: one claim, one numbering,
    /// one write of sealed bytes and one sync serve several calls. As many as the slots, at
    /// most 32: at 8 (a quarter of 32 slots) the claims at 500 sales a second came back full,
    /// so they never waited for more ([`prepare::CLAIM_LINGER`]) and took 7 rows each.
    batch: i64,
    /// Sealing batches that may run at once: half the cores. Rows are sealed ahead of their
    /// calls, so fewer sealing threads keep up; more would take the cores the I/O paths need
    /// (webhooks, PAC answers) and every call would wait longer for them.
    sealing: tokio::sync::Semaphore,
    started_at: DateTime<Utc>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// A running pool; [`Pool::shutdown`] drains it.
#[derive(Debug)]
pub struct Pool {
    token: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl Pool {
    /// Asks the pool to stop claiming and waits until in-flight work is finished or released.
    pub async fn shutdown(self) {
        self.token.cancel();
        if let Err(e) = self.handle.await {
            error!(error = %e, "worker pool ended abnormally");
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl Worker {
    pub fn new(
        db: Db,
        pac: Arc<PacClient>,
        csd: Arc<Csd>,
        cfg: WorkerConfig,
        pac_label: &str,
        pac_is_production: bool,
    ) -> Self {
        let suffix: u32 = rand::random_range(0..0x10000);
        let batch = i64::try_from(cfg.concurrency.clamp(1, 32)).unwrap_or(1);
        Self {
            db,
            pac,
            csd,
            pac_label: pac_label.to_owned(),
            backup_label: None,
            mail_domain: None,
            pac_is_production,
            arca: None,
            id: format!("{}-{}-{suffix:04x}", hostname(), std::process::id()),
            in_flight: pool::InFlight::default(),
            next_expired_look: prepare::Look::every(std::time::Duration::from_secs(1)),
            next_cancel_look: prepare::Look::every(cfg.idle_poll / 2),
            cfg,
            unsent: Mutex::new(HashMap::new()),
            ready: Mutex::new(VecDeque::new()),
            ready_notify: tokio::sync::Notify::new(),
            claims: pool::Claims::default(),
            settler: settle::Settler::new(),
            batch,
            sealing: tokio::sync::Semaphore::new(prepare::sealing_threads()),
            started_at: Utc::now(),
        }
    }

    /// Starts `concurrency` loops and a heartbeat; they stop when `token` is cancelled.
    pub fn start(
        self: Arc<Self>,
        token: CancellationToken,
        health: Option<crate::health::Health>,
    ) -> Pool {
        let handle = tokio::spawn(self.run(token.clone(), health));
        Pool { token, handle }
    }

    async fn run(self: Arc<Self>, token: CancellationToken, health: Option<crate::health::Health>) {
        info!(worker = %self.id, concurrency = self.cfg.concurrency, pac = %self.pac_label, "worker pool started");
        let slots = i64::try_from(self.cfg.concurrency).unwrap_or(i64::MAX);
        crate::metrics::worker_slots("configured", slots);
        let mut loops = JoinSet::new();
        for slot in 0..self.cfg.concurrency {
            let me = self.clone();
            let t = token.clone();
            loops.spawn(async move { me.slot_loop(slot, t).await });
        }
        // Argentina: one lane whose rounds take each sequence in turn (ARCA numbers each
        // sequence strictly, so its sales go one sequence at a time, never in parallel).
        if let Some(lane) = self.arca.clone() {
            info!(worker = %self.id, "ARCA lane started");
            let t = token.clone();
            loops.spawn(async move { lane.run(t).await });
        }
        let beat = {
            let me = self.clone();
            let t = token.clone();
            tokio::spawn(async move { me.heartbeat_loop(t, health).await })
        };
        // The settler outlives `token`: slots still finishing their calls hand it their
        // stamps, so it has a token of its own, cancelled once every slot has ended.
        let settled = CancellationToken::new();
        let settler = match self.settler.rx.lock().await.take() {
            Some(rx) => {
                let me = self.clone();
                let t = settled.clone();
                self.settler.running.store(true, Ordering::Relaxed);
                Some(tokio::spawn(async move { me.settler_loop(rx, t).await }))
            }
            None => None,
        };
        token.cancelled().await;
        info!(worker = %self.id, in_flight = self.in_flight.get(), "worker pool stopping: no new claims");
        let deadline = tokio::time::sleep(self.cfg.shutdown_grace);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = loops.join_next() => if next.is_none() { break },
                () = &mut deadline => {
                    warn!(worker = %self.id, remaining = loops.len(), "shutdown deadline reached; abandoning in-flight calls");
                    loops.abort_all();
                    while loops.join_next().await.is_some() {}
                    break;
                }
            }
        }
        // The heartbeat ended with `token`.
        if let Err(e) = beat.await {
            error!(error = %e, "a worker loop ended abnormally");
        }
        // Every send has ended, so every queued outcome has had its answer.
        self.settler.running.store(false, Ordering::Relaxed);
        settled.cancel();
        if let Some(s) = settler
            && let Err(e) = s.await
        {
            error!(error = %e, "the settler ended abnormally");
        }
        crate::metrics::worker_slots("configured", -slots);
        self.release_unsent().await;
        match self.db.release_stamp_leases(&self.id).await {
            Ok(0) => {}
            Ok(n) => {
                warn!(worker = %self.id, rows = n, "rows released as `unknown`: they will be recovered from the PAC before any resend")
            }
            Err(e) => {
                error!(worker = %self.id, error = %e, "could not release leases; they return when they expire")
            }
        }
        if let Err(e) = self.db.worker_stopped(&self.id).await {
            warn!(error = %e, "could not record the worker stop");
        }
        info!(worker = %self.id, "worker pool stopped");
    }

    async fn heartbeat_loop(
        &self,
        token: CancellationToken,
        health: Option<crate::health::Health>,
    ) {
        if let Some(h) = &health {
            h.register(crate::health::WORKER, Duration::from_secs(30));
        }
        let conc = i32::try_from(self.cfg.concurrency).unwrap_or(i32::MAX);
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            let in_flight = self.in_flight.get();
            match self
                .db
                .worker_heartbeat(&self.id, &hostname(), conc, in_flight, self.started_at)
                .await
            {
                Ok(()) => {
                    if let Some(h) = &health {
                        h.beat(crate::health::WORKER);
                    }
                }
                Err(e) => warn!(error = %e, "worker heartbeat failed"),
            }
        }
    }
}

/// Everything `serve` and `autofactura worker` need to run a pool, built from the settings.
#[derive(Debug)]
pub struct Services {
    pub worker: Arc<Worker>,
    /// The in-process sandbox PAC when the embedded default runs one (kept alive with the pool).
    pub sandbox: Option<crate::pacsim::SandboxHandle>,
}

/// Builds the worker around an already connected PAC (`serve` shares the application's).
pub fn worker_for(
    settings: &crate::config::Settings,
    db: Db,
    pac: Arc<PacClient>,
) -> anyhow::Result<Arc<Worker>> {
    let pac_cfg = settings.pac_config()?;
    let label = pac_cfg.kind.name();
    // Known SW/Finkok URLs or `[pac] environment` (validated at load) say which.
    let production = pac_cfg.kind != pac::PacKind::Sandbox
        && settings.pac_environment() == crate::config::PacEnvironment::Production;
    let e = &settings.emisor;
    let csd = match (&e.csd_cer, &e.csd_key, &e.csd_password) {
        (Some(cer), Some(key), Some(pw)) => Csd::from_files(cer, key, pw.expose())?,
        _ => crate::sandbox::csd()?,
    };
    let cfg = WorkerConfig::from_settings(&settings.worker);
    let mut worker = Worker::new(db, pac, Arc::new(csd), cfg, label, production);
    worker.backup_label = pac_cfg.backup_name();
    worker.mail_domain = settings.email.message_domain();
    if settings.arca.enabled {
        worker.arca = Some(
            crate::arca::drain::Drainer::new(worker.db.clone(), &settings.arca)?
                .mailing(settings.email.message_domain()),
        );
    }
    Ok(Arc::new(worker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_settings_become_the_pool_config() {
        let file =
            "[worker]\nconcurrency = 4\nlease_seconds = 5\nmax_attempts = 3\nwindow_hours = 2\n";
        let s = crate::config::Settings::from_parts(Some(file), &[]).expect("settings");
        let c = WorkerConfig::from_settings(&s.worker);
        assert_eq!(
            (c.concurrency, c.lease, c.retry.max_attempts, c.window),
            (4, Duration::from_secs(5), 3, Duration::from_secs(7200))
        );
        // The rest from the embedded defaults.
        assert_eq!(c.idle_poll, Duration::from_millis(500));
        assert_eq!(c.retry.base, RetryPolicy::default().base);
        assert_eq!(c.retry.cap, RetryPolicy::default().cap);
    }
}
