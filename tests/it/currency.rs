//! Issue 18 §4–6 through the real server: a sale in another currency is invoiced in it with
//! the provider's or Banxico's rate (or held with the reason), payments go only to PAC
//! environments of their mode, and Fecha is local time at the LugarExpedicion.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use autofactura::cfdi::InvoiceRequest;
use autofactura::pacsim::Sandbox;
use autofactura::pacsim::faults::FaultSpec;
use autofactura::webhooks::stripe;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::support::admin::{assert_stamped, outbox_of};
use crate::support::sales::payment_status;
use crate::support::{Backend, TestApp, spawn_app_with};

use crate::support::sales::serve;

/// A Mercado Pago API whose payments are `amount` `currency`, approved a minute ago, with
/// `conversion_rate` when given.
fn fake_mp(currency: &'static str, conversion_rate: Option<&'static str>) -> String {
    serve(move |cfg| {
        cfg.route(
            "/v1/payments/{id}",
            actix_web::web::get().to(move |id: actix_web::web::Path<String>| async move {
                let approved = (Utc::now() - Duration::minutes(1))
                    .to_rfc3339_opts(SecondsFormat::Millis, true);
                let mut p: Value = serde_json::from_str(
                    &autofactura::webhooks::mercadopago::sample_payment(&id, &approved),
                )
                .expect("sample");
                p["currency_id"] = json!(currency);
                p["transaction_amount"] = json!(29.99);
                // One Concepto for the whole amount: the sample's items add up to its own
                // amount, not to this one.
                p["additional_info"] = json!(null);
                if let Some(r) = conversion_rate {
                    p["conversion_rate"] = serde_json::from_str(r).expect("number");
                }
                actix_web::HttpResponse::Ok()
                    .content_type("application/json")
                    .body(p.to_string())
            }),
        );
    })
}

async fn spawn(b: Backend, mp: &str, extra: &str) -> Option<TestApp> {
    spawn_app_with(b, &format!("api_base = \"{mp}\"\n{extra}")).await
}

async fn notify(app: &TestApp, data_id: &str) -> Value {
    let n = format!("n-{data_id}");
    crate::support::sales::mp_notify(app, &n, "payment.created", data_id).await
}

