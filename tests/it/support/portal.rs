//! Portal test helpers: sales that wait for the factura global, a client that does not follow
//! redirects, the look-up and the fiscal form as a browser posts them.
#![allow(dead_code)]

use autofactura::webhooks::stripe;
use serde_json::{Value, json};

use super::TestApp;
use super::admin::form_body;

/// A paid Stripe sale of MXN 116.00 without the customer's RFC (`awaiting_global`), paid at
/// `created` (Unix seconds), with the order reference `ORD-{suffix}`; its payment id.
pub async fn sale_without_rfc_at(app: &TestApp, suffix: &str, created: i64) -> String {
    let mut v: Value = serde_json::from_str(&stripe::sample_payment_intent(suffix, created, false))
        .expect("sample");
    v["data"]["object"]["metadata"] = json!({ "order_id": format!("ORD-{suffix}") });
    let r = app.post_stripe_signed(&v.to_string()).await;
    assert_eq!(r.status(), 200);
    let id = format!("pi_test_{suffix}");
    let rows = app.invoices_in("awaiting_global").await;
    assert!(
        rows.iter().any(|r| r.payment_id == id),
        "{id} not awaiting the global: {rows:?}"
    );
    id
}

pub async fn sale_without_rfc(app: &TestApp, suffix: &str) -> String {
    sale_without_rfc_at(app, suffix, chrono::Utc::now().timestamp()).await
}

/// An HTTP client that shows redirects instead of following them.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// `POST /facturar` with `reference` and `total`, and `headers` (e.g. `X-Forwarded-For`).
pub async fn lookup_with(
    app: &TestApp,
    reference: &str,
    total: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = post(
        app,
        "/facturar",
        &[("reference", reference), ("total", total)],
    );
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("look-up")
}

pub async fn lookup(app: &TestApp, reference: &str, total: &str) -> reqwest::Response {
    lookup_with(app, reference, total, &[]).await
}

/// The sale's link a successful look-up redirects to (`/facturar/{token}`).
pub async fn link_of(app: &TestApp, reference: &str, total: &str) -> String {
    let r = lookup(app, reference, total).await;
    assert_eq!(r.status(), 303, "{}", r.text().await.unwrap_or_default());
    let path = r
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .expect("location")
        .to_owned();
    assert!(path.starts_with("/facturar/"), "{path}");
    path
}

/// The fiscal form of a persona física (XIQB891116QE4, 612, 26015, D01).
pub fn valid_form() -> Vec<(&'static str, &'static str)> {
    vec![
        ("rfc", "XIQB891116QE4"),
        ("razon_social", "Berenice Ximo Quezada"),
        ("regimen_fiscal", "612"),
        ("codigo_postal", "26015"),
        ("uso_cfdi", "D01"),
        ("email", "berenice@example.mx"),
    ]
}

pub async fn get(app: &TestApp, path: &str) -> (u16, String) {
    let r = client()
        .get(format!("{}{path}", app.address))
        .send()
        .await
        .expect("GET");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// A form post to `path`, not sent yet.
pub fn post(app: &TestApp, path: &str, form: &[(&str, &str)]) -> reqwest::RequestBuilder {
    client()
        .post(format!("{}{path}", app.address))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form_body(form))
}

pub async fn submit(app: &TestApp, path: &str, form: &[(&str, &str)]) -> reqwest::Response {
    post(app, path, form).send().await.expect("submit")
}
