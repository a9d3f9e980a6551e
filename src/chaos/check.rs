//! The verdict of a chaos run, from three lists and nothing else: the payments sent, our
//! records (each sale's own document, and the facturas globales with their sales), and the
//! PAC's own list of every stamp it issued. Pure, so a test can feed it a lost payment, a
//! duplicate, a sale in two documents or an orphan and see it counted.

use crate::domain::DocumentState;
use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::store::{DocumentListing, InvoiceRow};

/// How a sale of the run is meant to be invoiced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleKind {
    /// With the customer's fiscal data: its own ingreso.
    Nominative,
    /// Without an RFC, in the open month: a simulated customer invoices it at the portal.
    Portal,
    /// Without an RFC, in a closed period: the factura global.
    Global,
}

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
    pub kind: SaleKind,
    /// A partial refund of the sale the run delivered too (decimal text): it must end as one
    /// stamped egreso for that amount, related to the sale's UUID.
    pub refund: Option<String>,
}

/// A sale in a factura global, as `invoices list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub provider: String,
    pub payment_id: String,
    pub global_id: i64,
}

/// A factura global document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalDoc {
    pub id: i64,
    pub status: String,
    pub uuid: Option<String>,
}

/// An egreso (a refund's nota de crédito), as `invoices list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgresoDoc {
    pub status: String,
    pub uuid: Option<String>,
    /// The UUID of the document it credits.
    pub related_uuid: Option<String>,
    /// Decimal text: the refund's amount.
    pub total: String,
}

/// The facturas globales of the run and their sales, and the egresos.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Globals {
    pub members: Vec<Member>,
    pub documents: Vec<GlobalDoc>,
    pub egresos: Vec<EgresoDoc>,
}

impl Globals {
    /// From `invoices list`'s rows: the global documents, and the sales that name a global.
    pub fn from_listing(rows: &[DocumentListing]) -> Globals {
        let mut g = Globals::default();
        for r in rows {
            if r.kind == "egreso" {
                g.egresos.push(EgresoDoc {
                    status: r.status.clone(),
                    uuid: r.uuid.clone(),
                    related_uuid: r.related_uuid.clone(),
                    total: r.total.clone(),
                });
            } else if r.kind == "global" {
                if let Some(id) = r.id {
                    g.documents.push(GlobalDoc {
                        id,
                        status: r.status.clone(),
                        uuid: r.uuid.clone(),
                    });
                }
            } else if let (Some(global_id), Some(provider), Some(payment_id)) =
                (r.global_id, &r.provider, &r.payment_id)
            {
                g.members.push(Member {
                    provider: provider.clone(),
                    payment_id: payment_id.clone(),
                    global_id,
                });
            }
        }
        g
    }
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
    /// Of them, the sales a simulated customer invoiced at the portal.
    pub self_invoiced: usize,
    /// Payments in exactly one factura global, stamped with a UUID the PAC issued, and in no
    /// other document.
    pub in_global: usize,
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
    /// Payments the run also refunded in part, and of them those credited by exactly one
    /// stamped egreso for the refund's amount (missing, extra or other amounts are problems;
    /// an extra egreso counts as duplicated too).
    pub refunds: usize,
    pub credited: usize,
    /// Stamped documents whose customer has an address, and of them those whose message the
    /// mailbox took under exactly one Message-ID (see `mail.rs`).
    pub emails: usize,
    pub emailed: usize,
    /// One line per problem, for the operator.
    pub problems: Vec<String>,
}

