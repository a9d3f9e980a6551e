//! Issuing the globals of closed periods: read the sales still `awaiting_global`, leave out the
//! ones refunded in full, group the rest by period and currency, split each group at
//! `[global] max_conceptos`, and freeze each global with its members in one transaction.
//!
//! Safe to run anywhere at any time, twice, from two instances at once or again after a crash:
//! a sale leaves `awaiting_global` only in the transaction that freezes its global (a
//! conditional update), so whoever commits first takes it and the other finds it gone, rolls
//! back and plans again from what is left. Nothing here calls the PAC: the worker stamps the
//! frozen rows like any other.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use chrono::{NaiveDate, NaiveDateTime};
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;

use super::due::Timing;
use super::plan::{Planner, Slot, tipo_cambio_of};
use crate::domain::DocumentState;
use crate::domain::PaymentStatus;
use crate::domain::period::Period;
use crate::domain::time::{from_local, now_at, now_in_mexico};
use crate::store::{Db, Frozen, RecordedEvent, Sale, StoreError};
use crate::webhooks::refunds::{Recorded, refunded_in_full};

/// How many times one run plans again after finding its reading changed (another instance or
/// the portal took sales meanwhile) before it leaves the rest to the next run.
const REPLANS: usize = 8;

/// A global this run froze (and, when asked to wait, what the worker made of it).
#[derive(Debug, Clone)]
pub struct Issued {
    pub outbox_id: i64,
    pub period: Period,
    pub moneda: String,
    pub payments: usize,
    pub total: String,
    pub serie: String,
    /// As the document holds it when last read ([`refresh`]); `None` until allocated.
    pub folio: Option<String>,
    pub status: DocumentState,
    pub uuid: Option<String>,
}

impl fmt::Display for Issued {
    /// `global period=2026-11 periodicidad=04 payments=3 total=246.00 status=pending uuid=-`,
    /// then the currency, document and serie-folio.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "global period={} periodicidad={} payments={} total={} status={} uuid={} moneda={} id={} folio={}",
            self.period.label(),
            self.period.periodicidad.code(),
            self.payments,
            self.total,
            self.status,
            self.uuid.as_deref().unwrap_or("-"),
            self.moneda,
            self.outbox_id,
            self.folio
                .as_ref()
                .map_or_else(|| "-".to_owned(), |f| format!("{}-{f}", self.serie))
        )
    }
}

/// A sale this run left out of its global, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub provider: String,
    pub payment_id: String,
    pub reason: String,
}

/// What one run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub issued: Vec<Issued>,
    pub left_out: Vec<LeftOut>,
    /// Periods that could not be issued, each with its reason (nothing was frozen for them).
    pub problems: Vec<String>,
}

/// Which periods a run issues.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// Local time the periods must have closed by.
    pub closed_by: NaiveDateTime,
    /// Only periods whose last day is this date or earlier.
    pub through: Option<NaiveDate>,
    /// `serve`'s loop: a period only once it is due ([`Timing::issue_at`]: the portal's cutoff
    /// and the SAT's 72 hours); `None` (the command): as soon as it closed.
    pub timing: Option<Timing>,
}

impl Scope {
    /// The command line's: every period closed now, up to `through`.
    pub fn now_through(through: Option<NaiveDate>) -> Scope {
        Scope {
            closed_by: now_in_mexico(),
            through,
            timing: None,
        }
    }

    /// The loop's at local time `now`.
    pub fn due_by(now: NaiveDateTime, timing: Timing) -> Scope {
        Scope {
            closed_by: now,
            through: None,
            timing: Some(timing),
        }
    }

    fn covers(&self, p: &Period) -> bool {
        let due = match self.timing {
            Some(t) => t.issue_at(p) <= self.closed_by,
            None => p.closed_at(self.closed_by),
        };
        due && self.through.is_none_or(|t| p.end <= t)
    }

    /// Sales paid before this instant can belong to a covered period.
    fn paid_before(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let through_end = self
            .through
            .and_then(|t| t.succ_opt())
            .and_then(|d| d.and_hms_opt(0, 0, 0));
        from_local(through_end.map_or(self.closed_by, |t| t.min(self.closed_by)))
    }
}

