//! The merchant's signed events for documents that are not API invoices (issue 20 §4), on both
//! backends, against a real HTTP receiver checking each Standard Webhooks signature: a Stripe
//! sale stamped gives one `invoice.stamped` with its payment id and UUID, and a redelivery of
//! the sale's webhook none more; a Mercado Pago sale the same; a refund's egreso its own
//! event; a sale cancelled `invoice.canceled`; a receiver down, then up, gets the event once,
//! under the id every attempt carried.

use std::time::Duration;

use autofactura::notify::sign::message_id;
use autofactura::notify::view::document_id;
use autofactura::webhooks::stripe;
use serde_json::Value;

use crate::support::admin::{Browser, PASSWORD, doc, outbox_of};
use crate::support::receiver::{Receiver, webhook_toml_retrying};
use crate::support::rows::{Bind, WebhookRow, fetch_rows, merchant_events_of};
use crate::support::{Backend, TestApp, spawn_app_with};

/// The app sending merchant webhooks to `url`, retried every second for five minutes: a loaded
/// machine must not run the retries out while a test holds its receiver down.
async fn app(b: Backend, url: &str) -> Option<TestApp> {
    app_with(b, url, "").await
}

/// [`app`], with `mp` ending the `[mercadopago]` table (e.g. its `api_base`).
async fn app_with(b: Backend, url: &str, mp: &str) -> Option<TestApp> {
    let toml = format!(
        "{mp}{}[worker]\nidle_poll_ms = 50\n[admin]\npassword = \"{PASSWORD}\"\n",
        webhook_toml_retrying(url, 300)
    );
    spawn_app_with(b, &toml).await
}

/// A paid Stripe sale (`pi_test_{suffix}`), its webhook as Stripe sent it: its outbox id.
async fn pay(app: &TestApp, suffix: &str) -> (i64, String) {
    let body = stripe::sample_payment_intent(suffix, chrono::Utc::now().timestamp(), false);
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    (outbox_of(app, &format!("pi_test_{suffix}")).await.id, body)
}

