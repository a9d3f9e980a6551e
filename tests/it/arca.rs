//! Argentina (issue 21): ARCA vouchers exactly once, over real HTTP against the sandbox ARCA,
//! on both backends. The number is the identity: a lost answer is recovered by consulting it,
//! ARCA down while an outcome is unknown sends nothing new, two drainers on one database number
//! a sequence 1..N with no gap, and the sandbox refuses what WSFEv1 refuses.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use autofactura::arca::model::codes;
use autofactura::arca::wsfe::{Request, Solicit};
use autofactura::arca::{
    Alicuota, Auth, CbteTipo, DocTipo, Environment, IssueError, Issuer, Outcome, VoucherInput,
    Wsfe, WsfeError,
};
use autofactura::arcasim::server::{ArcaSimHandle, start};
use autofactura::arcasim::{ArcaSim, SimVoucher};
use autofactura::domain::ArcaVoucherState;
use autofactura::store::{self, ArcaSeq, ArcaTicketRow, Db, NewReservation, Reserve};
use rust_decimal::Decimal;
use support::{Backend, TestApp, exec_sql, spawn_app};

const CUIT: i64 = 20_267_565_393;
const PTO_VTA: i32 = 7;
const TIMEOUT: Duration = Duration::from_secs(5);

/// A Factura B to an anonymous consumidor final for `cents`, IVA 21 % included.
pub(crate) fn sale(cents: i64) -> VoucherInput {
    VoucherInput::consumidor_final(Decimal::new(cents, 2), Alicuota::Veintiuno)
}

pub(crate) struct Rig {
    pub(crate) app: TestApp,
    pub(crate) sim: ArcaSimHandle,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// A WSFEv1 client of the sandbox whose WSFEv1 endpoint is `url`.
fn wsfe_at(url: &str) -> Wsfe {
    let auth = Auth {
        token: "sandbox-token".into(),
        sign: "sandbox-sign".into(),
        cuit: CUIT,
    };
    Wsfe::new(url, auth, TIMEOUT).expect("client")
}

fn wsfe(sim: &ArcaSimHandle) -> Wsfe {
    wsfe_at(&sim.wsfe_url())
}

pub(crate) fn issuer(db: &Db, sim: &ArcaSimHandle) -> Issuer {
    Issuer::new(
        db.clone(),
        wsfe(sim),
        Environment::Homologacion,
        PTO_VTA,
        CbteTipo::FacturaB,
        TIMEOUT,
    )
}

pub(crate) async fn rig(b: Backend) -> Option<Rig> {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    let sim = start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA");
    let app = spawn_app(b).await?;
    Some(Rig {
        app,
        sim,
        http: reqwest::Client::new(),
        _dir: dir,
    })
}

impl Rig {
    pub(crate) fn issuer(&self) -> Issuer {
        issuer(&self.app.db, &self.sim)
    }

    pub(crate) async fn faults(&self, spec: &str) {
        let r = self
            .http
            .put(format!("{}/_sim/faults", self.sim.url()))
            .body(spec.to_owned())
            .send()
            .await
            .expect("sim");
        assert!(r.status().is_success(), "faults {spec}: {}", r.status());
    }

    /// `GET /_sim/{what}` of the sandbox, as JSON.
    async fn sim_get<T: serde::de::DeserializeOwned>(&self, what: &str) -> T {
        let url = format!("{}/_sim/{what}", self.sim.url());
        let r = self.http.get(url).send().await.expect("sim");
        r.json().await.expect("sim json")
    }

    /// What the sandbox authorized.
    async fn vouchers(&self) -> Vec<SimVoucher> {
        self.sim_get("vouchers").await
    }

    /// Each voucher at the sandbox: its number and total.
    pub(crate) async fn totals(&self) -> Vec<(i64, Decimal)> {
        let v = self.vouchers().await;
        v.iter().map(|v| (v.number, v.input.imp_total)).collect()
    }

    /// `FECAESolicitar` requests the sandbox received.
    pub(crate) async fn solicits(&self) -> u64 {
        let v: serde_json::Value = self.sim_get("stats").await;
        v["solicits"].as_u64().expect("solicits")
    }

