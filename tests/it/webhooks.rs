//! Webhooks end to end: the real server, a real database, on SQLite and PostgreSQL.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use autofactura::cfdi::{InvoiceRequest, ReceptorData};
use autofactura::webhooks::{mercadopago, signature, stripe};
use serde_json::{Value, json};
use support::rows::{Bind, fetch_rows, folios_of, outbox_status};
use support::{Backend, STRIPE_SECRET, TestApp, spawn_app, spawn_app_with};

fn pi_body(suffix: &str) -> String {
    stripe::sample_payment_intent(suffix, chrono::Utc::now().timestamp(), false)
}

/// A sample event with `edit` applied to its JSON.
fn edited(suffix: &str, edit: impl FnOnce(&mut Value)) -> String {
    let mut v: Value = serde_json::from_str(&pi_body(suffix)).expect("sample");
    edit(&mut v);
    v.to_string()
}

async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Asserts an answer's status and what it says: its `outcome` when accepted, its `error` code
/// when refused.
fn assert_said(status: u16, body: &Value, want_status: u16, want: &str) {
    let key = if want_status < 300 {
        "outcome"
    } else {
        "error"
    };
    assert_eq!(
        (status, body[key].as_str()),
        (want_status, Some(want)),
        "{body}"
    );
}

async fn a_paid_payment_intent_is_frozen_with_its_payment_in_one_outbox_row(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let created = 1_768_447_800; // 2026-01-15T03:30:00Z = 2026-01-14T21:30:00 in Mexico City
    let body = stripe::sample_payment_intent("frozen", created, false);
    let r = app.post_stripe_signed(&body).await;
    let (status, ack) = json_of(r).await;
    assert_eq!(status, 200, "{ack}");
    assert_eq!(ack["outcome"], "invoice_queued");
    let rows = app.invoices().await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (row.provider.as_str(), row.payment_id.as_str()),
        ("stripe", "pi_test_frozen")
    );
    assert_eq!(
        (
            row.status.as_str(),
            row.serie.as_deref(),
            row.folio.as_deref()
        ),
        ("pending", Some("A"), None),
        "frozen without a folio: a worker assigns it when it seals the row"
    );
    assert_eq!(row.amount, "116.00");
    assert!(!row.livemode, "test-mode payment is marked");
    let req: InvoiceRequest = serde_json::from_str(row.request_json.as_deref().expect("request"))
        .expect("frozen request");
    assert_eq!(req.fecha.to_string(), "2026-01-14 21:30:00");
    // Stored with its references, by which the portal finds the sale.
    let refs: Vec<(String,)> = fetch_rows(
        &app.db,
        "SELECT r.reference FROM payment_refs r JOIN payments p ON p.id = r.payment_id \
         WHERE p.payment_id = $1 ORDER BY r.reference",
        &[Bind::Str("pi_test_frozen")],
    )
    .await;
    assert!(
        refs.iter().any(|r| r.0 == "PI_TEST_FROZEN"),
        "the payment id is a reference: {refs:?}"
    );
    assert_eq!(
        (req.forma_pago.as_str(), req.metodo_pago.as_str()),
        ("04", "PUE")
    );
    assert_eq!(req.folio, None);
    assert_eq!(req.lines[0].unit_price.to_string(), "116.00");
    match &req.receptor {
        ReceptorData::Nominativo {
            rfc,
            regimen_fiscal,
            domicilio_fiscal,
            uso_cfdi,
            ..
        } => {
            assert_eq!(
                (
                    rfc.as_str(),
                    regimen_fiscal.as_str(),
                    domicilio_fiscal.as_str(),
                    uso_cfdi.as_str()
                ),
                ("XIQB891116QE4", "612", "26015", "G03")
            );
        }
        other => panic!("unexpected receptor {other:?}"),
    }
    assert_eq!(
        row.stamp_key.as_deref(),
        Some(autofactura::domain::StampKey::derive("stripe", "pi_test_frozen", "ingreso").as_str())
    );
    // The frozen request seals as is. A worker finds this sale (January 2026) past the SAT's
    // window before numbering it: it expires unsent without taking a folio.
    let csd = autofactura::sandbox::csd().expect("csd");
    autofactura::cfdi::seal(&req, &csd).expect("the frozen request seals");
    app.drain(30).await;
    let key = autofactura::domain::StampKey::derive("stripe", "pi_test_frozen", "ingreso");
    let doc = outbox_status(&app.db, key.as_str()).await.expect("row");
    assert_eq!(
        (
            doc.state.as_str(),
            doc.folio.as_deref(),
            doc.sealed_xml.is_some()
        ),
        ("expired", None, false)
    );
}

