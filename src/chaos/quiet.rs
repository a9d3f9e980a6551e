//! The end of the chaos phase: the kills stop, everything is started again, and the run waits
//! until no row is still moving (or nothing has changed for two minutes) before it counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::cast::Cast;
use super::check::TERMINAL_OUTBOX_STATES;
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
    let mut moving: Vec<(String, i64)> = db
        .outbox_counts()
        .await?
        .into_iter()
        .filter(|(s, _)| !TERMINAL_OUTBOX_STATES.contains(&s.as_str()))
        .map(|(s, n)| (format!("outbox {s}"), n))
        .collect();
    // Sales of a closed period still waiting: `serve`'s loop puts them in a global.
    let waiting = db.awaiting_global(start_of_month()?).await?.len();
    if waiting > 0 {
        moving.push((
            "payments awaiting_global of a closed period".into(),
            i64::try_from(waiting).unwrap_or(i64::MAX),
        ));
    }
    // Refunds not credited yet: waiting for their sale's ingreso, or cancelling it.
    moving.extend(
        db.refund_counts()
            .await?
            .into_iter()
            .filter(|(s, _)| s == "awaiting_original" || s == "canceling")
            .map(|(s, n)| (format!("refunds {s}"), n)),
    );
    // Customers' emails still to send (the courier retries through kills).
    moving.extend(
        db.delivery_counts()
            .await?
            .into_iter()
            .filter(|(s, _)| s == "pending" || s == "retry")
            .map(|(s, n)| (format!("emails {s}"), n)),
    );
    moving.extend(
        db.webhook_event_counts()
            .await?
            .into_iter()
            .filter(|(s, _)| s == "pending_fetch")
            .map(|(s, n)| (format!("webhook_events {s}"), n)),
    );
    if arca {
        let pending = db.arca_pending_sales(i64::MAX).await?.len();
        if pending > 0 {
            moving.push((
                "sales arca_pending".into(),
                i64::try_from(pending).unwrap_or(i64::MAX),
            ));
        }
        moving.extend(
            db.arca_voucher_counts()
                .await?
                .into_iter()
                .filter(|(s, _)| s == "reserved" || s == "unknown")
                .map(|(s, n)| (format!("arca_vouchers {s}"), n)),
        );
    }
    Ok(moving)
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