    /// With `fault` set, `key` is sent and its outcome stays unknown at `number`.
    pub(crate) async fn lose(&self, fault: &str, key: &str, input: &VoucherInput, number: i64) {
        self.faults(fault).await;
        let o = self.issuer().issue(key, input).await.expect("issue");
        assert!(
            matches!(o, Outcome::Indeterminate { number: n, .. } if n == number),
            "{key}: {o:?}"
        );
    }

    pub(crate) async fn state_of(&self, key: &str) -> Option<ArcaVoucherState> {
        let v = self.app.db.arca_voucher(key).await.expect("read");
        v.map(|v| v.state)
    }
}

fn seq() -> ArcaSeq<'static> {
    ArcaSeq {
        environment: "homologacion",
        cuit: CUIT,
        pto_vta: PTO_VTA,
        cbte_tipo: CbteTipo::FacturaB.code(),
    }
}

pub(crate) fn authorized(o: &Outcome) -> (i64, String, bool) {
    match o {
        Outcome::Authorized {
            number,
            cae,
            recovered,
        } => (*number, cae.code.clone(), *recovered),
        other => panic!("expected authorized, got {other:?}"),
    }
}

async fn a_voucher_is_authorized_once_with_its_cae(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    let first = i.issue("mp:1001", &sale(12_100)).await.expect("issue");
    let (number, cae, recovered) = authorized(&first);
    assert_eq!((number, recovered), (1, false));
    assert_eq!(cae.len(), 14, "{cae}");
    // Again, from another instance: the stored outcome, nothing sent.
    let again = issuer(&r.app.db, &r.sim)
        .issue("mp:1001", &sale(12_100))
        .await
        .expect("issue again");
    assert_eq!(again, first);
    assert_eq!(r.solicits().await, 1);
    let sim = r.vouchers().await;
    assert_eq!(sim.len(), 1);
    assert_eq!((sim[0].number, sim[0].cae.as_str()), (1, cae.as_str()));
    // The key with another input is refused before anything is sent.
    let e = i
        .issue("mp:1001", &sale(24_200))
        .await
        .expect_err("mismatch");
    assert!(matches!(e, IssueError::Mismatch(_)), "{e}");
    assert!(e.to_string().contains("ARCA_INPUT_IDEMPOTENCY_MISMATCH"));
    // An input WSFEv1 would refuse reserves nothing.
    let mut bad = sale(5_000);
    bad.imp_total += Decimal::ONE;
    let e = i.issue("mp:1002", &bad).await.expect_err("invalid");
    assert!(
        matches!(&e, IssueError::Invalid(m) if m[0].code == codes::TOTAL),
        "{e}"
    );
    assert_eq!(r.state_of("mp:1002").await, None);
    let (number, _, _) = authorized(&i.issue("mp:1003", &sale(5_000)).await.expect("issue"));
    assert_eq!(number, 2);
    assert_eq!(r.solicits().await, 2);
}

async fn a_lost_answer_is_recovered_by_consulting_its_number(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    r.lose("lose_next=1", "mp:2001", &sale(12_100), 1).await;
    assert_eq!(r.state_of("mp:2001").await, Some(ArcaVoucherState::Unknown));
    assert_eq!(r.vouchers().await.len(), 1, "ARCA authorized it");
    // The same sale again: its number is consulted, not sent again.
    let (number, cae, recovered) =
        authorized(&i.issue("mp:2001", &sale(12_100)).await.expect("retry"));
    assert_eq!((number, recovered), (1, true));
    assert_eq!(r.solicits().await, 1, "nothing was sent again");
    let sim = r.vouchers().await;
    assert_eq!(sim.len(), 1, "one voucher");
    assert_eq!(sim[0].cae, cae, "one CAE");

    // Lost again, and the next sale comes first: it settles the lost one, then takes 3.
    r.lose("lose_next=1", "mp:2002", &sale(3_000), 2).await;
    let (number, _, _) = authorized(&i.issue("mp:2003", &sale(4_000)).await.expect("next"));
    assert_eq!(number, 3);
    assert_eq!(
        r.state_of("mp:2002").await,
        Some(ArcaVoucherState::Authorized)
    );
    let (number, _, recovered) =
        authorized(&i.issue("mp:2002", &sale(3_000)).await.expect("retry"));
    assert_eq!((number, recovered), (2, true));
    assert_eq!(r.solicits().await, 3);
    let numbers: Vec<i64> = r.vouchers().await.iter().map(|v| v.number).collect();
    assert_eq!(numbers, [1, 2, 3]);
}

