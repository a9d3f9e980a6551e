//! The self-invoicing portal in a real headless Chromium (chromedriver): a customer finds a
//! sale by its reference and total, sends fiscal data that breaks the SAT's rules and reads
//! the errors next to each field, corrects them, watches the invoice get stamped and downloads
//! its XML; screenshots of each page in `target/screenshots/portal-*.png`.

use crate::support;

use support::portal::sale_without_rfc;
use support::webdriver::{Driver, browser_paths};
use support::{Backend, spawn_app};

/// How long the worker pool gets to stamp (the sandbox stamps in milliseconds).
const STAMP_WAIT_SECONDS: u32 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_customer_invoices_a_sale_at_the_portal_in_a_browser() {
    let Some((driver, chromium)) = browser_paths() else {
        return;
    };
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let id = sale_without_rfc(&app, "e2e_portal").await;
    let d = Driver::start(&driver, &chromium).await;

    d.goto(&format!("{}/facturar", app.address)).await;
    let page = d.wait_text("Facture su compra").await;
    assert!(page.contains("ESCUELA KEMPER URGATE"), "{page}");
    d.screenshot("portal-lookup").await;
    // A wrong total first: the one answer for anything not found.
    d.type_into(&d.find("#reference").await, "ORD-e2e_portal")
        .await;
    d.type_into(&d.find("#total").await, "161.00").await;
    d.click(&d.find("#lookup").await).await;
    let page = d.wait_text("No encontramos").await;
    assert!(page.contains("No encontramos una compra"), "{page}");
    d.clear(&d.find("#total").await).await;
    d.type_into(&d.find("#total").await, "116.00").await;
    d.click(&d.find("#lookup").await).await;
    let page = d.wait_text("Sus datos fiscales").await;
    assert!(page.contains(&id) && page.contains("$116.00 MXN"), "{page}");
    d.screenshot("portal-form").await;

    // Data that breaks the SAT's rules: a persona moral's régimen for a persona física, a
    // código postal that does not exist, an email without its domain.
    d.type_into(&d.find("#rfc").await, "xiqb891116qe4").await;
    d.type_into(&d.find("#razon_social").await, "Berenice Ximo Quezada")
        .await;
    d.click(&d.find("#regimen_fiscal option[value='601']").await)
        .await;
    d.type_into(&d.find("#codigo_postal").await, "17000").await;
    d.click(&d.find("#uso_cfdi option[value='G03']").await)
        .await;
    // The email of the receipt is already there (from the payment); the customer types
    // another, badly.
    let email = d.find("#email").await;
    assert_eq!(
        d.attribute(&email, "value").await.as_deref(),
        Some("cliente@example.mx")
    );
    d.clear(&email).await;
    d.type_into(&email, "berenice@").await;
    d.click(&d.find("#submit").await).await;
    let page = d.wait_text("no aplica a personas físicas").await;
    for says in [
        "El régimen 601 (General de Ley Personas Morales) no aplica a personas físicas",
        "El código postal 17000 no existe en el catálogo del SAT",
        "El correo electrónico «berenice@» no es válido",
    ] {
        assert!(page.contains(says), "{says} missing from {page}");
    }
    assert_eq!(
        d.text(&d.find("#codigo_postal-error").await).await,
        "El código postal 17000 no existe en el catálogo del SAT."
    );
    d.screenshot("portal-errors").await;
    // The same on a phone.
    d.set_window(390, 844).await;
    d.screenshot("portal-errors-phone").await;
    d.set_window(1280, 900).await;

    // Corrected: what was typed is still there, only the wrong fields change.
    d.click(&d.find("#regimen_fiscal option[value='612']").await)
        .await;
    d.clear(&d.find("#codigo_postal").await).await;
    d.type_into(&d.find("#codigo_postal").await, "26015").await;
    d.clear(&d.find("#email").await).await;
    d.type_into(&d.find("#email").await, "berenice@example.mx")
        .await;
    d.click(&d.find("#submit").await).await;
    let stamped = d
        .reload_until("Su factura está lista", STAMP_WAIT_SECONDS)
        .await;
    assert!(stamped, "not stamped: {}", d.page_text().await);
    let page = d.page_text().await;
    assert!(
        page.contains("BERENICE XIMO QUEZADA (XIQB891116QE4)"),
        "{page}"
    );
    d.screenshot("portal-stamped").await;

    // The download: the link's target is the stamped XML.
    let href = d
        .attribute(&d.find("#download-xml").await, "href")
        .await
        .expect("href");
    assert!(
        href.starts_with("/facturar/") && href.ends_with("/xml"),
        "{href}"
    );
    let r = reqwest::get(format!("{}{href}", app.address))
        .await
        .expect("download");
    assert_eq!(r.status(), 200);
    let xml = r.text().await.expect("xml");
    let uuid = d.text(&d.find("#uuid").await).await;
    assert!(
        xml.contains(&uuid) && xml.contains("Rfc=\"XIQB891116QE4\""),
        "{xml}"
    );
    assert!(xml.contains("RegimenFiscalReceptor=\"612\"") && xml.contains("UsoCFDI=\"G03\""));
    pool.shutdown().await;
}
