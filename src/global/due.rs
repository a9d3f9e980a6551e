//! When a period's factura global is issued by `serve`'s loop, and by when the SAT wants it.
//!
//! Two rules pull in opposite directions. Customers may still self-invoice a sale at the
//! portal until `[portal] days_after_month_end` days after its month ends, and a sale already
//! in a global can no longer be invoiced there; so the loop waits for that cutoff. But the SAT
//! wants the global within 72 hours after its period closes; so the loop never waits past
//! [`RESERVE`] before that deadline, and a customer's last days at the portal are cut short
//! when the two collide (a daily global, or more than two days after the month end).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDateTime, Utc};

use crate::config::Settings;
use crate::domain::period::{Period, Periodicidad, last_of_month};
use crate::ingest::fecha_of;

/// How long after its period closes the SAT allows a factura global to be issued.
pub const SAT_HOURS: i64 = 72;

/// What the loop keeps before the SAT deadline for the worker to stamp the global (PAC
/// outages, retries, an unknown outcome to recover): a global is frozen at the latest this
/// long before its deadline.
pub const RESERVE: Duration = Duration::hours(24);

/// What decides when the loop issues a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `[global] grace_minutes`: late deliveries of the period's last minutes.
    pub grace: Duration,
    /// `[portal] days_after_month_end` when the portal is on; `None` when it is off.
    pub portal_days: Option<u32>,
}

/// The local time by which the SAT wants `p`'s global: 72 hours after the period closes.
pub fn deadline(p: &Period) -> NaiveDateTime {
    p.closes_at() + Duration::hours(SAT_HOURS)
}

/// The local midnight after the last day the portal takes `p`'s sales (the last of them are
/// in the month `p` ends in).
pub fn portal_closes(p: &Period, days_after_month_end: u32) -> NaiveDateTime {
    let last = last_of_month(p.end) + chrono::Days::new(u64::from(days_after_month_end));
    (last + Duration::days(1))
        .and_hms_opt(0, 0, 0)
        .unwrap_or_default()
}

impl Timing {
    /// As configured: `[global] grace_minutes`, `[portal] enabled` and `days_after_month_end`.
    pub fn of(s: &Settings) -> Timing {
        // Past the SAT's hours a grace changes nothing (the deadline cuts it).
        let grace = s.global.grace_minutes.min(SAT_HOURS.unsigned_abs() * 60);
        Timing {
            grace: Duration::minutes(i64::try_from(grace).unwrap_or(SAT_HOURS * 60)),
            portal_days: s.portal.enabled.then_some(s.portal.days_after_month_end),
        }
    }

    /// When the loop issues `p`: once it closed and its grace passed, and once the portal no
    /// longer takes its sales, but no later than [`RESERVE`] before the SAT [`deadline`]
    /// (and never before the period closes).
    pub fn issue_at(&self, p: &Period) -> NaiveDateTime {
        let closes = p.closes_at();
        let wanted = self
            .portal_days
            .map(|d| portal_closes(p, d))
            .map_or(closes + self.grace, |portal| {
                portal.max(closes + self.grace)
            });
        wanted.min(deadline(p) - RESERVE).max(closes)
    }
}

/// A period whose sales still wait for their factura global, in one currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodDue {
    pub period: Period,
    pub moneda: String,
    pub sales: usize,
    /// When `serve`'s loop issues it ([`Timing::issue_at`]), local time.
    pub issue_at: NaiveDateTime,
    /// The SAT's [`deadline`], local time.
    pub deadline: NaiveDateTime,
}

