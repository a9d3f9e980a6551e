//! How the admin writes times, amounts, deadlines and messages: one format each, so every page
//! reads the same. Times are Mexico City time labelled "hora CDMX", shown relative ("3 min
//! ago") with the exact time on hover; amounts have thousands separators and the currency.

use std::fmt;

use chrono::{DateTime, Duration, NaiveDateTime, Utc};

use super::codes;
use crate::domain::DocumentState;

/// The zone every admin time is written in.
pub const ZONE: &str = "hora CDMX";

/// A UTC instant as Mexico City time, to the second, with the zone: the one exact format.
pub fn local(t: DateTime<Utc>) -> String {
    crate::domain::time::to_local(t)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
        + " "
        + ZONE
}

/// A Mexico City local time (a Fecha) in the same format.
pub fn local_naive(t: NaiveDateTime) -> String {
    format!("{} {ZONE}", t.format("%Y-%m-%d %H:%M:%S"))
}

/// "3 h 12 min", "45 s": the length of `since..now` (zero when negative).
pub fn age(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - since).num_seconds().max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// An instant as the pages show it: relative, with the exact time on hover. Rendered with
/// `|safe`: its text is built here from a timestamp, never from input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct When {
    /// "3 min ago", "in 2 h 5 min".
    pub rel: String,
    /// "2026-12-03 14:05:09 hora CDMX".
    pub exact: String,
    /// RFC 3339 in UTC, for `<time datetime>`.
    pub iso: String,
}

impl When {
    pub fn of(t: DateTime<Utc>, now: DateTime<Utc>) -> When {
        let rel = if t > now + Duration::seconds(1) {
            format!("in {}", age(now, t))
        } else {
            format!("{} ago", age(t, now))
        };
        When {
            rel,
            exact: local(t),
            iso: t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }

    pub fn opt(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> When {
        t.map(|t| When::of(t, now)).unwrap_or_default()
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.iso.is_empty() {
            return Ok(());
        }
        // Only digits, letters, spaces, `:`, `-` and `+` reach here: nothing to escape.
        write!(
            f,
            "<time datetime=\"{}\" title=\"{}\">{}</time>",
            self.iso, self.exact, self.rel
        )
    }
}

/// `amount` (decimal text, as stored) with thousands separators and the currency:
/// "1,234,567.80 MXN". Text that is not a plain decimal is shown as it is.
pub fn money(amount: &str, currency: &str) -> String {
    let a = amount.trim();
    let (sign, digits) = a.strip_prefix('-').map_or(("", a), |d| ("-", d));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return format!("{a} {currency}");
    }
    let mut grouped = String::with_capacity(int.len() + int.len() / 3);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let frac = match frac.len() {
        0 => ".00".to_owned(),
        1 => format!(".{frac}0"),
        _ => format!(".{frac}"),
    };
    format!("{sign}{grouped}{frac} {currency}")
}

/// The time left in a document's SAT window, as a list or detail page shows it.
#[derive(Debug, Clone, Default)]
pub struct Deadline {
    /// "window closes in 9 min", "window closed 2 h ago"; empty when it does not apply.
    pub text: String,
    /// `bad` under the at-risk threshold or closed, `warn` under twice it, else `muted`.
    pub class: &'static str,
    /// When it closes, exactly.
    pub exact: String,
}

impl Deadline {
    /// The window of a document whose Fecha is `fecha` (Mexico City), `window` long.
    pub fn of(
        fecha: NaiveDateTime,
        window: Duration,
        at_risk: Duration,
        now: DateTime<Utc>,
    ) -> Deadline {
        let Some(start) = crate::domain::time::from_local(fecha) else {
            return Deadline::default();
        };
        Deadline::at(start + window, at_risk, now)
    }

    /// A window that closes at `closes` (a global's SAT deadline, a receptor's answer).
    pub fn at(closes: DateTime<Utc>, at_risk: Duration, now: DateTime<Utc>) -> Deadline {
        let left = closes - now;
        let (text, class) = if left <= Duration::zero() {
            (format!("window closed {} ago", age(closes, now)), "bad")
        } else if left <= at_risk {
            (format!("window closes in {}", age(now, closes)), "bad")
        } else if left <= at_risk * 2 {
            (format!("window closes in {}", age(now, closes)), "warn")
        } else {
            (format!("window closes in {}", age(now, closes)), "muted")
        };
        Deadline {
            text,
            class,
            exact: local(closes),
        }
    }
}

/// What every page needs to write times and deadlines: one `now` per request, and the
/// window and threshold of `[worker]` and `[admin]`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub now: DateTime<Utc>,
    pub window: Duration,
    pub at_risk: Duration,
}

impl Clock {
    pub fn of(admin: &super::Admin) -> Clock {
        Clock {
            now: Utc::now(),
            window: admin.window,
            at_risk: admin.at_risk,
        }
    }

    pub fn when(&self, t: DateTime<Utc>) -> When {
        When::of(t, self.now)
    }

