//! The admin in a real headless Chromium (chromedriver): sign in, find a rejected invoice, press
//! retry and watch it get stamped by the worker pool; cancel a stamped one; and screenshots of
//! the main pages in `target/screenshots/`.

use crate::support;

use std::time::Duration;

use autofactura::pac::StampOutcome;
use support::admin::{
    PASSWORD, admin_app, cancellation, doc, mark_state, pay, pay_at, rejected, seal, send_to_pac,
    stamped,
};
use support::webdriver::{Driver, browser_paths};
use support::{Backend, TestApp};

async fn sign_in(d: &Driver, app: &TestApp) {
    d.goto(&format!("{}/admin", app.address)).await;
    let url = d.wait_url(|u| u.ends_with("/admin/login")).await;
    assert!(
        url.ends_with("/admin/login"),
        "an anonymous visit lands on the login page: {url}"
    );
    d.type_into(&d.find("#name").await, "Ana").await;
    d.type_into(&d.find("#password").await, PASSWORD).await;
    d.click(&d.find("form button[type=submit]").await).await;
    let url = d.wait_url(|u| u.ends_with("/admin")).await;
    assert!(url.ends_with("/admin"), "{url}");
    assert!(d.wait_text("Last errors").await.contains("Dashboard"));
}

async fn started() -> Option<(TestApp, Driver)> {
    let (driver, chromium) = browser_paths()?;
    let app = admin_app(Backend::Sqlite).await?;
    let d = Driver::start(&driver, &chromium).await;
    Some((app, d))
}

