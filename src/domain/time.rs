//! Time as SAT reads it: Mexico City local time, to the second, and SAT's business days.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc, Weekday};
use chrono_tz::America::Mexico_City;

/// A UTC instant as Mexico City local time, to the second (how `Fecha` and `FechaTimbrado`
/// are written).
pub fn to_local(t: DateTime<Utc>) -> NaiveDateTime {
    let l = t.with_timezone(&Mexico_City).naive_local();
    l - Duration::nanoseconds(i64::from(l.and_utc().timestamp_subsec_nanos()))
}

/// Now in Mexico City, to the second: the `Fecha` of a document sealed now.
pub fn now_in_mexico() -> NaiveDateTime {
    to_local(Utc::now())
}

/// A Mexico City local time as UTC (the earliest reading on a DST fold).
pub fn from_local(l: NaiveDateTime) -> Option<DateTime<Utc>> {
    Mexico_City
        .from_local_datetime(&l)
        .earliest()
        .map(|t| t.with_timezone(&Utc))
}

fn is_business_day(d: NaiveDate) -> bool {
    // Weekends only; the sandbox does not model SAT's holiday calendar.
    !matches!(d.weekday(), Weekday::Sat | Weekday::Sun)
}

/// `t` moved forward by `n` business days (same local time of day).
pub fn add_business_days(t: DateTime<Utc>, n: u32) -> DateTime<Utc> {
    let local = to_local(t);
    let mut date = local.date();
    let mut left = n;
    while left > 0 {
        date = date.succ_opt().unwrap_or(date);
        if is_business_day(date) {
            left -= 1;
        }
    }
    from_local(date.and_time(local.time())).unwrap_or(t + Duration::days(i64::from(n)))
}

/// The end (23:59:59 local) of the business day after the local date of `t`.
pub fn end_of_next_business_day(t: DateTime<Utc>) -> DateTime<Utc> {
    let mut date = to_local(t)
        .date()
        .succ_opt()
        .unwrap_or_else(|| to_local(t).date());
    while !is_business_day(date) {
        date = date.succ_opt().unwrap_or(date);
    }
    let end = date.and_hms_opt(23, 59, 59).unwrap_or_default();
    from_local(end).unwrap_or(t + Duration::days(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn business_days_skip_weekends() {
        // Friday 2026-01-02 12:00 local → +3 business days = Wednesday 2026-01-07 12:00.
        let fri = from_local(
            NaiveDate::from_ymd_opt(2026, 1, 2)
                .unwrap()
                .and_hms_opt(12, 0, 0)
                .unwrap(),
        )
        .unwrap();
        let d = to_local(add_business_days(fri, 3));
        assert_eq!(d.to_string(), "2026-01-07 12:00:00");
        assert_eq!(
            to_local(end_of_next_business_day(fri)).to_string(),
            "2026-01-05 23:59:59"
        );
    }
}
