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
//!   the first PAC call; every attempt sends those bytes under the row's stamp key.
//! - A row that may have reached the PAC (`unknown`, or a `stamping` row whose worker died) is
//!   first *recovered* by key; only if the PAC holds no stamp are the same bytes sent again.
//! - `failed` and `expired` mean the PAC did not stamp the document, for sure. An outcome the
//!   PAC could not confirm stays `unknown` whatever the window or the attempts: it is asked with
//!   backoff (at most an hour apart) until 72 hours after its window closed, then once a day,
//!   marked [`UNRESOLVED`] for the admin ([`Worker::still_unknown`]).
//! - Every PAC call is appended to `pac_attempts`.
//!
//! Cancellations ([`cancel`]) are drained by the same loops with the same discipline.

pub mod cancel;
pub mod retry;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::America::Mexico_City;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span, warn};

use crate::cfdi::{self, Csd, InvoiceRequest};
use crate::domain::StampKey;
use crate::pac::{self, AttemptLog, PacClient, Recovery, Route, StampOutcome};
use crate::store::worker::{Attempt, ClaimedStamp, Settle, StampedOutcome};
use crate::store::{Db, StoreError};

pub use crate::store::worker::UNRESOLVED;
pub use retry::RetryPolicy;

/// How long an unresolved outcome is asked for after its window closed: the window's end is
/// the last moment a send could have stamped it, so this is at least as long after its last
/// send.
const ASK_AFTER_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(72);

/// Past that, how often it is still asked for (until the PAC answers or an admin acts).
const ASK_DAILY: chrono::TimeDelta = chrono::TimeDelta::hours(24);

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

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 8,
            lease: Duration::from_secs(30),
            idle_poll: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(20),
            window: Duration::from_secs(72 * 3600),
            window_margin: Duration::from_secs(60),
            cancel_poll: Duration::from_secs(60),
            retry: RetryPolicy::default(),
        }
    }
}

impl WorkerConfig {
    /// Reads `[worker]`: `concurrency` plus the optional keys below, each validated.
    pub fn from_settings(s: &crate::config::WorkerSettings) -> Result<Self, String> {
        let mut c = Self {
            concurrency: s.concurrency,
            ..Self::default()
        };
        if c.concurrency == 0 || c.concurrency > 1024 {
            return Err(format!(
                "[worker] concurrency must be 1 to 1024, not {}",
                c.concurrency
            ));
        }
        for (k, v) in &s.extra {
            let n = v
                .as_integer()
                .filter(|n| *n >= 0)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| format!("[worker] {k} must be a non-negative integer"))?;
            match k.as_str() {
                "lease_seconds" if n >= 2 => c.lease = Duration::from_secs(n),
                "idle_poll_ms" if n >= 10 => c.idle_poll = Duration::from_millis(n),
                "shutdown_grace_seconds" => c.shutdown_grace = Duration::from_secs(n),
                "window_hours" if n >= 1 => c.window = Duration::from_secs(n * 3600),
                "window_margin_seconds" => c.window_margin = Duration::from_secs(n),
                "cancel_poll_seconds" if n >= 1 => c.cancel_poll = Duration::from_secs(n),
                "backoff_base_seconds" if n >= 1 => c.retry.base = Duration::from_secs(n),
                "backoff_cap_seconds" if n >= 1 => c.retry.cap = Duration::from_secs(n),
                "max_attempts" if n >= 1 => {
                    c.retry.max_attempts =
                        i32::try_from(n).map_err(|_| "[worker] max_attempts is too large")?;
                }
                "lease_seconds"
                | "idle_poll_ms"
                | "window_hours"
                | "cancel_poll_seconds"
                | "backoff_base_seconds"
                | "backoff_cap_seconds"
                | "max_attempts" => {
                    return Err(format!("[worker] {k} = {n} is too small"));
                }
                other => {
                    return Err(format!(
                        "[worker] unknown key `{other}` (known: concurrency, lease_seconds, idle_poll_ms, \
                         shutdown_grace_seconds, window_hours, window_margin_seconds, cancel_poll_seconds, \
                         backoff_base_seconds, backoff_cap_seconds, max_attempts)"
                    ));
                }
            }
        }
        Ok(c)
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
    /// Whether the PAC issues real CFDIs: test-mode payments are never sent to it.
    pub pac_is_production: bool,
    /// This process's id in leases, heartbeats and the attempt log.
    pub id: String,
    /// Rows being processed right now (reported by the heartbeat).
    in_flight: AtomicI32,
    /// When (Unix ms) the next claim also looks for rows whose lease expired.
    next_expired_look: AtomicI64,
    /// Rows claimed and not sent yet (id → the state claimed from).
    unsent: Mutex<HashMap<i64, String>>,
    /// Rows claimed together and sealed, waiting for a slot to send them.
    ready: Mutex<VecDeque<Prepared>>,
    /// Told when a batch has been prepared (or came to nothing).
    ready_notify: tokio::sync::Notify,
    /// Rows being claimed and prepared right now (at most; a claim may find fewer).
    preparing: AtomicUsize,
    /// Slots waiting for those rows.
    waiting: AtomicUsize,
    /// Stamped outcomes on their way to the database: the pool's settler stores whatever has
    /// queued up in one write ([`Worker::settler_loop`]).
    stamped_tx: tokio::sync::mpsc::UnboundedSender<StampedJob>,
    stamped_rx: tokio::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<StampedJob>>>,
    settler_running: std::sync::atomic::AtomicBool,
    /// Rows claimed at once when no prepared row is waiting: one claim and one write of sealed
    /// bytes serve several calls.
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

tokio::task_local! {
    /// Told when a send's PAC calls are over and its outcome is about to be stored (see
    /// [`Worker::slot_loop`]).
    static ANSWERED: std::cell::RefCell<Option<tokio::sync::oneshot::Sender<()>>>;
}

/// A claimed row, sealed, ready for its PAC call.
struct Prepared {
    id: i64,
    /// `pending`, `retry_scheduled`, `unknown` or `stamping` (see [`ClaimedStamp`]).
    claimed_from: String,
    /// Including this claim.
    attempts: i32,
    key: StampKey,
    folio: String,
    req: InvoiceRequest,
    /// The stored sealed bytes: what every attempt sends.
    sealed: Vec<u8>,
    claimed_at: Instant,
}

/// Adds to a count for as long as it lives; when it ends, it tells `done`'s waiters (after the
/// count has dropped, so they do not wait for it again).
struct Counted<'a> {
    count: &'a AtomicUsize,
    n: usize,
    done: Option<&'a tokio::sync::Notify>,
}