/// The periods (of `periodicidad`) and currencies of sales waiting for a global, given each
/// sale's payment time and currency; the closest deadline first.
pub fn periods_due(
    periodicidad: Periodicidad,
    timing: Timing,
    sales: &[(DateTime<Utc>, String)],
) -> Vec<PeriodDue> {
    let mut by: BTreeMap<(Period, &str), usize> = BTreeMap::new();
    for (paid_at, moneda) in sales {
        let p = Period::containing(periodicidad, fecha_of(*paid_at).date());
        *by.entry((p, moneda.as_str())).or_default() += 1;
    }
    let mut due: Vec<PeriodDue> = by
        .into_iter()
        .map(|((period, moneda), sales)| PeriodDue {
            issue_at: timing.issue_at(&period),
            deadline: deadline(&period),
            period,
            moneda: moneda.to_owned(),
            sales,
        })
        .collect();
    due.sort_by(|a, b| (a.deadline, &a.moneda).cmp(&(b.deadline, &b.moneda)));
    due
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    fn at(y: i32, m: u32, d: u32, h: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, m, d)
            .and_then(|d| d.and_hms_opt(h, 0, 0))
            .expect("time")
    }

    fn period(p: Periodicidad, y: i32, m: u32, d: u32) -> Period {
        Period::containing(p, NaiveDate::from_ymd_opt(y, m, d).expect("date"))
    }

    fn timing(grace_minutes: i64, portal_days: Option<u32>) -> Timing {
        Timing {
            grace: Duration::minutes(grace_minutes),
            portal_days,
        }
    }

    #[test]
    fn a_month_waits_for_the_portal_cutoff_then_its_grace() {
        let nov = period(Periodicidad::Mensual, 2026, 11, 10);
        assert_eq!(deadline(&nov), at(2026, 12, 4, 0));
        // Defaults: the portal closes with the month; the grace decides.
        assert_eq!(timing(60, Some(0)).issue_at(&nov), at(2026, 12, 1, 1));
        // Customers may invoice November's sales until the end of 1 December.
        assert_eq!(timing(60, Some(1)).issue_at(&nov), at(2026, 12, 2, 0));
        // The portal off: only the grace.
        assert_eq!(timing(60, None).issue_at(&nov), at(2026, 12, 1, 1));
    }

    #[test]
    fn the_72_hours_win_over_a_longer_portal_window() {
        let nov = period(Periodicidad::Mensual, 2026, 11, 10);
        // Five days at the portal would issue on 6 December, after the 4 December deadline:
        // issued 24 hours before it instead.
        assert_eq!(timing(60, Some(5)).issue_at(&nov), at(2026, 12, 3, 0));
        // A daily global: the portal takes the sale until the month ends, the SAT wants the
        // global within 72 hours of the day.
        let day = period(Periodicidad::Diaria, 2026, 11, 10);
        assert_eq!(timing(60, Some(0)).issue_at(&day), at(2026, 11, 13, 0));
        // A grace longer than the 48 hours left is cut too.
        assert_eq!(timing(60 * 60, None).issue_at(&day), at(2026, 11, 13, 0));
    }

    #[test]
    fn periods_due_by_period_and_currency_closest_deadline_first() {
        let utc = |m: u32, d: u32| {
            crate::domain::time::from_local(at(2026, m, d, 12)).expect("local time")
        };
        let sales = [
            (utc(11, 3), "MXN".to_owned()),
            (utc(10, 30), "MXN".to_owned()),
            (utc(11, 20), "MXN".to_owned()),
            (utc(11, 21), "USD".to_owned()),
        ];
        let due = periods_due(Periodicidad::Mensual, timing(60, Some(0)), &sales);
        let got: Vec<(String, &str, usize, NaiveDateTime)> = due
            .iter()
            .map(|d| (d.period.label(), d.moneda.as_str(), d.sales, d.deadline))
            .collect();
        assert_eq!(
            got,
            [
                ("2026-10".to_owned(), "MXN", 1, at(2026, 11, 4, 0)),
                ("2026-11".to_owned(), "MXN", 2, at(2026, 12, 4, 0)),
                ("2026-11".to_owned(), "USD", 1, at(2026, 12, 4, 0)),
            ]
        );
        assert_eq!(due[0].issue_at, at(2026, 11, 1, 1));
    }

    #[test]
    fn never_before_the_period_closes() {
        let day = period(Periodicidad::Diaria, 2026, 11, 30);
        assert_eq!(timing(0, None).issue_at(&day), at(2026, 12, 1, 0));
        assert!(timing(0, Some(0)).issue_at(&day) >= day.closes_at());
    }
}