impl Verdict {
    pub fn is_ok(&self) -> bool {
        self.stamped + self.in_global + self.expired == self.payments
            && self.lost == 0
            && self.duplicated == 0
            && self.orphans == 0
            && self.not_terminal == 0
            && self.credited == self.refunds
            && self.emailed == self.emails
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
            "payments={} stamped={} self_invoiced={} in_global={} expired={} lost={} duplicated={} orphans={} refunds={} credited={} emails={} emailed={} kills={} faults={}",
            v.payments,
            v.stamped,
            v.self_invoiced,
            v.in_global,
            v.expired,
            v.lost,
            v.duplicated,
            v.orphans,
            v.refunds,
            v.credited,
            v.emails,
            v.emailed,
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
    "arca_authorized",
    "arca_held",
];

/// Compares what was sent, what we recorded (`ours`, as `invoices list` shows it) and what the
/// PAC issued. `not_terminal` lists
/// rows still moving (e.g. `outbox unknown: 2`), each one a problem.
pub fn check(
    sent: &[SentPayment],
    ours: &[InvoiceRow],
    pac: &[PacStamp],
    not_terminal: &[(String, i64)],
) -> Verdict {
    check_with_globals(sent, ours, &Globals::default(), pac, not_terminal)
}

/// [`check`], with the facturas globales: a sale counts once, either by its own stamped
/// document or by its membership in exactly one stamped global; in two documents of any kind
/// it is duplicated.
pub fn check_with_globals(
    sent: &[SentPayment],
    ours: &[InvoiceRow],
    globals: &Globals,
    pac: &[PacStamp],
    not_terminal: &[(String, i64)],
) -> Verdict {
    let mut v = Verdict {
        payments: sent.len(),
        ..Verdict::default()
    };
    let mut by_payment: HashMap<(&str, &str), Vec<&InvoiceRow>> = HashMap::new();
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
    let global_uuids = globals.documents.iter().filter_map(|g| g.uuid.as_deref());
    let egreso_uuids = globals.egresos.iter().filter_map(|e| e.uuid.as_deref());
    for u in ours
        .iter()
        .filter_map(|r| r.uuid.as_deref())
        .chain(global_uuids)
        .chain(egreso_uuids)
        .filter(|u| !u.is_empty())
    {
        *our_uuids.entry(u.to_uppercase()).or_default() += 1;
    }
    let mut members: HashMap<(&str, &str), Vec<i64>> = HashMap::new();
    for m in &globals.members {
        members
            .entry((m.provider.as_str(), m.payment_id.as_str()))
            .or_default()
            .push(m.global_id);
    }
    let global_docs: HashMap<i64, &GlobalDoc> =
        globals.documents.iter().map(|g| (g.id, g)).collect();

    let mut sent_keys = HashSet::new();
    for p in sent {
        sent_keys.insert((p.provider.as_str(), p.payment_id.as_str()));
        let name = format!("{} {}", p.provider, p.payment_id);
        let rows = by_payment
            .get(&(p.provider.as_str(), p.payment_id.as_str()))
            .map_or(&[][..], Vec::as_slice);
        let stamped: Vec<&str> = rows
            .iter()
            .filter(|r| r.status == DocumentState::Stamped)
            .filter_map(|r| r.uuid.as_deref().filter(|u| !u.is_empty()))
            .collect();
        let pac_stamps = pac_by_key.get(p.stamp_key.as_str()).map_or(0, Vec::len);
        let in_globals = members
            .get(&(p.provider.as_str(), p.payment_id.as_str()))
            .map_or(&[][..], Vec::as_slice);
        if stamped.len() + in_globals.len() > 1 {
            v.duplicated += stamped.len() + in_globals.len() - 1;
            v.problems.push(format!(
                "{name}: in {} documents: its own {stamped:?}, globals {in_globals:?}",
                stamped.len() + in_globals.len()
            ));
        } else if let [g] = in_globals {
            match global_docs.get(g) {
                Some(GlobalDoc {
                    status,
                    uuid: Some(uuid),
                    ..
                }) if status == "stamped" && pac_uuids.contains(&uuid.to_uppercase()) => {
                    v.in_global += 1;
                }
                other => {
                    v.lost += 1;
                    v.problems.push(format!(
                        "{name}: in factura global #{g}, which is {}",
                        other.map_or_else(
                            || "not in our records".to_owned(),
                            |d| format!("{} with UUID {:?}", d.status, d.uuid)
                        )
                    ));
                }
            }
            if p.kind != SaleKind::Global {
                v.problems.push(format!(
                    "{name}: a {:?} sale ended in factura global #{g}",
                    p.kind
                ));
            }
        } else {
            if p.kind == SaleKind::Global {
                v.problems
                    .push(format!("{name}: not in any factura global"));
            }
            own(&mut v, p, &name, rows, &stamped, pac_stamps, &pac_uuids);
        }
        if let Some(amount) = &p.refund {
            super::credit::credit(
                &mut v,
                &name,
                amount,
                &stamped,
                &globals.egresos,
                &pac_uuids,
            );
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
    rest(&mut v, sent_keys, ours, pac, &our_uuids, not_terminal);
    v
}

/// How a sale that is in no global counts: by its own document.
fn own(
    v: &mut Verdict,
    p: &SentPayment,
    name: &str,
    rows: &[&InvoiceRow],
    stamped: &[&str],
    pac_stamps: usize,
    pac_uuids: &HashSet<String>,
) {
    match (rows, stamped) {
        ([], _) => {
            v.lost += 1;
            v.problems.push(format!("{name}: not in our records"));
        }
        ([r], []) if p.near_window && r.status == DocumentState::Expired && pac_stamps == 0 => {
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
        (_, [_]) => {
            v.stamped += 1;
            if p.kind == SaleKind::Portal {
                v.self_invoiced += 1;
            }
        }
        // Two stamped rows are counted with the globals, above.
        (_, _) => {}
    }
}

/// What is not about one sale: UUIDs on two rows, stamps nobody recorded, records nobody
/// sent, folios, rows still moving.
fn rest(
    v: &mut Verdict,
    sent_keys: HashSet<(&str, &str)>,
    ours: &[InvoiceRow],
    pac: &[PacStamp],
    our_uuids: &HashMap<String, usize>,
    not_terminal: &[(String, i64)],
) {
    for (uuid, n) in our_uuids {
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
}

/// The numbered folios of each serie must be exactly 1..=the highest: a number given twice
/// (two documents with one folio) or skipped (a number taken and lost, e.g. by a worker killed
/// between taking it and writing it) is a problem. Every payment of a chaos run is numbered by
/// the workers (no explicit folios), and a folio once written stays, whatever the row becomes.
fn folio_problems(ours: &[InvoiceRow]) -> Vec<String> {
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
    use crate::domain::PaymentStatus;

    fn sent(n: usize) -> Vec<SentPayment> {
        (0..n)
            .map(|i| SentPayment {
                provider: "stripe".into(),
                payment_id: format!("pi_{i}"),
                stamp_key: format!("key-{i}"),
                near_window: false,
                kind: SaleKind::Nominative,
                refund: None,
            })
            .collect()
    }

    fn ours(n: usize) -> Vec<InvoiceRow> {
        (0..n)
            .map(|i| InvoiceRow {
                provider: "stripe".into(),
                payment_id: format!("pi_{i}"),
                status: DocumentState::Stamped.into(),
                uuid: Some(format!("UUID-{i}")),
                serie: Some("A".into()),
                folio: Some((i + 1).to_string()),
                ..InvoiceRow::default()
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
            "payments=3 stamped=3 self_invoiced=0 in_global=0 expired=0 lost=0 duplicated=0 orphans=0 refunds=0 credited=0 emails=0 emailed=0 kills=3 faults=7"
        );
    }

    #[test]
    fn a_near_window_payment_may_expire_only_if_the_pac_never_stamped_it() {
        let mut s = sent(3);
        s[1].near_window = true;
        s[2].near_window = true;
        let mut o = ours(3);
        for r in &mut o[1..] {
            r.status = DocumentState::Expired.into();
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
        assert!(line(&v).contains("stamped=1 self_invoiced=0 in_global=0 expired=1 lost=1"));
        // An expired payment not dated at the window's edge is lost whatever the PAC holds.
        let v = check(&sent(3), &o, &pac(1), &[]);
        assert_eq!((v.expired, v.lost), (0, 2), "{v:?}");
    }

    #[test]
    fn a_payment_missing_or_not_stamped_is_lost() {
        let mut o = ours(3);
        o.remove(2);
        o[1].status = DocumentState::Unknown.into();
        o[1].uuid = None;
        let p = pac(1);
        let v = check(&sent(3), &o, &p, &[]);
        assert!(!v.is_ok());
        assert_eq!((v.stamped, v.lost, v.orphans), (1, 2, 0), "{v:?}");
        assert!(line(&v).contains("stamped=1 self_invoiced=0 in_global=0 expired=0 lost=2"));
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

    /// Three sales without an RFC: one invoiced at the portal (its own stamp), two in global
    /// #100 (stamped as `UUID-G`).
    fn without_rfc() -> (Vec<SentPayment>, Vec<InvoiceRow>, Globals, Vec<PacStamp>) {
        let mut s = sent(3);
        s[0].kind = SaleKind::Portal;
        s[1].kind = SaleKind::Global;
        s[2].kind = SaleKind::Global;
        let mut o = ours(3);
        for r in &mut o[1..] {
            r.status = PaymentStatus::InGlobal.into();
            r.uuid = None;
            r.folio = None;
        }
        let g = Globals {
            members: (1..3)
                .map(|i| Member {
                    provider: "stripe".into(),
                    payment_id: format!("pi_{i}"),
                    global_id: 100,
                })
                .collect(),
            documents: vec![GlobalDoc {
                id: 100,
                status: "stamped".into(),
                uuid: Some("UUID-G".into()),
            }],
            egresos: Vec::new(),
        };
        let mut p = pac(1);
        p.push(PacStamp {
            uuid: "UUID-G".into(),
            customid: Some("key-global".into()),
        });
        (s, o, g, p)
    }

    #[test]
    fn sales_without_rfc_count_once_at_the_portal_or_in_one_stamped_global() {
        let (s, o, g, p) = without_rfc();
        let v = check_with_globals(&s, &o, &g, &p, &[]);
        assert!(v.is_ok(), "{v:?}");
        assert_eq!(
            (v.stamped, v.self_invoiced, v.in_global),
            (1, 1, 2),
            "{v:?}"
        );
        assert!(line(&v).starts_with("payments=3 stamped=1 self_invoiced=1 in_global=2 expired=0"));
        // The global not stamped (yet, or ever): its sales have no CFDI.
        let mut pending = g.clone();
        pending.documents[0].status = "failed".into();
        pending.documents[0].uuid = None;
        let v = check_with_globals(&s, &o, &pending, &p[..1], &[]);
        assert_eq!((v.in_global, v.lost), (0, 2), "{v:?}");
        assert!(!v.is_ok());
        // A portal customer's sale left waiting: lost.
        let mut o2 = o;
        o2[0].status = PaymentStatus::AwaitingGlobal.into();
        o2[0].uuid = None;
        let v = check_with_globals(&s, &o2, &g, &p[1..], &[]);
        assert_eq!((v.stamped, v.lost), (0, 1), "{v:?}");
    }

    #[test]
    fn a_sale_in_two_documents_is_duplicated() {
        let (s, o, mut g, mut p) = without_rfc();
        // Invoiced at the portal and also put in the global.
        g.members.push(Member {
            provider: "stripe".into(),
            payment_id: "pi_0".into(),
            global_id: 100,
        });
        let v = check_with_globals(&s, &o, &g, &p, &[]);
        assert_eq!(v.duplicated, 1, "{v:?}");
        assert!(!v.is_ok());
        // In two globals.
        let (s, o, mut g, _) = without_rfc();
        g.members.push(Member {
            provider: "stripe".into(),
            payment_id: "pi_1".into(),
            global_id: 101,
        });
        g.documents.push(GlobalDoc {
            id: 101,
            status: "stamped".into(),
            uuid: Some("UUID-G2".into()),
        });
        p.push(PacStamp {
            uuid: "UUID-G2".into(),
            customid: Some("key-global-2".into()),
        });
        let v = check_with_globals(&s, &o, &g, &p, &[]);
        assert_eq!(v.duplicated, 1, "{v:?}");
        assert!(
            v.problems.iter().any(|m| m.contains("in 2 documents")),
            "{v:?}"
        );
        // A global's stamp is ours, not an orphan.
        assert_eq!(v.orphans, 0, "{v:?}");
    }

    #[test]
    fn a_record_nobody_sent_fails_the_run() {
        let v = check(&sent(1), &ours(2), &pac(2), &[]);
        assert!(!v.is_ok(), "{v:?}");
    }
}