impl<'a> Counted<'a> {
    fn add(count: &'a AtomicUsize, n: usize, done: Option<&'a tokio::sync::Notify>) -> Self {
        count.fetch_add(n, Ordering::Relaxed);
        Self { count, n, done }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(self.n, Ordering::Relaxed);
        if let Some(done) = self.done {
            done.notify_waiters();
        }
    }
}

/// A stamped outcome waiting for the settler, and where its answer goes.
struct StampedJob {
    outcome: StampedOutcome,
    reply: tokio::sync::oneshot::Sender<Result<bool, StoreError>>,
}

/// Most outcomes stored in one write. On SQLite each batch size is its own cached statement
/// text, so a larger cap costs memory: 32 took the drain's peak from 52 to 92 MiB.
const SETTLE_BATCH: usize = 16;

/// How long the settler waits for more outcomes while other calls are still out: each write
/// is a commit, and under load fewer, fuller writes leave the CPU to the calls. The answer is
/// not on a call's path (the slot's next call has already started), and a crash meanwhile is
/// the case recovery by key exists for.
const SETTLE_LINGER: Duration = Duration::from_millis(10);

/// What a claim found.
enum Next {
    /// A stamp to send.
    Ready(Box<Prepared>),
    /// Something was done without a stamp call (a cancellation, a row failed before sending).
    Worked,
    /// Nothing was due.
    Idle,
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