async fn arca_down_while_a_reservation_is_unknown_sends_nothing_new(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    // A fresh sequence with ARCA down: its next number cannot be learnt, nothing is reserved.
    r.faults("down=true").await;
    let e = i.issue("mp:3000", &sale(1_000)).await.expect_err("down");
    assert!(matches!(e, IssueError::Unavailable(_)), "{e}");
    assert_eq!(r.state_of("mp:3000").await, None);
    r.faults("none").await;
    authorized(&i.issue("mp:3000", &sale(1_000)).await.expect("issue"));

    r.lose("lose_next=1", "mp:3001", &sale(12_100), 2).await;
    r.faults("down=true").await;
    let sent = r.solicits().await;
    for _ in 0..3 {
        let blocked = i.issue("mp:3002", &sale(5_000)).await.expect("issue");
        assert!(
            matches!(&blocked, Outcome::Blocked { by, number: 2, .. } if by == "mp:3001"),
            "{blocked:?}"
        );
        let still = i.issue("mp:3001", &sale(12_100)).await.expect("issue");
        assert!(
            matches!(still, Outcome::Indeterminate { number: 2, .. }),
            "{still:?}"
        );
    }
    assert_eq!(
        r.solicits().await,
        sent,
        "nothing was sent while ARCA was down"
    );
    assert_eq!(r.state_of("mp:3002").await, None, "nothing was reserved");

    // ARCA back: the unknown one is found, then the blocked sale takes the next number.
    r.faults("none").await;
    let (number, _, _) = authorized(&i.issue("mp:3002", &sale(5_000)).await.expect("issue"));
    assert_eq!(number, 3);
    let (number, _, recovered) =
        authorized(&i.issue("mp:3001", &sale(12_100)).await.expect("issue"));
    assert_eq!((number, recovered), (2, true));

    // A send that never reached ARCA (down at that moment): unknown, then sent again at the
    // same number once ARCA proves it empty and next.
    r.lose("down=true", "mp:3003", &sale(7_000), 4).await;
    r.faults("none").await;
    let (number, _, recovered) =
        authorized(&i.issue("mp:3003", &sale(7_000)).await.expect("issue"));
    assert_eq!((number, recovered), (4, false));
    let numbers: Vec<i64> = r.vouchers().await.iter().map(|v| v.number).collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
}

async fn a_foreign_voucher_on_our_number_is_a_conflict(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    authorized(&i.issue("mp:5001", &sale(1_000)).await.expect("issue"));
    // Our send of number 2 never arrives; another system on the same punto de venta takes 2.
    r.lose("down=true", "mp:5002", &sale(2_000), 2).await;
    r.faults("none").await;
    let foreign = wsfe(&r.sim)
        .solicit(&request(2, sale(9_900)))
        .await
        .expect("answer");
    assert!(matches!(foreign, Solicit::Approved { .. }), "{foreign:?}");
    let sent = r.solicits().await;
    for _ in 0..2 {
        let c = i.issue("mp:5002", &sale(2_000)).await.expect("issue");
        assert!(
            matches!(&c, Outcome::Conflict { number: 2, detail } if detail.contains("DocTipo 99")),
            "{c:?}"
        );
    }
    assert_eq!(r.solicits().await, sent, "a conflict is never resent");
    assert_eq!(
        r.state_of("mp:5002").await,
        Some(ArcaVoucherState::Conflict)
    );
    // The sequence goes on after ARCA's last.
    let (number, _, _) = authorized(&i.issue("mp:5003", &sale(3_000)).await.expect("issue"));
    assert_eq!(number, 3);
    // Another system takes 4 while we count on it: our first send of 4 is refused (10016), the
    // number is consulted, and what holds it is not ours.
    let foreign = wsfe(&r.sim).solicit(&request(4, sale(8_800))).await;
    assert!(
        matches!(foreign, Ok(Solicit::Approved { .. })),
        "{foreign:?}"
    );
    let c = i.issue("mp:5004", &sale(4_000)).await.expect("issue");
    assert!(matches!(c, Outcome::Conflict { number: 4, .. }), "{c:?}");
    let (number, _, _) = authorized(&i.issue("mp:5005", &sale(5_000)).await.expect("issue"));
    assert_eq!(number, 5);
    let ours: Vec<(String, i64)> = r
        .app
        .db
        .arca_vouchers(seq())
        .await
        .expect("rows")
        .into_iter()
        .filter(|v| v.state == ArcaVoucherState::Authorized)
        .map(|v| (v.key, v.number))
        .collect();
    let expected = [("mp:5001", 1), ("mp:5003", 3), ("mp:5005", 5)];
    assert_eq!(ours, expected.map(|(k, n)| (k.to_owned(), n)));
}

