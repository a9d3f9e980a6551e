//! Argentina (issue 21): `FECAESolicitar` batches (`CantReg` > 1), over real HTTP against the
//! sandbox ARCA, on both backends. Many keys of one sequence go in one request with consecutive
//! numbers; a lost answer is recovered number by number; a voucher ARCA refuses in the middle
//! is settled with its reason and the ones it left unprocessed are issued again, with no gap
//! and no duplicate.

use std::time::Duration;

use autofactura::arca::model::{CbteAsoc, codes};
use autofactura::arca::wsfe::{Request, Solicit};
use autofactura::arca::{Auth, CbteTipo, Environment, Issuer, Lookup, Outcome, VoucherInput, Wsfe};
use autofactura::domain::ArcaVoucherState;
use rust_decimal::Decimal;

use autofactura::arca::drain::Drainer;

use crate::arca::{Rig, authorized, rig, sale};
use crate::support::Backend;
use crate::support::sales::mp_notify;

const CUIT: i64 = 20_267_565_393;
const PTO_VTA: i32 = 7;
const TIMEOUT: Duration = Duration::from_secs(5);

fn wsfe(r: &Rig) -> Wsfe {
    let auth = Auth {
        token: "sandbox-token".into(),
        sign: "sandbox-sign".into(),
        cuit: CUIT,
    };
    Wsfe::new(&r.sim.wsfe_url(), auth, TIMEOUT).expect("client")
}

fn issuer_of(r: &Rig, tipo: CbteTipo) -> Issuer {
    Issuer::new(
        r.app.db.clone(),
        wsfe(r),
        Environment::Homologacion,
        PTO_VTA,
        tipo,
        TIMEOUT,
    )
}

fn today() -> chrono::NaiveDate {
    (chrono::Utc::now() - chrono::Duration::hours(3)).date_naive()
}

/// Keys `{prefix}{n}` and sales of `1_000 + n` cents, n in `range`.
fn sales(prefix: &str, range: std::ops::Range<i64>) -> Vec<(String, VoucherInput)> {
    range
        .map(|n| (format!("{prefix}{n}"), sale(1_000 + n)))
        .collect()
}

fn pairs(items: &[(String, VoucherInput)]) -> Vec<(&str, &VoucherInput)> {
    items.iter().map(|(k, i)| (k.as_str(), i)).collect()
}

/// Each voucher of `tipo` at the sandbox: its number and total.
async fn at_arca(r: &Rig, tipo: CbteTipo) -> Vec<(i64, Decimal)> {
    let url = format!("{}/_sim/vouchers", r.sim.url());
    let all: Vec<autofactura::arcasim::SimVoucher> = reqwest::get(url)
        .await
        .expect("sim")
        .json()
        .await
        .expect("json");
    all.iter()
        .filter(|v| v.cbte_tipo == tipo.code())
        .map(|v| (v.number, v.input.imp_total))
        .collect()
}

async fn a_batch_of_sales_is_authorized_in_one_request(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    let items = sales("mp:b", 0..12);
    let got = i.issue_many(&pairs(&items)).await.expect("issue");
    let numbers: Vec<i64> = got
        .iter()
        .map(|o| authorized(o.as_ref().expect("outcome")).0)
        .collect();
    assert_eq!(
        numbers,
        (1..=12).collect::<Vec<_>>(),
        "consecutive, in order"
    );
    assert_eq!(r.solicits().await, 1, "one FECAESolicitar with CantReg 12");
    let expected: Vec<(i64, Decimal)> = (0..12)
        .map(|n| (n + 1, Decimal::new(1_000 + n, 2)))
        .collect();
    assert_eq!(r.totals().await, expected);
    // Again: the stored outcomes, nothing sent; the next batch follows at 13.
    let again = i.issue_many(&pairs(&items)).await.expect("issue");
    assert_eq!(
        again
            .iter()
            .map(|o| o.as_ref().ok().cloned())
            .collect::<Vec<_>>(),
        got.iter()
            .map(|o| o.as_ref().ok().cloned())
            .collect::<Vec<_>>()
    );
    let next = sales("mp:c", 0..3);
    let got = i.issue_sales(&pairs(&next)).await.expect("issue");
    let numbers: Vec<i64> = got
        .iter()
        .map(|o| authorized(o.as_ref().expect("o")).0)
        .collect();
    assert_eq!(numbers, [13, 14, 15]);
    assert_eq!(r.solicits().await, 2);

    // ARCA's most per request (FECompTotXRequest), enforced with its code.
    r.faults("reg_x_req=2").await;
    let w = wsfe(&r);
    assert_eq!(w.max_records().await.expect("RegXReq"), 2);
    let three: Vec<Request> = (16..19)
        .map(|n| Request {
            pto_vta: PTO_VTA,
            cbte_tipo: CbteTipo::FacturaB,
            number: n,
            cbte_fch: today(),
            input: sale(500),
        })
        .collect();
    let refused = w.solicit_many(&three).await.expect("answer");
    assert_eq!(refused.len(), 3);
    for s in refused {
        assert!(
            matches!(&s, Solicit::Rejected { errors, .. } if errors[0].code == codes::CANT_REG_MAX),
            "{s:?}"
        );
    }
    assert_eq!(r.totals().await.len(), 15, "nothing authorized");
}

