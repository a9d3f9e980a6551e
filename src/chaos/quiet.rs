//! The end of the chaos phase: the kills stop, everything is started again, and the run waits
//! until no row is still moving (or nothing has changed for two minutes) before it counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::cast::Cast;
use super::check::TERMINAL_OUTBOX_STATES;
use crate::domain::RefundStatus;
use crate::store::Db;

/// Stops the kills, then quiet: everything up, nothing killed, until no row is still moving
/// (see [`wait_quiet`]). Returns the processes and what still moves.
pub(super) async fn settle(
    chaos: tokio::task::JoinHandle<anyhow::Result<Cast>>,
    stop: &CancellationToken,
    http: &reqwest::Client,
    db: &Db,
    payments: usize,
    arca: bool,
    kills: &AtomicU64,
) -> anyhow::Result<(Cast, Vec<(String, i64)>)> {
    stop.cancel();
    let mut cast = chaos.await.context("the kill loop failed")??;
    eprintln!(
        "chaos: killing stopped ({} kills); waiting for quiet",
        kills.load(Ordering::Relaxed)
    );
    cast.start(http).await?;
    let moving = wait_quiet(db, payments, arca).await?;
    Ok((cast, moving))
}

/// Rows still moving: outbox rows outside a terminal state, notifications whose payment was
/// not fetched yet, sales of a closed period not in a global yet, refunds and emails still to
/// settle. With `arca`, ARS sales not settled and vouchers not settled (reserved, unknown) too.
async fn moving_rows(db: &Db, arca: bool) -> anyhow::Result<Vec<(String, i64)>> {
    let mut moving: Vec<(String, i64)> = in_states("outbox", db.outbox_counts().await?, |s| {
        !TERMINAL_OUTBOX_STATES.contains(&s.as_str())
    })
    .collect();
    // Sales of a closed period still waiting: `serve`'s loop puts them in a global.
    let waiting = db.awaiting_global(start_of_month()?).await?.len();
    moving.extend(if_any(
        "payments awaiting_global of a closed period",
        waiting,
    ));
    // Refunds not credited yet: waiting for their sale's ingreso (or voucher), or cancelling it.
    moving.extend(in_states("refunds", db.refund_counts().await?, |s| {
        matches!(
            s,
            RefundStatus::AwaitingOriginal | RefundStatus::Canceling | RefundStatus::ArcaPending
        )
    }));
    // Customers' emails still to send (the courier retries through kills).
    moving.extend(in_states("emails", db.delivery_counts().await?, |s| {
        s.is_due()
    }));
    moving.extend(in_states(
        "webhook_events",
        db.webhook_event_counts().await?,
        |s| s == "pending_fetch",
    ));
    if arca {
        let pending = db.arca_pending_sales(i64::MAX).await?.len();
        moving.extend(if_any("sales arca_pending", pending));
        moving.extend(in_states(
            "arca_vouchers",
            db.arca_voucher_counts().await?,
            |s| s.is_open(),
        ));
    }
    Ok(moving)
}

/// The `(state, count)` rows of `counts` whose state is still `moving`, named `"{what} {state}"`.
fn in_states<'a, S: std::fmt::Display + 'a>(
    what: &'a str,
    counts: Vec<(S, i64)>,
    moving: impl Fn(&S) -> bool + 'a,
) -> impl Iterator<Item = (String, i64)> + 'a {
    counts
        .into_iter()
        .filter(move |(s, _)| moving(s))
        .map(move |(s, n)| (format!("{what} {s}"), n))
}

/// `n` rows named `what`, when there are any.
fn if_any(what: &str, n: usize) -> Option<(String, i64)> {
    (n > 0).then(|| (what.to_owned(), i64::try_from(n).unwrap_or(i64::MAX)))
}

/// Waits until no row is moving, or until nothing has changed for two minutes; then returns
/// what still moves (empty when quiet), having printed the stuck rows.
async fn wait_quiet(db: &Db, payments: usize, arca: bool) -> anyhow::Result<Vec<(String, i64)>> {
    let stall_limit = Duration::from_secs(120);
    let mut last = Vec::new();
    let mut changed = Instant::now();
    let mut said = Instant::now();
    loop {
        let moving = moving_rows(db, arca).await?;
        let total: i64 = moving.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return Ok(moving);
        }
        if moving != last {
            last = moving.clone();
            changed = Instant::now();
        }
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            eprintln!("chaos: quiet phase, {payments} payments, still moving: {moving:?}");
        }
        if changed.elapsed() >= stall_limit {
            eprintln!("chaos: STUCK for {stall_limit:?}: {moving:?}");
            for (what, _) in &moving {
                if let Some(state) = what.strip_prefix("outbox ") {
                    for r in db.list_invoices(Some(state)).await?.iter().take(10) {
                        eprintln!(
                            "  {} {} {} attempts={} last_error={}",
                            r.provider,
                            r.payment_id,
                            r.status,
                            r.attempts,
                            r.last_error.as_deref().unwrap_or("-")
                        );
                    }
                }
            }
            return Ok(moving);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The start of the current month, Mexico City.
fn start_of_month() -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    use chrono::Datelike;
    let first = crate::domain::time::now_in_mexico()
        .date()
        .with_day(1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .context("no first day of the month")?;
    crate::domain::time::from_local(first).context("midnight is not a local time")
}