/// Issues every global `scope` covers. `actor` is who asked (logs).
pub async fn issue(
    db: &Db,
    planner: &Planner,
    scope: Scope,
    actor: &str,
) -> Result<Report, StoreError> {
    let mut report = Report::default();
    let Some(before) = scope.paid_before() else {
        return Ok(report);
    };
    for _ in 0..REPLANS {
        let mut sales = db.awaiting_global(before).await?;
        let events = db.recorded_events_of_awaiting(before).await?;
        let reductions = db.reductions_of_awaiting(before).await?;
        reduce(&mut sales, &reductions);
        let groups = group(planner, &scope, sales);
        if groups.is_empty() {
            return Ok(report);
        }
        let mut replan = false;
        'groups: for ((period, moneda, _rate), sales) in groups {
            let sales = leave_out(db, planner, sales, &events, &mut report).await?;
            if sales.is_empty() {
                continue;
            }
            if let Err(why) = tipo_cambio_of(&moneda, &sales) {
                hold(db, period, &moneda, &sales, &why, &mut report).await?;
                continue;
            }
            for chunk in sales.chunks(planner.settings.max_conceptos.max(1)) {
                let rfc = planner.emisor.rfc.as_str();
                let code = period.periodicidad.code();
                let start = period.start.to_string();
                let seq = db.next_global_seq(rfc, code, &start, &moneda).await?;
                let fecha = now_at(&planner.emisor.lugar_expedicion);
                let mut g = match planner.global(
                    Slot {
                        period,
                        moneda: &moneda,
                        seq,
                    },
                    chunk,
                    fecha,
                    None,
                    actor,
                ) {
                    Ok(g) => g,
                    Err(e) => {
                        let why = format!(
                            "the factura global of {} ({moneda}) cannot be built: {e}; its {} \
                             sales stay awaiting_global",
                            period.label(),
                            sales.len()
                        );
                        tracing::error!(period = %period.label(), %moneda, error = %e, "factura global not issued");
                        report.problems.push(why);
                        continue 'groups;
                    }
                };
                g.reductions = reductions
                    .iter()
                    .filter(|(row, _)| chunk.iter().any(|s| s.id == *row))
                    .count();
                match db.freeze_global(&g).await? {
                    Frozen::Global { outbox_id } => {
                        let issued = Issued {
                            outbox_id,
                            period,
                            moneda: moneda.clone(),
                            payments: chunk.len(),
                            total: g.total.clone(),
                            serie: planner.settings.serie.clone(),
                            folio: None,
                            status: g.draft.state,
                            uuid: None,
                        };
                        tracing::info!(%actor, document = outbox_id, stamp_key = %g.draft.stamp_key, "{issued}");
                        report.issued.push(issued);
                    }
                    Frozen::Changed(why) => {
                        tracing::info!(period = %period.label(), %moneda, %why, "factura global: reading changed, planning again");
                        replan = true;
                        break 'groups;
                    }
                }
            }
        }
        if !replan {
            return Ok(report);
        }
    }
    report.problems.push(format!(
        "sales kept changing under {REPLANS} plans in a row (another instance issuing at the same \
         time?); what is left is issued on the next run"
    ));
    Ok(report)
}

/// A group of sales that make one global (or several, at `max_conceptos`): period, currency
/// and, for a currency other than MXN, the exchange rate its sales carry.
type GroupKey = (Period, String, Option<String>);

/// The sales of covered periods by period, currency and rate, each group in concepto order.
fn group(planner: &Planner, scope: &Scope, sales: Vec<Sale>) -> BTreeMap<GroupKey, Vec<Sale>> {
    let mut groups: BTreeMap<GroupKey, Vec<Sale>> = BTreeMap::new();
    for s in sales {
        let period = planner.period_of(s.paid_at);
        if scope.covers(&period) {
            let rate = s.tipo_cambio.clone().filter(|_| s.currency != "MXN");
            groups
                .entry((period, s.currency.clone(), rate))
                .or_default()
                .push(s);
        }
    }
    groups
}

/// Holds `sales` out of their global for `why` (no exchange rate): each keeps waiting with
/// the reason, which `invoices list` and the admin show; the period is reported.
async fn hold(
    db: &Db,
    period: Period,
    moneda: &str,
    sales: &[Sale],
    why: &str,
    report: &mut Report,
) -> Result<(), StoreError> {
    let label = period.label();
    let reason = format!(
        "held out of the factura global of {label} ({moneda}): {why}; it is issued once the \
         sales carry one"
    );
    for s in sales {
        db.hold_from_global(s.id, &reason).await?;
    }
    tracing::warn!(period = %label, %moneda, sales = sales.len(), %why, "factura global held");
    report.problems.push(format!(
        "the factura global of {label} ({moneda}) is held: {why}; its {} sales stay \
         awaiting_global",
        sales.len()
    ));
    Ok(())
}