async fn a_reservation_whose_sender_died_is_sent_again_at_its_number(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    authorized(&i.issue("mp:6001", &sale(1_000)).await.expect("issue"));
    // An instance reserved number 2 and died before sending it (its window still open).
    let input = sale(2_000);
    let text = serde_json::to_string(&input).expect("json");
    let hash = input.hash();
    let today = (chrono::Utc::now() - chrono::Duration::hours(3)).date_naive();
    let reserve = |until| NewReservation {
        key: "mp:6002",
        input_hash: &hash,
        input: &text,
        today: "2000-01-01",
        sending_until: until,
        landing_until: until + chrono::Duration::minutes(2),
    };
    let in_flight = reserve(chrono::Utc::now() + chrono::Duration::minutes(1));
    let reserved = r.app.db.arca_reserve(seq(), &in_flight, None).await;
    assert!(
        matches!(&reserved, Ok(Reserve::Reserved(v)) if v.number == 2
            && v.cbte_fch == today.to_string()),
        "{reserved:?}"
    );
    // While its sender may still be talking to ARCA, nobody asks about it or takes 3.
    assert_eq!(
        i.issue("mp:6003", &sale(3_000)).await.expect("issue"),
        Outcome::Busy
    );
    assert_eq!(
        i.issue("mp:6002", &input).await.expect("issue"),
        Outcome::Busy
    );
    let unsettled = r
        .app
        .db
        .arca_reserve(
            seq(),
            &NewReservation {
                key: "mp:6003",
                ..in_flight.clone()
            },
            Some(9),
        )
        .await;
    assert!(
        matches!(unsettled, Ok(Reserve::Unsettled(ref v)) if v.key == "mp:6002"),
        "{unsettled:?}"
    );
    assert_eq!(r.solicits().await, 1);
    // Its window over: ARCA proves 2 empty and next, so the stored request goes at 2.
    exec_sql(
        &r.app.db,
        "UPDATE arca_vouchers SET sending_until = NULL WHERE key = 'mp:6002'",
    )
    .await;
    let (number, _, _) = authorized(&i.issue("mp:6003", &sale(3_000)).await.expect("issue"));
    assert_eq!(number, 3);
    let (number, _, recovered) = authorized(&i.issue("mp:6002", &input).await.expect("issue"));
    assert_eq!((number, recovered), (2, false));
    let at_arca = r.totals().await;
    assert_eq!(
        at_arca,
        [
            (1, Decimal::new(1_000, 2)),
            (2, Decimal::new(2_000, 2)),
            (3, Decimal::new(3_000, 2))
        ]
    );
}

