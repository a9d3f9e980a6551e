//! The verdict of a chaos run, from three lists and nothing else: the payments sent, our
//! records, and the PAC's own list of every stamp it issued. Pure, so a test can feed it a lost
//! payment, a duplicate or an orphan and see it counted.

use std::collections::{HashMap, HashSet};
use std::fmt;

/// A payment the run delivered (acknowledged at least once by an instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentPayment {
    pub provider: String,
    pub payment_id: String,
    /// The stamp key the appliance must derive for it (the PAC's `customid`).
    pub stamp_key: String,
    /// Dated at the edge of its SAT window: it may rightly end `expired`, provided the PAC
    /// holds no stamp of it.
    pub near_window: bool,
}

/// One payment in our records (`invoices list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurRecord {
    pub provider: String,
    pub payment_id: String,
    pub status: String,
    pub uuid: Option<String>,
    pub last_error: Option<String>,
    /// `None` without a comprobante; the folio `None` until a worker numbered it.
    pub serie: Option<String>,
    pub folio: Option<String>,
}

/// One stamp in the PAC's list (`GET /_sim/stamps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacStamp {
    pub uuid: String,
    pub customid: Option<String>,
}

/// The counts the run prints, and why any of them is off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub payments: usize,
    /// Payments with exactly one stamped UUID in our records, that UUID issued by the PAC.
    pub stamped: usize,
    /// Near-window payments that ended `expired` while the PAC holds no stamp of them: the
    /// window closed before a stamp, rightly.
    pub expired: usize,
    /// Payments without a stamped UUID in our records (missing, not stamped, or a UUID the PAC
    /// never issued).
    pub lost: usize,
    /// Stamps beyond the first for one payment (PAC stamps under its key, or one UUID on
    /// several of our rows).
    pub duplicated: usize,
    /// PAC stamps whose UUID is not in our records.
    pub orphans: usize,
    /// Rows still outside a terminal state.
    pub not_terminal: usize,
    /// One line per problem, for the operator.
    pub problems: Vec<String>,
}

impl Verdict {
    pub fn is_ok(&self) -> bool {
        self.stamped + self.expired == self.payments
            && self.lost == 0
            && self.duplicated == 0
            && self.orphans == 0
            && self.not_terminal == 0
            && self.problems.is_empty()
    }
}

/// The summary line; `kills` and `faults` come from the run itself.
pub struct Line<'a> {
    pub verdict: &'a Verdict,
    pub kills: u64,
    pub faults: u64,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.verdict;
        write!(
            f,
            "payments={} stamped={} expired={} lost={} duplicated={} orphans={} kills={} faults={}",
            v.payments,
            v.stamped,
            v.expired,
            v.lost,
            v.duplicated,
            v.orphans,
            self.kills,
            self.faults
        )
    }
}

/// States an outbox row stays in without anyone acting: everything else is still moving.
pub const TERMINAL_OUTBOX_STATES: &[&str] = &[
    "stamped",
    "failed",
    "expired",
    "canceled",
    "awaiting_global",
    "needs_attention",
];