async fn a_redelivery_answers_200_and_writes_nothing_new(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let body = pi_body("redeliver");
    for expected in ["invoice_queued", "duplicate", "duplicate"] {
        let (status, ack) = json_of(app.post_stripe_signed(&body).await).await;
        assert_eq!((status, ack["outcome"].as_str()), (200, Some(expected)));
    }
    assert_eq!(app.invoices().await.len(), 1);
    assert_eq!(app.events().await.len(), 1);
    let refs: Vec<(String,)> = fetch_rows(
        &app.db,
        "SELECT reference FROM payment_refs ORDER BY reference",
        &[],
    )
    .await;
    assert_eq!(
        refs,
        [
            ("ORD-REDELIVER".to_owned(),),
            ("PI_TEST_REDELIVER".to_owned(),)
        ],
        "the payment id and the order number, each once"
    );
    // No folio was spent on the duplicates.
    app.post_stripe_signed(&pi_body("next")).await;
    app.drain(30).await;
    let mut folios: Vec<_> = app
        .invoices()
        .await
        .into_iter()
        .filter_map(|r| r.folio)
        .collect();
    // Which of the two sales a worker numbers first is not this test's point: that the two
    // folios are 1 and 2, with none spent on the redeliveries, is.
    folios.sort();
    assert_eq!(folios, ["1", "2"]);
}

async fn fifty_concurrent_deliveries_of_one_event_yield_one_payment_and_one_outbox_row(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let app = Arc::new(app);
    let body = Arc::new(pi_body("concurrent"));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (app, body) = (app.clone(), body.clone());
        set.spawn(async move { app.post_stripe_signed(&body).await.status().as_u16() });
    }
    let mut statuses = Vec::new();
    while let Some(s) = set.join_next().await {
        statuses.push(s.expect("task"));
    }
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let rows = app.invoices().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(app.events().await.len(), 1);
    app.drain(30).await;
    assert_eq!(folios_of(&app.db, "A").await, [1], "one folio, the first");
}

/// Different events of one payment at once (Stripe sends several for one sale): each event is
/// kept, the payment and its invoice once.
async fn twenty_concurrent_events_of_one_payment_yield_one_invoice_and_keep_every_event(
    b: Backend,
) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let app = Arc::new(app);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..20 {
        let body = edited("race", |v| v["id"] = json!(format!("evt_race_{i}")));
        let app = app.clone();
        set.spawn(async move { json_of(app.post_stripe_signed(&body).await).await });
    }
    let mut queued = 0;
    while let Some(r) = set.join_next().await {
        let (status, ack) = r.expect("task");
        assert_eq!(status, 200, "{ack}");
        queued += usize::from(ack["outcome"] == "invoice_queued");
    }
    assert_eq!(queued, 1, "one delivery queued the invoice");
    assert_eq!(app.events().await.len(), 20, "every event is kept");
    assert_eq!(app.invoices().await.len(), 1);
    app.drain(30).await;
    assert_eq!(folios_of(&app.db, "A").await, [1], "one folio, the first");
}

