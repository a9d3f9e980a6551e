//! Sales as merchants really sell (issue 18, sections 1–3): a Checkout sale's line items read
//! from the Stripe API (a local fake over HTTP) become one Concepto each, with the SAT keys of
//! the product's metadata, else of `[invoice.products]`, else the defaults; its discounts and
//! shipping; an API outage keeps the event stored until the API answers.

use crate::support;

use autofactura::cfdi::InvoiceRequest;
use autofactura::config::Settings;
use autofactura::domain::StampKey;
use autofactura::webhooks::stripe_api::{self, Client};
use serde_json::{Value, json};
use support::stripe_api::{FakeStripe, line_item};
use support::{Backend, TestApp, sales, spawn_app_with_env};

/// `[invoice.products]` of these tests: the course is keyed by configuration, not metadata.
const PRODUCTS_TOML: &str = "[invoice.products.prod_curso]\nclave_prod_serv = \"86111604\"\n\
                             clave_unidad = \"E48\"\nunidad = \"Servicio\"\n";

async fn spawn_with(b: Backend, fake: &FakeStripe) -> Option<TestApp> {
    let base = fake.base.clone();
    spawn_app_with_env(
        b,
        PRODUCTS_TOML,
        &[
            ("AUTOFACTURA__STRIPE__API_KEY", support::stripe_api::API_KEY),
            ("AUTOFACTURA__STRIPE__API_BASE", &base),
            ("AUTOFACTURA__STRIPE__RETRY_INTERVAL_SECONDS", "1"),
            ("AUTOFACTURA__STRIPE__FETCH_TIMEOUT_SECONDS", "2"),
        ],
    )
    .await
}

/// The Checkout Session `cs_{suffix}` (paid by `pi_{suffix}`) of three products: two mugs
/// (keys in their metadata) with a line coupon of 20.00, a shirt (metadata), a course (keys
/// from `[invoice.products]`); an order coupon of 100.00 that Stripe left on the order; 99.00
/// of shipping. 2×150 + 349 + 1200 − 20 − 100 + 99 = 1828.00.
fn basket(fake: &FakeStripe, suffix: &str, taza_clave: &str) -> Value {
    fake.add_product(
        "prod_taza",
        "Taza de cerámica",
        json!({ "sat_clave_prod_serv": taza_clave, "sat_clave_unidad": "H87", "sat_unidad": "Pieza" }),
        None,
    );
    fake.add_product(
        "prod_playera",
        "Playera",
        json!({ "sat_clave_prod_serv": "53102501", "sat_clave_unidad": "H87" }),
        Some("txcd_30011000"),
    );
    fake.add_product("prod_curso", "Curso en línea", json!({}), None);
    let session = json!({
        "id": format!("cs_{suffix}"), "object": "checkout.session",
        "payment_intent": format!("pi_{suffix}"), "payment_status": "paid", "mode": "payment",
        "amount_subtotal": 184900, "amount_total": 182800, "currency": "mxn",
        "payment_method_types": ["card"],
        "total_details": { "amount_discount": 12000, "amount_shipping": 9900, "amount_tax": 0 },
        "shipping_cost": { "amount_subtotal": 9900, "amount_tax": 0, "amount_total": 9900,
                           "shipping_rate": "shr_estandar" },
        "customer_details": customer_details(),
        "metadata": { "regimen_fiscal": "612", "uso_cfdi": "G03" }
    });
    fake.add_session(
        session.clone(),
        vec![
            line_item(
                &format!("li_{suffix}_1"),
                "prod_taza",
                "Taza de cerámica",
                2,
                15000,
                2000,
            ),
            line_item(
                &format!("li_{suffix}_2"),
                "prod_playera",
                "Playera",
                1,
                34900,
                0,
            ),
            line_item(
                &format!("li_{suffix}_3"),
                "prod_curso",
                "Curso en línea",
                1,
                120000,
                0,
            ),
        ],
    );
    session
}

/// The customer of these sessions, with an RFC.
fn customer_details() -> Value {
    json!({
        "email": "berenice@example.mx", "name": "Berenice Ximo Quezada",
        "address": { "country": "MX", "postal_code": "26015" },
        "tax_ids": [{ "type": "mx_rfc", "value": "XIQB891116QE4" }]
    })
}

/// A live-mode event of `kind` about `object`, created now.
fn live_event(id: &str, kind: &str, object: Value) -> String {
    autofactura::webhooks::stripe::sample_event(
        id,
        kind,
        chrono::Utc::now().timestamp(),
        true,
        object,
    )
}

