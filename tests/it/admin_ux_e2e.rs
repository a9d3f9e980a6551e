//! The admin of issue 23 in a real headless Chromium, at 1280 px and at 390 px (a phone):
//! every page fits the phone without sideways scrolling, a 71-hour-old sale is at risk, a
//! partial lowercase UUID is found from the Invoices page, tiles count the rows they open,
//! and screenshots of every page at both widths land in `target/screenshots/` (`ux-*.png`);
//! the factura global's pages and the portal's are among them.

use crate::support;

use support::admin::{
    PASSWORD, admin_app, cancellation, doc, mark_state, mark_unknown, outbox_of, pay, rejected,
    stamped,
};
use support::ux::{sale, sql};
use support::webdriver::{Driver, browser_paths};
use support::{Backend, TestApp};

/// Signs in through the form, starting from `path` (the login brings the browser back there).
pub async fn sign_in_at(d: &Driver, app: &TestApp, path: &str) {
    d.goto(&format!("{}{path}", app.address)).await;
    d.wait_url(|u| u.contains("/admin/login")).await;
    d.type_into(&d.find("#name").await, "Ana").await;
    d.type_into(&d.find("#password").await, PASSWORD).await;
    d.click(&d.find("form button[type=submit]").await).await;
    let url = d.wait_url(|u| !u.contains("/admin/login")).await;
    assert!(url.ends_with(path), "back to {path}: {url}");
}

pub async fn started() -> Option<(TestApp, Driver)> {
    let (driver, chromium) = browser_paths()?;
    let app = admin_app(Backend::Sqlite).await?;
    let d = Driver::start(&driver, &chromium).await;
    Some((app, d))
}

/// What an operator meets in a bad week: waiting, at risk, rejected, expired, unknown, USD,
/// stamped and cancelled. The ids of the stamped, rejected and at-risk documents.
async fn a_bad_week(app: &TestApp) -> (i64, i64, String) {
    for n in 0..3 {
        pay(app, &format!("week_pending{n}")).await;
    }
    let risky = sale(app, "week_71h", 71, |_| {}).await;
    let rejected = rejected(
        app,
        "week_rfc",
        "CFDI40143",
        "CFDI40143 - Este RFC del receptor no existe en la lista de RFC inscritos no cancelados del SAT.",
    )
    .await;
    let old = sale(app, "week_expired", 80, |_| {}).await;
    let old = outbox_of(app, &old).await.id;
    sql(
        app,
        &format!(
            "UPDATE outbox SET state = 'expired', last_error_code = 'WINDOW', last_error_message = 'Fecha is past the 72-hour window; it was never sent to the PAC; refreeze it from the admin' WHERE id = {old}"
        ),
    )
    .await;
    let lost = pay(app, "week_lost").await;
    support::admin::seal(app, lost).await;
    mark_unknown(app, lost, chrono::Utc::now() + chrono::Duration::minutes(3)).await;
    sale(app, "week_usd", 2, |o| o["currency"] = "usd".into()).await;
    sale(app, "week_badrfc", 1, |o| {
        o["metadata"]["rfc"] = "NOT-AN-RFC".into();
    })
    .await;
    let mut stamped_id = 0;
    for n in 0..3 {
        stamped_id = pay(app, &format!("week_stamped{n}")).await;
        stamped(app, stamped_id).await;
    }
    let c = pay(app, "week_canceled").await;
    let uuid = stamped(app, c).await;
    let order = autofactura::domain::cancellation::CancelFacts::from_stamped(
        doc(app, c)
            .await
            .stamped_xml
            .as_deref()
            .expect("stamped xml"),
    )
    .expect("facts")
    .order(
        autofactura::domain::cancellation::Motivo::SinRelacion,
        None,
        chrono::Utc::now(),
    );
    autofactura::cancel::record(&app.db, c, order, "Ana")
        .await
        .expect("db")
        .expect("recorded");
    assert_eq!(cancellation(app, &uuid).await.state.as_str(), "requested");
    mark_state(app, c, "stamped").await;
    (stamped_id, rejected, risky)
}

