//! `autofactura chaos --authority arca`: Argentine Mercado Pago sales (ARS) through the
//! appliance to the sandbox ARCA, under the failures the exactly-once issuer is built for.
//!
//! It starts the sandbox ARCA (`arca-sim`, its own process) with faults (latency, 5xx, resets,
//! answers lost or broken after the voucher was authorized), two `serve` instances on one fresh
//! PostgreSQL database (one on SQLite without a URL) with `[arca]` on, and a stand-in of
//! Mercado Pago's payments API ([`payments_api`], some answers 503) that the instances read
//! the ARS payments from (buyers with a CUIT, a DNI or nothing: Facturas A and B; some
//! payments refunded: notas de crédito); the run sends the signed notifications ([`super::traffic`]: one to
//! four per payment, some at once to both instances). Every 3–8 s it SIGKILLs a random
//! instance and starts it again; it SIGKILLs the sandbox ARCA twice, restarting it once with
//! a window in which it cannot say what it issued (an unknown outcome cannot be resolved) and
//! once with a full outage. The kills go on until nearly every sale is authorized. When
//! everything is quiet it compares the sales sent, our sales and vouchers, and the sandbox's
//! list of every voucher it authorized ([`super::arca_check`]), and prints
//!
//! ```text
//! payments=N authorized=N recovered=R refunds=M credited=M lost=0 duplicated=0 orphans=0 gaps=0 kills=K faults=F
//! ```
//!
//! `recovered` counts vouchers whose CAE was learnt by consulting their number; `faults` the
//! faults the sandbox injected (sampled every second: those of its last second before a
//! kill are not counted).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;

use super::arca_check::{self, ArcaLine, OurVoucher, SentSale};
use super::procs::{Proc, free_port};
use super::traffic::{self, SendStats};
use super::{
    Cast, Options, SimKills, appliances, chaos_loop, connect, report, report_loop, settle, sim_args,
};
use crate::arcasim::SimVoucher;
use crate::domain::ArcaVoucherState;

/// The emisor: a responsable inscripto, so every anonymous sale is a Factura B.
const CUIT: i64 = 20_111_111_112;
const PTO_VTA: i32 = 3;

/// The WSAA certificate and key (any self-signed pair: the sandbox checks the signature, not
/// the chain).
const CERT: &[u8] = include_bytes!("../../fixtures/arca/test.crt");
const KEY: &[u8] = include_bytes!("../../fixtures/arca/test.key");

/// The sandbox ARCA's faults from its start: WSFEv1 takes only the tickets WSAA handed out
/// (kept in its journal, so they outlive its kills); latency, 5xx and resets before anything
/// is done; answers lost (or broken) after the voucher was authorized; and the `windows`
/// given (`outage`, `recover_outage`).
fn fault_spec(seed: u64, windows: &[(&str, (Duration, Duration))]) -> String {
    let mut s = format!(
        "seed={seed},strict_auth=true,latency=10ms..150ms,status500=0.03,status503=0.03,reset=0.03,lose_response=0.1,malformed=0.02"
    );
    for (name, (a, b)) in windows {
        s.push_str(&format!(",{name}={}ms..{}ms", a.as_millis(), b.as_millis()));
    }
    s
}

/// The settings of one instance: `[arca]` on the external sandbox, Mercado Pago's API at
/// `mp_url`, compressed time.
pub(super) fn appliance_settings(
    port: u16,
    database_url: &str,
    sim_url: &str,
    mp_url: &str,
) -> String {
    let mp = format!("api_base = \"{mp_url}\"\naccess_token = \"chaos\"\n");
    let head = super::instance_settings(port, database_url, &mp);
    format!(
        r#"{head}
[arca]
enabled = true
environment = "homologacion"
cuit = {CUIT}
punto_venta = {PTO_VTA}
cert = "arca.crt"
key = "arca.key"
condicion_iva = "responsable_inscripto"
wsaa_url = "{sim_url}/ws/services/LoginCms"
wsfe_url = "{sim_url}/wsfev1/service.asmx"
interval_seconds = 1
timeout_seconds = 3
"#
    )
}

