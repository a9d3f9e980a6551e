//! The periods a factura global covers (`docs/cfdi-rules.md` §6): c_Periodicidad, the local
//! dates of each period, and its `Meses` and `Año`.
//!
//! Every period lies inside one calendar month (two for bimestral), because `InformacionGlobal`
//! names one `Meses`: a week that crosses a month end is cut there into two periods.

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, Weekday};

/// c_Periodicidad, spelled as `[global] periodicidad` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Periodicidad {
    Diaria,
    Semanal,
    Quincenal,
    Mensual,
    /// Only for taxpayers in the RIF (régimen 621).
    Bimestral,
}

impl Periodicidad {
    pub const ALL: [Periodicidad; 5] = [
        Self::Diaria,
        Self::Semanal,
        Self::Quincenal,
        Self::Mensual,
        Self::Bimestral,
    ];

    /// The c_Periodicidad code: `01` … `05`.
    pub fn code(self) -> &'static str {
        match self {
            Self::Diaria => "01",
            Self::Semanal => "02",
            Self::Quincenal => "03",
            Self::Mensual => "04",
            Self::Bimestral => "05",
        }
    }

    /// The setting's spelling: `diaria`, `semanal`, `quincenal`, `mensual`, `bimestral`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Diaria => "diaria",
            Self::Semanal => "semanal",
            Self::Quincenal => "quincenal",
            Self::Mensual => "mensual",
            Self::Bimestral => "bimestral",
        }
    }

    /// From the setting's spelling or the code.
    pub fn parse(s: &str) -> Option<Periodicidad> {
        let s = s.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s || p.code() == s)
    }
}

/// One period: local dates (America/Mexico_City) from `start` to `end`, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Period {
    pub periodicidad: Periodicidad,
    pub start: NaiveDate,
    pub end: NaiveDate,
}

fn first_of_month(d: NaiveDate) -> NaiveDate {
    d.with_day(1).unwrap_or(d)
}

/// The last day of the month of `d`.
pub fn last_of_month(d: NaiveDate) -> NaiveDate {
    let first = first_of_month(d);
    let next = first
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(first);
    next.pred_opt().unwrap_or(d)
}

impl Period {
    /// The period of `periodicidad` that holds the local date `d`.
    pub fn containing(periodicidad: Periodicidad, d: NaiveDate) -> Period {
        let (start, end) = match periodicidad {
            Periodicidad::Diaria => (d, d),
            Periodicidad::Semanal => {
                // Monday to Sunday, cut at the month's edges.
                let monday = d.week(Weekday::Mon).first_day();
                let sunday = monday + Duration::days(6);
                (monday.max(first_of_month(d)), sunday.min(last_of_month(d)))
            }
            Periodicidad::Quincenal if d.day() <= 15 => {
                (first_of_month(d), d.with_day(15).unwrap_or(d))
            }
            Periodicidad::Quincenal => (d.with_day(16).unwrap_or(d), last_of_month(d)),
            Periodicidad::Mensual => (first_of_month(d), last_of_month(d)),
            Periodicidad::Bimestral => {
                // January–February, March–April, …
                let month0 = d.month0() - d.month0() % 2;
                let start = NaiveDate::from_ymd_opt(d.year(), month0 + 1, 1).unwrap_or(d);
                let end = last_of_month(
                    start
                        .checked_add_months(chrono::Months::new(1))
                        .unwrap_or(start),
                );
                (start, end)
            }
        };
        Period {
            periodicidad,
            start,
            end,
        }
    }

    /// c_Meses: `01`–`12`, or `13` (enero–febrero) … `18` (noviembre–diciembre) for bimestral.
    pub fn meses(&self) -> String {
        match self.periodicidad {
            Periodicidad::Bimestral => format!("{}", 13 + self.start.month0() / 2),
            _ => format!("{:02}", self.start.month()),
        }
    }

    /// `Año`: the year the operations belong to.
    pub fn anio(&self) -> i32 {
        self.start.year()
    }

    /// The local midnight that ends the period.
    pub fn closes_at(&self) -> NaiveDateTime {
        (self.end + Duration::days(1))
            .and_hms_opt(0, 0, 0)
            .unwrap_or_default()
    }

    /// Whether the period is over at local time `now`.
    pub fn closed_at(&self, now: NaiveDateTime) -> bool {
        self.closes_at() <= now
    }

    /// How people name it: `2026-11` (a month), `2026-11-05` (a day), `2026-11..2026-12` (two
    /// months), else `2026-11-02..2026-11-08`.
    pub fn label(&self) -> String {
        match self.periodicidad {
            Periodicidad::Mensual => self.start.format("%Y-%m").to_string(),
            Periodicidad::Diaria => self.start.format("%Y-%m-%d").to_string(),
            Periodicidad::Bimestral => format!(
                "{}..{}",
                self.start.format("%Y-%m"),
                self.end.format("%Y-%m")
            ),
            _ => format!("{}..{}", self.start, self.end),
        }
    }

    /// What identifies it in a stamp key: periodicidad and both dates.
    pub fn key(&self) -> String {
        format!("{}:{}:{}", self.periodicidad.code(), self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).expect("date")
    }

    #[test]
    fn every_periodicidad_cuts_its_period_inside_the_month() {
        use Periodicidad::*;
        // (periodicidad, a day, its period's first and last day, Meses, Año), one a line.
        #[rustfmt::skip]
        let cases = [
            (Diaria, "2026-11-05", "2026-11-05", "2026-11-05", "11", 2026),
            // 2026-12-31 is a Thursday: its week is cut at the year's end.
            (Semanal, "2026-12-31", "2026-12-28", "2026-12-31", "12", 2026),
            (Semanal, "2027-01-02", "2027-01-01", "2027-01-03", "01", 2027),
            (Quincenal, "2026-02-15", "2026-02-01", "2026-02-15", "02", 2026),
            (Quincenal, "2026-02-16", "2026-02-16", "2026-02-28", "02", 2026),
            (Mensual, "2028-02-10", "2028-02-01", "2028-02-29", "02", 2028),
            (Bimestral, "2026-12-01", "2026-11-01", "2026-12-31", "18", 2026),
            (Bimestral, "2026-02-01", "2026-01-01", "2026-02-28", "13", 2026),
        ];
        let day = |s: &str| s.parse::<NaiveDate>().expect("date");
        for (per, on, start, end, meses, anio) in cases {
            let p = Period::containing(per, day(on));
            assert_eq!(
                (p.start, p.end, p.meses(), p.anio()),
                (day(start), day(end), meses.to_owned(), anio),
                "{per:?} on {on}"
            );
        }
    }

    #[test]
    fn a_period_closes_at_the_local_midnight_after_its_last_day() {
        let p = Period::containing(Periodicidad::Mensual, d(2026, 11, 20));
        let at = |day: NaiveDate, h| day.and_hms_opt(h, 0, 0).expect("time");
        assert!(!p.closed_at(at(d(2026, 11, 30), 23)));
        assert!(p.closed_at(at(d(2026, 12, 1), 0)));
        assert_eq!(p.label(), "2026-11");
        assert_eq!(p.key(), "04:2026-11-01:2026-11-30");
        assert_eq!(
            Periodicidad::parse("QUINCENAL"),
            Some(Periodicidad::Quincenal)
        );
        assert_eq!(Periodicidad::parse("05"), Some(Periodicidad::Bimestral));
        assert_eq!(Periodicidad::parse("anual"), None);
    }
}
