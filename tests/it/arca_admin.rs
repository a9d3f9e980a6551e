//! Argentina (issue 21): the admin's ARCA vouchers in a real headless Chromium. A voucher whose
//! answer was lost is listed first, as `unknown` with what it blocks; authorized ones show
//! their number, CAE and CAE due date.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use autofactura::arca::{
    Alicuota, Auth, CbteTipo, Environment, Issuer, Outcome, VoucherInput, Wsfe,
};
use autofactura::arcasim::ArcaSim;
use autofactura::arcasim::server::start;
use rust_decimal::Decimal;
use support::Backend;
use support::admin::admin_app;
use support::webdriver::{Driver, browser_paths};

use crate::admin_ux_e2e::sign_in_at;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_lists_arca_vouchers_open_ones_first_with_their_cae() {
    let Some((driver, chromium)) = browser_paths() else {
        return;
    };
    let Some(app) = admin_app(Backend::Sqlite).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    let sim = start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA");
    let auth = Auth {
        token: "t".into(),
        sign: "s".into(),
        cuit: 20_111_111_112,
    };
    let timeout = Duration::from_secs(5);
    let wsfe = Wsfe::new(&sim.wsfe_url(), auth, timeout).expect("wsfe");
    let issuer = Issuer::new(
        app.db.clone(),
        wsfe,
        Environment::Homologacion,
        3,
        CbteTipo::FacturaB,
        timeout,
    );
    let sale = |cents| VoucherInput::consumidor_final(Decimal::new(cents, 2), Alicuota::Veintiuno);
    let mut caes = Vec::new();
    for (key, cents) in [("mercadopago:a1", 121_000), ("mercadopago:a2", 242_000)] {
        match issuer.issue(key, &sale(cents)).await.expect("issue") {
            Outcome::Authorized { cae, .. } => caes.push(cae),
            o => panic!("{key}: {o:?}"),
        }
    }
    sim.sim().set_faults("lose_next=1").expect("faults");
    let lost = issuer
        .issue("mercadopago:a3", &sale(50_000))
        .await
        .expect("issue");
    assert!(
        matches!(lost, Outcome::Indeterminate { number: 3, .. }),
        "{lost:?}"
    );

    let d = Driver::start(&driver, &chromium).await;
    sign_in_at(&d, &app, "/admin/arca").await;
    let text = d.wait_text("00003-00000002").await;
    for cae in &caes {
        assert!(text.contains(&cae.code), "{} in {text}", cae.code);
        assert!(
            text.contains(&cae.due.format("%Y-%m-%d").to_string()),
            "{text}"
        );
    }
    assert!(text.contains("1 with an outcome not known yet"), "{text}");
    let rows = d
        .script(
            "return Array.from(document.querySelectorAll('#arca-vouchers tr[data-key]')).map(r => [r.dataset.key, r.dataset.state]);",
        )
        .await;
    let rows: Vec<(String, String)> = serde_json::from_value(rows).expect("rows");
    assert_eq!(
        rows,
        [
            ("mercadopago:a3".into(), "unknown".into()),
            ("mercadopago:a2".into(), "authorized".into()),
            ("mercadopago:a1".into(), "authorized".into()),
        ]
    );
    sim.stop().await;
}
