//! The deadlines the dashboard opens with besides each document's SAT window: the facturas
//! globales due (the SAT wants each within 72 hours after its period closes) and the
//! cancellations waiting for the receptor (3 business days to answer; silence accepts), and the
//! complementos de pago (REP) not stamped yet, due by the 5th of the month after the payment.

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

/// One payment whose complemento de pago is not stamped yet.
pub struct RepDueView {
    pub payment: String,
    /// The REP's outbox row (its page).
    pub outbox_id: i64,
    pub state: String,
    pub deadline: Deadline,
}

/// When the REP of a payment made at `fecha_pago` (local, `YYYY-MM-DDThh:mm:ss`) is due: the
/// end of the 5th day of the next month.
pub fn rep_due(fecha_pago: &str) -> Option<chrono::NaiveDateTime> {
    use chrono::Datelike;
    let paid = chrono::NaiveDateTime::parse_from_str(fecha_pago, "%Y-%m-%dT%H:%M:%S").ok()?;
    let (y, m) = match paid.month() {
        12 => (paid.year() + 1, 1),
        m => (paid.year(), m + 1),
    };
    chrono::NaiveDate::from_ymd_opt(y, m, 5)?.and_hms_opt(23, 59, 59)
}

pub struct Deadlines {
    pub globals: Vec<GlobalDueView>,
    pub globals_total: usize,
    pub receptors: Vec<ReceptorView>,
    pub receptors_total: usize,
    pub reps: Vec<RepDueView>,
    pub reps_total: usize,
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
    let pending = db.reps_not_stamped().await?;
    let reps_total = pending.len();
    let reps = pending
        .into_iter()
        .take(SHOWN)
        .map(|p| RepDueView {
            deadline: rep_due(&p.paid.fecha_pago)
                .and_then(from_local)
                // Days, not hours: warn two days ahead at least.
                .map(|t| Deadline::at(t, clock.at_risk.max(Duration::days(2)), clock.now))
                .unwrap_or_default(),
            state: p.state.label().to_owned(),
            outbox_id: p.outbox_id,
            payment: p.public_id,
        })
        .collect();
    Ok(Deadlines {
        globals,
        globals_total,
        receptors,
        receptors_total,
        reps,
        reps_total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rep_is_due_by_the_end_of_the_fifth_of_the_next_month() {
        let due = |f: &str| rep_due(f).map(|d| d.to_string());
        assert_eq!(
            due("2026-11-29T10:30:00").as_deref(),
            Some("2026-12-05 23:59:59")
        );
        assert_eq!(
            due("2026-12-01T00:00:00").as_deref(),
            Some("2027-01-05 23:59:59")
        );
        assert_eq!(due("not a date"), None);
    }
}