    /// The token that stops the pool (shared with the HTTP server's shutdown).
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

/// Half the cores, at least one (see [`Worker::sealing`]).
fn sealing_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
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
        let batch = i64::try_from((cfg.concurrency / 4).clamp(1, 8)).unwrap_or(1);
        let (stamped_tx, stamped_rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            db,
            pac,
            csd,
            cfg,
            pac_label: pac_label.to_owned(),
            pac_is_production,
            id: format!("{}-{}-{suffix:04x}", hostname(), std::process::id()),
            in_flight: AtomicI32::new(0),
            next_expired_look: AtomicI64::new(0),
            unsent: Mutex::new(HashMap::new()),
            ready: Mutex::new(VecDeque::new()),
            ready_notify: tokio::sync::Notify::new(),
            preparing: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            stamped_tx,
            stamped_rx: tokio::sync::Mutex::new(Some(stamped_rx)),
            settler_running: std::sync::atomic::AtomicBool::new(false),
            batch,
            sealing: tokio::sync::Semaphore::new(sealing_threads()),
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
        let mut loops = JoinSet::new();
        for slot in 0..self.cfg.concurrency {
            let me = self.clone();
            let t = token.clone();
            loops.spawn(async move { me.slot_loop(slot, t).await });
        }
        let beat = {
            let me = self.clone();
            let t = token.clone();
            tokio::spawn(async move { me.heartbeat_loop(t, health).await })
        };
        let settler = match self.stamped_rx.lock().await.take() {
            Some(rx) => {
                let me = self.clone();
                self.settler_running.store(true, Ordering::Relaxed);
                Some(tokio::spawn(async move { me.settler_loop(rx).await }))
            }
            None => None,
        };
        // Only SQLite workers leave checkpoints to the pool ([`Db::checkpoint`]).
        let checkpoints = (self.db.backend() == "sqlite").then(|| {
            let me = self.clone();
            let t = token.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        () = t.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    if let Err(e) = me.db.checkpoint().await {
                        warn!(error = %e, "WAL checkpoint failed; the next one retries");
                    }
                }
            })
        });
        token.cancelled().await;
        info!(worker = %self.id, in_flight = self.in_flight.load(Ordering::Relaxed), "worker pool stopping: no new claims");
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
        beat.abort();
        if let Some(c) = checkpoints {
            c.abort();
        }
        // Every send has ended, so every queued outcome has had its answer.
        self.settler_running.store(false, Ordering::Relaxed);
        if let Some(s) = settler {
            s.abort();
        }
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
            let in_flight = self.in_flight.load(Ordering::Relaxed);
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

    /// One concurrency slot: claim, process, repeat; sleep when idle.
    ///
    /// A slot has one PAC call in flight at a time, and keeps one in flight nearly all the time:
    /// while a row's call runs, the slot claims and seals its next row, and once the call is
    /// answered the next call starts while the answer is being stored. Claiming, sealing and
    /// storing stay off the PAC's critical path. A row prepared but not yet sent goes back to the
    /// state it was claimed from when the pool stops ([`Worker::release_unsent`]).
    async fn slot_loop(self: Arc<Self>, slot: usize, token: CancellationToken) {
        // This slot's sends: at most one in its PAC call, and one storing its outcome.
        let mut sends = JoinSet::new();
        let reap = |r: Result<Result<(), StoreError>, tokio::task::JoinError>| match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(slot, error = %e, "worker cannot reach the database; retrying"),
            Err(e) => error!(slot, error = %e, "a send ended abnormally"),
        };
        let mut ready: Option<Prepared> = None;
        while !token.is_cancelled() {
            let cur = match ready.take() {
                Some(p) => p,
                None => match self.next(slot, false).await {
                    Ok(Next::Ready(p)) => *p,
                    Ok(Next::Worked) => continue,
                    Ok(Next::Idle) => {
                        self.idle(&token).await;
                        continue;
                    }
                    Err(e) => {
                        warn!(slot, error = %e, "worker cannot reach the database; retrying");
                        self.idle(&token).await;
                        continue;
                    }
                },
            };
            let prefetch = async {
                if token.is_cancelled() {
                    return None;
                }
                match self.next(slot, true).await {
                    Ok(Next::Ready(p)) => Some(*p),
                    Ok(_) => None,
                    Err(e) => {
                        warn!(slot, error = %e, "worker cannot reach the database; retrying");
                        None
                    }
                }
            };
            while sends.len() >= 2 {
                if let Some(r) = sends.join_next().await {
                    reap(r);
                }
            }
            let (on_answer, answered) = tokio::sync::oneshot::channel::<()>();
            let me = self.clone();
            sends.spawn(
                ANSWERED.scope(std::cell::RefCell::new(Some(on_answer)), async move {
                    me.send(cur, slot).await
                }),
            );
            // `answered` also resolves when the send ends without storing an outcome.
            let (_, next) = tokio::join!(answered, prefetch);
            while let Some(r) = sends.try_join_next() {
                reap(r);
            }
            ready = next;
        }
        while let Some(r) = sends.join_next().await {
            reap(r);
        }
    }

    /// Sleeps an idle poll, with jitter, or until the pool stops.
    async fn idle(&self, token: &CancellationToken) {
        let jitter = self.cfg.idle_poll.mul_f64(rand::random_range(0.5..1.5));
        tokio::select! {
            () = token.cancelled() => {}
            () = tokio::time::sleep(jitter) => {}
        }
    }

    /// Claims one due row and prepares it: a stamp first, else (unless `stamps_only`) a
    /// cancellation, which is processed at once.
    async fn next(&self, slot: usize, stamps_only: bool) -> Result<Next, StoreError> {
        let now = Utc::now();
        let lease_until = now + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
        // Dead workers' rows are looked for about once a second, not before every claim: a
        // lease lasts far longer, and each look is one more write on the busy path.
        let now_ms = now.timestamp_millis();
        let expired_first = self.next_expired_look.load(Ordering::Relaxed) <= now_ms;
        if expired_first {
            self.next_expired_look
                .store(now_ms + 1000, Ordering::Relaxed);
        }
        if let Some(p) = self.take_ready(stamps_only).await {
            return Ok(Next::Ready(Box::new(p)));
        }
        // A slot without a call in flight claims one row, so its call starts after one sealing,
        // not eight (after an idle spell every slot claims at once); a slot whose call is in
        // flight has time to prepare a batch for itself and the others.
        let batch = if stamps_only { self.batch } else { 1 };
        // Counted for the slots that may wait (every row of the batch but the one kept here);
        // once the batch is prepared, or came to nothing, they look at the queue again.
        let preparing = Counted::add(
            &self.preparing,
            usize::try_from(batch - 1).unwrap_or(0),
            Some(&self.ready_notify),
        );
        let claimed = self
            .db
            .claim_stamps(&self.id, lease_until, now, expired_first, batch)
            .await?;
        if !claimed.is_empty() {
            if claimed.iter().any(|c| c.claimed_from == "stamping") {
                // Where one died, more may have: look again at the next claim.
                self.next_expired_look.store(0, Ordering::Relaxed);
            }
            let span = info_span!("claim", rows = claimed.len(), slot);
            let mut prepared = self.prepare(claimed).instrument(span).await?;
            // Rows settled while preparing were never to be sent; the rest are, from now.
            self.unsent_rows()
                .extend(prepared.iter().map(|p| (p.id, p.claimed_from.clone())));
            if prepared.is_empty() {
                return Ok(Next::Worked);
            }
            let first = prepared.remove(0);
            // The rest wait for whichever slot asks next.
            self.ready_rows().extend(prepared);
            return Ok(Next::Ready(Box::new(first)));
        }
        // Nothing was claimed: the slots waiting for this batch look again now.
        drop(preparing);
        if stamps_only {
            return Ok(Next::Idle);
        }
        if let Some(c) = self
            .db
            .claim_cancellation(&self.id, lease_until, now)
            .await?
        {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            let span = info_span!("cancellation", id = c.id, uuid = %c.uuid, slot);
            let r = self.process_cancel(c).instrument(span).await;
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            r?;
            return Ok(Next::Worked);
        }
        Ok(Next::Idle)
    }

    /// A prepared row from the shared queue. A slot preparing ahead (`may_wait`) waits for the
    /// rows other slots are preparing, while those outnumber the slots already waiting for
    /// them, rather than claim a batch of its own: when the queue runs dry, every slot claiming
    /// at once would queue their batches behind one another for sealing, and the slots whose
    /// batches come last would sit without a call.
    async fn take_ready(&self, may_wait: bool) -> Option<Prepared> {
        loop {
            let notified = self.ready_notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so a batch stored meanwhile still wakes this slot.
            notified.as_mut().enable();
            if let Some(p) = self.ready_rows().pop_front() {
                return Some(p);
            }
            let waiting = self.waiting.load(Ordering::Relaxed);
            if !may_wait || self.preparing.load(Ordering::Relaxed) <= waiting {
                return None;
            }
            let _waiting = Counted::add(&self.waiting, 1, None);
            notified.await;
        }
    }

    /// Rows claimed together and prepared, waiting for a slot.
    fn ready_rows(&self) -> std::sync::MutexGuard<'_, VecDeque<Prepared>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rows this process claimed but has not sent yet (id → claimed from).
    fn unsent_rows(&self) -> std::sync::MutexGuard<'_, HashMap<i64, String>> {
        self.unsent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// On shutdown: rows claimed and sealed but never sent return to the state they were
    /// claimed from, due at once, with the claim's attempt given back. Nothing reached the PAC
    /// for them, so they need no recovery (a row claimed from an expired lease stays `unknown`).
    async fn release_unsent(&self) {
        self.ready_rows().clear();
        let rows: Vec<(i64, String)> = self.unsent_rows().drain().collect();
        for (id, from) in rows {
            match self.db.release_unsent_stamp(id, &self.id, &from).await {
                Ok(true) => {
                    info!(outbox_id = id, state = %from, "row claimed but never sent: released")
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(outbox_id = id, error = %e, "could not release an unsent row; it returns when its lease expires")
                }
            }
        }
    }

    /// The PAC stage of one prepared row: recovery when it may have been sent, the stamp call,
    /// the outcome stored.
    async fn send(&self, p: Prepared, slot: usize) -> Result<(), StoreError> {
        self.unsent_rows().remove(&p.id);
        let span = info_span!("invoice", outbox_id = p.id, key = %p.key, slot);
        // A row that waited long for its slot (the previous call was slow) gets its lease back
        // to full length before the call, so no other worker takes it meanwhile.
        if p.claimed_at.elapsed() > self.cfg.lease / 3 {
            let until = Utc::now() + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
            if !self.db.extend_stamp_lease(p.id, &self.id, until).await? {
                warn!(parent: &span, "lease lost while the row waited for its slot; another worker has it");
                return Ok(());
            }
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = self.send_prepared(p).instrument(span).await;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        r
    }

    async fn settle(&self, id: i64, s: Settle<'_>) -> Result<(), StoreError> {
        self.settle_logged(id, s, None).await
    }

    /// Settles and appends the attempt that led here, in one transaction.
    async fn settle_logged(
        &self,
        id: i64,
        s: Settle<'_>,
        attempt: Option<&Attempt<'_>>,
    ) -> Result<(), StoreError> {
        // The PAC has answered (every outcome is stored here): the slot may start its next call.
        let _ = ANSWERED.try_with(|a| a.borrow_mut().take().map(|tx| tx.send(())));
        let held = match StampedOutcome::of(id, &s, attempt) {
            // The common outcome, a fresh stamp, goes to the settler to be stored with others.
            Some(outcome) if self.settler_running.load(Ordering::Relaxed) => {
                let (reply, answer) = tokio::sync::oneshot::channel();
                self.stamped_tx
                    .send(StampedJob { outcome, reply })
                    .map_err(|_| StoreError::Other("the settler stopped".into()))?;
                answer
                    .await
                    .unwrap_or_else(|_| Err(StoreError::Other("the settler stopped".into())))?
            }
            _ => self.db.settle_stamp(id, &self.id, &s, attempt).await?,
        };
        if !held {
            warn!(
                "lease lost before settling; another worker owns the row and will reach the same answer from the PAC"
            );
        }
        Ok(())
    }

    async fn fail(
        &self,
        id: i64,
        state: &str,
        code: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        self.fail_logged(id, state, code, message, None).await
    }

    async fn fail_logged(
        &self,
        id: i64,
        state: &str,
        code: &str,
        message: &str,
        attempt: Option<&Attempt<'_>>,
    ) -> Result<(), StoreError> {
        warn!(state, code, message, "invoice needs a human");
        let s = Settle::Final {
            state,
            code: Some(code),
            message,
        };
        self.settle_logged(id, s, attempt).await
    }

    fn later(&self, attempts: i32, retry_after: Option<Duration>) -> DateTime<Utc> {
        Utc::now()
            + chrono::Duration::from_std(self.cfg.retry.delay(attempts, retry_after))
                .unwrap_or_default()
    }

    /// The first half of stamping, for a batch of claimed rows: reads each frozen request and
    /// seals the ones not sealed yet (on the blocking pool, in one task), then stores all the
    /// sealed bytes in one write before any of them is sent; the stored bytes are what every
    /// attempt sends. Rows that cannot be sent are settled here, without a PAC call.
    async fn prepare(&self, claimed: Vec<ClaimedStamp>) -> Result<Vec<Prepared>, StoreError> {
        let claimed_at = Instant::now();
        let mut checked = Vec::with_capacity(claimed.len());
        for c in claimed {
            let id = c.id;
            let req: InvoiceRequest = match serde_json::from_str(&c.request_json) {
                Ok(r) => r,
                Err(e) => {
                    let msg = format!("the frozen request cannot be read: {e}");
                    self.fail(id, "failed", "FROZEN", &msg).await?;
                    continue;
                }
            };
            let Ok(key) = StampKey::parse(&c.stamp_key) else {
                let msg = format!("stamp key `{}` is malformed", c.stamp_key);
                self.fail(id, "failed", "FROZEN", &msg).await?;
                continue;
            };
            let folio = format!(
                "{}-{}",
                req.serie.as_deref().unwrap_or(""),
                req.folio.as_deref().unwrap_or("")
            );
            if c.test_mode && self.pac_is_production {
                let msg = "a test-mode payment is never sent to a production PAC";
                self.fail(id, "failed", "TEST_MODE", msg).await?;
                continue;
            }
            checked.push(Prepared {
                id,
                claimed_from: c.claimed_from,
                attempts: c.attempts,
                key,
                folio,
                req,
                sealed: c.sealed_xml.unwrap_or_default(),
                claimed_at,
            });
        }
        // Seal once: only rows that were never sealed.
        let to_seal: Vec<InvoiceRequest> = checked
            .iter()
            .filter(|p| p.sealed.is_empty())
            .map(|p| p.req.clone())
            .collect();
        if to_seal.is_empty() {
            return Ok(checked);
        }
        let mut seals = self.seal_off_thread(to_seal).await.into_iter();
        let mut ready = Vec::with_capacity(checked.len());
        let mut fresh = Vec::new();
        for mut p in checked {
            if !p.sealed.is_empty() {
                ready.push(p);
                continue;
            }
            match seals.next() {
                Some(Ok(s)) => {
                    info!(outbox_id = p.id, folio = %p.folio, total = %s.total, "comprobante sealed");
                    p.sealed = s.xml;
                    fresh.push(p);
                }
                Some(Err(e)) => {
                    let msg = format!("cannot seal the frozen comprobante: {e}");
                    self.fail(p.id, "failed", "SEAL", &msg).await?;
                }
                None => {
                    let msg = "cannot seal the frozen comprobante: the sealing task ended early";
                    self.fail(p.id, "failed", "SEAL", msg).await?;
                }
            }
        }
        let rows: Vec<(i64, &[u8])> = fresh.iter().map(|p| (p.id, p.sealed.as_slice())).collect();
        let written = self.db.save_sealed_many(&rows).await?;
        for mut p in fresh {
            if !written.contains(&p.id) {
                // Another worker sealed it first: its bytes (the same, sealing is
                // deterministic) are the ones to send.
                p.sealed = self.db.save_sealed(p.id, &p.sealed).await?;
            }
            ready.push(p);
        }
        Ok(ready)
    }

    /// The second half: the PAC calls and the outcome, following the state machine above.
    async fn send_prepared(&self, p: Prepared) -> Result<(), StoreError> {
        let Prepared {
            id,
            claimed_from,
            attempts,
            key,
            folio,
            req,
            sealed,
            ..
        } = p;
        let expired = self.past_window(&req);
        let maybe_sent = claimed_from == "unknown" || claimed_from == "stamping";
        let mut attempts = attempts;
        if maybe_sent {
            let t = Instant::now();
            let log = DbRouteLog { db: &self.db };
            let r = self.pac.recover_logged(&sealed, &key, &log).await;
            self.log_recovery(id, &r, t).await?;
            match r {
                Recovery::Found(stamp) => {
                    return self.stamped(id, &folio, &stamp, &sealed, true, None).await;
                }
                Recovery::NotFound if expired => {
                    return self
                        .fail(id, "expired", "WINDOW", &format!("Fecha {} is past the 72-hour window and the PAC confirms it was never stamped; refreeze it from the admin", req.fecha))
                        .await;
                }
                Recovery::NotFound => {
                    // The outcome is definite now: the tries that count towards giving up start
                    // over, so a long unresolved spell never turns into an early dead letter.
                    if !self.db.restart_attempts(id, &self.id).await? {
                        warn!("lease lost after the recovery; another worker has the row");
                        return Ok(());
                    }
                    attempts = 1;
                    info!(%folio, "PAC confirms no stamp yet; sending the same bytes again")
                }
                Recovery::Unresolved { reason } => {
                    return self
                        .still_unknown(id, &folio, &req, attempts, &reason)
                        .await;
                }
            }
        } else if expired {
            return self
                .fail(id, "expired", "WINDOW", &format!("Fecha {} is past the 72-hour window; it was never sent to the PAC; refreeze it from the admin", req.fecha))
                .await;
        }

        let (route, outcome, latency) = self.stamp_with_keepalive(id, &sealed, &key).await?;
        let attempt = self.stamp_attempt(id, route, &outcome, latency);
        let a = Some(&attempt);
        match &outcome {
            StampOutcome::Stamped(stamp) => {
                self.stamped(id, &folio, stamp, &sealed, false, a).await
            }
            StampOutcome::AlreadyStamped {
                stamp,
                same_content: true,
            } => self.stamped(id, &folio, stamp, &sealed, true, a).await,
            StampOutcome::AlreadyStamped {
                stamp,
                same_content: false,
            } => {
                let msg = format!(
                    "the stamp key was already used for another document (UUID {}); reconcile before retrying",
                    stamp.uuid
                );
                self.fail_logged(id, "failed", "CFDI3307", &msg, a).await
            }
            // The PAC's window check: the frozen Fecha is too old to stamp.
            StampOutcome::Rejected { code, message } if code == "401" => {
                self.fail_logged(id, "expired", code, message, a).await
            }
            StampOutcome::Rejected { code, message } => {
                self.fail_logged(id, "failed", code, message, a).await
            }
            StampOutcome::Retryable {
                reason,
                retry_after,
            } => {
                if attempts >= self.cfg.retry.max_attempts {
                    let msg = format!("{} attempts, last: {reason}", attempts);
                    return self.fail_logged(id, "failed", "EXHAUSTED", &msg, a).await;
                }
                let run_at = self.later(attempts, *retry_after);
                info!(%folio, %reason, %run_at, "PAC did not process it; retry scheduled");
                let later = Settle::Later {
                    state: "retry_scheduled",
                    run_at,
                    code: None,
                    message: reason,
                };
                self.settle_logged(id, later, a).await
            }
            StampOutcome::Unknown { reason } => {
                // Ask again soon, recovering first. (A send happens within the window, so the
                // asking period of [`Worker::still_unknown`] has not begun.)
                let run_at = self.later(1, None);
                warn!(%folio, %reason, "outcome unknown; the next attempt recovers by key before anything else");
                let later = Settle::Later {
                    state: "unknown",
                    run_at,
                    code: None,
                    message: reason,
                };
                self.settle_logged(id, later, a).await
            }
        }
    }

    /// Seals on the blocking pool: an RSA signature is CPU work, and the async threads keep
    /// serving the other slots' I/O meanwhile. At most [`Worker::sealing`] batches at once. One
    /// result per request, in order.
    async fn seal_off_thread(
        &self,
        reqs: Vec<InvoiceRequest>,
    ) -> Vec<Result<cfdi::Sealed, cfdi::CfdiError>> {
        let csd = self.csd.clone();
        // Never closed, so this waits for a permit and holds it until the batch is sealed.
        let _permit = self.sealing.acquire().await;
        tokio::task::spawn_blocking(move || reqs.iter().map(|r| cfdi::seal(r, &csd)).collect())
            .await
            .unwrap_or_else(|e| {
                vec![Err(cfdi::CfdiError::Csd(format!(
                    "sealing task failed: {e}"
                )))]
            })
    }

    fn past_window(&self, req: &InvoiceRequest) -> bool {
        let Some(end) = self.window_end(req) else {
            return false;
        };
        Utc::now() >= end - chrono::Duration::from_std(self.cfg.window_margin).unwrap_or_default()
    }

    /// When the SAT window of the frozen Fecha closes: no PAC stamps the document after it.
    fn window_end(&self, req: &InvoiceRequest) -> Option<DateTime<Utc>> {
        let fecha = Mexico_City.from_local_datetime(&req.fecha).earliest()?;
        Some(
            fecha.with_timezone(&Utc)
                + chrono::Duration::from_std(self.cfg.window).unwrap_or_default(),
        )
    }

    /// A recovery the PAC could not answer. The PAC may hold a stamp, so the row stays
    /// `unknown` whatever the window or the attempts (a terminal state would free its API key
    /// and stop anyone from asking): asked again with backoff, at most an hour apart, until
    /// [`ASK_AFTER_WINDOW`] after its window closed; after that once a day ([`ASK_DAILY`]),
    /// marked [`UNRESOLVED`] so the admin lists it until the PAC answers.
    async fn still_unknown(
        &self,
        id: i64,
        folio: &str,
        req: &InvoiceRequest,
        attempts: i32,
        reason: &str,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let asking_ends = self.window_end(req).map(|end| end + ASK_AFTER_WINDOW);
        let (run_at, code, message) = match asking_ends {
            Some(ends) if now >= ends => {
                let message = format!(
                    "the PAC never confirmed whether it stamped this document: its window closed {} (Mexico City) and it was asked for 72 hours more; now asked once a day. Ask the PAC by the stamp key; nothing is sent again until it answers. Last answer: {reason}",
                    crate::pacsim::clock::to_local(ends - ASK_AFTER_WINDOW)
                );
                warn!(%folio, %reason, "outcome still unknown past its asking period; asked daily, listed as unresolved for the admin");
                (now + ASK_DAILY, Some(UNRESOLVED), message)
            }
            _ => {
                let delay = self.cfg.retry.delay_unknown(attempts);
                info!(%folio, %reason, ?delay, "outcome still unknown; will ask the PAC again");
                let run_at = now + chrono::Duration::from_std(delay).unwrap_or_default();
                (run_at, None, reason.to_owned())
            }
        };
        self.settle(
            id,
            Settle::Later {
                state: "unknown",
                run_at,
                code,
                message: &message,
            },
        )
        .await
    }

    /// Sends the sealed bytes, extending the lease while the call runs.
    async fn stamp_with_keepalive(
        &self,
        id: i64,
        sealed: &[u8],
        key: &StampKey,
    ) -> Result<(&'static str, StampOutcome, Duration), StoreError> {
        let t = Instant::now();
        let log = DbRouteLog { db: &self.db };
        let call = async {
            match &*self.pac {
                PacClient::Failover(f) => {
                    let (route, out) = f.stamp_logged(sealed, key, &log).await;
                    (route_label(route), out)
                }
                other => ("", other.stamp(sealed, key).await),
            }
        };
        tokio::pin!(call);
        let mut tick = tokio::time::interval(self.cfg.lease / 3);
        tick.tick().await;
        let (route, out) = loop {
            tokio::select! {
                out = &mut call => break out,
                _ = tick.tick() => {
                    let until = Utc::now() + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
                    if !self.db.extend_stamp_lease(id, &self.id, until).await.unwrap_or(false) {
                        warn!("lease could not be extended during the PAC call");
                    }
                }
            }
        };
        Ok((route, out, t.elapsed()))
    }

    /// Stores queued stamped outcomes: whatever has queued up while the last write ran goes
    /// in the next one (up to [`SETTLE_BATCH`]), and while other calls are out the settler
    /// waits up to [`SETTLE_LINGER`] for theirs, so under load one statement stores many
    /// outcomes; alone an outcome is stored at once.
    async fn settler_loop(&self, mut rx: tokio::sync::mpsc::UnboundedReceiver<StampedJob>) {
        while let Some(first) = rx.recv().await {
            let mut jobs = vec![first];
            let until = tokio::time::Instant::now() + SETTLE_LINGER;
            while jobs.len() < SETTLE_BATCH {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    // Calls still waiting for their answer (beyond the ones queued here).
                    Err(_) if self.in_flight.load(Ordering::Relaxed) > jobs.len() as i32 => {
                        match tokio::time::timeout_at(until, rx.recv()).await {
                            Ok(Some(j)) => jobs.push(j),
                            Ok(None) | Err(_) => break,
                        }
                    }
                    Err(_) => break,
                }
            }
            let (outcomes, replies): (Vec<StampedOutcome>, Vec<_>) =
                jobs.into_iter().map(|j| (j.outcome, j.reply)).unzip();
            match self.db.settle_stamped_many(&self.id, &outcomes).await {
                Ok(settled) => {
                    for (o, reply) in outcomes.iter().zip(replies) {
                        let _ = reply.send(Ok(settled.contains(&o.id)));
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    for reply in replies {
                        let _ = reply.send(Err(StoreError::Other(msg.clone())));
                    }
                }
            }
        }
    }

    async fn stamped(
        &self,
        id: i64,
        folio: &str,
        stamp: &pac::Stamp,
        sealed: &[u8],
        recovered: bool,
        attempt: Option<&Attempt<'_>>,
    ) -> Result<(), StoreError> {
        let flag = (!stamp.belongs_to(sealed)).then_some("stamp_of_other_bytes");
        let tfd_xml = String::from_utf8_lossy(&cfdi::xml::tfd_to_xml(&stamp.tfd)).into_owned();
        info!(%folio, uuid = %stamp.uuid, recovered, "invoice stamped");
        self.settle_logged(
            id,
            Settle::Stamped {
                uuid: &stamp.uuid,
                tfd_xml: &tfd_xml,
                stamped_xml: &stamp.xml,
                fecha_timbrado: &stamp.tfd.fecha_timbrado,
                flag,
            },
            attempt,
        )
        .await
    }

    fn label<'a>(&'a self, route: &'a str) -> &'a str {
        if route.is_empty() {
            &self.pac_label
        } else {
            route
        }
    }

    fn stamp_attempt<'a>(
        &'a self,
        id: i64,
        route: &'a str,
        out: &'a StampOutcome,
        latency: Duration,
    ) -> Attempt<'a> {
        let (outcome, code, message, uuid, status) = match out {
            StampOutcome::Stamped(s) => ("stamped", None, None, Some(s.uuid.as_str()), Some(200)),
            StampOutcome::AlreadyStamped {
                stamp,
                same_content,
            } => (
                if *same_content {
                    "already_stamped"
                } else {
                    "key_reused"
                },
                Some(if *same_content { "307" } else { "CFDI3307" }),
                None,
                Some(stamp.uuid.as_str()),
                None,
            ),
            StampOutcome::Rejected { code, message } => (
                "rejected",
                Some(code.as_str()),
                Some(message.as_str()),
                None,
                http_status(message),
            ),
            StampOutcome::Retryable { reason, .. } => (
                "retryable",
                None,
                Some(reason.as_str()),
                None,
                http_status(reason),
            ),
            StampOutcome::Unknown { reason } => (
                "unknown",
                None,
                Some(reason.as_str()),
                None,
                http_status(reason),
            ),
        };
        Attempt {
            outbox_id: Some(id),
            cancellation_id: None,
            operation: "stamp",
            pac: self.label(route),
            outcome,
            http_status: status,
            code,
            message,
            latency_ms: i64::try_from(latency.as_millis()).unwrap_or(i64::MAX),
            uuid,
            worker: &self.id,
        }
    }

    async fn log_recovery(&self, id: i64, r: &Recovery, t: Instant) -> Result<(), StoreError> {
        let (outcome, message, uuid) = match r {
            Recovery::Found(s) => ("found", None, Some(s.uuid.as_str())),
            Recovery::NotFound => ("not_found", None, None),
            Recovery::Unresolved { reason } => ("unresolved", Some(reason.as_str()), None),
        };
        self.db
            .log_attempt(&Attempt {
                outbox_id: Some(id),
                cancellation_id: None,
                operation: "recover",
                pac: &self.pac_label,
                outcome,
                http_status: message.and_then(http_status),
                code: None,
                message,
                latency_ms: i64::try_from(t.elapsed().as_millis()).unwrap_or(i64::MAX),
                uuid,
                worker: &self.id,
            })
            .await
    }
}