/// How long a worker gets to stamp a retried document (the sandbox stamps in milliseconds).
const STAMP_WAIT_SECONDS: u32 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_retries_a_rejected_invoice_and_sees_it_stamped() {
    let Some((app, d)) = started().await else {
        return;
    };
    // Valid frozen bytes the PAC once refused (as after a transient validation outage).
    let id = rejected(
        &app,
        "e2e_retry",
        "CFDI40102",
        "CFDI40102 - El resultado de la digestión debe ser igual al resultado de la desencripción del sello.",
    )
    .await;
    // The worker pool starts now (had it run from the start, it would have stamped the payment
    // before it could be marked failed); it shares the application's PAC.
    let worker =
        autofactura::worker::worker_for(&app.settings, app.db.clone(), app.state.pac.clone())
            .expect("worker");
    let pool = worker.start(tokio_util::sync::CancellationToken::new(), None);
    sign_in(&d, &app).await;
    d.click(&d.link("Invoices").await).await;
    d.click(&d.link("Failed").await).await;
    // Each click may return before its page has loaded: wait for what it should show.
    let list = d.wait_text("pi_test_e2e_retry").await;
    assert!(
        list.contains("pi_test_e2e_retry") && list.contains("CFDI40102"),
        "{list}"
    );
    d.screenshot("failed-list").await;
    d.click(&d.link("pi_test_e2e_retry").await).await;
    let detail = d.wait_text("SAT (via the PAC) says").await;
    assert!(
        detail.contains("SAT (via the PAC) says") && detail.contains("CFDI40102"),
        "{detail}"
    );
    d.click(&d.find(&format!("#retry-{id}")).await).await;
    let sent_back = d.wait_text("Sent back to the queue").await;
    assert!(sent_back.contains("Sent back to the queue"), "{sent_back}");
    // The worker pool takes it from here; the page shows the outcome when it lands.
    let stamped = d.reload_until("Stamped", STAMP_WAIT_SECONDS).await;
    d.screenshot("retried-detail").await;
    let row = doc(&app, id).await;
    assert!(
        stamped,
        "no worker stamped document #{id} within {STAMP_WAIT_SECONDS} s (state {})",
        row.state
    );
    assert_eq!(row.state.as_str(), "stamped");
    let uuid = row.uuid.expect("uuid");
    assert!(d.page_text().await.contains(&uuid));
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admin_cancels_a_stamped_invoice() {
    let Some((app, d)) = started().await else {
        return;
    };
    let id = pay(&app, "e2e_cancel").await;
    let uuid = stamped(&app, id).await;
    sign_in(&d, &app).await;
    d.goto(&format!("{}/admin/invoices?view=all&q={uuid}", app.address))
        .await;
    d.click(&d.link("pi_test_e2e_cancel").await).await;
    d.click(&d.find(&format!("#cancel-{id}")).await).await;
    let page = d.wait_text("Cancel now").await;
    assert!(
        page.contains("Cancel now, no receptor approval needed"),
        "{page}"
    );
    // Motivo 01 without a replacement is refused with the reason.
    d.click(&d.find("input[name=motivo][value='01']").await)
        .await;
    d.click(&d.find("#cancel-form button[type=submit]").await)
        .await;
    let refused = d
        .wait_text("motivo 01 needs the UUID of the replacement")
        .await;
    assert!(
        refused.contains("motivo 01 needs the UUID of the replacement"),
        "{refused}"
    );
    d.screenshot("cancel-form").await;
    d.click(&d.find("input[name=motivo][value='02']").await)
        .await;
    d.click(&d.find("#cancel-form button[type=submit]").await)
        .await;
    let detail = d.wait_text("Cancellation request frozen").await;
    assert!(detail.contains("Cancellation request frozen"), "{detail}");
    assert!(detail.contains("Cancel requested"), "{detail}");
    d.screenshot("cancel-requested").await;
    let c = cancellation(&app, &uuid).await;
    assert_eq!(
        (
            c.motivo.as_str(),
            c.requested_by.as_str(),
            c.requires_acceptance
        ),
        ("02", "Ana", false)
    );
    d.click(&d.link("Cancellations").await).await;
    assert!(d.wait_text(&uuid).await.contains(&uuid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn screenshots_of_the_main_pages() {
    let Some((app, d)) = started().await else {
        return;
    };
    // A little of everything.
    for n in 0..3 {
        pay(&app, &format!("shot_pending{n}")).await;
    }
    let rejected = rejected(
        &app,
        "shot_rejected",
        "CFDI40221",
        "CFDI40221 - El valor del campo Total no coincide con la suma de los importes.",
    )
    .await;
    let old = chrono::Utc::now().timestamp() - 4 * 86_400;
    let expired = pay_at(&app, "shot_expired", old).await;
    mark_state(&app, expired, "expired").await;
    for n in 0..4 {
        let id = pay(&app, &format!("shot_stamped{n}")).await;
        stamped(&app, id).await;
    }
    let lost = pay(&app, "shot_lost").await;
    seal(&app, lost).await;
    assert!(matches!(
        send_to_pac(&app, lost).await,
        StampOutcome::Stamped(_)
    ));
    mark_state(&app, lost, "unknown").await;

    sign_in(&d, &app).await;
    // Reconciliation from its page adopts the lost stamp.
    d.click(&d.link("Reconciliation").await).await;
    d.wait_url(|u| u.ends_with("/admin/reconcile")).await;
    d.click(&d.find("#reconcile-now").await).await;
    let text = d.wait_text("Reconciliation finished").await;
    assert!(text.contains("Reconciliation finished"), "{text}");
    assert!(text.contains("adopted by reconciliation"), "{text}");
    d.screenshot("reconcile").await;
    assert_eq!(doc(&app, lost).await.state.as_str(), "stamped");

    d.click(&d.link("Dashboard").await).await;
    d.wait_text("Last errors").await;
    let dash = d.screenshot("dashboard").await;
    assert!(std::fs::metadata(&dash).unwrap().len() > 10_000);
    d.goto(&format!("{}/admin/invoices?view=pending", app.address))
        .await;
    d.screenshot("pending-list").await;
    d.goto(&format!("{}/admin/invoices?view=stamped", app.address))
        .await;
    d.screenshot("stamped-list").await;
    d.goto(&format!(
        "{}/admin/payments/{}",
        app.address,
        doc(&app, rejected).await.payment_id
    ))
    .await;
    d.screenshot("detail-rejected").await;
    d.click(&d.find(&format!("#refreeze-{rejected}")).await)
        .await;
    d.screenshot("refreeze-form").await;
    // The same pages on a phone.
    d.set_window(390, 844).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.goto(&format!("{}/admin", app.address)).await;
    d.screenshot("dashboard-phone").await;
    d.goto(&format!("{}/admin/invoices?view=failed", app.address))
        .await;
    d.screenshot("failed-list-phone").await;
    // With the worker pool running: the pending documents get stamped and the dashboard shows
    // the pool's heartbeat (this is the README's picture).
    let worker =
        autofactura::worker::worker_for(&app.settings, app.db.clone(), app.state.pac.clone())
            .expect("worker");
    let pool = worker.start(tokio_util::sync::CancellationToken::new(), None);
    d.set_window(1280, 800).await;
    d.goto(&format!("{}/admin", app.address)).await;
    let live = d.reload_until("HOST / PID", 30).await;
    assert!(
        live,
        "the dashboard never showed the running pool: {}",
        d.page_text().await
    );
    d.screenshot("dashboard-live").await;
    pool.shutdown().await;
}
