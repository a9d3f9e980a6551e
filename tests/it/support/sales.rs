//! Sales for the factura global tests: signed Stripe deliveries of payments without the
//! customer's RFC, dated in a closed month, and their refunds; where the globals ended.
#![allow(dead_code)]

use autofactura::domain::time::{from_local, now_in_mexico};
use autofactura::webhooks::stripe;
use chrono::{Datelike, Months, NaiveDate};
use serde_json::{Value, json};

use super::TestApp;
use super::rows::{Bind, fetch_rows};

/// The first day of the month `back` months before the current one (Mexico City): `1` is the
/// last closed month.
pub fn month(back: u32) -> NaiveDate {
    let today = now_in_mexico().date();
    today.with_day(1).expect("first day") - Months::new(back)
}

/// The last day of the month starting at `first`.
pub fn month_end(first: NaiveDate) -> NaiveDate {
    (first + Months::new(1)).pred_opt().expect("last day")
}

/// `YYYY-MM` of the month starting at `first`, as `global issue` prints a monthly period.
pub fn label(first: NaiveDate) -> String {
    first.format("%Y-%m").to_string()
}

/// Unix seconds of `day` of the month starting at `first`, at `hour` local time.
pub fn at(first: NaiveDate, day: u32, hour: u32) -> i64 {
    let t = first
        .with_day(day)
        .and_then(|d| d.and_hms_opt(hour, 0, 0))
        .expect("local time");
    from_local(t).expect("a local time").timestamp()
}

/// A `payment_intent.succeeded` of `minor` centavos (MXN) at `created`, without fiscal data:
/// `pi_test_{suffix}`.
pub fn sale_body(suffix: &str, created: i64, minor: i64) -> String {
    let mut v: Value = serde_json::from_str(&stripe::sample_payment_intent(suffix, created, false))
        .expect("sample");
    let o = &mut v["data"]["object"];
    o["metadata"] = json!({ "order_id": format!("ORD-{suffix}") });
    o["amount"] = json!(minor);
    o["amount_received"] = json!(minor);
    v.to_string()
}

/// Posts [`sale_body`] signed; the sale waits for the factura global.
pub async fn sell(app: &TestApp, suffix: &str, created: i64, minor: i64) {
    let r = app
        .post_stripe_signed(&sale_body(suffix, created, minor))
        .await;
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["payment_status"], "awaiting_global", "{body}");
}

/// Posts a signed `charge.refunded` of `pi_test_{suffix}`: `refunded_minor` of `amount_minor`
/// back, in full when they are equal.
pub async fn refund(app: &TestApp, suffix: &str, amount_minor: i64, refunded_minor: i64) {
    let object = json!({
        "id": format!("ch_test_{suffix}"), "object": "charge", "amount": amount_minor,
        "amount_refunded": refunded_minor, "currency": "mxn",
        "payment_intent": format!("pi_test_{suffix}"), "refunded": refunded_minor >= amount_minor,
        "status": "succeeded"
    });
    let body = stripe::sample_event(
        &format!("evt_refund_{suffix}_{refunded_minor}"),
        "charge.refunded",
        chrono::Utc::now().timestamp(),
        false,
        object,
    );
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
}

/// Payment ids of the sales of each global, by global document: `(outbox_id, seq, payment_id)`,
/// in global then payment order.
pub async fn memberships(app: &TestApp) -> Vec<(i64, i32, String)> {
    fetch_rows(
        &app.db,
        "SELECT g.outbox_id, g.seq, p.payment_id FROM global_members m \
         JOIN globals g ON g.outbox_id = m.outbox_id JOIN payments p ON p.id = m.payment_row \
         ORDER BY g.outbox_id, p.payment_id",
        &[],
    )
    .await
}

/// How many outbox rows of kind `global` there are.
pub async fn global_documents(app: &TestApp) -> i64 {
    let rows: Vec<(i64,)> = fetch_rows(
        &app.db,
        "SELECT COUNT(*) FROM outbox WHERE kind = $1",
        &[Bind::Str("global")],
    )
    .await;
    rows[0].0
}

/// A payment's status and reason, by its provider id.
pub async fn payment_status(app: &TestApp, payment_id: &str) -> (String, Option<String>) {
    let rows: Vec<(String, Option<String>)> = fetch_rows(
        &app.db,
        "SELECT status, reason FROM payments WHERE payment_id = $1",
        &[Bind::Str(payment_id)],
    )
    .await;
    rows.into_iter().next().expect("the payment")
}

/// The factura global of every sale awaiting one (all in MXN and one period), planned as
/// `global issue` plans it, not frozen yet.
pub async fn planned_global(app: &TestApp) -> autofactura::store::NewGlobal {
    let planner = autofactura::global::Planner::new(&app.settings).expect("planner");
    let sales = app
        .db
        .awaiting_global(chrono::Utc::now())
        .await
        .expect("sales");
    let slot = autofactura::global::plan::Slot {
        period: planner.period_of(sales[0].paid_at),
        moneda: "MXN",
        seq: 1,
    };
    let now = autofactura::domain::time::now_in_mexico();
    planner
        .global(slot, &sales, now, None, "test")
        .expect("global")
}

/// Posts signed Mercado Pago notification `n` (`action`) about payment `data_id`: the answer.
pub async fn mp_notify(app: &TestApp, n: &str, action: &str, data_id: &str) -> serde_json::Value {
    let body = serde_json::json!({ "id": n, "live_mode": false, "type": "payment",
        "action": action, "data": { "id": data_id } })
    .to_string();
    let r = app.post_mp_signed(data_id, &body).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

/// Serves `routes` on 127.0.0.1:0 over real HTTP; its base URL.
pub fn serve(
    routes: impl Fn(&mut actix_web::web::ServiceConfig) + Send + Clone + 'static,
) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server =
        actix_web::HttpServer::new(move || actix_web::App::new().configure(routes.clone()))
            .workers(1)
            .listen(listener)
            .expect("listen")
            .run();
    tokio::spawn(server);
    format!("http://127.0.0.1:{port}")
}