fn completed(suffix: &str, session: Value) -> String {
    live_event(
        &format!("evt_cs_{suffix}"),
        "checkout.session.completed",
        session,
    )
}

async fn post(app: &TestApp, body: &str) -> Value {
    let r = app.post_stripe_signed(body).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

/// The stamped XML of `pi_{suffix}`'s ingreso, once stamped.
async fn stamped_xml(app: &TestApp, suffix: &str) -> String {
    let key = StampKey::derive("stripe", &format!("pi_{suffix}"), "ingreso");
    let d = crate::checkout::wait_document(app, key.as_str(), "stamped").await;
    String::from_utf8(d.stamped_xml.expect("stamped XML")).expect("utf-8")
}

/// The value of `attr` on every element named `element` of `xml`, in order.
fn attrs(xml: &str, element: &str, attr: &str) -> Vec<String> {
    xml.split(&format!("<{element} "))
        .skip(1)
        .map(|e| {
            let tag = &e[..e.find('>').unwrap_or(e.len())];
            let at = tag
                .find(&format!(" {attr}=\""))
                .map(|i| i + attr.len() + 3)
                .or_else(|| {
                    tag.starts_with(&format!("{attr}=\""))
                        .then_some(attr.len() + 2)
                });
            at.map(|i| tag[i..].split('"').next().unwrap_or("").to_owned())
                .unwrap_or_default()
        })
        .collect()
}

/// The four Conceptos of [`basket`], as they must be stamped.
fn assert_basket_cfdi(xml: &str) {
    assert_eq!(
        attrs(xml, "cfdi:Concepto", "ClaveProdServ"),
        ["52151602", "53102501", "86111604", "78102203"],
        "metadata, metadata, [invoice.products], [invoice.shipping]"
    );
    assert_eq!(
        attrs(xml, "cfdi:Concepto", "ClaveUnidad"),
        ["H87", "H87", "E48", "E48"]
    );
    assert_eq!(
        attrs(xml, "cfdi:Concepto", "Cantidad"),
        ["2", "1", "1", "1"]
    );
    assert_eq!(attrs(xml, "cfdi:Comprobante", "Total"), ["1828.00"]);
    assert!(
        attrs(xml, "cfdi:Concepto", "Descuento")[3].is_empty(),
        "no discount on shipping"
    );
}

/// The frozen lines' discounts (tax included, as charged): the mugs' own 20.00 plus each
/// line's share of the 100.00 order coupon, prorated by what it still cost (280 : 349 : 1200
/// of 1829) to the centavo, the two centavos rounding left going to the largest remainders:
/// 15.31, 19.08, 65.61.
async fn assert_basket_discounts(app: &TestApp) {
    let rows = app.invoices().await;
    assert_eq!((rows.len(), rows[0].amount.as_str()), (1, "1828.00"));
    let req: InvoiceRequest =
        serde_json::from_str(rows[0].request_json.as_deref().expect("json")).expect("request");
    let discounts: Vec<String> = req
        .lines
        .iter()
        .map(|l| l.discount.map(|d| d.to_string()).unwrap_or_default())
        .collect();
    assert_eq!(discounts, ["35.31", "19.08", "65.61", ""]);
    assert_eq!(
        req.lines
            .iter()
            .map(|l| l.descripcion.as_str())
            .collect::<Vec<_>>(),
        ["Taza de cerámica", "Playera", "Curso en línea", "Envío"]
    );
}

async fn a_checkout_sale_of_three_products_with_a_coupon_and_shipping_is_four_conceptos(
    b: Backend,
) {
    let fake = FakeStripe::start().await;
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let session = basket(&fake, "li1", "52151602");
    let ack = post(&app, &completed("li1", session)).await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let xml = stamped_xml(&app, "li1").await;
    assert_basket_cfdi(&xml);
    assert_basket_discounts(&app).await;
    pool.shutdown().await;
}

async fn the_stripe_api_down_then_up_gives_the_same_cfdi_once(b: Backend) {
    let fake = FakeStripe::start().await;
    fake.set_up(false);
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let body = completed("li2", basket(&fake, "li2", "52151602"));
    let ack = post(&app, &body).await;
    assert_eq!(ack["outcome"], "stored_pending_fetch", "{ack}");
    // Stripe redelivers while the API is still down: still stored, still nothing invoiced.
    let ack = post(&app, &body).await;
    assert_eq!(ack["outcome"], "stored_pending_fetch", "{ack}");
    assert!(app.invoices().await.is_empty(), "nothing on partial data");
    let ev = app.events().await;
    assert_eq!((ev.len(), ev[0].status.as_str()), (1, "pending_fetch"));
    assert!(
        ev[0].reason.as_deref().unwrap_or("").contains("503"),
        "{:?}",
        ev[0].reason
    );
    fake.set_up(true);
    let xml = stamped_xml(&app, "li2").await;
    assert_basket_cfdi(&xml);
    assert_basket_discounts(&app).await;
    // A late redelivery and the PaymentIntent's own event change nothing.
    let ack = post(&app, &body).await;
    assert_eq!(ack["outcome"], "duplicate", "{ack}");
    let pi = autofactura::webhooks::stripe::sample_payment_intent("li2x", 1_755_613_200, true)
        .replace("pi_test_li2x", "pi_li2");
    let ack = post(&app, &pi).await;
    assert_eq!(ack["outcome"], "duplicate_payment", "{ack}");
    let invoices = app.invoices().await;
    assert_eq!(invoices.len(), 1, "one sale, one CFDI");
    assert_eq!(app.events().await[0].status, "processed");
    pool.shutdown().await;
}

/// `item` with Stripe Tax's tax on top (a tax-exclusive price): `rate` percent, `tax` centavos
/// as Stripe rounded it for this line.
fn taxed(mut item: Value, rate: i64, tax: i64) -> Value {
    item["price"]["tax_behavior"] = json!("exclusive");
    item["amount_tax"] = json!(tax);
    item["amount_total"] = json!(item["amount_total"].as_i64().expect("total") + tax);
    item["taxes"] = json!([{
        "amount": tax, "taxability_reason": "standard_rated", "taxable_amount": item["amount_total"],
        "rate": { "id": format!("txr_{rate}"), "object": "tax_rate", "percentage": rate as f64,
                  "inclusive": false, "country": "MX", "tax_type": "vat" }
    }]);
    item
}

/// Stripe Tax rounds each line's tax to the centavo: 100.03 and 200.03 at 16 % pay 16.00 and
/// 32.00, 348.06 in all, where the engine's own sum (48.0096) would make 48.01. The CFDI
/// carries the taxes that were charged, line by line, and totals the charge.
async fn stripe_tax_amounts_are_the_cfdi_taxes_line_by_line(b: Backend) {
    let fake = FakeStripe::start().await;
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    fake.add_product("prod_a", "Cuaderno", json!({}), None);
    fake.add_product("prod_b", "Libreta", json!({}), None);
    let session = json!({
        "id": "cs_tax", "object": "checkout.session", "payment_intent": "pi_tax",
        "payment_status": "paid", "mode": "payment", "currency": "mxn",
        "amount_subtotal": 30006, "amount_total": 34806, "payment_method_types": ["card"],
        "total_details": { "amount_discount": 0, "amount_shipping": 0, "amount_tax": 4800 },
        "customer_details": customer_details(),
        "metadata": { "regimen_fiscal": "612", "uso_cfdi": "G03" }
    });
    fake.add_session(
        session.clone(),
        vec![
            taxed(
                line_item("li_tax_1", "prod_a", "Cuaderno", 1, 10003, 0),
                16,
                1600,
            ),
            taxed(
                line_item("li_tax_2", "prod_b", "Libreta", 1, 20003, 0),
                16,
                3200,
            ),
        ],
    );
    let ack = post(&app, &completed("tax", session)).await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let xml = stamped_xml(&app, "tax").await;
    assert_eq!(
        attrs(&xml, "cfdi:Traslado", "Importe"),
        ["16.00", "32.00", "48.00"],
        "each line's tax as Stripe charged it, then their sum"
    );
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "SubTotal"), ["300.06"]);
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "Total"), ["348.06"]);
    pool.shutdown().await;
}