async fn a_lost_batch_answer_is_recovered_number_by_number(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    let items = sales("mp:l", 0..6);
    r.faults("lose_next=1").await;
    let got = i.issue_many(&pairs(&items)).await.expect("issue");
    for (n, o) in got.iter().enumerate() {
        assert!(
            matches!(o, Ok(Outcome::Indeterminate { number, .. }) if *number == n as i64 + 1),
            "{o:?}"
        );
    }
    for (k, _) in &items {
        assert_eq!(r.state_of(k).await, Some(ArcaVoucherState::Unknown));
    }
    assert_eq!(r.totals().await.len(), 6, "ARCA authorized the batch");
    // Asked again (a new sale first): each number is consulted, one CAE each, nothing resent.
    let mut again = sales("mp:m", 0..1);
    again.extend(items.iter().cloned());
    let got = i.issue_sales(&pairs(&again)).await.expect("issue");
    let sim = r.totals().await;
    let mut numbers = Vec::new();
    for (o, (k, input)) in got.iter().zip(&again) {
        let (number, _, recovered) = authorized(o.as_ref().expect("outcome"));
        assert_eq!(recovered, k.starts_with("mp:l"), "{k}");
        assert!(sim.contains(&(number, input.imp_total)), "{k} at {number}");
        numbers.push(number);
    }
    assert_eq!(numbers, [7, 1, 2, 3, 4, 5, 6]);
    assert_eq!(r.solicits().await, 2, "the lost batch was never sent again");
    assert_eq!(sim.len(), 7, "one voucher per sale");

    // A batch that never reached ARCA (down): sent again as it was, in one request, at the
    // same numbers.
    let items = sales("mp:n", 0..4);
    r.faults("down=true").await;
    let got = i.issue_many(&pairs(&items)).await.expect("issue");
    assert!(
        got.iter()
            .all(|o| matches!(o, Ok(Outcome::Indeterminate { .. }))),
        "{got:?}"
    );
    r.faults("none").await;
    let got = i.issue_many(&pairs(&items)).await.expect("issue");
    let numbers: Vec<(i64, bool)> = got
        .iter()
        .map(|o| {
            let (n, _, recovered) = authorized(o.as_ref().expect("outcome"));
            (n, recovered)
        })
        .collect();
    assert_eq!(numbers, [(8, false), (9, false), (10, false), (11, false)]);
    assert_eq!(
        r.solicits().await,
        4,
        "the refused request, then one resend"
    );
    assert_eq!(r.totals().await.len(), 11);
}

