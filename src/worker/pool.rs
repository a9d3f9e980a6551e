//! The slots: each keeps one PAC call in flight, getting its next row meanwhile; the turn to
//! claim, taken by one slot at a time; the queue of rows claimed together and sealed, waiting
//! for a slot; the rows claimed and not sent yet, released when the pool stops.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Instant;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::Worker;
use super::prepare::{Next, Prepared};
use super::settle::Answered;
use crate::domain::DocumentState;
use crate::store::StoreError;

/// Calls to the PAC (stamps and cancellations) running right now: the heartbeat reports it, and
/// the settler waits for more outcomes only while calls beyond its queue are out.
#[derive(Debug, Default)]
pub(super) struct InFlight(AtomicI32);

impl InFlight {
    /// A call starts; every [`InFlight::start`] is followed by an [`InFlight::end`].
    pub(super) fn start(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
        crate::metrics::worker_slots("in_flight", 1);
    }

    pub(super) fn end(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        crate::metrics::worker_slots("in_flight", -1);
    }

    pub(super) fn get(&self) -> i32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One claim of stamps at a time in this process. A slot that finds no prepared row waits for
/// the claim under way rather than claim beside it: each claim takes every due row up to the
/// batch, so at a steady rate the pool claims, numbers, seals and stores a few rows at once
/// instead of one per slot and PAC call. Caught up with what arrives, claims begin at most
/// every [`CLAIM_LINGER`](super::prepare::CLAIM_LINGER), and the rows that came meanwhile go
/// together.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Held while a claim statement runs; when the last one began.
    turn: tokio::sync::Mutex<Option<Instant>>,
    /// Claims ended so far.
    ended: AtomicU64,
    /// The last claim found nothing due.
    last_empty: AtomicBool,
    /// The last claim found fewer rows than it asked for: the pool has caught up.
    caught_up: AtomicBool,
}

impl Claims {
    pub(super) fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Relaxed)
    }
}

/// The slot's turn to claim: the claim ends with [`Turn::ended`].
pub(super) struct Turn<'a> {
    claims: &'a Claims,
    last: tokio::sync::MutexGuard<'a, Option<Instant>>,
}

impl Turn<'_> {
    /// When the last claim began, if any did.
    pub(super) fn last(&self) -> Option<Instant> {
        *self.last
    }

    /// A claim begins now.
    pub(super) fn begin(&mut self) {
        *self.last = Some(Instant::now());
    }

    /// The claim found `found` of the `asked` rows; the turn passes, and the slots waiting for
    /// it look again.
    pub(super) fn ended(self, found: usize, asked: usize, notify: &tokio::sync::Notify) {
        let claims = self.claims;
        claims.caught_up.store(found < asked, Ordering::Relaxed);
        claims.last_empty.store(found == 0, Ordering::Relaxed);
        claims.ended.fetch_add(1, Ordering::Relaxed);
        drop(self);
        notify.notify_waiters();
    }
}

/// What a slot looking for a row to send finds.
pub(super) enum Found<'a> {
    /// A prepared row.
    Row(Box<Prepared>),
    /// The turn to claim.
    Turn(Turn<'a>),
    /// The claim it waited for found nothing due.
    Nothing,
}

impl Worker {
    /// One concurrency slot: claim, process, repeat; sleep when idle.
    ///
    /// A slot has one PAC call in flight at a time, and keeps one in flight nearly all the time:
    /// while a row's call runs, the slot gets its next row (from the queue, or claiming and
    /// sealing a batch for itself and the others), and once the call is
    /// answered the next call starts while the answer is being stored. Claiming, sealing and
    /// storing stay off the PAC's critical path. A row prepared but not yet sent goes back to the
    /// state it was claimed from when the pool stops ([`Worker::release_unsent`]).
    pub(super) async fn slot_loop(self: Arc<Self>, slot: usize, token: CancellationToken) {
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
            let (on_answer, answered) = Answered::channel();
            let me = self.clone();
            sends.spawn(async move { me.send(cur, slot, on_answer).await });
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

    /// A prepared row from the shared queue, else the turn to claim, else (another slot
    /// holding the turn) whatever that claim brings: its rows, or the turn after it, or
    /// nothing when it found nothing due.
    pub(super) async fn row_or_turn(&self) -> Found<'_> {
        loop {
            let notified = self.ready_notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so rows queued or a turn passed meanwhile still wake
            // this slot.
            notified.as_mut().enable();
            let ended = self.claims.ended.load(Ordering::Relaxed);
            if let Some(p) = self.ready_rows().pop_front() {
                return Found::Row(Box::new(p));
            }
            if let Ok(last) = self.claims.turn.try_lock() {
                return Found::Turn(Turn {
                    claims: &self.claims,
                    last,
                });
            }
            notified.await;
            if self.claims.ended.load(Ordering::Relaxed) != ended
                && self.claims.last_empty.load(Ordering::Relaxed)
            {
                return Found::Nothing;
            }
        }
    }

    /// Rows claimed together and prepared, waiting for a slot.
    pub(super) fn ready_rows(&self) -> std::sync::MutexGuard<'_, VecDeque<Prepared>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rows this process claimed but has not sent yet (id → claimed from).
    pub(super) fn unsent_rows(&self) -> std::sync::MutexGuard<'_, HashMap<i64, DocumentState>> {
        self.unsent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// On shutdown: rows claimed and sealed but never sent return to the state they were
    /// claimed from, due at once, with the claim's attempt given back. Nothing reached the PAC
    /// for them, so they need no recovery (a row claimed from an expired lease stays `unknown`).
    pub(super) async fn release_unsent(&self) {
        self.ready_rows().clear();
        let rows: Vec<(i64, DocumentState)> = self.unsent_rows().drain().collect();
        for (id, from) in rows {
            match self.db.release_unsent_stamp(id, &self.id, from).await {
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
}
