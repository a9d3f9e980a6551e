//! Argentina (issue 21): the admin's ARCA vouchers in a real headless Chromium. A voucher whose
//! answer was lost is listed first, as `unknown` with what it blocks; authorized ones show
//! their number, CAE and CAE due date. Blocked sequences, superseded keys, conflicts and
//! WSAA login refusals are shown with the action a human can take, and the actions work.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use autofactura::arca::wsfe::{Request, Solicit};
use autofactura::arca::{
    Alicuota, Auth, CbteTipo, Environment, Issuer, Outcome, VoucherInput, Wsfe,
};
use autofactura::arcasim::ArcaSim;
use autofactura::arcasim::server::{ArcaSimHandle, start};
use autofactura::store::ArcaLoginRefusal;
use rust_decimal::Decimal;
use support::admin::admin_app;
use support::webdriver::{Driver, browser_paths};
use support::{Backend, exec_sql};

use crate::admin_ux_e2e::sign_in_at;

struct Rig {
    driver: (std::path::PathBuf, std::path::PathBuf),
    app: support::TestApp,
    sim: ArcaSimHandle,
    wsfe: Wsfe,
    /// The issuer of Factura B at point 3, on the app's database and the sandbox.
    issuer: Issuer,
    _dir: tempfile::TempDir,
}

