//! The slots: each keeps one PAC call in flight, claiming and sealing its next row meanwhile;
//! the queue of rows claimed together and sealed, waiting for a slot; the rows claimed and
//! not sent yet, released when the pool stops.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

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

/// A number of rows or slots that only [`Counted`] changes, so every addition is taken back.
#[derive(Debug, Default)]
pub(super) struct Tally(AtomicUsize);

impl Tally {
    pub(super) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Adds to a count for as long as it lives; when it ends, it tells `done`'s waiters (after the
/// count has dropped, so they do not wait for it again).
pub(super) struct Counted<'a> {
    count: &'a Tally,
    n: usize,
    done: Option<&'a tokio::sync::Notify>,
}

impl<'a> Counted<'a> {
    pub(super) fn add(count: &'a Tally, n: usize, done: Option<&'a tokio::sync::Notify>) -> Self {
        count.0.fetch_add(n, Ordering::Relaxed);
        Self { count, n, done }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.count.0.fetch_sub(self.n, Ordering::Relaxed);
        if let Some(done) = self.done {
            done.notify_waiters();
        }
    }
}

impl Worker {
    /// One concurrency slot: claim, process, repeat; sleep when idle.
    ///
    /// A slot has one PAC call in flight at a time, and keeps one in flight nearly all the time:
    /// while a row's call runs, the slot claims and seals its next row, and once the call is
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

    /// A prepared row from the shared queue. A slot preparing ahead (`may_wait`) waits for the
    /// rows other slots are preparing, while those outnumber the slots already waiting for
    /// them, rather than claim a batch of its own: when the queue runs dry, every slot claiming
    /// at once would queue their batches behind one another for sealing, and the slots whose
    /// batches come last would sit without a call.
    pub(super) async fn take_ready(&self, may_wait: bool) -> Option<Prepared> {
        loop {
            let notified = self.ready_notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so a batch stored meanwhile still wakes this slot.
            notified.as_mut().enable();
            if let Some(p) = self.ready_rows().pop_front() {
                return Some(p);
            }
            let waiting = self.waiting.get();
            if !may_wait || self.preparing.get() <= waiting {
                return None;
            }
            let _waiting = Counted::add(&self.waiting, 1, None);
            notified.await;
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