/// Every admin page of the bad week, by name.
async fn pages(app: &TestApp, stamped_id: i64, rejected: i64) -> Vec<(String, String)> {
    let payment = |id: i64| async move { doc(app, id).await.payment_id };
    let mut pages: Vec<(String, String)> = vec![
        ("dashboard".into(), "/admin".into()),
        ("invoices".into(), "/admin/invoices".into()),
        ("at-risk".into(), "/admin/invoices?view=at_risk".into()),
        ("failed".into(), "/admin/invoices?view=failed".into()),
        ("stamped".into(), "/admin/invoices?view=stamped".into()),
        ("all".into(), "/admin/invoices?view=all".into()),
        ("search".into(), "/admin/invoices?q=week".into()),
        ("cancellations".into(), "/admin/cancellations?all=1".into()),
        ("reconcile".into(), "/admin/reconcile".into()),
        ("audit".into(), "/admin/audit".into()),
        (
            "detail-stamped".into(),
            format!("/admin/payments/{}", payment(stamped_id).await),
        ),
        (
            "detail-rejected".into(),
            format!("/admin/payments/{}", payment(rejected).await),
        ),
        (
            "cancel-form".into(),
            format!("/admin/documents/{stamped_id}/cancel"),
        ),
        (
            "refreeze-form".into(),
            format!("/admin/documents/{rejected}/refreeze"),
        ),
    ];
    for state in ["needs_attention", "unknown", "expired"] {
        pages.push((
            format!("state-{state}"),
            format!("/admin/invoices?state={state}"),
        ));
    }
    let lost = outbox_of(app, "pi_test_week_lost").await;
    pages.push((
        "detail-unknown".into(),
        format!("/admin/payments/{}", lost.payment_id),
    ));
    pages.extend(global_and_portal_pages(app).await);
    pages
}

/// The factura global's admin pages and the portal's (issue 17): the globals, one global with
/// its sales, the portal's look-up, a sale's fiscal form, and a sale already in a global.
async fn global_and_portal_pages(app: &TestApp) -> Vec<(String, String)> {
    use autofactura::global::{Planner, Scope, issue};
    use support::portal::{link_of, sale_without_rfc, sale_without_rfc_at};
    use support::sales::{at, month};

    sale_without_rfc(app, "week_portal").await;
    sale_without_rfc_at(app, "week_global", at(month(1), 5, 12)).await;
    let planner = Planner::new(&app.settings).expect("planner");
    let report = issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("issue");
    let global = report.issued.first().expect("a global").outbox_id;
    stamped(app, global).await;
    vec![
        ("globals".into(), "/admin/globals".into()),
        ("global-detail".into(), format!("/admin/globals/{global}")),
        ("portal-lookup".into(), "/facturar".into()),
        (
            "portal-form".into(),
            link_of(app, "ORD-week_portal", "116.00").await,
        ),
        (
            "portal-in-global".into(),
            link_of(app, "ORD-week_global", "116.00").await,
        ),
    ]
}