async fn a_usd_sale_carries_moneda_usd_and_the_providers_rate(b: Backend) {
    let mp = fake_mp("USD", Some("18.2512345"));
    let Some(app) = spawn(b, &mp, "").await else {
        return;
    };
    let ack = notify(&app, "7001").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let doc = outbox_of(&app, "7001").await;
    let req: InvoiceRequest = serde_json::from_str(&doc.request_json).expect("request");
    assert_eq!(req.moneda, "USD");
    assert_eq!(
        req.tipo_cambio.map(|t| t.to_string()).as_deref(),
        Some("18.251235"),
        "Mercado Pago's rate, to the 6 decimals of the XSD"
    );
    // The sandbox checks it against the published rate (USD 17.75 ± 5 %) and stamps it.
    app.drain(20).await;
    let doc = outbox_of(&app, "7001").await;
    assert_stamped(&doc);
    let xml = String::from_utf8(doc.stamped_xml.expect("xml")).expect("utf8");
    assert!(
        xml.contains(r#"Moneda="USD""#) && xml.contains(r#"TipoCambio="18.251235""#),
        "{xml}"
    );
    assert!(xml.contains(r#"Total="29.99""#), "{xml}");
}

async fn a_usd_sale_without_a_rate_source_is_held_with_its_reason(b: Backend) {
    let mp = fake_mp("USD", None);
    let Some(app) = spawn(b, &mp, "").await else {
        return;
    };
    notify(&app, "7002").await;
    let (status, reason) = payment_status(&app, "7002").await;
    assert_eq!(status, "needs_attention");
    let reason = reason.unwrap_or_default();
    assert!(
        reason.contains("no exchange rate for currency USD") && reason.contains("[fx] source"),
        "{reason}"
    );
    assert!(app.invoices_in("pending").await.is_empty());
}

/// A Banxico SIE API that wants token `tok`; `up` says whether it answers; counts calls.
fn fake_banxico(up: Arc<AtomicBool>, calls: Arc<AtomicUsize>) -> String {
    serve(move |cfg| {
        let (up, calls) = (up.clone(), calls.clone());
        cfg.route(
            "/series/{id}/datos/{from}/{to}",
            actix_web::web::get().to(
                move |p: actix_web::web::Path<(String, String, String)>,
                      req: actix_web::HttpRequest| {
                    let (up, calls) = (up.clone(), calls.clone());
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        let token = req.headers().get("bmx-token").and_then(|h| h.to_str().ok());
                        if !up.load(Ordering::SeqCst) {
                            return actix_web::HttpResponse::ServiceUnavailable().finish();
                        }
                        if token != Some("tok") || p.0 != "SF43718" {
                            return actix_web::HttpResponse::Unauthorized().finish();
                        }
                        let today = autofactura::domain::time::to_local(Utc::now()).date();
                        let day = |n: i64| (today - Duration::days(n)).format("%d/%m/%Y").to_string();
                        // The FIX of the days before the payment; the payment day's own (and a
                        // day without one) must not be taken.
                        let body = json!({ "bmx": { "series": [{ "idSerie": "SF43718", "titulo": "FIX",
                            "datos": [ { "fecha": day(3), "dato": "18.0100" },
                                       { "fecha": day(2), "dato": "18.3456" },
                                       { "fecha": day(1), "dato": "N/E" },
                                       { "fecha": day(0), "dato": "19.9999" } ] }] } });
                        actix_web::HttpResponse::Ok().json(body)
                    }
                },
            ),
        );
    })
}

/// A Mercado Pago app rating USD by a fake Banxico (down until `up`), retrying stored
/// notifications every second, waiting out a Banxico outage `retries` times.
async fn with_banxico(
    b: Backend,
    retries: i32,
) -> Option<(TestApp, Arc<AtomicBool>, Arc<AtomicUsize>)> {
    let mp = fake_mp("USD", None);
    let (up, calls) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let banxico = fake_banxico(up.clone(), calls.clone());
    let fx = format!(
        "retry_interval_seconds = 1\n[fx]\nsource = \"banxico\"\ntoken = \"tok\"\napi_base = \"{banxico}\"\ntimeout_seconds = 2\noutage_retries = {retries}\n"
    );
    let app = spawn(b, &mp, &fx).await?;
    Some((app, up, calls))
}

/// Waits (20 s at most) until the stored notification of `data_id` is no longer waiting.
async fn settled(app: &TestApp, data_id: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while app
        .events()
        .await
        .iter()
        .any(|e| e.payment_ref.as_deref() == Some(data_id) && e.status == "pending_fetch")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{data_id} still waits"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Banxico down: the notification is kept and asked again, not held; once Banxico answers,
/// the sale is frozen with the FIX, nobody retrying it by hand.
async fn a_usd_sale_is_rated_by_banxicos_fix_over_http_and_waits_while_it_is_down(b: Backend) {
    let Some((app, up, calls)) = with_banxico(b, 8).await else {
        return;
    };
    let ack = notify(&app, "7003").await;
    assert_eq!(ack["outcome"], "stored_pending_fetch", "{ack}");
    let ev = app.events().await;
    assert_eq!(ev[0].status, "pending_fetch");
    let reason = ev[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("Banxico's SIE API failed (HTTP 503)"),
        "{reason}"
    );
    assert!(
        app.invoices().await.is_empty(),
        "nothing held, nothing frozen yet"
    );
    up.store(true, Ordering::SeqCst);
    settled(&app, "7003").await;
    assert_eq!(payment_status(&app, "7003").await.0, "invoice_pending");
    let req: InvoiceRequest =
        serde_json::from_str(&outbox_of(&app, "7003").await.request_json).expect("request");
    assert_eq!(
        (req.moneda.as_str(), req.tipo_cambio.map(|t| t.to_string())),
        ("USD", Some("18.3456".into())),
        "the last FIX published before the day of the payment"
    );
    assert!(calls.load(Ordering::SeqCst) >= 2, "asked again");
}

/// Banxico down longer than `[fx] outage_retries` waits: the sale is then held, saying why
/// and what to do.
async fn a_usd_sale_is_held_once_banxico_stays_down_past_its_retries(b: Backend) {
    let Some((app, _up, calls)) = with_banxico(b, 1).await else {
        return;
    };
    let ack = notify(&app, "7005").await;
    assert_eq!(ack["outcome"], "stored_pending_fetch", "{ack}");
    settled(&app, "7005").await;
    let (status, reason) = payment_status(&app, "7005").await;
    assert_eq!(status, "needs_attention");
    let reason = reason.unwrap_or_default();
    assert!(
        reason.contains("Banxico's SIE API failed (HTTP 503)") && reason.contains("(Fix)"),
        "{reason}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "asked once more, then held"
    );
}

/// An API invoice in USD sent without tipo_cambio takes `[fx]`'s: Banxico down is a 503 to
/// retry, with nothing written; once Banxico answers, the same request freezes the FIX.
async fn an_api_invoice_without_tipo_cambio_takes_the_fx_rate(b: Backend) {
    let (up, calls) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let banxico = fake_banxico(up.clone(), calls.clone());
    let toml = format!(
        "[invoice]\ncurrencies = [\"MXN\", \"USD\"]\n[fx]\nsource = \"banxico\"\ntoken = \"tok\"\napi_base = \"{banxico}\"\ntimeout_seconds = 2\n"
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    let key = autofactura::api::keys::create_api_key(&app.db, "tests", "EKU9003173C9")
        .await
        .expect("api key");
    let mut body = crate::api::invoice();
    body["moneda"] = json!("USD");
    let post = || {
        app.http
            .post(format!("{}/v1/invoices", app.address))
            .bearer_auth(key.expose())
            .header("Idempotency-Key", "usd-fx-1")
            .json(&body)
            .send()
    };
    let r = post().await.expect("send");
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").and_then(|h| h.to_str().ok()),
        Some("60")
    );
    let err: Value = r.json().await.expect("json");
    assert_eq!(err["error"]["code"], "RATE_UNAVAILABLE", "{err}");
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Banxico's SIE API failed (HTTP 503)")
            && message.contains("send tipo_cambio"),
        "{message}"
    );
    assert!(app.invoices().await.is_empty(), "nothing written");
    up.store(true, Ordering::SeqCst);
    let r = post().await.expect("send");
    assert!(matches!(r.status().as_u16(), 201 | 202), "{}", r.status());
    let rows = app.invoices().await;
    assert_eq!(rows.len(), 1);
    let req: InvoiceRequest =
        serde_json::from_str(rows[0].request_json.as_deref().expect("json")).expect("request");
    assert_eq!(
        (req.moneda.as_str(), req.tipo_cambio.map(|t| t.to_string())),
        ("USD", Some("18.3456".into()))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// Runs the pool until the document of `payment_id` leaves the queue (20 s at most).
async fn stamped(app: &TestApp, payment_id: &str) -> autofactura::store::DocFull {
    let (pool, _services) = app.start_pool().await;
    let mut doc = outbox_of(app, payment_id).await;
    for _ in 0..100 {
        if matches!(
            doc.state.as_str(),
            "stamped" | "needs_attention" | "failed" | "expired"
        ) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        doc = outbox_of(app, payment_id).await;
    }
    pool.shutdown().await;
    doc
}

/// `[pac]` kind `sw` at a sandbox over HTTP (SW's wire shape), of environment `env`, with
/// the SAT test CSD a real PAC kind requires.
async fn sw_at(
    b: Backend,
    env: &str,
) -> Option<(
    TestApp,
    autofactura::pacsim::SandboxHandle,
    tempfile::TempDir,
)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, sim) = Sandbox::start_in_process(&dir.path().join("sim.jsonl"), FaultSpec::default())
        .await
        .expect("sandbox");
    let root = env!("CARGO_MANIFEST_DIR");
    let toml = format!(
        "[pac]\nkind = \"sw\"\nurl = \"{url}\"\nuser = \"sandbox\"\npassword = \"sandbox\"\nenvironment = \"{env}\"\n\
         [emisor]\ncsd_cer = \"{root}/fixtures/csd/EKU9003173C9.cer\"\ncsd_key = \"{root}/fixtures/csd/EKU9003173C9.key\"\ncsd_password = \"12345678a\"\n\
         [admin]\npassword = \"{}\"\n",
        crate::support::admin::PASSWORD
    );
    let app = spawn_app_with(b, &toml).await?;
    Some((app, sim, dir))
}

async fn pay(app: &TestApp, suffix: &str, livemode: bool) -> Value {
    let body = stripe::sample_payment_intent(suffix, Utc::now().timestamp() - 60, livemode);
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

async fn a_test_mode_sale_is_stamped_in_a_test_environment_and_a_live_one_held(b: Backend) {
    let Some((app, _sim, _dir)) = sw_at(b, "test").await else {
        return;
    };
    assert!(
        app.settings
            .pac_environment_label()
            .contains("live payments are held"),
        "{}",
        app.settings.pac_environment_label()
    );
    pay(&app, "env-test", false).await;
    pay(&app, "env-live", true).await;
    let test = stamped(&app, "pi_test_env-test").await;
    assert_stamped(&test);
    let live = outbox_of(&app, "pi_test_env-live").await;
    assert_eq!(
        (live.state.as_str(), live.last_error_code.as_deref()),
        ("needs_attention", Some("live_to_test_pac"))
    );
    assert!(
        live.last_error_message
            .unwrap_or_default()
            .contains("never sent to a test PAC"),
    );
    // The admin names the environment and the held document's reason and fix.
    let browser = crate::support::admin::Browser::new(&app);
    browser.login().await;
    let dash = browser.get("/admin").await.body;
    assert!(
        dash.contains("sw (test environment): test-mode payments are stamped; live payments are held in needs_attention"),
        "{dash}"
    );
    let detail = browser
        .get(&format!("/admin/payments/{}", live.payment_id))
        .await
        .body;
    assert!(
        detail.contains("live_to_test_pac")
            && detail.contains("Point [pac] at the production service"),
        "{detail}"
    );
    // In production it is the other way round.
    let Some((app, _sim, _dir)) = sw_at(b, "production").await else {
        return;
    };
    pay(&app, "env-test", false).await;
    let test = outbox_of(&app, "pi_test_env-test").await;
    assert_eq!(
        (test.state.as_str(), test.last_error_code.as_deref()),
        ("needs_attention", Some("test_mode"))
    );
}

/// A Stripe sale at `at` for an emisor in Tijuana: the frozen Fecha.
async fn fecha_at(app: &TestApp, suffix: &str, at: DateTime<Utc>) -> String {
    let body = stripe::sample_payment_intent(suffix, at.timestamp(), false);
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    let doc = outbox_of(app, &format!("pi_test_{suffix}")).await;
    let req: InvoiceRequest = serde_json::from_str(&doc.request_json).expect("request");
    req.fecha.to_string()
}

async fn an_emisor_in_tijuana_freezes_fecha_in_tijuana_time_on_both_sides_of_daylight_saving(
    b: Backend,
) {
    let Some(app) = spawn_app_with(b, "[emisor]\nlugar_expedicion = \"22000\"\n").await else {
        return;
    };
    let utc = |s: &str| {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    };
    // Tijuana leaves daylight saving on 2026-11-01 at 02:00 PDT: 01:59:59 PDT, then 01:00 PST.
    assert_eq!(
        fecha_at(&app, "tj-1", utc("2026-11-01T08:59:59Z")).await,
        "2026-11-01 01:59:59"
    );
    assert_eq!(
        fecha_at(&app, "tj-2", utc("2026-11-01T09:00:00Z")).await,
        "2026-11-01 01:00:00"
    );
    // and enters it on 2026-03-08 at 02:00 PST: 01:59:59 PST, then 03:00 PDT.
    assert_eq!(
        fecha_at(&app, "tj-3", utc("2026-03-08T09:59:59Z")).await,
        "2026-03-08 01:59:59"
    );
    assert_eq!(
        fecha_at(&app, "tj-4", utc("2026-03-08T10:00:00Z")).await,
        "2026-03-08 03:00:00"
    );
    // A sale of a minute ago is stamped: the sandbox reads Fecha in Tijuana time too (in
    // Mexico City time it would lie in Tijuana's future, which a PAC refuses).
    let now = Utc::now() - Duration::minutes(1);
    let fecha = fecha_at(&app, "tj-now", now).await;
    assert_eq!(
        fecha,
        autofactura::domain::time::to_local_at(now, "22000").to_string()
    );
    for suffix in ["tj-1", "tj-2", "tj-3", "tj-4"] {
        // Months old: they would expire unsent; only the fresh one is sent.
        let id = outbox_of(&app, &format!("pi_test_{suffix}")).await.id;
        crate::support::admin::mark_state(&app, id, "needs_attention").await;
    }
    app.drain(20).await;
    let doc = outbox_of(&app, "pi_test_tj-now").await;
    assert_stamped(&doc);
}

on_both_backends!(
    a_usd_sale_carries_moneda_usd_and_the_providers_rate,
    a_usd_sale_without_a_rate_source_is_held_with_its_reason,
    a_usd_sale_is_rated_by_banxicos_fix_over_http_and_waits_while_it_is_down,
    a_usd_sale_is_held_once_banxico_stays_down_past_its_retries,
    an_api_invoice_without_tipo_cambio_takes_the_fx_rate,
    a_test_mode_sale_is_stamped_in_a_test_environment_and_a_live_one_held,
    an_emisor_in_tijuana_freezes_fecha_in_tijuana_time_on_both_sides_of_daylight_saving,
);