async fn a_voucher_arca_refuses_is_rejected_and_its_number_left_empty(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    // Another system dated its voucher 1 three days ahead: ours, dated today, cannot follow.
    let mut ahead = request(1, sale(9_900));
    ahead.cbte_fch += chrono::Duration::days(3);
    let ahead = wsfe(&r.sim).solicit(&ahead).await.expect("answer");
    assert!(matches!(ahead, Solicit::Approved { .. }), "{ahead:?}");
    let refused = i.issue("mp:7001", &sale(1_000)).await.expect("issue");
    assert!(
        matches!(&refused, Outcome::Rejected { number: 2, errors } if errors[0].code == codes::NOT_NEXT),
        "{refused:?}"
    );
    assert_eq!(
        r.state_of("mp:7001").await,
        Some(ArcaVoucherState::Rejected)
    );
    // Settled: asked again, the same rejection, nothing sent.
    let sent = r.solicits().await;
    assert_eq!(
        i.issue("mp:7001", &sale(1_000)).await.expect("issue"),
        refused
    );
    assert_eq!(r.solicits().await, sent);
    let at_2 = wsfe(&r.sim).consult(PTO_VTA, CbteTipo::FacturaB, 2).await;
    assert_eq!(at_2.expect("consult"), None, "a rejection uses no number");
}

/// Issues `key` until it is settled, as a drainer would (waiting out busy, blocked and
/// unknown turns, and ARCA down when the next number must be read from it).
async fn drain_one(i: &Issuer, key: &str, input: &VoucherInput) -> Outcome {
    for _ in 0..800 {
        match i.issue(key, input).await {
            Ok(
                o @ (Outcome::Authorized { .. }
                | Outcome::Rejected { .. }
                | Outcome::Conflict { .. }),
            ) => return o,
            Ok(_) | Err(IssueError::Unavailable(_)) => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(e) => panic!("{key}: {e}"),
        }
    }
    panic!("{key} never settled");
}

async fn two_drainers_on_one_database_number_consecutively(b: Backend) {
    drain_two(b, false).await;
}

async fn two_drainers_through_outages_and_lost_answers_issue_each_sale_once(b: Backend) {
    drain_two(b, true).await;
}

/// Two instances on one database drain 24 sales of one sequence, six answers lost on the way
/// (and with `outages`, ARCA down a third of the time): each sale ends with one CAE, numbered
/// 1..24 with no gap and no duplicate, and the lost answers were recovered by consulting.
async fn drain_two(b: Backend, outages: bool) {
    let Some(r) = rig(b).await else { return };
    let second_db = store::connect(&r.app.settings.database)
        .await
        .expect("a second instance's pool");
    const SALES: i64 = 24;
    r.faults("lose_next=6").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = outages.then(|| {
        let (stop, http, url) = (stop.clone(), r.http.clone(), r.sim.url().to_owned());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for (spec, ms) in [("down=true", 60), ("down=false", 120)] {
                    let put = http.put(format!("{url}/_sim/faults")).body(spec);
                    assert!(put.send().await.expect("sim").status().is_success());
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
        })
    });
    let drainers = [r.issuer(), issuer(&second_db, &r.sim)]
        .into_iter()
        .enumerate()
        .map(|(n, i)| {
            tokio::spawn(async move {
                let mut out = Vec::new();
                for s in (0..SALES).filter(|s| s % 2 == n as i64) {
                    let key = format!("mp:4{s:03}");
                    let o = drain_one(&i, &key, &sale(1_000 + s)).await;
                    out.push((key, authorized(&o)));
                }
                out
            })
        })
        .collect::<Vec<_>>();
    let mut issued = Vec::new();
    for d in drainers {
        issued.extend(d.await.expect("drainer"));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(f) = flipper {
        f.await.expect("flipper");
    }
    let mut numbers: Vec<i64> = issued.iter().map(|(_, (n, _, _))| *n).collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (1..=SALES).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    let sim = r.vouchers().await;
    assert_eq!(sim.len() as i64, SALES, "one voucher per sale at ARCA");
    for (key, (number, cae, _)) in &issued {
        let v = sim.iter().find(|v| v.number == *number).expect("at ARCA");
        assert_eq!(&v.cae, cae, "{key}: the CAE ARCA gave number {number}");
        let cents: i64 = key[4..].parse().expect("sale");
        assert_eq!(
            v.input.imp_total,
            Decimal::new(1_000 + cents, 2),
            "{key} at {number}"
        );
    }
    let rows = r.app.db.arca_vouchers(seq()).await.expect("rows");
    assert_eq!(rows.len() as i64, SALES);
    assert!(rows.iter().all(|v| v.state == ArcaVoucherState::Authorized));
    let recovered = rows.iter().filter(|v| v.recovered).count();
    // At least the six lost on purpose; a send that timed out under load is one more.
    assert!(
        recovered >= 6,
        "each lost answer recovered by consulting its number: {recovered}"
    );
    second_db.close().await;
}