/// Compares what was sent, what we recorded and what the PAC issued. `not_terminal` lists
/// rows still moving (e.g. `outbox unknown: 2`), each one a problem.
pub fn check(
    sent: &[SentPayment],
    ours: &[OurRecord],
    pac: &[PacStamp],
    not_terminal: &[(String, i64)],
) -> Verdict {
    let mut v = Verdict {
        payments: sent.len(),
        ..Verdict::default()
    };
    let mut by_payment: HashMap<(&str, &str), Vec<&OurRecord>> = HashMap::new();
    for r in ours {
        by_payment
            .entry((r.provider.as_str(), r.payment_id.as_str()))
            .or_default()
            .push(r);
    }
    let pac_uuids: HashSet<String> = pac.iter().map(|s| s.uuid.to_uppercase()).collect();
    let mut pac_by_key: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in pac {
        if let Some(k) = s.customid.as_deref() {
            pac_by_key.entry(k).or_default().push(s.uuid.as_str());
        }
    }
    let mut our_uuids: HashMap<String, usize> = HashMap::new();
    for r in ours {
        if let Some(u) = r.uuid.as_deref().filter(|u| !u.is_empty()) {
            *our_uuids.entry(u.to_uppercase()).or_default() += 1;
        }
    }

    let mut sent_keys = HashSet::new();
    for p in sent {
        sent_keys.insert((p.provider.as_str(), p.payment_id.as_str()));
        let name = format!("{} {}", p.provider, p.payment_id);
        let rows = by_payment
            .get(&(p.provider.as_str(), p.payment_id.as_str()))
            .map_or(&[][..], Vec::as_slice);
        let stamped: Vec<&str> = rows
            .iter()
            .filter(|r| r.status == "stamped")
            .filter_map(|r| r.uuid.as_deref().filter(|u| !u.is_empty()))
            .collect();
        let pac_stamps = pac_by_key.get(p.stamp_key.as_str()).map_or(0, Vec::len);
        match (rows, stamped.as_slice()) {
            ([], _) => {
                v.lost += 1;
                v.problems.push(format!("{name}: not in our records"));
            }
            ([r], []) if p.near_window && r.status == "expired" && pac_stamps == 0 => {
                v.expired += 1;
            }
            (_, []) => {
                v.lost += 1;
                let r = rows[0];
                v.problems.push(format!(
                    "{name}: {} without a UUID ({})",
                    r.status,
                    r.last_error.as_deref().unwrap_or("no error recorded")
                ));
            }
            (_, [uuid]) if !pac_uuids.contains(&uuid.to_uppercase()) => {
                v.lost += 1;
                v.problems.push(format!(
                    "{name}: our UUID {uuid} was never issued by the PAC"
                ));
            }
            (_, [_]) => v.stamped += 1,
            (_, many) => {
                v.duplicated += many.len() - 1;
                v.problems
                    .push(format!("{name}: {} stamped rows: {many:?}", many.len()));
            }
        }
        if let Some(uuids) = pac_by_key.get(p.stamp_key.as_str())
            && uuids.len() > 1
        {
            v.duplicated += uuids.len() - 1;
            v.problems.push(format!(
                "{name}: the PAC issued {} stamps under its key {}: {uuids:?}",
                uuids.len(),
                p.stamp_key
            ));
        }
    }
    for (uuid, n) in &our_uuids {
        if *n > 1 {
            v.duplicated += n - 1;
            v.problems
                .push(format!("UUID {uuid} is recorded on {n} of our rows"));
        }
    }
    for s in pac {
        if !our_uuids.contains_key(&s.uuid.to_uppercase()) {
            v.orphans += 1;
            v.problems.push(format!(
                "PAC stamp {} (customid {}) is not in our records",
                s.uuid,
                s.customid.as_deref().unwrap_or("-")
            ));
        }
    }
    for r in ours {
        if !sent_keys.contains(&(r.provider.as_str(), r.payment_id.as_str())) {
            v.problems.push(format!(
                "{} {} is in our records but was never sent",
                r.provider, r.payment_id
            ));
        }
    }
    v.problems.extend(folio_problems(ours));
    for (what, n) in not_terminal {
        if *n > 0 {
            v.not_terminal += usize::try_from(*n).unwrap_or(usize::MAX);
            v.problems.push(format!("{n} rows still {what}"));
        }
    }
    v
}

