//! Argentina (issue 21): the barrier, over real HTTP against the sandbox ARCA, on both
//! backends. A number ARCA proves empty, whose old attempt can no longer land, goes to another
//! key; the old key is superseded, never resends, and its sale goes on under a new key.

use autofactura::arca::{Lookup, Outcome, VoucherInput};
use autofactura::domain::ArcaVoucherState;
use rust_decimal::Decimal;

use crate::arca::{Rig, authorized, issuer, rig, sale};
use crate::support::{Backend, exec_sql};

/// With `down=true`, `key`'s send never reaches ARCA and stays unknown at `number`; then ARCA
/// is back and no send of `key` can land any more (its landing window is over).
async fn lose_for_good(r: &Rig, key: &str, input: &VoucherInput, number: i64) {
    r.lose("down=true", key, input, number).await;
    r.faults("none").await;
    exec_sql(
        &r.app.db,
        &format!("UPDATE arca_vouchers SET landing_until = NULL WHERE key = '{key}'"),
    )
    .await;
}

/// What an indeterminate outcome's number showed, and the number.
fn lookup(o: &Outcome) -> (i64, Lookup) {
    match o {
        Outcome::Indeterminate { number, lookup, .. } => (*number, lookup.clone()),
        other => panic!("expected indeterminate, got {other:?}"),
    }
}

async fn the_barrier_supersedes_a_number_proven_empty_and_the_old_key_never_resends(b: Backend) {
    let Some(r) = rig(b).await else { return };
    let i = r.issuer();
    authorized(&i.issue("mp:8001", &sale(1_000)).await.expect("issue"));
    lose_for_good(&r, "mp:8002", &sale(2_000), 2).await;
    let sent = r.solicits().await;
    // Another key: ARCA proves 2 empty and next, and mp:8002 cannot land: 2 goes to mp:8003.
    let (number, _, recovered) =
        authorized(&i.issue("mp:8003", &sale(3_000)).await.expect("issue"));
    assert_eq!((number, recovered), (2, false));
    assert_eq!(r.solicits().await, sent + 1, "only mp:8003 was sent");
    let old = r.app.db.arca_voucher("mp:8002").await.expect("read");
    let old = old.expect("a reservation is never deleted");
    assert_eq!(
        (old.state, old.number, old.superseded_by.as_deref()),
        (ArcaVoucherState::Superseded, 2, Some("mp:8003"))
    );
    // Its repeats, from this instance and another, consult the number and report it
    // superseded: nothing is sent.
    let by = Lookup::Superseded {
        by: "mp:8003".into(),
    };
    for i in [r.issuer(), issuer(&r.app.db, &r.sim)] {
        let o = i.issue("mp:8002", &sale(2_000)).await.expect("repeat");
        assert_eq!(lookup(&o), (2, by.clone()));
    }
    assert_eq!(r.solicits().await, sent + 1, "the old key never resends");
    // The sale goes on under its next key, once.
    for _ in 0..2 {
        let o = i.issue_sale("mp:8002", &sale(2_000)).await.expect("sale");
        assert_eq!(authorized(&o).0, 3);
    }
    let next = r.state_of("mp:8002#2").await;
    assert_eq!(next, Some(ArcaVoucherState::Authorized));
    assert_eq!(r.solicits().await, sent + 2);

    // Its own repeat finds the number free for good: it is not resent, and the sale's next
    // key takes the number.
    lose_for_good(&r, "mp:8004", &sale(4_000), 4).await;
    let sent = r.solicits().await;
    let o = i.issue("mp:8004", &sale(4_000)).await.expect("repeat");
    assert_eq!(lookup(&o), (4, Lookup::Free));
    assert_eq!(r.solicits().await, sent, "a free number is not resent");
    let o = i.issue_sale("mp:8004", &sale(4_000)).await.expect("sale");
    assert_eq!(authorized(&o).0, 4);
    let old = r.app.db.arca_voucher("mp:8004").await.expect("read");
    let by = old.and_then(|v| v.superseded_by);
    assert_eq!(by.as_deref(), Some("mp:8004#2"));
    assert_eq!(r.solicits().await, sent + 1);
    // ARCA holds each sale once, and nothing of the superseded attempts.
    let expected = [(1, 1_000), (2, 3_000), (3, 2_000), (4, 4_000)];
    let expected = expected.map(|(n, c)| (n, Decimal::new(c, 2)));
    assert_eq!(r.totals().await, expected);
}

crate::on_both_backends!(
    the_barrier_supersedes_a_number_proven_empty_and_the_old_key_never_resends,
);