/// A sale charged in USD: the CFDI is in USD at the rate of the charge's balance transaction,
/// read from the Stripe API (within the published rate's 5 %, so the sandbox stamps it).
async fn a_usd_sale_carries_the_balance_transactions_rate(b: Backend) {
    let fake = FakeStripe::start().await;
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    fake.add_charge("pi_test_usd1", "ch_test_usd1", Some("17.854321"));
    let mut pi: Value =
        serde_json::from_str(&autofactura::webhooks::stripe::sample_payment_intent(
            "usd1",
            chrono::Utc::now().timestamp(),
            true,
        ))
        .expect("event");
    pi["data"]["object"]["currency"] = json!("usd");
    pi["data"]["object"]["amount"] = json!(2999);
    pi["data"]["object"]["amount_received"] = json!(2999);
    let ack = post(&app, &pi.to_string()).await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let key = StampKey::derive("stripe", "pi_test_usd1", "ingreso");
    let d = crate::checkout::wait_document(&app, key.as_str(), "stamped").await;
    let xml = String::from_utf8(d.stamped_xml.expect("stamped XML")).expect("utf-8");
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "Moneda"), ["USD"]);
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "TipoCambio"), ["17.854321"]);
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "Total"), ["29.99"]);
    pool.shutdown().await;
}

