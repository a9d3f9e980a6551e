//! Argentina (issue 21): one outbox for both countries. An ARS sale's voucher is frozen in the
//! outbox (kind `arca`) in the transaction that records the payment, and the worker pool's
//! ARCA lane issues it as it was frozen; a sale an earlier version recorded without it is
//! frozen by the lane. Signed webhooks through the real server, the sandbox ARCA over HTTP;
//! both backends.

use crate::arca_sales::{CUIT, authorized, fake_mp_ars, rig_with, sim_vouchers};
use crate::ops_metrics::{scrape, value};
use crate::support;

use autofactura::arca::drain::Drainer;
use autofactura::arca::order::Order;
use autofactura::domain::{DocumentKind, DocumentState};
use rust_decimal::Decimal;
use support::Backend;
use support::rows::{count, exec_sql, outbox_status};
use support::sales::mp_notify;

fn pesos(s: &str) -> Decimal {
    s.parse().expect("an amount")
}

async fn an_ars_sale_is_frozen_with_its_payment_and_issued_as_frozen(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    // No lane runs yet: what ingest wrote is looked at first.
    let Some((app, sim)) = rig_with(b, &dir, false, &fake_mp_ars(), "").await else {
        return;
    };
    let ack = mp_notify(&app, "n-frozen-1", "payment.created", "7300000001").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    mp_notify(&app, "n-frozen-2", "payment.updated", "7300000001").await;
    let key = "mercadopago:7300000001";
    let row = outbox_status(&app.db, key).await.expect("an outbox row");
    assert_eq!(
        (row.kind, row.state),
        (DocumentKind::Arca, DocumentState::ArcaPending)
    );
    assert_eq!(
        count(&app.db, "SELECT COUNT(*) FROM outbox").await,
        1,
        "a redelivery freezes nothing more"
    );
    // The order: a Factura B (an RI to an anonymous buyer) of 1210.00 with IVA at 21 %.
    let order = Order::from_json(&row.request_json).expect("an order");
    assert_eq!(order.tipo, 6);
    assert_eq!(
        (
            order.input.imp_total,
            order.input.imp_neto,
            order.input.imp_iva
        ),
        (pesos("1210.00"), pesos("1000.00"), pesos("210.00"))
    );
    assert_eq!(
        app.db
            .arca_payment_status("mercadopago", "7300000001")
            .await
            .expect("status")
            .map(|s| s.0)
            .as_deref(),
        Some("arca_pending")
    );

    // The operator sees it queued, as any document: by state and kind, and its age.
    let m = scrape(&app, &app.admin_address).await;
    let labels = [("state", "arca_pending"), ("kind", "arca")];
    assert_eq!(value(&m, "autofactura_documents", &labels), 1.0);
    assert!(
        m.samples
            .iter()
            .any(|x| x.metric == "autofactura_oldest_pending_seconds"
                && x.labels.get("kind") == Some("arca")),
        "no age for the queued voucher"
    );

    // The merchant changes the IVA rate before the lane runs: the frozen voucher is issued
    // as it was frozen, at 21 %.
    let mut cfg = app.settings.arca.clone();
    cfg.iva_rate = "10.5".into();
    let lane = Drainer::new(app.db.clone(), &cfg).expect("the lane");
    assert_eq!(lane.round().await.expect("a round"), 1);
    let v = authorized(&app.db, key).await;
    let at_arca = sim_vouchers(sim.url()).await;
    assert_eq!(at_arca.len(), 1, "{at_arca:?}");
    assert_eq!((at_arca[0].cuit, at_arca[0].number), (CUIT, v.number));
    assert_eq!(at_arca[0].input, order.input, "ARCA got the frozen input");
    let row = outbox_status(&app.db, key).await.expect("the row");
    assert_eq!(row.state, DocumentState::Authorized);
    assert_eq!(row.last_error_message, None);
    // A second round has nothing to do.
    assert_eq!(lane.round().await.expect("a round"), 0);
    assert_eq!(sim_vouchers(sim.url()).await.len(), 1);
    sim.stop().await;
}

async fn a_sale_recorded_before_orders_were_frozen_is_frozen_by_the_lane(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((app, sim)) = rig_with(b, &dir, false, &fake_mp_ars(), "").await else {
        return;
    };
    for (n, id) in ["7300000011", "7300000012"].iter().enumerate() {
        mp_notify(&app, &format!("n-old-{n}"), "payment.created", id).await;
    }
    // As an earlier version recorded them: the sale `arca_pending`, nothing in the outbox.
    exec_sql(&app.db, "DELETE FROM outbox").await;
    let lane = Drainer::new(app.db.clone(), &app.settings.arca).expect("the lane");
    assert_eq!(lane.round().await.expect("a round"), 2);
    for key in ["mercadopago:7300000011", "mercadopago:7300000012"] {
        authorized(&app.db, key).await;
        let row = outbox_status(&app.db, key).await.expect("frozen now");
        assert_eq!(
            (row.kind, row.state),
            (DocumentKind::Arca, DocumentState::Authorized)
        );
    }
    assert_eq!(sim_vouchers(sim.url()).await.len(), 2);
    assert_eq!(
        count(
            &app.db,
            "SELECT COUNT(*) FROM payments WHERE status = 'arca_authorized'"
        )
        .await,
        2
    );
    sim.stop().await;
}

crate::on_both_backends!(
    an_ars_sale_is_frozen_with_its_payment_and_issued_as_frozen,
    a_sale_recorded_before_orders_were_frozen_is_frozen_by_the_lane,
);