/// `document.documentElement.scrollWidth` and `window.innerWidth`.
async fn widths(d: &Driver) -> (i64, i64) {
    let v = d
        .script("return [document.documentElement.scrollWidth, window.innerWidth];")
        .await;
    (
        v[0].as_i64().expect("scrollWidth"),
        v[1].as_i64().expect("innerWidth"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_admin_page_fits_a_phone_and_both_widths_are_kept() {
    let Some((app, d)) = started().await else {
        return;
    };
    let (stamped_id, rejected, _) = a_bad_week(&app).await;
    sign_in_at(&d, &app, "/admin").await;
    let pages = pages(&app, stamped_id, rejected).await;
    let mut too_wide = Vec::new();
    for (width, height) in [(1280, 900), (390, 844)] {
        d.set_window(width, height).await;
        for (name, path) in &pages {
            d.goto(&format!("{}{path}", app.address)).await;
            let text = d.page_text().await;
            assert!(
                !text.contains("404 Not Found") && !text.contains("500 Internal"),
                "{path}: {text}"
            );
            d.screenshot(&format!("ux-{name}-{width}")).await;
            if name == "cancel-form" {
                // FolioSustitucion only applies to motivo 01: hidden means not shown.
                let shown = d
                    .script(
                        "return getComputedStyle(document.getElementById('folio-field')).display;",
                    )
                    .await;
                assert_eq!(
                    shown.as_str(),
                    Some("none"),
                    "the FolioSustitucion field shows"
                );
            }
            if width == 390 {
                // Also the rows, as cards.
                let table = d
                    .script("var t = document.querySelector('table'); if (t) { t.scrollIntoView(); } return !!t;")
                    .await;
                if table.as_bool() == Some(true) {
                    d.screenshot(&format!("ux-{name}-{width}-rows")).await;
                }
                let (scroll, inner) = widths(&d).await;
                if scroll > inner {
                    too_wide.push(format!("{path}: scrollWidth {scroll} > innerWidth {inner}"));
                }
            }
        }
    }
    // The login page too, signed out.
    d.goto(&format!("{}/admin/login", app.address)).await;
    d.screenshot("ux-login-390").await;
    let (scroll, inner) = widths(&d).await;
    assert!(scroll <= inner, "login: {scroll} > {inner}");
    assert!(
        too_wide.is_empty(),
        "pages scroll sideways at 390 px: {too_wide:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlines_search_and_tiles_in_the_browser() {
    let Some((app, d)) = started().await else {
        return;
    };
    let (stamped_id, _, risky) = a_bad_week(&app).await;
    let uuid = doc(&app, stamped_id).await.uuid.expect("uuid");
    sign_in_at(&d, &app, "/admin").await;

    // The At risk tile opens the 71-hour-old sale with its window.
    let risk = d.find("#tile-at-risk").await;
    assert!(
        d.text(&risk).await.starts_with('1'),
        "{}",
        d.text(&risk).await
    );
    d.click(&risk).await;
    let list = d.wait_text(&risky).await;
    assert!(list.contains(&risky), "{list}");
    assert!(list.contains("window closes in"), "{list}");
    d.screenshot("ux-at-risk-list").await;
    d.click(&d.link(&risky).await).await;
    let detail = d.wait_text("SAT window").await;
    assert!(detail.contains("SAT window: window closes in"), "{detail}");

    // From the default Invoices page, a part of the stamped UUID in lower case finds it.
    d.click(&d.link("Invoices").await).await;
    d.wait_url(|u| u.ends_with("/admin/invoices")).await;
    let part = uuid[4..18].to_lowercase();
    let input = d.find("form.search input[name=q]").await;
    d.type_into(&input, &part).await;
    d.click(&d.find("form.search button[type=submit]").await)
        .await;
    let found = d.wait_text("1 result(s)").await;
    let payment = format!("pi_test_week_stamped{}", 2);
    assert!(
        found.contains("1 result(s)") && found.contains(&payment),
        "{found}"
    );
    assert!(found.contains(&uuid), "{found}");
    // The global box in the header finds it from any page.
    d.goto(&format!("{}/admin/audit", app.address)).await;
    d.type_into(&d.find("#global-q").await, &format!("{part}\n"))
        .await;
    assert!(d.wait_text(&payment).await.contains(&payment));

    // Every tile opens exactly the rows it counts.
    d.goto(&format!("{}/admin", app.address)).await;
    let tiles = d
        .script(
            "return Array.from(document.querySelectorAll('a.tile')).map(t => [t.getAttribute('href'), parseInt(t.querySelector('.n').textContent, 10)]);",
        )
        .await;
    let tiles = tiles.as_array().expect("tiles").clone();
    assert!(tiles.len() >= 8, "{tiles:?}");
    for t in tiles {
        let (href, n) = (t[0].as_str().expect("href"), t[1].as_i64().expect("n"));
        d.goto(&format!("{}{href}", app.address)).await;
        let rows = d
            .script("return document.querySelectorAll('tr[data-payment]').length;")
            .await
            .as_i64()
            .expect("rows");
        assert_eq!(rows, n, "{href}: the tile says {n}, the list shows {rows}");
    }
}

/// The app with pages that refresh every second, the browser, and a running worker pool.
async fn live() -> Option<(TestApp, Driver, autofactura::worker::Pool)> {
    let (driver, chromium) = browser_paths()?;
    let app = support::spawn_app_with(
        Backend::Sqlite,
        &format!("[admin]\npassword = \"{PASSWORD}\"\nrefresh_seconds = 1\n"),
    )
    .await?;
    let d = Driver::start(&driver, &chromium).await;
    let worker =
        autofactura::worker::worker_for(&app.settings, app.db.clone(), app.state.pac.clone())
            .expect("worker");
    let pool = worker.start(tokio_util::sync::CancellationToken::new(), None);
    Some((app, d, pool))
}

/// Polls (every 200 ms, up to `seconds`) until `ok` holds of the page text; the text.
async fn wait_for(d: &Driver, seconds: u64, ok: impl Fn(&str) -> bool) -> String {
    let mut text = d.page_text().await;
    for _ in 0..seconds * 5 {
        if ok(&text) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        text = d.page_text().await;
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_pac_claims_nothing_until_resumed_and_a_stale_notice_goes_by_itself() {
    let Some((app, d, pool)) = live().await else {
        return;
    };
    sign_in_at(&d, &app, "/admin").await;
    // Pause from the dashboard.
    d.type_into(
        &d.find("#pause-pac input[name=reason]").await,
        "PAC incident",
    )
    .await;
    // Typed in and left (the focus elsewhere): two refreshes later the reason is still there,
    // as the dashboard keeps a region with an edited field.
    d.script("document.activeElement.blur(); document.body.removeAttribute('data-refreshed');")
        .await;
    let refreshed = "return document.body.getAttribute('data-refreshed');";
    // Refreshes come every second; a loaded machine may take seconds to serve each one.
    let (mut first, mut second) = (None, false);
    for _ in 0..600 {
        let now = d.script(refreshed).await.as_str().map(str::to_owned);
        match (&first, now) {
            (None, Some(t)) => first = Some(t),
            (Some(a), Some(b)) if *a != b => {
                second = true;
                break;
            }
            _ => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        second,
        "the dashboard did not refresh twice in a minute: {first:?}"
    );
    let typed = d
        .script("return document.querySelector('#pause-pac input[name=reason]').value;")
        .await;
    assert_eq!(
        typed.as_str(),
        Some("PAC incident"),
        "a refresh replaced the field being filled in"
    );
    d.click(&d.find("#pause-pac button[type=submit]").await)
        .await;
    let dash = d.wait_text("is paused").await;
    assert!(dash.contains("Stamping at sandbox is paused"), "{dash}");
    d.screenshot("ux-dashboard-paused").await;
    // A sale and a retried rejection wait while paused: nothing is claimed.
    let waiting = sale(&app, "live_waiting", 0, |_| {}).await;
    let waiting = outbox_of(&app, &waiting).await.id;
    let retried = rejected(&app, "live_retried", "CFDI40102", "CFDI40102 - sello").await;
    d.goto(&format!(
        "{}/admin/payments/{}",
        app.address,
        doc(&app, retried).await.payment_id
    ))
    .await;
    d.click(&d.find(&format!("#retry-{retried}")).await).await;
    let notice =
        "Sent back to the queue with the same frozen bytes and key; a worker will stamp it.";
    assert!(d.wait_text(notice).await.contains(notice));
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for id in [waiting, retried] {
        let row = doc(&app, id).await;
        assert_eq!(
            (row.state.as_str(), row.attempts),
            ("pending", 0),
            "document #{id} was claimed while the PAC was paused"
        );
    }
    // Resumed: the worker stamps both, and the page, never reloaded, follows: the stale
    // notice is gone and the badge says Stamped.
    assert!(app.db.resume_pac("sandbox", "Ana").await.expect("resume"));
    let text = wait_for(&d, 60, |t| !t.contains(notice) && t.contains("Stamped")).await;
    assert!(
        !text.contains(notice),
        "the stale notice is still there: {text}"
    );
    assert!(text.contains("Stamped"), "{text}");
    assert!(!d.url().await.contains("notice="), "{}", d.url().await);
    assert_eq!(doc(&app, retried).await.state.as_str(), "stamped");
    // The other row is another slot's call: the page showing this one stamped says nothing of
    // it, so it is waited for.
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while doc(&app, waiting).await.state.as_str() != "stamped" {
        assert!(
            tokio::time::Instant::now() < until,
            "{:?}",
            doc(&app, waiting).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    d.screenshot("ux-detail-live").await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fix_form_issues_once_when_sent_twice() {
    let Some((app, d)) = started().await else {
        return;
    };
    let usd = sale(&app, "e2e_usd", 3, |o| o["currency"] = "usd".into()).await;
    sign_in_at(&d, &app, "/admin").await;
    d.goto(&format!(
        "{}/admin/invoices?state=needs_attention",
        app.address
    ))
    .await;
    d.click(&d.link(&usd).await).await;
    d.click(&d.find("a[id^=fix-]").await).await;
    let form = d.wait_text("TipoCambio").await;
    assert!(form.contains("no exchange rate for currency USD"), "{form}");
    d.type_into(&d.find("input[name=tipo_cambio]").await, "17.10")
        .await;
    d.screenshot("ux-fix-form").await;
    // Two submits of the same form, as a double click sends them.
    d.script(
        "var f = document.getElementById('fix-form'); \
         var a = new FormData(f), b = new FormData(f); \
         return Promise.all([fetch(f.action, {method: 'POST', body: new URLSearchParams(a)}), \
                             fetch(f.action, {method: 'POST', body: new URLSearchParams(b)})]) \
           .then(function (r) { return r.map(function (x) { return x.status; }); });",
    )
    .await;
    let row = outbox_of(&app, &usd).await;
    let docs = support::admin::count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM outbox WHERE payment_id = {}",
            row.payment_id
        ),
    )
    .await;
    assert_eq!(docs, 1, "one document for one sale");
    assert!(
        row.request_json.contains("\"tipo_cambio\":\"17.10\"")
            || row.request_json.contains("\"tipo_cambio\":17.1"),
        "{}",
        row.request_json
    );
    // And the form, sent once more from the page, shows what it did: no error, no new document.
    d.click(&d.find("#fix-submit").await).await;
    let text = d.wait_text("The corrected data was frozen").await;
    assert!(text.contains("The corrected data was frozen"), "{text}");
    assert!(!text.contains("does not need attention"), "{text}");
}