async fn leases_and_tickets_are_kept_in_the_database(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let db = &r.app.db;
    let ttl = chrono::Duration::seconds(30);
    assert!(db.arca_lock("sequence:x", "a", ttl).await.expect("lock"));
    assert!(!db.arca_lock("sequence:x", "b", ttl).await.expect("lock"));
    db.arca_unlock("sequence:x", "b").await.expect("unlock");
    assert!(
        !db.arca_lock("sequence:x", "b", ttl).await.expect("lock"),
        "not b's to free"
    );
    db.arca_unlock("sequence:x", "a").await.expect("unlock");
    assert!(db.arca_lock("sequence:x", "b", ttl).await.expect("lock"));
    // An expired lease is taken over.
    assert!(db.arca_lock("sequence:y", "a", -ttl).await.expect("lock"));
    assert!(
        db.arca_lock("sequence:y", "b", ttl)
            .await
            .expect("take over")
    );
    assert!(!db.arca_lock("sequence:y", "a", ttl).await.expect("lock"));

    let now = chrono::Utc::now();
    let ticket = ArcaTicketRow {
        token: "PD94bWwg".into(),
        sign: "c2lnbg==".into(),
        generated_at: now,
        expires_at: now + chrono::Duration::hours(12),
    };
    db.arca_save_ticket("homologacion", "wsfe", "ab12", &ticket)
        .await
        .expect("save");
    // Another pool (a restarted instance) finds it.
    let other = store::connect(&r.app.settings.database)
        .await
        .expect("pool");
    let read = other
        .arca_ticket("homologacion", "wsfe", "ab12")
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(
        (read.token.as_str(), read.sign.as_str()),
        ("PD94bWwg", "c2lnbg==")
    );
    assert!((read.expires_at - ticket.expires_at).num_seconds().abs() < 1);
    other.close().await;
}

on_both_backends!(
    a_voucher_is_authorized_once_with_its_cae,
    a_lost_answer_is_recovered_by_consulting_its_number,
    arca_down_while_a_reservation_is_unknown_sends_nothing_new,
    two_drainers_on_one_database_number_consecutively,
    two_drainers_through_outages_and_lost_answers_issue_each_sale_once,
    a_foreign_voucher_on_our_number_is_a_conflict,
    a_voucher_arca_refuses_is_rejected_and_its_number_left_empty,
    a_reservation_whose_sender_died_is_sent_again_at_its_number,
    leases_and_tickets_are_kept_in_the_database,
);

fn request(number: i64, input: VoucherInput) -> Request {
    Request {
        pto_vta: PTO_VTA,
        cbte_tipo: CbteTipo::FacturaB,
        number,
        cbte_fch: (chrono::Utc::now() - chrono::Duration::hours(3)).date_naive(),
        input,
    }
}