async fn an_unknown_product_key_needs_attention_naming_the_product_and_the_key(b: Backend) {
    let fake = FakeStripe::start().await;
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let session = basket(&fake, "li3", "99999999");
    let ack = post(&app, &completed("li3", session)).await;
    assert_eq!(ack["outcome"], "payment_recorded", "{ack}");
    let (status, reason) = sales::payment_status(&app, "pi_li3").await;
    let reason = reason.unwrap_or_default();
    assert_eq!(status, "needs_attention");
    assert!(
        reason.contains("\"Taza de cerámica\" (prod_taza)")
            && reason.contains("sat_clave_prod_serv \"99999999\" is not in c_ClaveProdServ"),
        "{reason}"
    );
    assert!(app.invoices_in("pending").await.is_empty());
}

/// A paid Billing invoice of 12 lines (a plan and 11 seats) for `pi_{suffix}`: the event
/// carries the first 10 (`has_more`), the fake all 12; 20 % off the plan line.
fn billing(fake: &FakeStripe, suffix: &str) -> Value {
    fake.add_product(
        "prod_plan",
        "Plan Pro",
        json!({ "sat_clave_prod_serv": "81112101", "sat_clave_unidad": "E48" }),
        None,
    );
    fake.add_product("prod_seat", "Usuario adicional", json!({}), None);
    let (start, end) = (1_764_547_200, 1_767_225_600); // 2025-12-01 .. 2026-01-01 UTC
    let line = |n: usize, product: &str, name: &str, amount: i64, discount: i64| {
        json!({
            "id": format!("il_{suffix}_{n:02}"), "object": "line_item", "amount": amount, "currency": "mxn",
            "description": format!("1 × {name}"), "quantity": 1,
            "period": { "start": start, "end": end },
            "discount_amounts": if discount > 0 { json!([{ "amount": discount, "discount": "di_1" }]) } else { json!([]) },
            "pricing": { "type": "price_details",
                         "price_details": { "price": format!("price_{product}"), "product": product } }
        })
    };
    let mut lines = vec![line(0, "prod_plan", "Plan Pro", 99900, 19980)];
    lines.extend((1..12).map(|n| line(n, "prod_seat", "Usuario adicional", 10000, 0)));
    // 999.00 − 199.80 + 11 × 100.00 = 1899.20
    let invoice = json!({
        "id": format!("in_{suffix}"), "object": "invoice", "number": format!("F-{suffix}"),
        "amount_paid": 189920, "amount_due": 189920, "currency": "mxn", "status": "paid",
        "customer_email": "berenice@example.mx", "customer_name": "Berenice Ximo Quezada",
        "customer_address": { "postal_code": "26015", "country": "MX" },
        "customer_tax_ids": [{ "type": "mx_rfc", "value": "XIQB891116QE4" }],
        "payments": { "object": "list", "has_more": false, "data": [
            { "object": "invoice_payment", "payment": { "type": "payment_intent", "payment_intent": format!("pi_{suffix}") } }
        ]},
        "parent": { "type": "subscription_details",
                    "subscription_details": { "subscription": "sub_1", "metadata": { "regimen_fiscal": "612" } } },
        "lines": { "object": "list", "has_more": true, "data": lines[..10].to_vec() },
        "metadata": {}
    });
    fake.add_invoice(invoice.clone(), lines);
    invoice
}

async fn an_invoice_paid_of_12_lines_is_one_cfdi_even_with_its_payment_intent_event(b: Backend) {
    let fake = FakeStripe::start().await;
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let invoice = billing(&fake, "bi1");
    // The PaymentIntent's event first: the sale is found to be the invoice's, with its lines.
    let pi = live_event(
        "evt_pi_bi1",
        "payment_intent.succeeded",
        json!({ "id": "pi_bi1", "object": "payment_intent", "amount": 189920, "amount_received": 189920,
                "currency": "mxn", "description": "Subscription update", "metadata": {},
                "payment_method_types": ["card"], "status": "succeeded" }),
    );
    let ack = post(&app, &pi).await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let paid = live_event("evt_in_bi1", "invoice.paid", invoice);
    let ack = post(&app, &paid).await;
    assert_eq!(ack["outcome"], "duplicate_payment", "{ack}");
    let xml = stamped_xml(&app, "bi1").await;
    assert_eq!(xml.matches("<cfdi:Concepto ").count(), 12, "{xml}");
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "Total"), ["1899.20"]);
    assert_eq!(
        attrs(&xml, "cfdi:Receptor", "Rfc"),
        ["XIQB891116QE4"],
        "the invoice's customer"
    );
    let claves = attrs(&xml, "cfdi:Concepto", "ClaveProdServ");
    assert_eq!(
        (claves[0].as_str(), claves[11].as_str()),
        ("81112101", "01010101")
    );
    assert!(
        xml.contains("Descripcion=\"1 × Plan Pro (periodo 30/11/2025 al 31/12/2025)\""),
        "the subscription period, in Mexico City dates: {xml}"
    );
    assert_eq!(app.invoices().await.len(), 1, "one sale, one CFDI");
    pool.shutdown().await;
}

