//! Fiscal data as merchants really collect it in Stripe Checkout (issue 17, point 1): custom
//! fields (dropdown, text) with the customer's régimen, uso CFDI and razón social next to the
//! `mx_rfc` tax id, checked against the SAT catalogs; what breaks a rule waits for the customer
//! at the portal instead of ending nowhere.

use crate::support;

use std::time::Duration;

use autofactura::domain::StampKey;
use autofactura::store::DocFull;
use autofactura::webhooks::stripe;
use serde_json::{Value, json};
use support::portal::{get, link_of, submit, valid_form};
use support::{Backend, TestApp, rows, spawn_app};

/// A paid `checkout.session.completed` for `pi_{suffix}` with `custom_fields`, the customer's
/// `mx_rfc` tax id, the card holder's name and the billing postal code.
pub fn checkout_with_fields(suffix: &str, rfc: &str, custom_fields: Value) -> String {
    stripe::sample_event(
        &format!("evt_cs_{suffix}"),
        "checkout.session.completed",
        chrono::Utc::now().timestamp(),
        false,
        json!({
            "id": format!("cs_test_{suffix}"), "object": "checkout.session",
            "payment_intent": format!("pi_{suffix}"), "payment_status": "paid",
            "amount_total": 34800, "currency": "mxn", "payment_method_types": ["card"],
            "custom_fields": custom_fields,
            "customer_details": {
                "email": "berenice@example.mx", "name": "Jenny Rosen",
                "address": { "country": "MX", "postal_code": "26015" },
                "tax_ids": [{ "type": "mx_rfc", "value": rfc }]
            },
            "metadata": {}
        }),
    )
}

/// The three custom fields the docs recommend, answered.
pub fn fiscal_fields(regimen: &str, uso: &str, razon_social: &str) -> Value {
    let dropdown = |key: &str, label: &str, value: &str| {
        json!({
            "key": key, "label": { "custom": label, "type": "custom" }, "optional": false,
            "type": "dropdown",
            "dropdown": { "options": [{ "label": value, "value": value }], "value": value }
        })
    };
    json!([
        dropdown("regimenfiscal", "Régimen fiscal", regimen),
        dropdown("usocfdi", "Uso del CFDI", uso),
        {
            "key": "razonsocial", "label": { "custom": "Razón social", "type": "custom" },
            "optional": false, "type": "text",
            "text": { "maximum_length": 254, "minimum_length": null, "value": razon_social }
        }
    ])
}