async fn a_missing_or_wrong_signature_is_refused_with_a_reason_and_nothing_written(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let body = pi_body("badsig");
    let (s, e) = json_of(app.post_stripe(&body, None).await).await;
    assert_eq!((s, e["error"].as_str()), (400, Some("bad_signature")));
    assert!(
        e["reason"]
            .as_str()
            .unwrap_or("")
            .contains("Stripe-Signature"),
        "{e}"
    );
    let t = chrono::Utc::now().timestamp();
    let wrong = signature::stripe_header(&["whsec_wrong"], t, body.as_bytes());
    let (s, e) = json_of(app.post_stripe(&body, Some(wrong)).await).await;
    assert_eq!(s, 400);
    assert!(
        e["reason"]
            .as_str()
            .unwrap_or("")
            .contains("no signatures found matching"),
        "{e}"
    );
    let tampered = signature::stripe_header(&[STRIPE_SECRET], t, body.as_bytes());
    let (s, _) = json_of(
        app.post_stripe(&body.replace("11600", "1"), Some(tampered))
            .await,
    )
    .await;
    assert_eq!(s, 400);
    assert!(app.events().await.is_empty());
    assert!(app.invoices().await.is_empty());
}

async fn a_stale_or_future_timestamp_is_refused(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let body = pi_body("stale");
    let now = chrono::Utc::now().timestamp();
    // Well outside the 300 s window: a request that takes a second to arrive under load would
    // bring a timestamp 301 s ahead back inside it.
    for t in [now - 400, now + 400] {
        let h = signature::stripe_header(&[STRIPE_SECRET], t, body.as_bytes());
        let (s, e) = json_of(app.post_stripe(&body, Some(h)).await).await;
        assert_said(s, &e, 400, "stale_timestamp");
    }
    assert!(app.events().await.is_empty());
}

async fn a_signed_but_malformed_body_is_refused_and_kept_for_audit(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let body = "{\"id\": \"evt_1\", \"type\": ";
    let (s, e) = json_of(app.post_stripe_signed(body).await).await;
    assert_said(s, &e, 400, "malformed_payload");
    let events = app.events().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].status, "malformed");
    assert_eq!(events[0].raw_body, body.as_bytes());
    assert!(
        events[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("not a Stripe event")
    );
    assert!(app.invoices().await.is_empty());
}

async fn a_payment_without_rfc_is_recorded_as_awaiting_the_factura_global(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let body = edited("norfc", |v| {
        v["data"]["object"]["metadata"] = json!({ "order_id": "ORD-1" })
    });
    let (s, ack) = json_of(app.post_stripe_signed(&body).await).await;
    assert_said(s, &ack, 200, "payment_recorded");
    let rows = app.invoices().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status.as_str(), "awaiting_global");
    assert_eq!(rows[0].folio, None, "no folio spent");
    let listed = app.invoices_in("awaiting_global").await;
    assert_eq!(listed.len(), 1);
}

async fn an_unsupported_currency_or_incomplete_receptor_needs_attention_with_the_reason(
    b: Backend,
) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let usd = edited("usd", |v| v["data"]["object"]["currency"] = json!("usd"));
    assert_eq!(app.post_stripe_signed(&usd).await.status(), 200);
    let partial = edited("partial", |v| {
        v["data"]["object"]["metadata"] = json!({ "rfc": "XIQB891116QE4" })
    });
    assert_eq!(app.post_stripe_signed(&partial).await.status(), 200);
    let no_amount = edited("noamount", |v| {
        let o = v["data"]["object"].as_object_mut().expect("object");
        o.remove("amount");
        o.remove("amount_received");
    });
    assert_eq!(app.post_stripe_signed(&no_amount).await.status(), 200);
    let rows = app.invoices_in("needs_attention").await;
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("currency USD"),
        "{:?}",
        rows[0]
    );
    assert!(
        rows[1]
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("régimen fiscal"),
        "{:?}",
        rows[1]
    );
    let events = app.events().await;
    let missing = events
        .iter()
        .find(|e| e.event_id == "evt_test_noamount")
        .expect("kept");
    assert_eq!(missing.status, "needs_attention");
    assert!(
        missing
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("missing amount")
    );
}

