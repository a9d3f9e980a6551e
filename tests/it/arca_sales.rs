//! Argentina (issue 21), end to end: a signed Mercado Pago webhook for a payment in ARS, with
//! `[arca]` on, becomes one ARCA voucher with a CAE at the sandbox ARCA (logged in through
//! WSAA), issued by the background loop of the real server; no CFDI. Both backends.

use crate::ops_metrics::{scrape, value};
use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use autofactura::arcasim::server::{ArcaSimHandle, start};
use autofactura::arcasim::{ArcaSim, SimVoucher};
use autofactura::domain::ArcaVoucherState;
use autofactura::store::{ArcaVoucherRow, Db};
use autofactura::webhooks::mercadopago;
use support::sales::mp_notify;
use support::{Backend, TestApp, spawn_app_with};

pub const CUIT: i64 = 20_111_111_112;
pub const PTO_VTA: i32 = 3;

/// A stand-in for Mercado Pago's `GET /v1/payments/{id}`: the sample payment, in ARS from
/// Argentina (site MLA), for 1210 pesos.
pub fn fake_mp_ars() -> String {
    support::sales::serve(|cfg| {
        cfg.route(
            "/v1/payments/{id}",
            actix_web::web::get().to(|id: actix_web::web::Path<String>| async move {
                let body = mercadopago::sample_payment(&id, "2026-08-19T09:40:03.000-03:00")
                    .replace(
                        "\"currency_id\": \"MXN\"",
                        "\"currency_id\": \"ARS\", \"site_id\": \"MLA\"",
                    )
                    .replace(
                        "\"transaction_amount\": 116.00",
                        "\"transaction_amount\": 1210.00",
                    )
                    .replace("\"unit_price\": \"87\"", "\"unit_price\": \"1000\"")
                    .replace("\"unit_price\": 29.00", "\"unit_price\": 210.00");
                actix_web::HttpResponse::Ok()
                    .content_type("application/json")
                    .body(body)
            }),
        );
    })
}

/// The `[mercadopago]` and `[arca]` settings of an appliance on the sandbox ARCA at `sim`.
pub fn arca_toml(mp_base: &str, sim_url: &str) -> String {
    let fixture = |f: &str| format!("{}/fixtures/arca/{f}", env!("CARGO_MANIFEST_DIR"));
    format!(
        "api_base = \"{mp_base}\"\nretry_interval_seconds = 1\nfetch_timeout_seconds = 5\n\
         [arca]\nenabled = true\ncuit = {CUIT}\npunto_venta = {PTO_VTA}\ncert = {:?}\nkey = {:?}\n\
         condicion_iva = \"responsable_inscripto\"\n\
         wsaa_url = \"{sim_url}/ws/services/LoginCms\"\nwsfe_url = \"{sim_url}/wsfev1/service.asmx\"\n\
         interval_seconds = 1\ntimeout_seconds = 5\n",
        fixture("test.crt"),
        fixture("test.key"),
    )
}

/// Polls `key`'s voucher until it is authorized (60 s at most).
pub async fn authorized(db: &Db, key: &str) -> ArcaVoucherRow {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v = db.arca_voucher(key).await.expect("read");
        if let Some(v) = v.filter(|v| v.state == ArcaVoucherState::Authorized) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key} was never authorized"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the sandbox authorized.
pub async fn sim_vouchers(sim_url: &str) -> Vec<SimVoucher> {
    reqwest::get(format!("{sim_url}/_sim/vouchers"))
        .await
        .expect("sim")
        .json()
        .await
        .expect("json")
}

/// The appliance and the sandbox ARCA; with `in_process`, the ARCA loop runs in the test
/// (else only `worker` processes issue).
async fn rig(
    b: Backend,
    dir: &tempfile::TempDir,
    in_process: bool,
) -> Option<(TestApp, ArcaSimHandle)> {
    rig_with(b, dir, in_process, &fake_mp_ars(), "").await
}