/// `sales` without the ones that must not be in a global: refunded in full, or test-mode sales
/// when the PAC is a production one. Each is taken out of `awaiting_global` with its reason
/// (if still there) and listed in `report`.
async fn leave_out(
    db: &Db,
    planner: &Planner,
    sales: Vec<Sale>,
    events: &[RecordedEvent],
    report: &mut Report,
) -> Result<Vec<Sale>, StoreError> {
    let mut kept = Vec::with_capacity(sales.len());
    for s in sales {
        let recorded: Vec<Recorded<'_>> = events
            .iter()
            .filter(|e| e.payment_row == s.id)
            .map(|e| Recorded {
                provider: &e.provider,
                event_id: &e.event_id,
                event_type: &e.event_type,
                reason: e.reason.as_deref(),
                raw_body: &e.raw_body,
            })
            .collect();
        let amount: Decimal = s.amount.parse().unwrap_or(Decimal::MAX);
        let out = match refunded_in_full(amount, &recorded) {
            Some(reason) => Some((PaymentStatus::Refunded, reason)),
            None if amount <= Decimal::ZERO => Some((
                PaymentStatus::Refunded,
                "refunded in full before its factura global (its refunds add up to the sale)"
                    .to_owned(),
            )),
            None => crate::config::environment_mismatch(
                planner.pac_env,
                planner.sandbox_pac,
                s.livemode,
            )
            .map(|(_, why)| {
                (
                    PaymentStatus::NeedsAttention,
                    format!("{why}; nor in a factura global"),
                )
            }),
        };
        let Some((status, reason)) = out else {
            kept.push(s);
            continue;
        };
        if db.leave_out_of_global(s.id, status, &reason).await? {
            tracing::info!(provider = %s.provider, payment_id = %s.payment_id, %reason, "left out of the factura global");
            report.left_out.push(LeftOut {
                provider: s.provider,
                payment_id: s.payment_id,
                reason,
            });
        }
    }
    Ok(kept)
}

/// The sales less what was refunded of them while they waited (`reductions`: payment row and
/// amount): the global carries what was kept.
fn reduce(sales: &mut [Sale], reductions: &[(i64, String)]) {
    for s in sales {
        let refunded: Decimal = reductions
            .iter()
            .filter(|(row, _)| *row == s.id)
            .filter_map(|(_, a)| a.parse::<Decimal>().ok())
            .sum();
        match s.amount.parse::<Decimal>() {
            Ok(amount) if refunded > Decimal::ZERO => s.amount = (amount - refunded).to_string(),
            _ => {}
        }
    }
}

/// Each issued global with its state, UUID and folio as stored now.
pub async fn refresh(db: &Db, issued: &mut [Issued]) -> Result<(), StoreError> {
    for i in issued {
        if let Some(d) = db.document(i.outbox_id).await? {
            i.status = d.state;
            i.uuid = d.uuid;
            i.folio = d.folio;
        }
    }
    Ok(())
}

/// Waits up to `wait` for the worker to settle every issued global (stamped, or any state that
/// needs a person); then refreshes them.
pub async fn wait_for_stamps(
    db: &Db,
    issued: &mut [Issued],
    wait: Duration,
) -> Result<(), StoreError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        refresh(db, issued).await?;
        let moving = issued.iter().any(|i| {
            matches!(
                i.status,
                DocumentState::Pending
                    | DocumentState::Stamping
                    | DocumentState::RetryScheduled
                    | DocumentState::Unknown
            )
        });
        if !moving || tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `serve`'s loop: every `[global] interval_seconds`, the periods that are due (closed
/// `grace_minutes` ago, past the portal's cutoff, or about to miss the SAT's 72 hours: see
/// [`Timing::issue_at`]), then the motivo 01 cancellations of replaced globals whose
/// replacement is stamped. Ends with `token`.
pub async fn issue_loop(db: Db, planner: Planner, timing: Timing, token: CancellationToken) {
    let every = Duration::from_secs(planner.settings.interval_seconds.max(1));
    loop {
        let round = async {
            let scope = Scope::due_by(now_in_mexico(), timing);
            if let Err(e) = issue(&db, &planner, scope, "global issue loop").await {
                tracing::warn!(error = %e, "factura global: this round failed; the next one tries again");
            }
            if let Err(e) = super::replace::request_substitution_cancels(&db).await {
                tracing::warn!(error = %e, "factura global: replaced globals not cancelled yet");
            }
            tokio::time::sleep(every).await;
        };
        if token.run_until_cancelled(round).await.is_none() {
            return;
        }
    }
}