fn checkout(kind: &str, evt: &str, payment_status: &str) -> String {
    json!({
        "id": evt, "object": "event", "type": kind, "created": chrono::Utc::now().timestamp(), "livemode": false,
        "data": { "object": {
            "id": "cs_test_1", "object": "checkout.session", "payment_intent": "pi_from_checkout",
            "payment_status": payment_status, "amount_total": 23200, "currency": "mxn",
            "payment_method_types": ["oxxo"],
            "customer_details": {
                "name": "Jenny Rosen", "business_name": "ESCUELA KEMPER URGATE", "email": "j@example.mx",
                "address": { "postal_code": "42501" },
                "tax_ids": [{ "type": "eu_vat", "value": "X" }, { "type": "mx_rfc", "value": "eku9003173c9" }]
            },
            "metadata": { "regimen_fiscal": "601" }
        }}
    })
    .to_string()
}

async fn checkout_sessions_invoice_when_paid_including_async_oxxo(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (_, ack) = json_of(
        app.post_stripe_signed(&checkout("checkout.session.completed", "evt_c1", "unpaid"))
            .await,
    )
    .await;
    assert_eq!(ack["outcome"], "ignored");
    assert!(app.invoices().await.is_empty());
    let (_, ack) = json_of(
        app.post_stripe_signed(&checkout(
            "checkout.session.async_payment_succeeded",
            "evt_c2",
            "paid",
        ))
        .await,
    )
    .await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    // The same sale seen through its PaymentIntent is the same payment.
    let pi = edited("x", |v| {
        v["id"] = json!("evt_pi_same");
        v["data"]["object"]["id"] = json!("pi_from_checkout");
    });
    let (_, ack) = json_of(app.post_stripe_signed(&pi).await).await;
    assert_eq!(ack["outcome"], "duplicate_payment");
    let rows = app.invoices().await;
    assert_eq!(rows.len(), 1);
    let req: InvoiceRequest =
        serde_json::from_str(rows[0].request_json.as_deref().expect("json")).expect("request");
    assert_eq!(req.forma_pago, "01", "OXXO is cash");
    assert!(
        matches!(&req.receptor, ReceptorData::Nominativo { rfc, .. } if rfc.as_str() == "EKU9003173C9")
    );
    assert_eq!(req.lines[0].unit_price.to_string(), "232.00");
}

async fn refunds_disputes_and_other_events_are_recorded_or_ignored_with_200(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let ev = |id: &str, kind: &str| {
        json!({ "id": id, "type": kind, "created": 1, "livemode": false,
                "data": { "object": { "id": "ch_1", "payment_intent": "pi_9", "amount_refunded": 100 } } })
        .to_string()
    };
    for (id, kind, outcome) in [
        ("evt_r", "charge.refunded", "recorded"),
        ("evt_d", "charge.dispute.created", "recorded"),
        ("evt_o", "customer.created", "ignored"),
    ] {
        let (s, ack) = json_of(app.post_stripe_signed(&ev(id, kind)).await).await;
        assert_eq!((s, ack["outcome"].as_str()), (200, Some(outcome)), "{kind}");
    }
    let events = app.events().await;
    assert_eq!(events.len(), 3);
    assert_eq!(events[0].payment_ref.as_deref(), Some("pi_9"));
    assert!(app.invoices().await.is_empty());
}

async fn an_unavailable_database_answers_503_so_the_provider_retries(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    app.db.close().await;
    let (s, e) = json_of(app.post_stripe_signed(&pi_body("down")).await).await;
    assert_said(s, &e, 503, "unavailable");
    assert_eq!(app.get("/readyz").await.status(), 503);
}

async fn health_and_readiness_report_the_database_and_workers(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    assert_eq!(app.get("/healthz").await.status(), 200);
    let (s, body) = json_of(app.get("/readyz").await).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["database"], "ok");
    assert_eq!(body["workers"][0]["name"], "mp_fetch_retry");
}

