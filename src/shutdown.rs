//! One stop for the whole process. [`Shutdown`] wraps the one [`CancellationToken`] that the
//! HTTP servers, the worker pool and every background loop (Mercado Pago fetch retries,
//! periodic reconciliation, merchant webhooks, the customer's emails, the idempotency purge)
//! are given: each ends when it is cancelled, nothing is aborted from outside. The entry points (`serve`,
//! `autofactura worker`) cancel it on a signal; tests and benchmarks may cancel it themselves.
//!
//! Imports nothing of the crate, so anything may take it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

/// The process's stop; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
    /// Set when the stop is forced (SIGINT, SIGQUIT): the HTTP servers drop open requests
    /// instead of letting them finish, as actix does for those signals.
    forced: Arc<AtomicBool>,
}

/// Which signals stop the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signals {
    /// SIGTERM (graceful) and Ctrl-C (SIGINT), as `autofactura worker` always stopped.
    TermAndInt,
    /// Also SIGQUIT (forced), the set actix answered for `serve`.
    TermIntAndQuit,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// The token to pass down: a loop ends when it is cancelled.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Stops everything, letting open HTTP requests finish (as SIGTERM does).
    pub fn cancel(&self) {
        self.token.cancel();
    }

    /// Whether open HTTP requests may finish ([`Shutdown::cancel`], SIGTERM) or are dropped
    /// (SIGINT, SIGQUIT).
    pub fn graceful(&self) -> bool {
        !self.forced.load(Ordering::Relaxed)
    }

    /// Resolves once the stop has been asked for.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// Cancels on the first of `signals` (the task ends with the stop, whoever asked for it).
    pub fn stop_on(&self, signals: Signals) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let (name, forced) = tokio::select! {
                () = me.token.cancelled() => return,
                got = signal(signals) => got,
            };
            tracing::info!(
                signal = name,
                "{name} received: stopping {}",
                if forced {
                    "now (open HTTP requests are dropped)"
                } else {
                    "gracefully"
                }
            );
            if forced {
                me.forced.store(true, Ordering::Relaxed);
            }
            me.token.cancel();
        })
    }
}

/// Resolves on the first of `signals`: its name, and `true` when it forces the stop.
async fn signal(signals: Signals) -> (&'static str, bool) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let quit = match signals {
            Signals::TermIntAndQuit => signal(SignalKind::quit()).ok(),
            Signals::TermAndInt => None,
        };
        let quit = async {
            match quit {
                Some(mut q) => q.recv().await,
                None => std::future::pending().await,
            }
        };
        match term {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => ("SIGTERM", false),
                _ = tokio::signal::ctrl_c() => ("SIGINT", true),
                _ = quit => ("SIGQUIT", true),
            },
            Err(_) => tokio::select! {
                _ = tokio::signal::ctrl_c() => ("SIGINT", true),
                _ = quit => ("SIGQUIT", true),
            },
        }
    }
    #[cfg(not(unix))]
    {
        let _ = signals;
        let _ = tokio::signal::ctrl_c().await;
        ("Ctrl-C", true)
    }
}

/// The loop of an outbox drained one row at a time (merchant webhooks, the customer's emails):
/// `step` handles one due row (`Ok(false)`: none was due) until `token` is cancelled; a step
/// under way is finished first. When idle or when `step` fails (the database is away, said
/// once per failure in `what`'s words), it sleeps `idle` between looks.
pub async fn drain_until_cancelled<E, F, Fut>(
    token: CancellationToken,
    idle: std::time::Duration,
    what: &str,
    mut step: F,
) where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, E>>,
{
    while !token.is_cancelled() {
        let worked = match step().await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "{what}: database unavailable");
                false
            }
        };
        if !worked {
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(idle) => {}
            }
        }
    }
}