/// Polls the document of `key` until it is `state` (the worker pool stamps in milliseconds).
pub async fn wait_document(app: &TestApp, key: &str, state: &str) -> DocFull {
    for _ in 0..300 {
        if let Some(d) = rows::outbox_status(&app.db, key).await
            && d.state.as_str() == state
        {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "document {key} never reached {state}: {:?}",
        rows::outbox_status(&app.db, key).await.map(|d| (
            d.state,
            d.last_error_code,
            d.last_error_message
        ))
    );
}

async fn a_checkout_sale_with_custom_fields_is_stamped_nominative(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let body = checkout_with_fields(
        "cf1",
        "xiqb891116qe4",
        fiscal_fields("612", "D01", "Berenice Ximo Quezada"),
    );
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
    let ack: Value = r.json().await.expect("json");
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let key = StampKey::derive("stripe", "pi_cf1", "ingreso");
    let d = wait_document(&app, key.as_str(), "stamped").await;
    let xml = String::from_utf8(d.stamped_xml.expect("stamped XML")).expect("utf-8");
    for want in [
        "Rfc=\"XIQB891116QE4\"",
        // The razón social typed in the custom field, not the card holder's name.
        "Nombre=\"BERENICE XIMO QUEZADA\"",
        "DomicilioFiscalReceptor=\"26015\"",
        "RegimenFiscalReceptor=\"612\"",
        // The dropdown's answer, not `[invoice] uso_cfdi` (G03).
        "UsoCFDI=\"D01\"",
        "Total=\"348.00\"",
    ] {
        assert!(xml.contains(want), "{want} missing from {xml}");
    }
    assert_eq!(app.invoices_in("stamped").await.len(), 1);
    pool.shutdown().await;
}

async fn checkout_data_breaking_a_sat_rule_waits_for_the_customer_at_the_portal(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    // 601 (General de Ley Personas Morales) chosen by a persona física.
    let body = checkout_with_fields(
        "cf2",
        "XIQB891116QE4",
        fiscal_fields("601", "G03", "Berenice Ximo Quezada"),
    );
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    let rows = app.invoices_in("needs_attention").await;
    assert_eq!(rows.len(), 1, "{:?}", app.invoices().await);
    let reason = rows[0].last_error.clone().unwrap_or_default();
    assert!(
        reason.contains("régimen fiscal 601 does not apply to a persona física"),
        "{reason}"
    );
    assert!(reason.contains("self-invoice at /facturar"), "{reason}");
    assert_eq!(rows[0].folio, None, "nothing frozen, no folio spent");
}

async fn checkout_data_breaking_a_rule_is_corrected_at_the_portal_and_stamped(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    // A uso the régimen does not allow (616 allows S01 and G02, not G03).
    let body = checkout_with_fields(
        "cf3",
        "XIQB891116QE4",
        fiscal_fields("616", "G03", "Berenice Ximo Quezada"),
    );
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    assert_eq!(app.invoices_in("needs_attention").await.len(), 1);
    // The customer finds it by the Checkout Session id on the receipt page.
    let path = link_of(&app, "cs_test_cf3", "348.00").await;
    let (status, page) = get(&app, &path).await;
    assert_eq!(status, 200);
    // What was typed at checkout is there, with what is wrong with it.
    assert!(page.contains("value=\"XIQB891116QE4\""), "{page}");
    assert!(page.contains("no sirven para la factura"), "{page}");
    assert!(
        page.contains("id=\"uso_cfdi-error\">El uso G03 (Gastos en general.) no está permitido para el régimen 616"),
        "{page}"
    );
    let mut form = valid_form();
    form[2] = ("regimen_fiscal", "616");
    form[4] = ("uso_cfdi", "S01");
    assert_eq!(submit(&app, &path, &form).await.status(), 303);
    let key = StampKey::derive("stripe", "pi_cf3", "ingreso");
    let d = wait_document(&app, key.as_str(), "stamped").await;
    let xml = String::from_utf8(d.stamped_xml.expect("xml")).expect("utf-8");
    assert!(
        xml.contains("RegimenFiscalReceptor=\"616\"") && xml.contains("UsoCFDI=\"S01\""),
        "{xml}"
    );
    assert!(xml.contains("Total=\"348.00\""), "{xml}");
    pool.shutdown().await;
}

/// Posts `body` signed and returns the acknowledgement's `outcome` and `payment_status`.
async fn post(app: &TestApp, body: &str) -> (String, String) {
    let r = app.post_stripe_signed(body).await;
    assert_eq!(r.status(), 200);
    let ack: Value = r.json().await.expect("json");
    let field = |k: &str| ack[k].as_str().unwrap_or_default().to_owned();
    (field("outcome"), field("payment_status"))
}

async fn session_and_payment_intent_in_either_order_give_one_sale_with_the_session_data(
    b: Backend,
) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let now = chrono::Utc::now().timestamp();
    let session = |suffix: &str| {
        checkout_with_fields(
            &format!("test_{suffix}"),
            "XIQB891116QE4",
            fiscal_fields("612", "D01", "Berenice Ximo Quezada"),
        )
    };
    // The PaymentIntent first (no fiscal data: it waits for the global), then its session.
    let pi_first = support::sales::sale_body("pifirst", now, 34800);
    assert_eq!(
        post(&app, &pi_first).await,
        ("payment_recorded".into(), "awaiting_global".into())
    );
    assert_eq!(
        post(&app, &session("pifirst")).await,
        ("fiscal_data_completed".into(), "invoice_pending".into())
    );
    // The session first, then its PaymentIntent: nothing more to do.
    assert_eq!(
        post(&app, &session("csfirst")).await,
        ("invoice_queued".into(), "invoice_pending".into())
    );
    let pi_later = support::sales::sale_body("csfirst", now, 34800);
    assert_eq!(post(&app, &pi_later).await.0, "duplicate_payment");
    // A redelivery of the session changes nothing either.
    assert_eq!(post(&app, &session("pifirst")).await.0, "duplicate");

    for suffix in ["pifirst", "csfirst"] {
        let key = StampKey::derive("stripe", &format!("pi_test_{suffix}"), "ingreso");
        let d = wait_document(&app, key.as_str(), "stamped").await;
        let xml = String::from_utf8(d.stamped_xml.expect("xml")).expect("utf-8");
        for want in [
            "Rfc=\"XIQB891116QE4\"",
            "Nombre=\"BERENICE XIMO QUEZADA\"",
            "RegimenFiscalReceptor=\"612\"",
            "UsoCFDI=\"D01\"",
            "Total=\"348.00\"",
        ] {
            assert!(xml.contains(want), "{suffix}: {want} missing from {xml}");
        }
        // The customer finds the sale by the session id whichever came first.
        link_of(&app, &format!("cs_test_test_{suffix}"), "348.00").await;
    }
    let sales = app.invoices().await;
    assert_eq!(sales.len(), 2, "one sale each: {sales:?}");
    assert!(
        sales.iter().all(|s| s.status.as_str() == "stamped"),
        "{sales:?}"
    );
    let docs: Vec<(i64,)> = rows::fetch_rows(&app.db, "SELECT COUNT(*) FROM outbox", &[]).await;
    assert_eq!(docs[0].0, 2, "one document per sale");
    pool.shutdown().await;
}

on_both_backends!(
    session_and_payment_intent_in_either_order_give_one_sale_with_the_session_data,
    a_checkout_sale_with_custom_fields_is_stamped_nominative,
    checkout_data_breaking_a_sat_rule_waits_for_the_customer_at_the_portal,
    checkout_data_breaking_a_rule_is_corrected_at_the_portal_and_stamped,
);