/// What a payment of the run paid: 100.00 to 99,999.99 pesos, from its id alone (so the
/// payments API and the check agree without sharing anything).
pub fn amount_of(payment_id: &str) -> Decimal {
    let h = payment_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    });
    Decimal::new(10_000 + i64::try_from(h % 9_990_000).unwrap_or(0), 2)
}

/// The refund a payment of the run lists, from its id alone: about one payment in ten is
/// refunded a quarter of its amount (its nota de crédito), under refund id `9{id}`.
pub fn refund_of(payment_id: &str) -> Option<(String, Decimal)> {
    (amount_of(&format!("{payment_id}refund")) > Decimal::from(90_000)).then(|| {
        let quarter = (amount_of(payment_id) / Decimal::from(4)).round_dp(2);
        (format!("9{payment_id}"), quarter)
    })
}

/// Who bought, from the id alone: about a third are a responsable inscripto with a CUIT
/// (Factura A, and Nota de Crédito A: sequences of their own), a third give a DNI, a third
/// nothing (Factura B to a consumidor final).
fn buyer_of(payment_id: &str) -> (serde_json::Value, serde_json::Value) {
    let pick = amount_of(&format!("{payment_id}buyer")) * Decimal::from(100) % Decimal::from(3);
    if pick == Decimal::ZERO {
        (
            serde_json::json!({ "type": "CUIT", "number": "20267565393" }),
            serde_json::json!({ "condicion_iva": "responsable_inscripto" }),
        )
    } else if pick == Decimal::ONE {
        (
            serde_json::json!({ "type": "DNI", "number": "30123456" }),
            serde_json::json!({}),
        )
    } else {
        (serde_json::Value::Null, serde_json::json!({}))
    }
}

/// Mercado Pago's `GET /v1/payments/{id}` for the run: an approved payment in ARS (site MLA)
/// of [`amount_of`] the id, paid now by [`buyer_of`] the id, with [`refund_of`] the id listed
/// in its `refunds`; one answer in twenty is a 503 (the appliance retries its fetch). Serves
/// until the returned handle is dropped.
async fn payments_api() -> anyhow::Result<(String, actix_web::dev::ServerHandle)> {
    use actix_web::{App, HttpResponse, HttpServer, web};
    async fn payment(id: web::Path<String>) -> HttpResponse {
        if rand::random_bool(0.05) {
            return HttpResponse::ServiceUnavailable().body("chaos: payments API unavailable");
        }
        let now = (chrono::Utc::now() - chrono::Duration::hours(3))
            .format("%Y-%m-%dT%H:%M:%S%.3f-03:00")
            .to_string();
        let amount = amount_of(&id);
        let mut p: serde_json::Value =
            match serde_json::from_str(&crate::webhooks::mercadopago::sample_payment(&id, &now)) {
                Ok(p) => p,
                Err(e) => return HttpResponse::InternalServerError().body(e.to_string()),
            };
        p["currency_id"] = "ARS".into();
        p["site_id"] = "MLA".into();
        p["transaction_amount"] = "@AMOUNT@".into();
        p["additional_info"]["items"] = serde_json::json!([{
            "id": "PLAN", "title": "Plan mensual", "quantity": "1",
            "unit_price": amount.to_string(), "category_id": "services"
        }]);
        p["payer"]["email"] = "cliente@example.com.ar".into();
        let (identification, metadata) = buyer_of(&id);
        match p["payer"].as_object_mut() {
            Some(payer) if identification.is_null() => {
                payer.remove("identification");
            }
            _ => p["payer"]["identification"] = identification,
        }
        p["metadata"] = metadata;
        if let Some((refund, amount)) = refund_of(&id) {
            p["status_detail"] = "partially_refunded".into();
            p["transaction_amount_refunded"] = amount.to_string().into();
            p["refunds"] = serde_json::json!([{
                "id": refund, "payment_id": id.as_str(), "amount": "@REFUND@",
                "status": "approved", "date_created": now
            }]);
        }
        // The amount as JSON number text, exactly (the appliance reads it as written).
        let refunded = refund_of(&id).map_or_else(String::new, |(_, a)| a.to_string());
        let body = p
            .to_string()
            .replace("\"@AMOUNT@\"", &amount.to_string())
            .replace("\"@REFUND@\"", &refunded);
        HttpResponse::Ok()
            .content_type("application/json")
            .body(body)
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = HttpServer::new(|| App::new().route("/v1/payments/{id}", web::get().to(payment)))
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
    let handle = server.handle();
    tokio::spawn(server);
    Ok((url, handle))
}

/// The faults the sandbox injected, summed over its restarts: sampled every second.
async fn count_faults(http: reqwest::Client, sim: String, total: Arc<AtomicU64>) {
    let (mut before, mut last) = (0, 0);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(r) = http.get(format!("{sim}/_sim/stats")).send().await else {
            continue;
        };
        let Ok(v) = r.json::<serde_json::Value>().await else {
            continue;
        };
        let now = v["faults"].as_u64().unwrap_or(0);
        if now < last {
            // Restarted: its counter starts again.
            before += last;
        }
        last = now;
        total.store(before + now, Ordering::Relaxed);
    }
}