/// The HTTP status an adapter wrote into its reason (`HTTP 503: …`), when it did.
fn http_status(text: &str) -> Option<i32> {
    let i = text.find("HTTP ")?;
    let digits: String = text[i + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|s| (100..600).contains(s))
}

fn route_label(r: Route) -> &'static str {
    match r {
        Route::Primary => "primary",
        Route::Backup => "backup",
    }
}

/// The failover client's durable memory of where each key was sent: `outbox.pac_route`. The
/// worker's sends record into it, and every recovery (the worker's, reconciliation's, a
/// refreeze's) asks only the PACs it names.
pub struct DbRouteLog<'a> {
    pub db: &'a Db,
}

impl AttemptLog for DbRouteLog<'_> {
    fn sent_to<'a>(
        &'a self,
        key: &'a StampKey,
    ) -> pac::failover::BoxFuture<'a, Result<Vec<Route>, String>> {
        Box::pin(async move {
            let routes = self
                .db
                .pac_routes(key.as_str())
                .await
                .map_err(|e| e.to_string())?;
            Ok(routes
                .iter()
                .filter_map(|r| match r.as_str() {
                    "primary" => Some(Route::Primary),
                    "backup" => Some(Route::Backup),
                    _ => None,
                })
                .collect())
        })
    }

    fn before_send<'a>(
        &'a self,
        key: &'a StampKey,
        route: Route,
    ) -> pac::failover::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.db
                .add_pac_route(key.as_str(), route_label(route))
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Everything `serve` and `autofactura worker` need to run a pool, built from the settings.
pub struct Services {
    pub worker: Arc<Worker>,
    /// The in-process sandbox PAC when the embedded default runs one (kept alive with the pool).
    pub sandbox: Option<crate::pacsim::SandboxHandle>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("worker", &self.worker)
            .field("sandbox", &self.sandbox.is_some())
            .finish()
    }
}