fn rejected_codes(s: &Solicit) -> Vec<i32> {
    match s {
        Solicit::Rejected {
            errors,
            observations,
        } => errors.iter().chain(observations).map(|e| e.code).collect(),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_enforces_numbering_and_amounts_and_keeps_its_vouchers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("arcasim.json");
    let sim = start(Arc::new(ArcaSim::open(&path).expect("sim")), "127.0.0.1:0").expect("start");
    let w = wsfe(&sim);
    let tipo = CbteTipo::FacturaB;
    assert_eq!(w.last_authorized(PTO_VTA, tipo).await.expect("last"), 0);
    let skip = w.solicit(&request(2, sale(1_000))).await.expect("answer");
    assert_eq!(rejected_codes(&skip), [codes::NOT_NEXT]);
    let mut bad = sale(1_000);
    bad.imp_total += Decimal::ONE;
    bad.iva[0].importe -= Decimal::new(1, 2);
    let bad = w.solicit(&request(1, bad)).await.expect("answer");
    assert_eq!(rejected_codes(&bad), [codes::TOTAL, codes::IVA_SUM]);
    let mut stale = request(1, sale(1_000));
    stale.cbte_fch -= chrono::Duration::days(6);
    let stale = w.solicit(&stale).await.expect("answer");
    assert_eq!(rejected_codes(&stale), [codes::DATE_WINDOW]);
    let mut class_a = request(1, sale(1_000));
    class_a.cbte_tipo = CbteTipo::FacturaA;
    let a = w.solicit(&class_a).await.expect("answer");
    assert_eq!(
        rejected_codes(&a),
        [codes::CLASS_A_NEEDS_CUIT, codes::CONDICION_IVA]
    );
    let Solicit::Approved { cae, .. } = w.solicit(&request(1, sale(1_000))).await.expect("answer")
    else {
        panic!("number 1 is next")
    };
    let twice = w.solicit(&request(1, sale(1_000))).await.expect("answer");
    assert_eq!(
        rejected_codes(&twice),
        [codes::NOT_NEXT],
        "a number holds one voucher"
    );
    assert_eq!(w.consult(PTO_VTA, tipo, 2).await.expect("consult"), None);
    let found = w
        .consult(PTO_VTA, tipo, 1)
        .await
        .expect("consult")
        .expect("found");
    assert_eq!(found.cae, cae);
    assert!(found.matches(&request(1, sale(1_000))));
    assert!(!found.matches(&request(1, sale(1_001))));
    // Class A goes to a registered CUIT; the other sequence starts at 1.
    let mut ri = sale(1_000);
    ri.doc_tipo = DocTipo::Cuit;
    ri.doc_nro = 30_000_000_007;
    ri.condicion_iva_receptor = 1;
    let mut class_a = request(1, ri);
    class_a.cbte_tipo = CbteTipo::FacturaA;
    assert!(matches!(
        w.solicit(&class_a).await.expect("answer"),
        Solicit::Approved { .. }
    ));
    sim.stop().await;

    // Restarted on the same file: the vouchers and the numbering are still there.
    let sim = start(Arc::new(ArcaSim::open(&path).expect("sim")), "127.0.0.1:0").expect("start");
    let w = wsfe(&sim);
    assert_eq!(w.last_authorized(PTO_VTA, tipo).await.expect("last"), 1);
    assert_eq!(
        w.last_authorized(PTO_VTA, CbteTipo::FacturaA)
            .await
            .expect("last"),
        1
    );
    let again = w.solicit(&request(1, sale(1_000))).await.expect("answer");
    assert_eq!(rejected_codes(&again), [codes::NOT_NEXT]);
    // Credentials without a token are refused.
    let stranger = Wsfe::new(
        &sim.wsfe_url(),
        Auth {
            token: String::new(),
            sign: "x".into(),
            cuit: CUIT,
        },
        TIMEOUT,
    )
    .expect("client");
    let e = stranger
        .last_authorized(PTO_VTA, tipo)
        .await
        .expect_err("no token");
    assert!(e.to_string().contains(&codes::AUTH.to_string()), "{e}");
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arca_sim_command_loses_an_answer_and_survives_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("arcasim.json");
    let args = [
        "--state".as_ref(),
        state.as_os_str(),
        "--faults".as_ref(),
        "lose_next=1".as_ref(),
    ];
    let (mut child, url) = support::sim::spawn_sandbox("arca-sim", &args);
    let client = |url: &str| wsfe_at(&format!("{url}/wsfev1/service.asmx"));
    let lost = client(&url).solicit(&request(1, sale(1_000))).await;
    assert!(matches!(lost, Err(WsfeError::Transport(_))), "{lost:?}");
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");

    let (mut child, url) = support::sim::spawn_sandbox("arca-sim", &args[..2]);
    let w = client(&url);
    let found = w.consult(PTO_VTA, CbteTipo::FacturaB, 1).await;
    let last = w.last_authorized(PTO_VTA, CbteTipo::FacturaB).await;
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let found = found
        .expect("consult")
        .expect("authorized before the answer was lost");
    assert!(found.matches(&request(1, sale(1_000))));
    assert_eq!(last.expect("last"), 1);
}