/// The ARCA run proper; `Ok(false)` when the counts are off.
pub async fn run_in(
    opts: &Options,
    seed: u64,
    dir: &Path,
    database_url: &str,
) -> anyhow::Result<bool> {
    let (db, http) = connect(database_url).await?;
    let mut rng = StdRng::seed_from_u64(seed);
    std::fs::write(dir.join("arca.crt"), CERT).context("cannot write arca.crt")?;
    std::fs::write(dir.join("arca.key"), KEY).context("cannot write arca.key")?;

    let instances = if opts.database_url.is_some() { 2 } else { 1 };
    // One sequence issues a few vouchers a second: the faults and kills span the time it takes.
    let chaos_for = Duration::try_from_secs_f64(
        (opts.payments as f64 / opts.rate)
            .max(opts.payments as f64 / 4.0)
            .max(30.0),
    )
    .unwrap_or(Duration::from_secs(30));
    let window = (chaos_for / 10).clamp(Duration::from_secs(3), Duration::from_secs(15));
    let sim_kill_at = vec![chaos_for / 4, chaos_for * 5 / 8];
    let recover_outage = (chaos_for / 4, chaos_for / 4 + window);
    let outage = (chaos_for * 5 / 8, chaos_for * 5 / 8 + window);

    let sim_port = free_port()?;
    let state = dir.join("arcasim-state.jsonl");
    let first_faults = fault_spec(seed, &[]);
    let sim = Proc::new(
        "arca-sim",
        sim_port,
        sim_args("arca-sim", &state, sim_port, &first_faults),
        dir,
        "/_sim/vouchers",
    )?;
    let (mp_url, mp) = payments_api().await?;
    let appliances = appliances(dir, instances, |port| {
        appliance_settings(port, database_url, &sim.url(), &mp_url)
    })?;
    let mut cast = Cast { sim, appliances };
    cast.start(&http).await?;
    let targets: Arc<Vec<String>> = Arc::new(cast.appliances.iter().map(Proc::url).collect());
    let sim_url = cast.sim.url();
    eprintln!(
        "chaos: arca-sim at {sim_url} (faults {first_faults}), payments API at {mp_url}, {} instance(s) at {}",
        targets.len(),
        targets.join(", ")
    );

    let now = chrono::Utc::now().timestamp();
    let plan = traffic::plan_mercadopago(opts.payments, opts.rate, now, &mut rng);
    let sent: Vec<SentSale> = plan
        .payments
        .iter()
        .map(|p| SentSale {
            provider: p.provider.clone(),
            payment_id: p.payment_id.clone(),
            amount: amount_of(&p.payment_id),
            refund: refund_of(&p.payment_id),
        })
        .collect();
    eprintln!(
        "chaos: {} sales, {} deliveries; arca-sim killed at {sim_kill_at:?}, cannot consult {recover_outage:?}, down {outage:?}",
        sent.len(),
        plan.deliveries,
    );

    let kills = Arc::new(AtomicU64::new(0));
    let faults = Arc::new(AtomicU64::new(0));
    let stats = Arc::new(SendStats::default());
    let stop = CancellationToken::new();
    let started = Instant::now();
    let sim_kills = SimKills {
        at: sim_kill_at.clone(),
        args: Box::new(move |since, k| {
            // Windows count from the restarted sandbox's own start.
            let (name, (a, b)) = if k == 1 {
                ("recover_outage", recover_outage)
            } else {
                ("outage", outage)
            };
            let w = (a.saturating_sub(since), b.saturating_sub(since));
            let faults = fault_spec(seed.wrapping_add(k as u64), &[(name, w)]);
            (sim_args("arca-sim", &state, sim_port, &faults), faults)
        }),
    };
    let chaos = tokio::spawn(chaos_loop(
        cast,
        stop.clone(),
        sim_kills,
        kills.clone(),
        rng.random(),
        (3000, 8000),
    ));
    let reporter = tokio::spawn(report_loop(
        db.clone(),
        stats.clone(),
        kills.clone(),
        plan.deliveries,
        opts.payments,
        started,
        true,
    ));
    let counter = tokio::spawn(count_faults(http.clone(), sim_url.clone(), faults.clone()));
    let give_up = Instant::now() + chaos_for * 3 + Duration::from_secs(300);
    let errors = traffic::send_all(
        plan.groups,
        targets,
        opts.rate,
        32,
        rng.random(),
        stats.clone(),
        give_up,
    )
    .await;
    // The kills go on while the sales are issued: until nearly all are, the sandbox's kills
    // are behind, or three times the planned time passed.
    let last_sim_kill = started + sim_kill_at.last().copied().unwrap_or_default();
    let enough = opts.payments * 95 / 100;
    loop {
        let authorized = db
            .arca_voucher_counts()
            .await?
            .into_iter()
            .find(|(s, _)| *s == ArcaVoucherState::Authorized)
            .map_or(0, |(_, n)| usize::try_from(n).unwrap_or(0));
        let now = Instant::now();
        if (authorized >= enough && now >= last_sim_kill + window && now >= started + chaos_for)
            || now >= started + chaos_for * 3
        {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (mut cast, moving) = settle(chaos, &stop, &http, &db, opts.payments, true, &kills).await?;
    reporter.abort();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    counter.abort();

    // Rejected vouchers (a number ARCA refused, used again) are no fault of the count, but
    // worth seeing.
    eprintln!(
        "chaos: our vouchers by state: {:?}",
        db.arca_voucher_counts().await?
    );
    let sales = db.list_invoices(None).await?;
    let ours: Vec<OurVoucher> = db
        .arca_recent_vouchers(i64::MAX)
        .await?
        .iter()
        .map(OurVoucher::from)
        .collect();
    let at_arca: Vec<SimVoucher> = http
        .get(format!("{sim_url}/_sim/vouchers"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let mut verdict = arca_check::check(&sent, &sales, &ours, &at_arca, CUIT, &moving);
    verdict
        .problems
        .extend(errors.iter().map(|e| format!("sender: {e}")));
    verdict.problems.extend(cast.crashes());

    cast.stop().await;
    mp.stop(false).await;
    db.close().await;
    let line = ArcaLine {
        verdict: &verdict,
        kills: kills.load(Ordering::Relaxed),
        faults: faults.load(Ordering::Relaxed),
    };
    report(&verdict.problems, verdict.is_ok(), started, &stats, &line);
    Ok(verdict.is_ok())
}