/// Known test hosts of real PACs: documents sent there are not real CFDIs.
const TEST_PAC_HOSTS: &[&str] = &[
    "services.test.sw.com.mx",
    "api.test.sw.com.mx",
    "demo-facturacion.finkok.com",
];

/// Connects the PAC (starting the in-process sandbox for the embedded default) and builds the
/// worker: for `autofactura worker` and tests, which have no running application.
pub async fn services(settings: &crate::config::Settings, db: Db) -> anyhow::Result<Services> {
    let connected = pac::connect(&crate::startup::pac_config(settings)?).await?;
    let db = db.for_workers(&settings.database).await?;
    let worker = worker_for(settings, db, Arc::new(connected.client))?;
    Ok(Services {
        worker,
        sandbox: connected.sandbox,
    })
}

/// Builds the worker around an already connected PAC (`serve` shares the application's).
pub fn worker_for(
    settings: &crate::config::Settings,
    db: Db,
    pac: Arc<PacClient>,
) -> anyhow::Result<Arc<Worker>> {
    let pac_cfg = crate::startup::pac_config(settings)?;
    let label = match pac_cfg.kind {
        pac::PacKind::Sandbox => "sandbox",
        pac::PacKind::Sw => "sw",
        pac::PacKind::Finkok => "finkok",
    };
    let production = pac_cfg.kind != pac::PacKind::Sandbox
        && !pac_cfg
            .url
            .as_deref()
            .is_some_and(|u| TEST_PAC_HOSTS.iter().any(|h| u.contains(h)));
    let e = &settings.emisor;
    let csd = match (&e.csd_cer, &e.csd_key, &e.csd_password) {
        (Some(cer), Some(key), Some(pw)) => Csd::from_files(cer, key, pw.expose())?,
        _ => crate::cli::sandbox_csd()?,
    };
    let cfg = WorkerConfig::from_settings(&settings.worker).map_err(|e| anyhow::anyhow!(e))?;
    Ok(Arc::new(Worker::new(
        db,
        pac,
        Arc::new(csd),
        cfg,
        label,
        production,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_http_status_from_adapter_reasons() {
        assert_eq!(http_status("HTTP 503: busy"), Some(503));
        assert_eq!(
            http_status("stamped, but HTTP 500 without a message"),
            Some(500)
        );
        assert_eq!(http_status("connection refused"), None);
    }

    #[test]
    fn worker_settings_are_validated() {
        let mut s = crate::config::WorkerSettings {
            concurrency: 4,
            extra: toml::Table::new(),
        };
        s.extra
            .insert("lease_seconds".into(), toml::Value::Integer(5));
        s.extra
            .insert("max_attempts".into(), toml::Value::Integer(3));
        let c = WorkerConfig::from_settings(&s).expect("valid");
        assert_eq!(
            (c.concurrency, c.lease, c.retry.max_attempts),
            (4, Duration::from_secs(5), 3)
        );
        s.extra.insert("lease_secs".into(), toml::Value::Integer(5));
        assert!(
            WorkerConfig::from_settings(&s)
                .expect_err("unknown key")
                .contains("unknown key `lease_secs`")
        );
        s.extra.clear();
        s.concurrency = 0;
        assert!(WorkerConfig::from_settings(&s).is_err());
    }
}
