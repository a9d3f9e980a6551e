//! The sandbox ARCA's faults (issue 21), on the `autofactura arca-sim` process over real HTTP:
//! the PAC sandbox's syntax at start and at runtime, every fault seen by the real WSFEv1
//! client, and the vouchers of lost answers kept across `kill -9`.

use crate::support;

use std::time::{Duration, Instant};

use autofactura::arca::wsfe::{Request, Solicit};
use autofactura::arca::{Alicuota, Auth, CbteTipo, VoucherInput, Wsfe, WsfeError};
use autofactura::arcasim::SimVoucher;
use rust_decimal::Decimal;
use support::sim::{set_faults, spawn_sandbox};

const CUIT: i64 = 20_267_565_393;
const PTO_VTA: i32 = 7;

fn client(url: &str) -> Wsfe {
    let auth = Auth {
        token: "sandbox-token".into(),
        sign: "sandbox-sign".into(),
        cuit: CUIT,
    };
    Wsfe::new(
        &format!("{url}/wsfev1/service.asmx"),
        auth,
        Duration::from_secs(5),
    )
    .expect("client")
}

fn request(number: i64) -> Request {
    Request {
        pto_vta: PTO_VTA,
        cbte_tipo: CbteTipo::FacturaB,
        number,
        cbte_fch: (chrono::Utc::now() - chrono::Duration::hours(3)).date_naive(),
        input: VoucherInput::consumidor_final(Decimal::new(121_000, 2), Alicuota::Veintiuno),
    }
}

async fn vouchers(http: &reqwest::Client, url: &str) -> Vec<SimVoucher> {
    http.get(format!("{url}/_sim/vouchers"))
        .send()
        .await
        .expect("sim")
        .json()
        .await
        .expect("json")
}

/// The sandbox process, SIGKILLed when dropped (a failed assertion must not leave it running).
struct Sim(std::process::Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn sim_text(http: &reqwest::Client, url: &str, what: &str) -> String {
    http.get(format!("{url}/_sim/{what}"))
        .send()
        .await
        .expect("sim")
        .text()
        .await
        .expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_arca_sim_injects_the_pac_sandbox_faults_and_keeps_lost_answers_across_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("arcasim.jsonl");
    let args = [
        "--state".as_ref(),
        state.as_os_str(),
        "--faults".as_ref(),
        "seed=1,lose_response=1,latency=300ms".as_ref(),
    ];
    let (child, url) = spawn_sandbox("arca-sim", &args);
    let child = Sim(child);
    let http = reqwest::Client::new();
    let w = client(&url);
    assert_eq!(
        sim_text(&http, &url, "faults").await,
        "seed=1,lose_response=1,latency=300ms"
    );

    // Authorized and written down, then the answer dropped; no answer leaves before the
    // latency.
    let started = Instant::now();
    let lost = w.solicit(&request(1)).await;
    assert!(matches!(lost, Err(WsfeError::Transport(_))), "{lost:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let at_arca = vouchers(&http, &url).await;
    assert_eq!(at_arca.len(), 1, "{at_arca:?}");
    assert_eq!(at_arca[0].number, 1);
    assert!(!at_arca[0].cae.is_empty());

    // At runtime: a 5xx and a reset come before anything is done.
    set_faults(&http, &url, "status500=1").await;
    let e = w.solicit(&request(2)).await.expect_err("500");
    assert!(e.to_string().contains("500"), "{e}");
    set_faults(&http, &url, "reset=1").await;
    let e = w.solicit(&request(2)).await.expect_err("reset");
    assert!(matches!(e, WsfeError::Transport(_)), "{e:?}");
    // An outage window answers 503 to every call; asking for issued vouchers alone can be
    // down while new ones are authorized.
    set_faults(&http, &url, "outage=0s..1h").await;
    let e = w.last_authorized(PTO_VTA, CbteTipo::FacturaB).await;
    assert!(e.expect_err("outage").to_string().contains("503"));
    set_faults(&http, &url, "recover_outage=0s..1h").await;
    let e = w.consult(PTO_VTA, CbteTipo::FacturaB, 1).await;
    assert!(e.expect_err("recover outage").to_string().contains("503"));
    let Solicit::Approved { cae, .. } = w.solicit(&request(2)).await.expect("answer") else {
        panic!("number 2 is next")
    };
    set_faults(&http, &url, "none").await;
    assert_eq!(sim_text(&http, &url, "faults").await, "none");
    assert_eq!(
        w.last_authorized(PTO_VTA, CbteTipo::FacturaB)
            .await
            .expect("up"),
        2
    );
    let stats: serde_json::Value =
        serde_json::from_str(&sim_text(&http, &url, "stats").await).expect("stats");
    assert_eq!(stats["faults"], 5, "{stats}");
    let bad = http
        .put(format!("{url}/_sim/faults"))
        .body("lose_late=2m")
        .send()
        .await
        .expect("sim");
    assert_eq!(bad.status(), 400, "a PAC-only fault is refused");

    // SIGKILL: both vouchers, the one whose answer was lost too, are still there.
    drop(child);
    let (child, url) = spawn_sandbox("arca-sim", &args[..2]);
    let child = Sim(child);
    let w = client(&url);
    let found = w
        .consult(PTO_VTA, CbteTipo::FacturaB, 1)
        .await
        .expect("consult")
        .expect("authorized before its answer was lost");
    let after = vouchers(&http, &url).await;
    let next = w.solicit(&request(3)).await;
    drop(child);
    assert_eq!(found.cae.code, at_arca[0].cae);
    let numbers: Vec<(i64, &str)> = after.iter().map(|v| (v.number, v.cae.as_str())).collect();
    assert_eq!(
        numbers,
        [(1, at_arca[0].cae.as_str()), (2, cae.code.as_str())]
    );
    let Ok(Solicit::Approved { cae: third, .. }) = next else {
        panic!("number 3 is next after the restart: {next:?}")
    };
    assert!(third != cae && third.code != at_arca[0].cae, "a new CAE");
}
