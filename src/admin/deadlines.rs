//! The deadlines the dashboard opens with besides each document's SAT window: the facturas
//! globales due (the SAT wants each within 72 hours after its period closes) and the
//! cancellations waiting for the receptor (3 business days to answer; silence accepts). The
//! REP's deadline (the 5th of the next month) joins them once the pagos flow exists.

use chrono::Duration;

use super::format::{Clock, Deadline, local_naive};
use crate::config::Settings;
use crate::domain::time::{add_business_days, from_local};
use crate::error::AdminError;
use crate::global::Timing;
use crate::global::due::periods_due;
use crate::store::Db;

/// The receptor has this many business days to answer a cancellation (regla 2.7.1.35).
pub const RECEPTOR_BUSINESS_DAYS: u32 = 3;

/// How many of each kind the dashboard lists (the rest are counted).
const SHOWN: usize = 5;

/// One period's factura global still to issue.
pub struct GlobalDueView {
    pub period: String,
    pub moneda: String,
    pub sales: usize,
    /// When `serve` issues it ("by hand" when `auto_issue` is off), exact local time.
    pub issue: String,
    pub deadline: Deadline,
}

/// One cancellation waiting for the receptor.
pub struct ReceptorView {
    pub uuid: String,
    pub deadline: Deadline,
}

pub struct Deadlines {
    pub globals: Vec<GlobalDueView>,
    pub globals_total: usize,
    pub receptors: Vec<ReceptorView>,
    pub receptors_total: usize,
}

pub async fn deadlines(
    db: &Db,
    settings: &Settings,
    clock: &Clock,
) -> Result<Deadlines, AdminError> {
    let timing = Timing::of(settings);
    let sales = db.awaiting_global_times().await?;
    let due = periods_due(settings.global.periodicidad, timing, &sales);
    let globals_total = due.len();
    let globals = due
        .into_iter()
        .take(SHOWN)
        .map(|d| GlobalDueView {
            period: d.period.label(),
            moneda: d.moneda,
            sales: d.sales,
            issue: if settings.global.auto_issue {
                format!("issued automatically from {}", local_naive(d.issue_at))
            } else {
                "issue it: autofactura global issue".to_owned()
            },
            deadline: from_local(d.deadline)
                .map(|t| Deadline::at(t, clock.at_risk, clock.now))
                .unwrap_or_default(),
        })
        .collect();
    let waiting = db.waiting_for_receptor().await?;
    let receptors_total = waiting.len();
    let receptors = waiting
        .into_iter()
        .take(SHOWN)
        .map(|c| ReceptorView {
            deadline: Deadline::at(
                add_business_days(c.created_at, RECEPTOR_BUSINESS_DAYS),
                clock.at_risk.min(Duration::hours(24)),
                clock.now,
            ),
            uuid: c.uuid,
        })
        .collect();
    Ok(Deadlines {
        globals,
        globals_total,
        receptors,
        receptors_total,
    })
}