/// The merchant events of document `id` once `done` holds of them (within 60 s).
async fn events_when(
    app: &TestApp,
    id: i64,
    what: &str,
    done: impl Fn(&[WebhookRow]) -> bool,
) -> Vec<WebhookRow> {
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows = merchant_events_of(&app.db, id).await;
        if done(&rows) {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "merchant events never {what}: {rows:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn delivered(rows: &[WebhookRow]) -> bool {
    !rows.is_empty() && rows.iter().all(|r| r.state == "delivered")
}

async fn a_stamped_stripe_sale_sends_one_signed_event_and_a_redelivery_none_more(b: Backend) {
    let (receiver, url) = Receiver::start(0).await;
    let Some(app) = app(b, &url).await else {
        return;
    };
    let (id, body) = pay(&app, "ev_sale").await;
    app.drain(60).await;
    let d = doc(&app, id).await;
    assert_eq!(d.state.to_string(), "stamped", "{d:?}");
    let (msg, v) = receiver.wait_where("invoice.stamped", 60, |_| true).await;
    let data = &v["data"];
    assert_eq!(data["payment_id"], "pi_test_ev_sale", "{v}");
    assert_eq!(data["provider"], "stripe", "{v}");
    assert_eq!(data["kind"], "ingreso", "{v}");
    assert_eq!(data["status"], "stamped", "{v}");
    assert_eq!(data["uuid"].as_str(), d.uuid.as_deref(), "{v}");
    assert_eq!(data["serie"].as_str(), d.serie.as_deref(), "{v}");
    assert_eq!(data["folio"].as_str(), d.folio.as_deref(), "{v}");
    assert!(data["total"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
    assert_eq!(
        data["links"]["pdf"],
        format!("/admin/documents/{id}/pdf"),
        "{v}"
    );
    let rows = events_when(&app, id, "delivered", delivered).await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(msg, message_id(&document_id(id), rows[0].id));
    // Stripe delivers the same payment again: the sale is known, no second stamp, no event.
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    app.drain(60).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(merchant_events_of(&app.db, id).await.len(), 1);
    assert_eq!(receiver.ids(), [msg], "exactly one delivery");
}

async fn a_refunds_egreso_sends_its_own_event(b: Backend) {
    let (receiver, url) = Receiver::start(0).await;
    let Some(app) = app(b, &url).await else {
        return;
    };
    let (sale, _) = pay(&app, "ev_egreso").await;
    app.drain(60).await;
    receiver.wait_for("invoice.stamped", 60).await;
    let (pool, _services) = app.start_pool().await;
    let (kind, suffix) = ("refund.created", "ev_egreso");
    crate::refunds::refund_event(&app, "ev_egreso_r1", kind, suffix, "ev_egreso_r1", 4999).await;
    let is_egreso = |v: &Value| v["data"]["kind"] == "egreso";
    let (msg, v) = receiver.wait_where("invoice.stamped", 60, is_egreso).await;
    pool.shutdown().await;
    let egresos: Vec<(i64,)> = fetch_rows(
        &app.db,
        "SELECT id FROM outbox WHERE kind = $1",
        &[Bind::Str("egreso")],
    )
    .await;
    assert_eq!(egresos.len(), 1, "{egresos:?}");
    let egreso = egresos[0].0;
    let d = doc(&app, egreso).await;
    assert_eq!(v["data"]["id"], document_id(egreso), "{v}");
    assert_eq!(v["data"]["uuid"].as_str(), d.uuid.as_deref(), "{v}");
    assert!(d.uuid.is_some(), "{d:?}");
    let rows = events_when(&app, egreso, "delivered", delivered).await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(msg, message_id(&document_id(egreso), rows[0].id));
    assert_eq!(merchant_events_of(&app.db, sale).await.len(), 1);
    assert_eq!(receiver.ids().len(), 2, "the ingreso's, then the egreso's");
}

async fn a_receiver_down_then_up_gets_the_event_once_under_one_id(b: Backend) {
    // A port bound but not listening: the merchant's endpoint is down (a connection is
    // refused), and no other test's server can be given the port meanwhile.
    let (down, addr) = crate::support::refusing_port();
    let Some(app) = app(b, &format!("http://{addr}/hook")).await else {
        return;
    };
    let (id, _) = pay(&app, "ev_down").await;
    app.drain(60).await;
    // The first attempt failed and the event waits for its retry. A claim alone counts an
    // attempt before it connects, so the error it recorded is what shows it was refused.
    events_when(&app, id, "tried", |r| {
        r.len() == 1 && r[0].last_error.is_some() && r[0].state == "pending"
    })
    .await;
    drop(down);
    let (receiver, _) = Receiver::start_on(&addr, 0);
    let rows = events_when(&app, id, "delivered", delivered).await;
    assert!(rows[0].attempts >= 2, "{rows:#?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        receiver.ids(),
        [message_id(&document_id(id), rows[0].id)],
        "delivered once, under the event's id"
    );
    let v = receiver.wait_for("invoice.stamped", 5).await;
    assert_eq!(v["data"]["payment_id"], "pi_test_ev_down");
}

/// A Mercado Pago API whose payments are the sample's (MXN), approved a minute ago.
fn fake_mp() -> String {
    crate::support::sales::serve(|cfg| {
        cfg.route(
            "/v1/payments/{id}",
            actix_web::web::get().to(|id: actix_web::web::Path<String>| async move {
                let approved = (chrono::Utc::now() - chrono::Duration::minutes(1))
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                actix_web::HttpResponse::Ok()
                    .content_type("application/json")
                    .body(autofactura::webhooks::mercadopago::sample_payment(
                        &id, &approved,
                    ))
            }),
        );
    })
}

async fn a_stamped_mercado_pago_sale_sends_its_event(b: Backend) {
    let (receiver, url) = Receiver::start(0).await;
    let mp = format!("api_base = \"{}\"\n", fake_mp());
    let Some(app) = app_with(b, &url, &mp).await else {
        return;
    };
    let ack = crate::support::sales::mp_notify(&app, "n-ev-mp", "payment.created", "8801").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let id = outbox_of(&app, "8801").await.id;
    app.drain(60).await;
    let (msg, v) = receiver.wait_where("invoice.stamped", 60, |_| true).await;
    let d = doc(&app, id).await;
    assert_eq!(v["data"]["provider"], d.provider.as_str(), "{v}");
    assert!(
        d.provider.contains("mercado") || d.provider == "mp",
        "{d:?}"
    );
    assert_eq!(v["data"]["payment_id"], "8801", "{v}");
    assert_eq!(v["data"]["uuid"].as_str(), d.uuid.as_deref(), "{v}");
    let rows = events_when(&app, id, "delivered", delivered).await;
    assert_eq!(msg, message_id(&document_id(id), rows[0].id));
}

async fn a_cancelled_sale_sends_invoice_canceled(b: Backend) {
    let (receiver, url) = Receiver::start(0).await;
    let Some(app) = app(b, &url).await else {
        return;
    };
    let (id, _) = pay(&app, "ev_cancel").await;
    app.drain(60).await;
    receiver.wait_for("invoice.stamped", 60).await;
    let browser = Browser::new(&app);
    let csrf = browser.login().await;
    browser.cancel(id, &csrf).await;
    let (pool, _services) = app.start_pool().await;
    let (msg, v) = receiver.wait_where("invoice.canceled", 60, |_| true).await;
    pool.shutdown().await;
    let d = doc(&app, id).await;
    assert_eq!(v["data"]["status"], "canceled", "{v}");
    assert_eq!(v["data"]["payment_id"], "pi_test_ev_cancel", "{v}");
    assert_eq!(v["data"]["uuid"].as_str(), d.uuid.as_deref(), "{v}");
    let rows = events_when(&app, id, "both delivered", |r| r.len() == 2 && delivered(r)).await;
    assert_eq!(rows[1].event_type, "invoice.canceled");
    assert_eq!(msg, message_id(&document_id(id), rows[1].id));
}

on_both_backends!(
    a_stamped_mercado_pago_sale_sends_its_event,
    a_cancelled_sale_sends_invoice_canceled,
    a_stamped_stripe_sale_sends_one_signed_event_and_a_redelivery_none_more,
    a_refunds_egreso_sends_its_own_event,
    a_receiver_down_then_up_gets_the_event_once_under_one_id,
);