/// A local stand-in for the Mercado Pago payments API that can be switched off.
struct FakeMp {
    base: String,
    up: Arc<AtomicBool>,
}

async fn fake_mp() -> FakeMp {
    let up = Arc::new(AtomicBool::new(true));
    let flag = up.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = actix_web::HttpServer::new(move || {
        let flag = flag.clone();
        actix_web::App::new().route(
            "/v1/payments/{id}",
            actix_web::web::get().to(
                move |id: actix_web::web::Path<String>, req: actix_web::HttpRequest| {
                    let flag = flag.clone();
                    async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("");
                        if !flag.load(Ordering::SeqCst) {
                            actix_web::HttpResponse::ServiceUnavailable().body("down")
                        } else if auth != "Bearer TEST-token" {
                            actix_web::HttpResponse::Unauthorized().body("bad token")
                        } else {
                            actix_web::HttpResponse::Ok()
                                .content_type("application/json")
                                .body(mercadopago::sample_payment(
                                    &id,
                                    "2026-08-19T09:40:03.000-06:00",
                                ))
                        }
                    }
                },
            ),
        )
    })
    .workers(1)
    .listen(listener)
    .expect("listen")
    .run();
    tokio::spawn(server);
    FakeMp {
        base: format!("http://127.0.0.1:{port}"),
        up,
    }
}

fn mp_notification(id: &str, data_id: &str) -> String {
    json!({ "id": id, "live_mode": false, "type": "payment", "date_created": "2026-08-19T09:40:04.000-06:00",
            "user_id": 44444, "api_version": "v1", "action": "payment.created", "data": { "id": data_id } })
    .to_string()
}

/// Mercado Pago's notification `id` of payment `data_id`, signed with the test secret.
async fn notify(app: &TestApp, id: &str, data_id: &str) -> (u16, Value) {
    json_of(
        app.post_mp_signed(data_id, &mp_notification(id, data_id))
            .await,
    )
    .await
}

async fn spawn_with_mp(b: Backend, mp: &FakeMp) -> Option<TestApp> {
    spawn_app_with(
        b,
        &format!(
            "api_base = \"{}\"\nretry_interval_seconds = 1\nfetch_timeout_seconds = 2\n",
            mp.base
        ),
    )
    .await
}

async fn mercadopago_approved_payment_is_fetched_and_invoiced(b: Backend) {
    let mp = fake_mp().await;
    let Some(app) = spawn_with_mp(b, &mp).await else {
        return;
    };
    let (s, ack) = notify(&app, "n-1", "5466310457").await;
    assert_said(s, &ack, 200, "invoice_queued");
    let (_, ack) = notify(&app, "n-1", "5466310457").await;
    assert_eq!(ack["outcome"], "duplicate");
    let (_, ack) = notify(&app, "n-2", "5466310457").await;
    assert_eq!(ack["outcome"], "duplicate_payment");
    let rows = app.invoices().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].provider.as_str(), rows[0].amount.as_str()),
        ("mercadopago", "116.00")
    );
    let req: InvoiceRequest =
        serde_json::from_str(rows[0].request_json.as_deref().expect("json")).expect("request");
    assert_eq!(
        (req.forma_pago.as_str(), req.fecha.to_string().as_str()),
        ("28", "2026-08-19 09:40:03")
    );
}