    /// The window of a document in `state` with Fecha `fecha`; nothing for a final or
    /// expired one (or one without a Fecha).
    pub fn deadline(&self, state: Option<DocumentState>, fecha: Option<NaiveDateTime>) -> Deadline {
        use crate::domain::DocumentState as S;
        match (state, fecha) {
            (Some(s), Some(f)) if !s.is_final() && s != S::Expired && !s.is_arca() => {
                Deadline::of(f, self.window, self.at_risk, self.now)
            }
            _ => Deadline::default(),
        }
    }
}

/// An error as the pages show it: who said it, its code once, the message, and the hint.
#[derive(Debug, Clone, Default)]
pub struct Said {
    /// "PAC", "SAT (via the PAC)", "appliance"; empty when there is nothing to show.
    pub source: &'static str,
    pub code: String,
    /// The message verbatim, without a leading repetition of the code.
    pub message: String,
    /// What to do, from [`codes`]; empty when the code is not known.
    pub hint: &'static str,
}

impl Said {
    pub fn of(code: Option<&str>, message: Option<&str>, from_pac_call: bool) -> Said {
        let code = code.unwrap_or_default().trim().to_owned();
        let message = message.unwrap_or_default().trim();
        if code.is_empty() && message.is_empty() {
            return Said::default();
        }
        let known = codes::lookup(&code);
        let source = match known {
            Some(k) => k.source.label(),
            None if code.starts_with("CFDI") => codes::Source::Sat.label(),
            None if !code.is_empty() || from_pac_call => codes::Source::Pac.label(),
            None => codes::Source::Appliance.label(),
        };
        Said {
            source,
            message: strip_code(&code, message).to_owned(),
            hint: known.map_or("", |k| k.hint),
            code,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.code.is_empty() && self.message.is_empty()
    }
}

/// `message` without a leading `code` (PACs often repeat it: "CFDI40143 - …").
pub fn strip_code<'m>(code: &str, message: &'m str) -> &'m str {
    if code.is_empty() {
        return message;
    }
    match message.strip_prefix(code) {
        Some(rest) => rest
            .trim_start_matches([' ', '-', '.', ':', '–'])
            .trim_start(),
        None => message,
    }
}

/// Serie and folio as one "A-17"; "A-—" while the folio is not known yet (a comprobante is
/// numbered when a worker seals it), "—" without either.
pub fn serie_folio(serie: Option<&str>, folio: Option<&str>) -> String {
    let folio = folio.filter(|f| !f.is_empty()).unwrap_or("—");
    match serie {
        Some(s) if !s.is_empty() => format!("{s}-{folio}"),
        _ => folio.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_have_separators_and_the_currency() {
        assert_eq!(money("1234567.8", "MXN"), "1,234,567.80 MXN");
        assert_eq!(money("116.00", "MXN"), "116.00 MXN");
        assert_eq!(money("999", "USD"), "999.00 USD");
        assert_eq!(money("-1000.5", "MXN"), "-1,000.50 MXN");
        assert_eq!(money("abc", "MXN"), "abc MXN");
    }

    #[test]
    fn times_carry_the_zone_and_relative_times_the_exact_one() {
        let now = DateTime::parse_from_rfc3339("2026-12-03T20:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(local(now), "2026-12-03 14:00:00 hora CDMX");
        let w = When::of(now - Duration::minutes(3), now);
        assert_eq!(w.rel, "3 min ago");
        assert_eq!(
            w.to_string(),
            "<time datetime=\"2026-12-03T19:57:00Z\" title=\"2026-12-03 13:57:00 hora CDMX\">3 min ago</time>"
        );
        assert_eq!(When::of(now + Duration::hours(2), now).rel, "in 2 h 0 min");
    }

    #[test]
    fn the_window_is_counted_from_fecha() {
        let now = DateTime::parse_from_rfc3339("2026-12-03T20:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let fecha = crate::domain::time::to_local(now - Duration::hours(71));
        let d = Deadline::of(fecha, Duration::hours(72), Duration::hours(6), now);
        assert_eq!(
            (d.text.as_str(), d.class),
            ("window closes in 1 h 0 min", "bad")
        );
        let d = Deadline::of(fecha, Duration::hours(70), Duration::hours(6), now);
        assert_eq!(
            (d.text.as_str(), d.class),
            ("window closed 1 h 0 min ago", "bad")
        );
        let fresh = crate::domain::time::to_local(now);
        let d = Deadline::of(fresh, Duration::hours(72), Duration::hours(6), now);
        assert_eq!(d.class, "muted");
    }

    #[test]
    fn a_code_is_said_once_and_attributed() {
        let s = Said::of(
            Some("CFDI40143"),
            Some("CFDI40143 - Este RFC del receptor no existe"),
            true,
        );
        assert_eq!(s.message, "Este RFC del receptor no existe");
        assert!(s.source.starts_with("SAT"));
        assert!(!s.hint.is_empty());
        let w = Said::of(Some("WINDOW"), Some("Fecha … never sent"), false);
        assert_eq!(w.source, "appliance");
        let t = Said::of(None, Some("operation timed out"), true);
        assert_eq!(t.source, "PAC");
        assert!(Said::of(None, None, true).is_empty());
        assert_eq!(serie_folio(Some("A"), None), "A-—");
        assert_eq!(serie_folio(None, None), "—");
        assert_eq!(serie_folio(Some("A"), Some("7")), "A-7");
    }
}
