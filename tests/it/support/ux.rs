//! Helpers of the admin UX tests (`admin_ux`, `admin_ux_e2e`): sales shaped as a test needs
//! (an age, a currency, a customer), raw fixture SQL, and reading what the pages count.
#![allow(dead_code)]

use autofactura::webhooks::stripe;
use chrono::Utc;
use serde_json::Value;

use super::TestApp;

/// A paid Stripe sale made `hours_ago`, changed by `shape` (its `data.object`) before it is
/// signed and delivered; its payment id.
pub async fn sale(
    app: &TestApp,
    suffix: &str,
    hours_ago: i64,
    shape: impl FnOnce(&mut Value),
) -> String {
    let created = Utc::now().timestamp() - hours_ago * 3600;
    let mut body: Value =
        serde_json::from_str(&stripe::sample_payment_intent(suffix, created, false))
            .expect("sample json");
    shape(&mut body["data"]["object"]);
    let body = body.to_string();
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    format!("pi_test_{suffix}")
}

/// Runs fixture statements (literal SQL, no binds) on either backend.
pub async fn sql(app: &TestApp, text: &str) {
    super::rows::exec_sql(&app.db, text).await;
}

/// The dashboard's tiles: `(data-state, count, href)`.
pub fn tiles(dashboard: &str) -> Vec<(String, i64, String)> {
    dashboard
        .split("<a class=\"tile")
        .skip(1)
        .map(|t| {
            let attr = |name: &str| {
                let needle = format!("{name}=\"");
                let start = t.find(&needle).map(|i| i + needle.len()).unwrap_or(0);
                t[start..]
                    .split('"')
                    .next()
                    .unwrap_or_default()
                    .replace("&amp;", "&")
            };
            let n = t
                .split("<span class=\"n\">")
                .nth(1)
                .and_then(|r| r.split('<').next())
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(-1);
            (attr("data-state"), n, attr("href"))
        })
        .collect()
}

/// The "N result(s)" of an invoices list.
pub fn result_count(list: &str) -> i64 {
    list.split("id=\"result-count\"")
        .nth(1)
        .and_then(|r| r.split_once('>').map(|(_, rest)| rest))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no result count in:\n{list}"))
}

/// The rows of an invoices list page: their payment ids, in order.
pub fn listed(list: &str) -> Vec<String> {
    list.split("<tr data-payment=\"")
        .skip(1)
        .filter_map(|r| r.split('"').next().map(str::to_owned))
        .collect()
}

/// Appends a PAC call of document `id` to the attempt log, as a worker does.
pub async fn log_call(
    app: &TestApp,
    id: i64,
    operation: &str,
    outcome: &str,
    http_status: Option<i32>,
    message: &str,
) {
    app.db
        .log_attempt(&autofactura::store::Attempt {
            outbox_id: Some(id),
            cancellation_id: None,
            operation,
            pac: "sandbox",
            outcome,
            http_status,
            code: None,
            message: Some(message),
            latency_ms: 5,
            uuid: None,
            worker: "test",
        })
        .await
        .expect("log the PAC call");
}