async fn a_refusal_in_a_batch_settles_it_and_the_rest_is_issued_again(b: Backend) {
    let Some(r) = rig(b).await else { return };
    // Four facturas to credit, in one request.
    let facturas = sales("mp:f", 0..4);
    let got = r
        .issuer()
        .issue_many(&pairs(&facturas))
        .await
        .expect("issue");
    assert!(
        got.iter()
            .all(|o| matches!(o, Ok(Outcome::Authorized { .. })))
    );
    // Five notas de crédito in one request; the third names a voucher ARCA does not have.
    let credit = |n: i64, nro: i64| {
        let mut nc = sale(100 + n);
        nc.cbtes_asoc = vec![CbteAsoc {
            tipo: CbteTipo::FacturaB.code(),
            pto_vta: PTO_VTA,
            nro,
            cuit: CUIT,
            cbte_fch: today(),
        }];
        (format!("refund:nc{n}"), nc)
    };
    let notes: Vec<(String, VoucherInput)> = [(0, 1), (1, 2), (2, 99), (3, 3), (4, 4)]
        .map(|(n, nro)| credit(n, nro))
        .into();
    let nc = issuer_of(&r, CbteTipo::NotaCreditoB);
    let got = nc.issue_sales(&pairs(&notes)).await.expect("issue");
    let got: Vec<Outcome> = got.into_iter().map(|o| o.expect("outcome")).collect();
    assert_eq!(authorized(&got[0]).0, 1);
    assert_eq!(authorized(&got[1]).0, 2);
    assert!(
        matches!(&got[2], Outcome::Rejected { number: 3, errors }
            if errors.iter().any(|e| e.code == codes::CBTE_ASOC_NOT_FOUND)),
        "{:?}",
        got[2]
    );
    // The two ARCA left unprocessed: consulted, superseded, issued again from 3 up.
    assert_eq!(authorized(&got[3]).0, 3);
    assert_eq!(authorized(&got[4]).0, 4);
    for (k, state) in [
        ("refund:nc2", ArcaVoucherState::Rejected),
        ("refund:nc3", ArcaVoucherState::Superseded),
        ("refund:nc4", ArcaVoucherState::Superseded),
        ("refund:nc3#2", ArcaVoucherState::Authorized),
        ("refund:nc4#2", ArcaVoucherState::Authorized),
    ] {
        assert_eq!(r.state_of(k).await, Some(state), "{k}");
    }
    // A repeat of an unprocessed attempt consults its number once and sends nothing.
    let sent = r.solicits().await;
    let o = nc.issue("refund:nc3", &notes[3].1).await.expect("repeat");
    assert!(
        matches!(
            &o,
            Outcome::Indeterminate {
                number: 4,
                lookup: Lookup::Superseded { .. },
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!(r.solicits().await, sent);
    // ARCA holds each nota de crédito once, numbered 1..4 with no gap.
    let expected = [(1, 100), (2, 101), (3, 103), (4, 104)].map(|(n, c)| (n, Decimal::new(c, 2)));
    assert_eq!(at_arca(&r, CbteTipo::NotaCreditoB).await, expected);
    assert_eq!(sent, 3, "facturas, the batch, the two issued again");
}

/// The drain: a round takes a sequence's pending Mercado Pago sales and issues them in one
/// request, numbered in the order they came.
async fn a_round_issues_a_sequence_s_pending_sales_in_one_request(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mp = crate::arca_sales::fake_mp_ars();
    let Some((app, sim)) = crate::arca_sales::rig_with(b, &dir, false, &mp, "").await else {
        return;
    };
    let ids: Vec<String> = (0..8).map(|n| format!("71000002{n:02}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let ack = mp_notify(&app, &format!("n-b-{n}"), "payment.created", id).await;
        assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    }
    let drainer = Drainer::new(app.db.clone(), &app.settings.arca).expect("drainer");
    assert_eq!(
        drainer.round().await.expect("round"),
        8,
        "all settled in one round"
    );
    let stats: serde_json::Value = reqwest::get(format!("{}/_sim/stats", sim.url()))
        .await
        .expect("sim")
        .json()
        .await
        .expect("json");
    assert_eq!(stats["solicits"], 1, "one FECAESolicitar with CantReg 8");
    for (n, id) in ids.iter().enumerate() {
        let v = app
            .db
            .arca_voucher(&format!("mercadopago:{id}"))
            .await
            .expect("read");
        let v = v.expect("issued");
        assert_eq!(
            (v.state.as_str(), v.number),
            ("authorized", n as i64 + 1),
            "{id}"
        );
    }
    let numbers: Vec<i64> = crate::arca_sales::sim_vouchers(sim.url())
        .await
        .iter()
        .map(|v| v.number)
        .collect();
    assert_eq!(numbers, (1..=8).collect::<Vec<_>>());
    sim.stop().await;
}

crate::on_both_backends!(
    a_round_issues_a_sequence_s_pending_sales_in_one_request,
    a_batch_of_sales_is_authorized_in_one_request,
    a_lost_batch_answer_is_recovered_number_by_number,
    a_refusal_in_a_batch_settles_it_and_the_rest_is_issued_again,
);
