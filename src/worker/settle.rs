//! Storing outcomes: every settle of a stamp row, and the settler task that stores fresh
//! stamps queued on its channel in batched writes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::Worker;
use crate::domain::DocumentState;
use crate::store::StoreError;
use crate::store::{Attempt, Settle, StampedOutcome};

/// Told when a send's PAC calls are over and its outcome is about to be stored (see
/// [`Worker::slot_loop`]): the slot may start its next call. A send that ends without storing
/// an outcome drops it untold, which the slot's receiver sees as well.
pub(super) struct Answered(Option<tokio::sync::oneshot::Sender<()>>);

impl Answered {
    /// The signal for one send, and what its slot waits on.
    pub(super) fn channel() -> (Self, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Self(Some(tx)), rx)
    }

    /// For outcomes stored outside a send (rows settled while being prepared): no slot waits.
    pub(super) fn nobody() -> Self {
        Self(None)
    }

    /// Tells the slot, the first time only.
    fn tell(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// The settler's channel: slots queue fresh stamps on it while the pool's settler task runs
/// ([`Worker::settler_loop`]); otherwise each outcome is stored on its own.
pub(super) struct Settler {
    tx: tokio::sync::mpsc::UnboundedSender<StampedJob>,
    /// Taken by the pool that runs the settler (one per worker).
    pub(super) rx: tokio::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<StampedJob>>>,
    /// Whether the settler task is running: set when it starts, cleared when the pool stops.
    pub(super) running: AtomicBool,
}

impl Settler {
    pub(super) fn new() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            tx,
            rx: tokio::sync::Mutex::new(Some(rx)),
            running: AtomicBool::new(false),
        }
    }
}

/// A stamped outcome waiting for the settler, and where its answer goes.
pub(super) struct StampedJob {
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
const SETTLE_LINGER: Duration = Duration::from_millis(25);

impl Worker {
    pub(super) async fn settle(
        &self,
        id: i64,
        s: Settle<'_>,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        self.settle_logged(id, s, None, answered).await
    }

    /// Settles and appends the attempt that led here, in one transaction.
    pub(super) async fn settle_logged(
        &self,
        id: i64,
        s: Settle<'_>,
        attempt: Option<&Attempt<'_>>,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        // The PAC has answered (every outcome is stored here): the slot may start its next call.
        answered.tell();
        let held = match StampedOutcome::of(id, &s, attempt) {
            // The common outcome, a fresh stamp, goes to the settler to be stored with others.
            Some(outcome) if self.settler.running.load(Ordering::Relaxed) => {
                let (reply, answer) = tokio::sync::oneshot::channel();
                self.settler
                    .tx
                    .send(StampedJob { outcome, reply })
                    .map_err(|_| StoreError::Other("the settler stopped".into()))?;
                answer
                    .await
                    .unwrap_or_else(|_| Err(StoreError::Other("the settler stopped".into())))?
            }
            _ => {
                self.db
                    .settle_stamp(id, &self.id, &s, attempt, self.mail_domain.as_deref())
                    .await?
            }
        };
        if !held {
            warn!(
                "lease lost before settling; another worker owns the row and will reach the same answer from the PAC"
            );
        }
        Ok(())
    }

    pub(super) async fn fail(
        &self,
        id: i64,
        state: DocumentState,
        code: &str,
        message: &str,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        self.fail_logged(id, state, code, message, None, answered)
            .await
    }

    pub(super) async fn fail_logged(
        &self,
        id: i64,
        state: DocumentState,
        code: &str,
        message: &str,
        attempt: Option<&Attempt<'_>>,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        warn!(state = %state, code, message, "invoice needs a human");
        let s = Settle::Final {
            state,
            code: Some(code),
            message,
        };
        self.settle_logged(id, s, attempt, answered).await
    }

    /// Stores queued stamped outcomes: whatever has queued up while the last write ran goes
    /// in the next one (up to [`SETTLE_BATCH`]), and while other calls are out the settler
    /// waits up to [`SETTLE_LINGER`] for theirs, so under load one statement stores many
    /// outcomes; alone an outcome is stored at once. Ends when `token` is cancelled (a write
    /// under way is finished first).
    pub(super) async fn settler_loop(
        &self,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<StampedJob>,
        token: CancellationToken,
    ) {
        while let Some(first) = token.run_until_cancelled(rx.recv()).await.flatten() {
            let mut jobs = vec![first];
            let until = tokio::time::Instant::now() + SETTLE_LINGER;
            while jobs.len() < SETTLE_BATCH {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    // Calls still waiting for their answer (beyond the ones queued here).
                    Err(_) if self.in_flight.get() > jobs.len() as i32 => {
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
            let mail = self.mail_domain.as_deref();
            match self.db.settle_stamped_many(&self.id, &outcomes, mail).await {
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
}