/// A browser, the admin app on SQLite and a sandbox ARCA; `None` without a browser or app.
async fn rig() -> Option<Rig> {
    let driver = browser_paths()?;
    let app = admin_app(Backend::Sqlite).await?;
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
        wsfe.clone(),
        Environment::Homologacion,
        3,
        CbteTipo::FacturaB,
        timeout,
    );
    Some(Rig {
        driver,
        app,
        sim,
        wsfe,
        issuer,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_lists_arca_vouchers_open_ones_first_with_their_cae() {
    let Some(Rig {
        driver: (driver, chromium),
        app,
        sim,
        issuer,
        _dir,
        ..
    }) = rig().await
    else {
        return;
    };
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

/// The voucher a foreign system writes at `number` of point 3, Factura B, today.
fn foreign(number: i64, input: VoucherInput) -> Request {
    Request {
        pto_vta: 3,
        cbte_tipo: CbteTipo::FacturaB,
        number,
        cbte_fch: (chrono::Utc::now() - chrono::Duration::hours(3)).date_naive(),
        input,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_admin_shows_blocked_sequences_superseded_keys_and_conflicts_with_their_actions() {
    let Some(Rig {
        driver: (driver, chromium),
        app,
        sim,
        wsfe,
        issuer,
        _dir,
    }) = rig().await
    else {
        return;
    };
    let sale = |cents| VoucherInput::consumidor_final(Decimal::new(cents, 2), Alicuota::Veintiuno);
    let faults = |spec: &str| sim.sim().set_faults(spec).expect("faults");
    let issue = |key: &'static str, cents| {
        let issuer = issuer.clone();
        async move { issuer.issue(key, &sale(cents)).await.expect("issue") }
    };
    assert!(matches!(
        issue("mercadopago:b1", 1_000).await,
        Outcome::Authorized { .. }
    ));
    // b2's send never arrives and can no longer land: b3 takes its number 2.
    faults("down=true");
    issue("mercadopago:b2", 2_000).await;
    faults("none");
    exec_sql(
        &app.db,
        "UPDATE arca_vouchers SET landing_until = NULL WHERE key = 'mercadopago:b2'",
    )
    .await;
    assert!(matches!(
        issue("mercadopago:b3", 3_000).await,
        Outcome::Authorized { number: 2, .. }
    ));
    // b4's send never arrives; another system takes number 3: a conflict.
    faults("down=true");
    issue("mercadopago:b4", 4_000).await;
    faults("none");
    let taken = wsfe
        .solicit(&foreign(3, sale(9_900)))
        .await
        .expect("answer");
    assert!(matches!(taken, Solicit::Approved { .. }), "{taken:?}");
    assert!(matches!(
        issue("mercadopago:b4", 4_000).await,
        Outcome::Conflict { .. }
    ));
    exec_sql(
        &app.db,
        "INSERT INTO payments (provider, payment_id, event_id, amount, currency, method, \
         customer_json, paid_at, livemode, status, reason, created_at, updated_at) VALUES \
         ('mercadopago', 'b4', 'e-b4', '40.00', 'ARS', 'account_money', '{}', \
         '2026-12-04T12:00:00Z', 0, 'needs_attention', 'ARCA: conflict', \
         '2026-12-04T12:00:00Z', '2026-12-04T12:00:00Z')",
    )
    .await;
    // b5's answer is lost: its sequence is blocked.
    faults("lose_next=1");
    let lost = issue("mercadopago:b5", 5_000).await;
    assert!(
        matches!(lost, Outcome::Indeterminate { number: 4, .. }),
        "{lost:?}"
    );
    let now = chrono::Utc::now();
    let refusal = ArcaLoginRefusal {
        environment: "homologacion".into(),
        service: "wsfe".into(),
        cert_fingerprint: "ab12".into(),
        refusals: 2,
        refused_at: now,
        retry_at: now + chrono::Duration::minutes(10),
    };
    app.db
        .arca_save_login_refusal(&refusal)
        .await
        .expect("refusal");

    let d = Driver::start(&driver, &chromium).await;
    sign_in_at(&d, &app, "/admin/arca").await;
    let text = d.wait_text("Blocked sequences").await;
    assert!(text.contains("went to mercadopago:b3"), "{text}");
    assert!(text.contains("coe.alreadyAuthenticated"), "{text}");
    let current = d
        .script("return document.querySelector('nav[aria-label=Main] a[href=\"/admin/arca\"]').getAttribute('aria-current');")
        .await;
    assert_eq!(current, "page", "ARCA is in the main navigation");
    let blocked = d
        .script("return Array.from(document.querySelectorAll('#arca-blocked tr[data-key]')).map(r => r.dataset.key);")
        .await;
    assert_eq!(blocked, serde_json::json!(["mercadopago:b5"]));
    // One action per row that needs a human: the conflict's re-issue.
    let buttons = d
        .script("return Array.from(document.querySelectorAll('#arca-vouchers tr[data-key] button')).map(b => b.closest('tr').dataset.key);")
        .await;
    assert_eq!(buttons, serde_json::json!(["mercadopago:b4"]));
    d.click(
        &d.find("#arca-vouchers tr[data-key=\"mercadopago:b4\"] button")
            .await,
    )
    .await;
    let text = d.wait_text("under its next attempt key").await;
    assert!(text.contains("re-issued as mercadopago:b4#2"), "{text}");
    let status = app.db.arca_payment_status("mercadopago", "b4").await;
    let status = status.expect("read").expect("the sale");
    assert_eq!(status.0, "arca_pending", "{status:?}");
    // The drain's next round issues the sale under b4#2 (after settling b5, found at ARCA).
    let again = issuer
        .issue_sale("mercadopago:b4", &sale(4_000))
        .await
        .expect("issue");
    assert!(
        matches!(again, Outcome::Authorized { number: 5, .. }),
        "{again:?}"
    );

    d.click(&d.find("#arca-login-now").await).await;
    let text = d.wait_text("next ARCA round logs in").await;
    assert!(!text.contains("coe.alreadyAuthenticated"), "{text}");
    let left = app
        .db
        .arca_login_refusal("homologacion", "wsfe", "ab12")
        .await;
    assert_eq!(left.expect("read"), None);
    d.goto(&format!("{}/admin/audit", app.address)).await;
    let audit = d.wait_text("arca_login_now").await;
    assert!(audit.contains("arca_reissue"), "{audit}");
    assert!(audit.contains("arca_login_now"), "{audit}");
    sim.stop().await;
}