/// The sample payment lists two items (`additional_info.items`, quantity and price as text and
/// as a number): two Conceptos, keyed by `[invoice.products]` through the item id.
async fn mercadopago_items_become_one_concepto_each(b: Backend) {
    let mp = fake_mp().await;
    let Some(app) = spawn_app_with(
        b,
        &format!(
            "api_base = \"{}\"\n[invoice.products.SOPORTE]\nclave_prod_serv = \"81112101\"\nclave_unidad = \"E48\"\n",
            mp.base
        ),
    )
    .await
    else {
        return;
    };
    let (s, ack) = notify(&app, "n-items", "5466310458").await;
    assert_said(s, &ack, 200, "invoice_queued");
    // The fake's payment is months old (past the 72-hour window): the frozen request is
    // checked, and built as the worker would.
    let rows = app.invoices().await;
    let req: InvoiceRequest =
        serde_json::from_str(rows[0].request_json.as_deref().expect("json")).expect("request");
    let lines: Vec<(&str, &str, Option<&str>, &str, String)> = req
        .lines
        .iter()
        .map(|l| {
            (
                l.clave_prod_serv.as_str(),
                l.clave_unidad.as_str(),
                l.no_identificacion.as_deref(),
                l.descripcion.as_str(),
                l.unit_price.to_string(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            (
                "01010101",
                "ACT",
                Some("PLAN-PRO"),
                "Plan Pro - agosto 2026",
                "87".into()
            ),
            (
                "81112101",
                "E48",
                Some("SOPORTE"),
                "Soporte prioritario",
                "29.00".into()
            ),
        ]
    );
    let built = autofactura::cfdi::build(&req, "30001000000500003416").expect("build");
    assert_eq!(built.total.to_string(), "116.00");
}

async fn mercadopago_notification_is_kept_when_the_api_is_down_and_resolved_by_the_retry(
    b: Backend,
) {
    let mp = fake_mp().await;
    mp.up.store(false, Ordering::SeqCst);
    let Some(app) = spawn_with_mp(b, &mp).await else {
        return;
    };
    let (s, ack) = notify(&app, "n-down", "777").await;
    assert_said(s, &ack, 200, "stored_pending_fetch");
    assert!(app.invoices().await.is_empty());
    let ev = app.events().await;
    assert_eq!(ev[0].status, "pending_fetch");
    assert!(
        ev[0].reason.as_deref().unwrap_or("").contains("503"),
        "{:?}",
        ev[0].reason
    );
    mp.up.store(true, Ordering::SeqCst);
    // The background retry runs every second; wait for it (bounded), not for a fixed time.
    let mut rows = Vec::new();
    for _ in 0..300 {
        rows = app.invoices().await;
        if !rows.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(rows.len(), 1, "the stored notification was resolved");
    assert_eq!(rows[0].payment_id, "777");
    assert_eq!(app.events().await[0].status, "processed");
}

async fn mercadopago_bad_signature_is_refused(b: Backend) {
    let mp = fake_mp().await;
    let Some(app) = spawn_with_mp(b, &mp).await else {
        return;
    };
    let query = "?data.id=1&type=payment";
    let (s, _) = post_mp(
        &app,
        query,
        "1704908010",
        "r",
        "00",
        &mp_notification("n", "1"),
    )
    .await;
    assert_eq!(s, 400);
    // Signed for another data.id: refused too.
    let ts = chrono::Utc::now().timestamp().to_string();
    let v1 = signature::mp_sign(support::MP_SECRET, Some("2"), Some("r"), &ts);
    let (s, _) = post_mp(&app, query, &ts, "r", &v1, &mp_notification("n", "1")).await;
    assert_eq!(s, 400);
    assert!(app.events().await.is_empty());
}

/// A Mercado Pago delivery with the headers given as is.
async fn post_mp(
    app: &TestApp,
    query: &str,
    ts: &str,
    request_id: &str,
    v1: &str,
    body: &str,
) -> (u16, Value) {
    json_of(
        app.http
            .post(format!("{}/webhooks/mercadopago{query}", app.address))
            .header("x-signature", format!("ts={ts},v1={v1}"))
            .header("x-request-id", request_id)
            .body(body.to_owned())
            .send()
            .await
            .expect("request"),
    )
    .await
}

/// Correctly signed, yet refused with nothing stored: a `ts` older than the tolerance, a
/// notification without the signed `?data.id=`, and a replay of a delivery already received
/// (even with the unsigned body edited so the event id looks new). A good one still works.
async fn mercadopago_stale_replayed_or_unsigned_notifications_are_refused(b: Backend) {
    let mp = fake_mp().await;
    let Some(app) = spawn_with_mp(b, &mp).await else {
        return;
    };
    let tolerance = app.settings.mercadopago.tolerance_seconds;
    assert!(tolerance > 0, "a tolerance by default");
    let now = chrono::Utc::now().timestamp();
    let secret = support::MP_SECRET;
    let old = (now - tolerance - 60).to_string();
    let ts = now.to_string();
    // (ts, the data.id signed and sent, x-request-id, notification id, error, its reason says)
    let refused = [
        // Older than the tolerance.
        (
            &old,
            Some("5466310457"),
            "r-old",
            "n-old",
            "stale_timestamp",
            "tolerance",
        ),
        // Signed without data.id (the body's is not signed).
        (&ts, None, "r-noid", "n-noid", "missing_data_id", "data.id"),
    ];
    for (ts, data_id, rid, id, error, reason) in refused {
        let v1 = signature::mp_sign(secret, data_id, Some(rid), ts);
        let query = data_id.map_or(String::new(), |d| format!("data.id={d}&"));
        let body = mp_notification(id, "5466310457");
        let (s, body) = post_mp(&app, &format!("?{query}type=payment"), ts, rid, &v1, &body).await;
        assert_said(s, &body, 400, error);
        assert!(
            body["reason"].as_str().unwrap_or("").contains(reason),
            "{body}"
        );
    }
    assert!(app.events().await.is_empty(), "nothing stored");
    assert!(app.invoices().await.is_empty());
    // A good one.
    let v1 = signature::mp_sign(secret, Some("5466310457"), Some("r-1"), &ts);
    let good = mp_notification("n-1", "5466310457");
    let query = "?data.id=5466310457&type=payment";
    let (s, ack) = post_mp(&app, query, &ts, "r-1", &v1, &good).await;
    assert_said(s, &ack, 200, "invoice_queued");
    // The same delivery again, and again with the body's notification id edited.
    for body in [good.clone(), mp_notification("n-forged", "5466310457")] {
        let (s, refused) = post_mp(&app, query, &ts, "r-1", &v1, &body).await;
        assert_said(s, &refused, 409, "replayed");
    }
    assert_eq!(app.events().await.len(), 1, "the replays stored nothing");
    assert_eq!(app.invoices().await.len(), 1);
    // A new delivery (new x-request-id) of the same notification is a redelivery, as before.
    let v1 = signature::mp_sign(secret, Some("5466310457"), Some("r-2"), &ts);
    let (s, ack) = post_mp(&app, query, &ts, "r-2", &v1, &good).await;
    assert_said(s, &ack, 200, "duplicate");
}

on_both_backends!(
    a_paid_payment_intent_is_frozen_with_its_payment_in_one_outbox_row,
    a_redelivery_answers_200_and_writes_nothing_new,
    fifty_concurrent_deliveries_of_one_event_yield_one_payment_and_one_outbox_row,
    twenty_concurrent_events_of_one_payment_yield_one_invoice_and_keep_every_event,
    a_missing_or_wrong_signature_is_refused_with_a_reason_and_nothing_written,
    a_stale_or_future_timestamp_is_refused,
    a_signed_but_malformed_body_is_refused_and_kept_for_audit,
    a_payment_without_rfc_is_recorded_as_awaiting_the_factura_global,
    an_unsupported_currency_or_incomplete_receptor_needs_attention_with_the_reason,
    checkout_sessions_invoice_when_paid_including_async_oxxo,
    refunds_disputes_and_other_events_are_recorded_or_ignored_with_200,
    an_unavailable_database_answers_503_so_the_provider_retries,
    health_and_readiness_report_the_database_and_workers,
    mercadopago_approved_payment_is_fetched_and_invoiced,
    mercadopago_items_become_one_concepto_each,
    mercadopago_notification_is_kept_when_the_api_is_down_and_resolved_by_the_retry,
    mercadopago_bad_signature_is_refused,
    mercadopago_stale_replayed_or_unsigned_notifications_are_refused,
);