/// The numbered folios of each serie must be exactly 1..=the highest: a number given twice
/// (two documents with one folio) or skipped (a number taken and lost, e.g. by a worker killed
/// between taking it and writing it) is a problem. Every payment of a chaos run is numbered by
/// the workers (no explicit folios), and a folio once written stays, whatever the row becomes.
fn folio_problems(ours: &[OurRecord]) -> Vec<String> {
    let mut by_serie: HashMap<&str, Vec<u64>> = HashMap::new();
    for r in ours {
        if let Some(n) = r.folio.as_deref().and_then(|f| f.parse().ok()) {
            by_serie
                .entry(r.serie.as_deref().unwrap_or(""))
                .or_default()
                .push(n);
        }
    }
    let mut problems = Vec::new();
    for (serie, mut folios) in by_serie {
        folios.sort_unstable();
        let mut repeated: Vec<u64> = folios
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        repeated.dedup();
        let mut missing = Vec::new();
        let mut expect = 1;
        for f in &folios {
            missing.extend(expect..*f);
            expect = expect.max(f + 1);
        }
        if !repeated.is_empty() {
            problems.push(format!("serie {serie}: folios given twice: {repeated:?}"));
        }
        if !missing.is_empty() {
            problems.push(format!("serie {serie}: folios skipped: {missing:?}"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(n: usize) -> Vec<SentPayment> {
        (0..n)
            .map(|i| SentPayment {
                provider: "stripe".into(),
                payment_id: format!("pi_{i}"),
                stamp_key: format!("key-{i}"),
                near_window: false,
            })
            .collect()
    }

    fn ours(n: usize) -> Vec<OurRecord> {
        (0..n)
            .map(|i| OurRecord {
                provider: "stripe".into(),
                payment_id: format!("pi_{i}"),
                status: "stamped".into(),
                uuid: Some(format!("UUID-{i}")),
                last_error: None,
                serie: Some("A".into()),
                folio: Some((i + 1).to_string()),
            })
            .collect()
    }

    fn pac(n: usize) -> Vec<PacStamp> {
        (0..n)
            .map(|i| PacStamp {
                uuid: format!("UUID-{i}"),
                customid: Some(format!("key-{i}")),
            })
            .collect()
    }

    fn line(v: &Verdict) -> String {
        Line {
            verdict: v,
            kills: 3,
            faults: 7,
        }
        .to_string()
    }

    #[test]
    fn a_clean_run_passes_with_the_exact_line() {
        let v = check(&sent(3), &ours(3), &pac(3), &[("outbox unknown".into(), 0)]);
        assert!(v.is_ok(), "{v:?}");
        assert_eq!(
            line(&v),
            "payments=3 stamped=3 expired=0 lost=0 duplicated=0 orphans=0 kills=3 faults=7"
        );
    }

    #[test]
    fn a_near_window_payment_may_expire_only_if_the_pac_never_stamped_it() {
        let mut s = sent(3);
        s[1].near_window = true;
        s[2].near_window = true;
        let mut o = ours(3);
        for r in &mut o[1..] {
            r.status = "expired".into();
            r.uuid = None;
        }
        // The PAC stamped the last one (its answer lost), and we recorded it as expired.
        let p = pac(1)
            .into_iter()
            .chain([PacStamp {
                uuid: "UUID-2".into(),
                customid: Some("key-2".into()),
            }])
            .collect::<Vec<_>>();
        let v = check(&s, &o, &p, &[]);
        assert_eq!(
            (v.stamped, v.expired, v.lost, v.orphans),
            (1, 1, 1, 1),
            "{v:?}"
        );
        assert!(!v.is_ok());
        assert!(line(&v).contains("stamped=1 expired=1 lost=1"));
        // An expired payment not dated at the window's edge is lost whatever the PAC holds.
        let v = check(&sent(3), &o, &pac(1), &[]);
        assert_eq!((v.expired, v.lost), (0, 2), "{v:?}");
    }

    #[test]
    fn a_payment_missing_or_not_stamped_is_lost() {
        let mut o = ours(3);
        o.remove(2);
        o[1].status = "unknown".into();
        o[1].uuid = None;
        let p = pac(1);
        let v = check(&sent(3), &o, &p, &[]);
        assert!(!v.is_ok());
        assert_eq!((v.stamped, v.lost, v.orphans), (1, 2, 0), "{v:?}");
        assert!(line(&v).contains("stamped=1 expired=0 lost=2"));
    }

    #[test]
    fn a_uuid_the_pac_never_issued_is_lost() {
        let v = check(&sent(2), &ours(2), &pac(1), &[]);
        assert_eq!((v.stamped, v.lost), (1, 1), "{v:?}");
        assert!(!v.is_ok());
    }

    #[test]
    fn a_second_stamp_for_one_payment_is_a_duplicate_and_an_orphan() {
        let mut p = pac(2);
        p.push(PacStamp {
            uuid: "UUID-extra".into(),
            customid: Some("key-1".into()),
        });
        let v = check(&sent(2), &ours(2), &p, &[]);
        assert_eq!((v.stamped, v.duplicated, v.orphans), (2, 1, 1), "{v:?}");
        assert!(!v.is_ok());
        assert!(line(&v).contains("duplicated=1 orphans=1"));
    }

    #[test]
    fn one_uuid_on_two_rows_is_a_duplicate() {
        let mut o = ours(2);
        o[1].uuid = Some("UUID-0".into());
        let v = check(&sent(2), &o, &pac(2), &[]);
        assert!(v.duplicated >= 1 && !v.is_ok(), "{v:?}");
    }

    #[test]
    fn a_stamp_nobody_recorded_is_an_orphan() {
        let mut p = pac(2);
        p.push(PacStamp {
            uuid: "UUID-stray".into(),
            customid: None,
        });
        let v = check(&sent(2), &ours(2), &p, &[]);
        assert_eq!((v.stamped, v.orphans, v.duplicated), (2, 1, 0), "{v:?}");
        assert!(!v.is_ok());
    }

    #[test]
    fn rows_still_moving_fail_the_run() {
        let v = check(
            &sent(1),
            &ours(1),
            &pac(1),
            &[("outbox retry_scheduled".into(), 2)],
        );
        assert_eq!(v.not_terminal, 2);
        assert!(!v.is_ok());
        assert!(v.problems.iter().any(|p| p.contains("retry_scheduled")));
    }

    #[test]
    fn a_folio_given_twice_or_skipped_fails_the_run() {
        let mut o = ours(4);
        o[2].folio = Some("2".into());
        let v = check(&sent(4), &o, &pac(4), &[]);
        assert!(!v.is_ok(), "{v:?}");
        assert!(
            v.problems
                .iter()
                .any(|p| p == "serie A: folios given twice: [2]"),
            "{v:?}"
        );
        assert!(
            v.problems
                .iter()
                .any(|p| p == "serie A: folios skipped: [3]"),
            "{v:?}"
        );
        // A row not numbered yet (or never: no comprobante) is no gap.
        let mut o = ours(4);
        o[3].folio = None;
        assert!(check(&sent(4), &o, &pac(4), &[]).problems.is_empty());
    }

    #[test]
    fn a_record_nobody_sent_fails_the_run() {
        let v = check(&sent(1), &ours(2), &pac(2), &[]);
        assert!(!v.is_ok(), "{v:?}");
    }
}