async fn an_invoice_paid_alone_is_one_cfdi_with_every_line(b: Backend) {
    let fake = FakeStripe::start().await;
    let Some(app) = spawn_with(b, &fake).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let invoice = billing(&fake, "bi2");
    let paid = live_event("evt_in_bi2", "invoice.paid", invoice);
    let ack = post(&app, &paid).await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let xml = stamped_xml(&app, "bi2").await;
    assert_eq!(
        xml.matches("<cfdi:Concepto ").count(),
        12,
        "has_more: the rest fetched"
    );
    assert_eq!(attrs(&xml, "cfdi:Comprobante", "Total"), ["1899.20"]);
    pool.shutdown().await;
}

/// The client as the appliance builds it, pointed at `fake`.
fn client(fake: &FakeStripe) -> Client {
    let s =
        Settings::from_parts(Some(&format!("[stripe]\n{}", fake.toml())), &[]).expect("settings");
    Client::from_settings(&s.stripe)
        .expect("client")
        .expect("an api_key is set")
}

#[tokio::test]
async fn the_client_reads_the_exchange_rate_of_the_charges_balance_transaction() {
    let fake = FakeStripe::start().await;
    fake.add_charge("pi_usd", "ch_usd", Some("17.854321"));
    fake.add_charge("pi_same", "ch_same", None);
    let c = client(&fake);
    let rate = c.exchange_rate("pi_usd").await.expect("rate");
    assert_eq!(
        rate.map(|r| r.to_string()).as_deref(),
        Some("17.854321"),
        "exact, never through f64"
    );
    assert_eq!(
        c.exchange_rate("pi_same").await.expect("rate"),
        None,
        "no conversion, no rate"
    );
    let err = c
        .exchange_rate("pi_unknown")
        .await
        .expect_err("404")
        .to_string();
    assert!(err.contains("404"), "{err}");
}

#[tokio::test]
async fn the_client_reads_every_page_of_line_items_with_the_products_expanded() {
    let fake = FakeStripe::start().await;
    fake.add_product(
        "prod_p",
        "Pluma",
        json!({ "sat_clave_prod_serv": "44121701" }),
        None,
    );
    let items: Vec<Value> = (0..230)
        .map(|i| line_item(&format!("li_{i:03}"), "prod_p", "Pluma", 1, 1000, 0))
        .collect();
    fake.add_session(
        json!({ "id": "cs_many", "payment_intent": "pi_many" }),
        items,
    );
    let c = client(&fake);
    let before = fake.hits();
    let got = c.checkout_line_items("cs_many").await.expect("items");
    assert_eq!(fake.hits() - before, 3, "pages of 100 while has_more");
    assert_eq!(got.len(), 230);
    assert_eq!(got[229]["id"], "li_229");
    assert_eq!(
        got[0]["price"]["product"]["metadata"]["sat_clave_prod_serv"],
        "44121701"
    );
    let lines = stripe_api::checkout_lines(&json!({}), &got, "MXN").expect("lines");
    assert_eq!(lines[0].keys.clave_prod_serv.as_deref(), Some("44121701"));
    fake.set_up(false);
    let err = c
        .checkout_line_items("cs_many")
        .await
        .expect_err("down")
        .to_string();
    assert!(err.contains("503"), "{err}");
}

on_both_backends!(
    a_checkout_sale_of_three_products_with_a_coupon_and_shipping_is_four_conceptos,
    the_stripe_api_down_then_up_gives_the_same_cfdi_once,
    an_unknown_product_key_needs_attention_naming_the_product_and_the_key,
    an_invoice_paid_of_12_lines_is_one_cfdi_even_with_its_payment_intent_event,
    an_invoice_paid_alone_is_one_cfdi_with_every_line,
    stripe_tax_amounts_are_the_cfdi_taxes_line_by_line,
    a_usd_sale_carries_the_balance_transactions_rate,
);
