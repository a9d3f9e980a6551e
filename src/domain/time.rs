//! Time as SAT reads it: local time to the second (Mexico City for SAT's own clock, the zone of
//! the LugarExpedicion for a comprobante's Fecha) and SAT's business days.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc, Weekday};
use chrono_tz::America::Mexico_City;
use chrono_tz::Tz;

use crate::cfdi::catalogs::{self, Huso};

/// The IANA zone of a c_CodigoPostal `huso_horario`. The tz database carries Mexico's 2022
/// law: no daylight saving except the border strip, which keeps the US dates.
pub fn zone_of(huso: Huso) -> Tz {
    match huso {
        Huso::Centro => Mexico_City,
        // Central time with the US dates (Matamoros is on the strip).
        Huso::CentroFrontera => chrono_tz::America::Matamoros,
        Huso::Noroeste => chrono_tz::America::Tijuana,
        // Sinaloa, Nayarit, Sonora and Baja California Sur: UTC−7 all year.
        Huso::Pacifico => chrono_tz::America::Mazatlan,
        Huso::Sureste => chrono_tz::America::Cancun,
    }
}

/// The zone a Fecha issued at LugarExpedicion `cp` is written in. A code not in c_CodigoPostal
/// reads as Mexico City (start-up refuses such an emisor; see [`check_lugar_expedicion`]).
pub fn zone_at(cp: &str) -> Tz {
    catalogs::huso_horario(cp).map_or(Mexico_City, zone_of)
}

/// `Ok` with the zone when `cp` is a código postal of c_CodigoPostal; else what to fix.
pub fn check_lugar_expedicion(cp: &str) -> Result<Huso, String> {
    catalogs::huso_horario(cp).ok_or_else(|| {
        format!(
            "[emisor] lugar_expedicion {cp:?} is not a código postal of c_CodigoPostal: give the five-digit postal code of the place of issue"
        )
    })
}

/// A UTC instant as local time at LugarExpedicion `cp`, to the second: a Fecha.
pub fn to_local_at(t: DateTime<Utc>, cp: &str) -> NaiveDateTime {
    let l = t.with_timezone(&zone_at(cp)).naive_local();
    l - Duration::nanoseconds(i64::from(l.and_utc().timestamp_subsec_nanos()))
}

/// Now at LugarExpedicion `cp`, to the second: the Fecha of a document frozen now.
pub fn now_at(cp: &str) -> NaiveDateTime {
    to_local_at(Utc::now(), cp)
}

/// A Fecha written at LugarExpedicion `cp` as UTC. On a daylight-saving fold the earlier
/// instant, so a 72-hour window computed from it never runs past the real one; in a gap (a
/// time that never existed there) the hour after.
pub fn from_local_at(l: NaiveDateTime, cp: &str) -> Option<DateTime<Utc>> {
    let tz = zone_at(cp);
    tz.from_local_datetime(&l)
        .earliest()
        .or_else(|| tz.from_local_datetime(&(l + Duration::hours(1))).earliest())
        .map(|t| t.with_timezone(&Utc))
}

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

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn fecha_follows_the_zone_of_the_place_of_issue_and_its_daylight_saving() {
        // Tijuana leaves daylight saving on 2026-11-01 at 02:00 PDT (09:00 UTC).
        assert_eq!(
            to_local_at(utc("2026-11-01T08:59:59Z"), "22000").to_string(),
            "2026-11-01 01:59:59"
        );
        assert_eq!(
            to_local_at(utc("2026-11-01T09:00:00Z"), "22000").to_string(),
            "2026-11-01 01:00:00"
        );
        // and enters it on 2026-03-08 at 02:00 PST (10:00 UTC).
        assert_eq!(
            to_local_at(utc("2026-03-08T09:59:59Z"), "22000").to_string(),
            "2026-03-08 01:59:59"
        );
        assert_eq!(
            to_local_at(utc("2026-03-08T10:00:00Z"), "22000").to_string(),
            "2026-03-08 03:00:00"
        );
        // Mexico City, Hermosillo and Cancún keep one offset all year.
        for (cp, jan, jul) in [
            ("06600", "2026-01-15 06:00:00", "2026-07-15 06:00:00"),
            ("83000", "2026-01-15 05:00:00", "2026-07-15 05:00:00"),
            ("77500", "2026-01-15 07:00:00", "2026-07-15 07:00:00"),
            // The border strip on Central time follows the US dates.
            ("88000", "2026-01-15 06:00:00", "2026-07-15 07:00:00"),
        ] {
            assert_eq!(
                to_local_at(utc("2026-01-15T12:00:00Z"), cp).to_string(),
                jan,
                "{cp}"
            );
            assert_eq!(
                to_local_at(utc("2026-07-15T12:00:00Z"), cp).to_string(),
                jul,
                "{cp}"
            );
        }
        // Back to UTC: a folded hour reads as its earlier instant, a skipped one as the hour after.
        let fold = NaiveDate::from_ymd_opt(2026, 11, 1)
            .unwrap()
            .and_hms_opt(1, 30, 0)
            .unwrap();
        assert_eq!(
            from_local_at(fold, "22000"),
            Some(utc("2026-11-01T08:30:00Z"))
        );
        let gap = NaiveDate::from_ymd_opt(2026, 3, 8)
            .unwrap()
            .and_hms_opt(2, 30, 0)
            .unwrap();
        assert_eq!(
            from_local_at(gap, "22000"),
            Some(utc("2026-03-08T10:30:00Z"))
        );
        assert!(check_lugar_expedicion("22000").is_ok());
        assert!(
            check_lugar_expedicion("17000")
                .unwrap_err()
                .contains("c_CodigoPostal")
        );
    }

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