/// [`rig`] with the Mercado Pago stand-in at `mp` and `extra` settings after `[arca]`.
pub async fn rig_with(
    b: Backend,
    dir: &tempfile::TempDir,
    in_process: bool,
    mp: &str,
    extra: &str,
) -> Option<(TestApp, ArcaSimHandle)> {
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    sim.set_faults("strict_auth=true").expect("faults");
    let sim = start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA");
    let app = spawn_app_with(b, &format!("{}{extra}", arca_toml(mp, sim.url()))).await?;
    if in_process {
        // The pool `serve` runs, with its ARCA lane (the test app starts none).
        app.run_workers().await;
    }
    Some((app, sim))
}

async fn a_mercado_pago_sale_in_ars_becomes_one_arca_voucher_with_a_cae(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((app, sim)) = rig(b, &dir, true).await else {
        return;
    };
    let ack = mp_notify(&app, "n-ar-1", "payment.created", "7100000001").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    // The same notification again, and another for the same payment: still one voucher.
    mp_notify(&app, "n-ar-1", "payment.created", "7100000001").await;
    mp_notify(&app, "n-ar-2", "payment.updated", "7100000001").await;
    let v = authorized(&app.db, "mercadopago:7100000001").await;
    // An RI selling to an anonymous consumidor final: Factura B (6), number 1.
    assert_eq!((v.pto_vta, v.cbte_tipo, v.number), (PTO_VTA, 6, 1));
    let cae = v.cae.clone().expect("a CAE");
    let at_arca = sim_vouchers(sim.url()).await;
    assert_eq!(at_arca.len(), 1, "{at_arca:?}");
    assert_eq!(
        (at_arca[0].cuit, at_arca[0].cae.as_str()),
        (CUIT, cae.as_str())
    );
    assert_eq!(at_arca[0].input.imp_total.to_string(), "1210.00");
    assert_eq!(at_arca[0].input.imp_iva.to_string(), "210.00");
    let sales = app.invoices().await;
    assert_eq!(sales.len(), 1);
    assert!(
        sales[0].stamp_key.is_none() && sales[0].request_json.is_none(),
        "no CFDI for an ARS sale: {:?}",
        sales[0].status
    );
    // The sale says so once its loop settled it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, reason): (String, Option<String>) = sqlx_row(&app, "7100000001").await;
        if status == "arca_authorized" {
            assert!(reason.unwrap_or_default().contains(&cae));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "status {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The operator sees it in the metrics: the voucher by state (this database), and the calls
    // to ARCA (the process's counters, shared by the tests of this binary: at least these).
    let m = scrape(&app, &app.admin_address).await;
    assert_eq!(
        value(&m, "autofactura_arca_vouchers", &[("state", "authorized")]),
        1.0
    );
    for op in ["loginCms", "FECAESolicitar"] {
        let calls = value(
            &m,
            "autofactura_arca_requests_total",
            &[("operation", op), ("outcome", "answered")],
        );
        assert!(calls >= 1.0, "{op}: {calls}");
    }
    sim.stop().await;
}

/// Polls sale `payment_id` until its loop settled it `arca_authorized` (90 s at most).
pub(crate) async fn settled(app: &TestApp, payment_id: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (status, reason) = sqlx_row(app, payment_id).await;
        if status == "arca_authorized" {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{payment_id}: {status} {reason:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn a_worker_killed_while_arca_authorizes_leaves_one_voucher_and_no_gap(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((app, sim)) = rig(b, &dir, false).await else {
        return;
    };
    // ARCA authorizes the first voucher and holds its answer: the worker is killed waiting.
    sim.sim().set_faults("hang_next=1").expect("faults");
    mp_notify(&app, "n-k-1", "payment.created", "7100000011").await;
    let log = app.config_file.with_extension("worker.log");
    let mut worker = support::worker_process(&app, &log, &[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while sim.sim().vouchers().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never reached ARCA"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.kill().expect("SIGKILL");
    worker.wait().expect("wait");
    sim.sim().set_faults("none").expect("faults");

    // A new worker resolves the number it reserved (consulting ARCA), then issues the next sale
    // at the next number.
    let mut restarted = support::worker_process(&app, &log, &[]);
    settled(&app, "7100000011").await;
    mp_notify(&app, "n-k-2", "payment.created", "7100000012").await;
    settled(&app, "7100000012").await;
    restarted.kill().expect("stop");
    let _ = restarted.wait();

    let at_arca = sim_vouchers(sim.url()).await;
    let numbers: Vec<i64> = at_arca.iter().map(|v| v.number).collect();
    assert_eq!(numbers, [1, 2], "one voucher per sale, no gap");
    let first = authorized(&app.db, "mercadopago:7100000011").await;
    let second = authorized(&app.db, "mercadopago:7100000012").await;
    assert_eq!(
        (first.number, first.cae.as_deref()),
        (1, Some(at_arca[0].cae.as_str()))
    );
    assert!(first.recovered, "learnt by consulting its number");
    assert_eq!(
        (second.number, second.cae.as_deref()),
        (2, Some(at_arca[1].cae.as_str()))
    );
    sim.stop().await;
}

async fn a_punto_de_venta_arca_does_not_list_issues_nothing_until_it_does(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((app, sim)) = rig(b, &dir, true).await else {
        return;
    };
    sim.sim().set_faults("ptos_venta=4+5").expect("faults");
    mp_notify(&app, "n-pv-1", "payment.created", "7100000021").await;
    // Two rounds ask ARCA for the points of sale; neither sends a voucher.
    let asked = || sim.sim().ptos_venta_asked.load(Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while asked() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "never checked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sim.sim().solicits.load(Ordering::SeqCst), 0, "nothing sent");
    assert_eq!(sqlx_row(&app, "7100000021").await.0, "arca_pending");
    // Once ARCA lists it, the sale is issued.
    sim.sim()
        .set_faults(&format!("ptos_venta=4+{PTO_VTA}"))
        .expect("faults");
    settled(&app, "7100000021").await;
    assert_eq!(sim_vouchers(sim.url()).await.len(), 1);
    sim.stop().await;
}

/// An ARS sale for ARCA is invoiced in pesos: with the exchange-rate source down it is recorded
/// at once, not kept waiting for a rate it does not need.
async fn an_ars_sale_for_arca_waits_for_no_exchange_rate(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    let sim = start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA");
    let mp = fake_mp_ars();
    // Pesos are an invoicing currency with a Banxico series, and nothing listens on port 9:
    // a rate lookup for this sale would be an outage, and the sale would wait for it.
    let toml = format!(
        "{}[invoice]\ncurrencies = [\"*\"]\n\
         [fx]\nsource = \"banxico\"\ntoken = \"tok\"\napi_base = \"http://127.0.0.1:9\"\n\
         timeout_seconds = 2\n[fx.series]\nARS = \"SF57767\"\n",
        arca_toml(&mp, sim.url())
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    let ack = mp_notify(&app, "n-ar-fx", "payment.created", "7100000061").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    let (status, _) = sqlx_row(&app, "7100000061").await;
    assert_eq!(status, "arca_pending");
    sim.stop().await;
}

/// The status and reason of payment `payment_id`.
pub async fn sqlx_row(app: &TestApp, payment_id: &str) -> (String, Option<String>) {
    let rows = app
        .db
        .arca_payment_status("mercadopago", payment_id)
        .await
        .expect("read");
    rows.expect("the payment is recorded")
}

crate::on_both_backends!(
    a_mercado_pago_sale_in_ars_becomes_one_arca_voucher_with_a_cae,
    a_worker_killed_while_arca_authorizes_leaves_one_voucher_and_no_gap,
    a_punto_de_venta_arca_does_not_list_issues_nothing_until_it_does,
    an_ars_sale_for_arca_waits_for_no_exchange_rate,
);
