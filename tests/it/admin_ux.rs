//! The admin an operator trusts at a glance (issue 23), over HTTP on SQLite and PostgreSQL:
//! labels that agree, who said each message, deadlines from Fecha, the At risk tile, tiles
//! that count exactly the rows they link to, one search across every state, sign-in that
//! returns to the page asked for, and the small things (favicon, `[hidden]`, nothing
//! selected, a page past the end, catalog pick lists). Browser checks: `admin_ux_e2e`.

use crate::support;

use support::admin::{
    Browser, PASSWORD, admin_app, doc, mark_failed, mark_state, mark_unknown, outbox_of, pay,
    rejected, seal, stamped,
};
use support::ux::{listed, log_call, result_count, sale, sql, tiles};
use support::{Backend, TestApp};

/// An admin app with a signed-in browser and its CSRF token (admin_ux_ops starts so too).
pub(crate) async fn signed_in(b: Backend) -> Option<(TestApp, Browser, String)> {
    let app = admin_app(b).await?;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    Some((app, br, csrf))
}

/// Asks, through the admin, to cancel stamped document `id` with motivo 02 (no replacement).
pub(crate) async fn cancel_02(br: &Browser, csrf: &str, id: i64) {
    let r = br
        .post(
            &format!("/admin/documents/{id}/cancel"),
            &[("csrf", csrf), ("motivo", "02"), ("folio_sustitucion", "")],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
}

async fn payment_page(app: &TestApp, br: &Browser, outbox_id: i64) -> String {
    let d = doc(app, outbox_id).await;
    let p = br.get(&format!("/admin/payments/{}", d.payment_id)).await;
    assert_eq!(p.status, 200, "{}", p.body);
    p.body
}

async fn labels_agree_and_each_message_says_who_said_it(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    // A PAC rejection whose message repeats its code: the code once, SAT's rule, a hint.
    let rfc = rejected(
        &app,
        "ux_rfc",
        "CFDI40143",
        "CFDI40143 - Este RFC del receptor no existe en la lista de RFC inscritos no cancelados del SAT.",
    )
    .await;
    let page = payment_page(&app, &br, rfc).await;
    assert!(!page.contains("CFDI40143 CFDI40143"), "{page}");
    assert!(
        page.contains("SAT (via the PAC) says</strong> <code>CFDI40143</code> Este RFC"),
        "{page}"
    );
    assert!(
        page.contains("What to do: The customer&#39;s RFC")
            || page.contains("What to do: The customer&#x27;s RFC")
            || page.contains("What to do: The customer's RFC"),
        "{page}"
    );
    let list = br.get("/admin/invoices?view=failed").await.body;
    assert!(!list.contains("CFDI40143 CFDI40143"), "{list}");

    // The appliance's own verdict is not the PAC's.
    let old = pay(&app, "ux_window").await;
    sql(
        &app,
        &format!(
            "UPDATE outbox SET state = 'expired', last_error_code = 'WINDOW', \
             last_error_message = 'Fecha 2026-01-01T00:00:00 is past the 72-hour window; it was never sent to the PAC; refreeze it from the admin' WHERE id = {old}"
        ),
    )
    .await;
    let page = payment_page(&app, &br, old).await;
    assert!(
        page.contains("appliance says</strong> <code>WINDOW</code>"),
        "{page}"
    );
    assert!(!page.contains("PAC says"), "{page}");

    // A stamped invoice shows its document's state, not the payment's `invoice_pending`, and
    // no past "next run".
    let st = pay(&app, "ux_stamped").await;
    let uuid = stamped(&app, st).await;
    sql(
        &app,
        &format!("UPDATE outbox SET run_at = '2020-01-01T00:00:00Z' WHERE id = {st}"),
    )
    .await;
    let page = payment_page(&app, &br, st).await;
    assert!(!page.contains("invoice_pending"), "{page}");
    assert!(page.contains("id=\"payment-status\">Stamped<"), "{page}");
    assert!(
        !page.contains("next run") && !page.contains("next try"),
        "{page}"
    );
    assert!(page.contains("hora CDMX"), "times carry the zone: {page}");
    assert!(page.contains("116.00 MXN"), "{page}");

    // A cancellation that needs no acceptance, still processing at SAT, waits for SAT.
    cancel_02(&br, &csrf, st).await;
    sql(
        &app,
        &format!(
            "UPDATE cancellations SET state = 'pending_receiver', estatus_cancelacion = 'En proceso' WHERE uuid = '{uuid}'"
        ),
    )
    .await;
    let cancels = br.get("/admin/cancellations").await.body;
    assert!(cancels.contains("Waiting for SAT"), "{cancels}");
    assert!(!cancels.contains("Waiting for the receptor"), "{cancels}");
    let page = payment_page(&app, &br, st).await;
    assert!(page.contains("Waiting for SAT"), "{page}");
    // The dashboard counts it in the same words, not in its stored spelling.
    let dash = br.get("/admin").await.body;
    assert!(
        dash.contains("<span class=\"chip\">Waiting for SAT: 1</span>"),
        "{dash}"
    );
}

async fn an_unknown_outcome_shows_the_call_that_was_lost(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let id = pay(&app, "ux_lost").await;
    seal(&app, id).await;
    mark_unknown(&app, id, chrono::Utc::now() + chrono::Duration::minutes(5)).await;
    // Asked since, the PAC answered 503: the row stays unknown, and the worker's last message
    // is that 503.
    log_call(
        &app,
        id,
        "recover",
        "retryable",
        Some(503),
        "service unavailable",
    )
    .await;
    sql(
        &app,
        &format!(
            "UPDATE outbox SET last_error_message = 'HTTP 503 service unavailable' WHERE id = {id}"
        ),
    )
    .await;
    let page = payment_page(&app, &br, id).await;
    let banner = page
        .split(&format!("id=\"lost-{id}\""))
        .nth(1)
        .and_then(|r| r.split("</p>").next())
        .unwrap_or_else(|| panic!("no lost-call banner: {page}"));
    assert!(banner.contains("operation timed out"), "{banner}");
    assert!(
        banner.contains("Asked since: recover: retryable HTTP 503"),
        "{banner}"
    );
    assert!(page.contains("next try in"), "{page}");
}

async fn a_document_71_hours_old_shows_its_window_and_is_at_risk(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let fresh = sale(&app, "ux_fresh", 0, |_| {}).await;
    let old = sale(&app, "ux_71h", 71, |_| {}).await;
    let old_id = outbox_of(&app, &old).await.id;
    let dash = br.get("/admin").await.body;
    let risk = tiles(&dash)
        .into_iter()
        .find(|(s, _, _)| s == "at_risk")
        .unwrap_or_else(|| panic!("no At risk tile: {dash}"));
    assert_eq!(risk.1, 1, "{dash}");
    assert!(dash.contains("At risk"), "{dash}");
    let list = br.get(&risk.2).await.body;
    assert_eq!(listed(&list), vec![old.clone()], "{list}");
    assert!(
        list.contains("window closes in 59 min") || list.contains("window closes in 1 h 0 min"),
        "{list}"
    );
    assert!(
        list.contains("deadline bad-text"),
        "red under the threshold: {list}"
    );
    // The waiting list puts the window that closes first first.
    let pending = br.get("/admin/invoices").await.body;
    assert_eq!(
        listed(&pending),
        vec![old.clone(), fresh.clone()],
        "{pending}"
    );
    let page = payment_page(&app, &br, old_id).await;
    assert!(
        page.contains(&format!("id=\"deadline-{old_id}\"")),
        "{page}"
    );
    assert!(
        page.contains("SAT window:</strong> window closes in"),
        "{page}"
    );
    // The dashboard names the closest window, not the queue's age.
    assert!(dash.contains("Closest SAT window"), "{dash}");
    // Once stamped it is no longer at risk.
    stamped(&app, old_id).await;
    let dash = br.get("/admin").await.body;
    assert_eq!(
        tiles(&dash)
            .iter()
            .find(|(s, _, _)| s == "at_risk")
            .map(|t| t.1),
        Some(0)
    );
}

async fn every_tile_counts_exactly_the_rows_its_link_shows(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    pay(&app, "ux_t_pending").await;
    let f = pay(&app, "ux_t_failed").await;
    mark_failed(&app, f, "CFDI40108", "x").await;
    let e = pay(&app, "ux_t_expired").await;
    mark_state(&app, e, "expired").await;
    let s = pay(&app, "ux_t_stamped").await;
    stamped(&app, s).await;
    let u = pay(&app, "ux_t_unknown").await;
    mark_state(&app, u, "unknown").await;
    sale(&app, "ux_t_usd", 0, |o| o["currency"] = "usd".into()).await;
    sale(&app, "ux_t_global", 0, |o| {
        o["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("rfc");
    })
    .await;
    sale(&app, "ux_t_risk", 70, |_| {}).await;
    let dash = br.get("/admin").await.body;
    let tiles = tiles(&dash);
    assert!(tiles.len() >= 8, "{tiles:?}");
    for (state, n, href) in &tiles {
        let list = br.get(href).await;
        assert_eq!(list.status, 200, "{href}: {}", list.body);
        assert_eq!(
            result_count(&list.body),
            *n,
            "tile {state} counts {n} but {href} lists: {}",
            list.body
        );
    }
    // Needs attention (USD) is its own tile, not mixed into another.
    assert!(
        tiles
            .iter()
            .any(|(s, n, _)| s == "needs_attention" && *n == 1),
        "{tiles:?}"
    );
}

async fn one_search_finds_parts_in_any_case_across_every_state(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let st = pay(&app, "ux_s_stamped").await;
    let uuid = stamped(&app, st).await;
    let named = sale(&app, "ux_s_named", 0, |o| {
        o["metadata"]["razon_social"] = "ROSA MARIA PEREZ LUNA".into();
        o["receipt_email"] = "rosa.perez@ejemplo.mx".into();
    })
    .await;
    let other = pay(&app, "ux_s_other").await;
    mark_failed(&app, other, "CFDI40108", "x").await;
    // A part of the stamped UUID, lower case, from the default Invoices page's search box.
    let part = uuid[9..23].to_lowercase();
    let default = br.get("/admin/invoices").await.body;
    assert!(default.contains("action=\"/admin/invoices\""), "{default}");
    let found = br.get(&format!("/admin/invoices?q={part}")).await.body;
    assert_eq!(
        listed(&found),
        vec!["pi_test_ux_s_stamped".to_owned()],
        "{found}"
    );
    assert!(
        found.contains("Stamped <span class=\"count\">(1)</span>"),
        "{found}"
    );
    assert!(
        found.contains("In progress <span class=\"count\">(0)</span>"),
        "{found}"
    );
    // Name, email, stamp key, payment id, RFC and serie-folio, in any case and in part.
    let key = doc(&app, st).await.stamp_key;
    // Only a sealed document has a folio (numbered when a worker seals it).
    let folio = doc(&app, st).await.folio.expect("folio");
    for (q, want) in [
        ("maria perez".to_owned(), named.clone()),
        ("Rosa.Perez@".to_owned(), named.clone()),
        (
            key[key.len() - 10..].to_uppercase(),
            "pi_test_ux_s_stamped".to_owned(),
        ),
        ("UX_S_OTH".to_owned(), "pi_test_ux_s_other".to_owned()),
        (format!("a-{folio}"), "pi_test_ux_s_stamped".to_owned()),
    ] {
        let enc = autofactura::admin::common::percent_encode(&q);
        let list = br.get(&format!("/admin/invoices?q={enc}")).await.body;
        assert!(listed(&list).contains(&want), "{q} → {:?}", listed(&list));
    }
    let by_rfc = br.get("/admin/invoices?q=xiqb8911").await.body;
    assert_eq!(result_count(&by_rfc), 3, "{:?} {by_rfc}", listed(&by_rfc));
    // LIKE's wildcards are text here.
    let none = br.get("/admin/invoices?q=%25_%25").await.body;
    assert_eq!(result_count(&none), 0, "{none}");
    // Every page carries the global search box.
    for path in [
        "/admin",
        "/admin/cancellations",
        "/admin/reconcile",
        "/admin/audit",
    ] {
        let p = br.get(path).await.body;
        assert!(p.contains("id=\"global-q\""), "{path}");
    }
}

async fn sign_in_returns_to_the_page_asked_for_and_keeps_the_name(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let br = Browser::new(&app);
    let asked = "/admin/invoices?view=failed&q=x";
    let r = br.get(asked).await;
    let location = r.location.expect("redirect");
    assert_eq!(
        location,
        format!(
            "/admin/login?next={}",
            autofactura::admin::common::percent_encode(asked)
        )
    );
    let form = br.get(&location).await;
    let csrf = form.csrf();
    assert!(
        form.body.contains(&format!(
            "name=\"next\" value=\"{}\"",
            asked.replace('&', "&#38;")
        )) || form.body.contains(&format!(
            "name=\"next\" value=\"{}\"",
            asked.replace('&', "&amp;")
        )),
        "{}",
        form.body
    );
    let wrong = br
        .post(
            "/admin/login",
            &[
                ("csrf", &csrf),
                ("name", "Lucía"),
                ("password", "nope"),
                ("next", asked),
            ],
        )
        .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("value=\"Lucía\""), "{}", wrong.body);
    let csrf = autofactura_csrf(&wrong.body);
    let ok = br
        .post(
            "/admin/login",
            &[
                ("csrf", &csrf),
                ("name", "Lucía"),
                ("password", PASSWORD),
                ("next", asked),
            ],
        )
        .await;
    assert_eq!((ok.status, ok.location.as_deref()), (303, Some(asked)));
    // Elsewhere is never a destination.
    let other = Browser::new(&app);
    let form = other
        .get("/admin/login?next=https://evil.example/admin")
        .await;
    assert!(!form.body.contains("evil.example"), "{}", form.body);
    let csrf = form.csrf();
    let r = other
        .post(
            "/admin/login",
            &[
                ("csrf", &csrf),
                ("name", "Ana"),
                ("password", PASSWORD),
                ("next", "//evil.example/"),
            ],
        )
        .await;
    assert_eq!((r.status, r.location.as_deref()), (303, Some("/admin")));
}

fn autofactura_csrf(body: &str) -> String {
    support::admin::hidden(body, "csrf").expect("csrf")
}

async fn the_small_things(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    let anon = Browser::new(&app);
    let icon = anon.get("/admin/static/favicon.svg").await;
    assert_eq!(icon.status, 200);
    assert_eq!(icon.headers["content-type"], "image/svg+xml");
    assert!(br.get("/admin").await.body.contains("rel=\"icon\""));
    let css = anon.get("/admin/static/admin.css").await.body;
    assert!(
        css.contains("[hidden] { display: none !important; }"),
        "{css}"
    );

    // "Retry selected" with nothing selected: back to the list, saying so.
    let f = rejected(&app, "ux_none", "CFDI40102", "x").await;
    let back = "/admin/invoices?view=failed";
    let r = br
        .post("/admin/invoices/retry", &[("csrf", &csrf), ("back", back)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let location = r.location.expect("location");
    assert_eq!(location, format!("{back}&notice=none_selected"));
    let list = br.get(&location).await.body;
    assert!(list.contains("Nothing was selected"), "{list}");
    assert_eq!(doc(&app, f).await.state.as_str(), "failed");
    // A foreign `back` is not followed.
    let r = br
        .post(
            "/admin/invoices/retry",
            &[("csrf", &csrf), ("back", "https://evil.example/")],
        )
        .await;
    assert!(
        r.location
            .as_deref()
            .is_some_and(|l| l.starts_with("/admin/invoices?")),
        "{:?}",
        r.location
    );

    // A page past the end says so and shows the last page.
    let past = br.get("/admin/invoices?view=all&page=99").await.body;
    assert!(past.contains("There is no page 99"), "{past}");
    assert!(
        listed(&past).contains(&"pi_test_ux_none".to_owned()),
        "{past}"
    );
    let cancels = br.get("/admin/cancellations?page=7").await.body;
    assert!(cancels.contains("There is no page 7"), "{cancels}");

    // Catalog fields are pick lists from the SAT catalogs.
    let form = br.get(&format!("/admin/documents/{f}/refreeze")).await.body;
    assert!(form.contains("<select name=\"regimen_fiscal\""), "{form}");
    assert!(form.contains("<option value=\"612\" selected>612 · Personas Físicas con Actividades Empresariales y Profesionales</option>"), "{form}");
    assert!(form.contains("<select name=\"uso_cfdi\""), "{form}");
    assert!(form.contains("<option value=\"G03\" selected>"), "{form}");
}

async fn pac_health_reads_a_recent_window(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let id = pay(&app, "ux_health").await;
    for _ in 0..5 {
        log_call(
            &app,
            id,
            "stamp",
            "retryable",
            Some(503),
            "service unavailable",
        )
        .await;
    }
    let dash = br.get("/admin").await.body;
    assert!(
        dash.contains("class=\"bad-text\" id=\"pac-health\""),
        "{dash}"
    );
    // An hour later those calls are history: the PAC's health is not judged on them.
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    // As sqlx writes a time on SQLite (RFC 3339), which PostgreSQL reads too.
    let at = hour_ago.to_rfc3339();
    sql(&app, &format!("UPDATE pac_attempts SET at = '{at}'")).await;
    let dash = br.get("/admin").await.body;
    assert!(
        dash.contains("class=\"muted-text\" id=\"pac-health\""),
        "{dash}"
    );
    assert!(dash.contains("No PAC calls in the last 15 min."), "{dash}");
    // Every PAC call row links to its document.
    assert!(
        dash.contains(&format!("href=\"/admin/documents/{id}\"")),
        "{dash}"
    );
    let r = br.get(&format!("/admin/documents/{id}")).await;
    assert_eq!(r.status, 303);
    assert!(
        r.location
            .is_some_and(|l| l.ends_with(&format!("#doc-{id}"))),
    );
}

on_both_backends!(
    labels_agree_and_each_message_says_who_said_it,
    an_unknown_outcome_shows_the_call_that_was_lost,
    a_document_71_hours_old_shows_its_window_and_is_at_risk,
    every_tile_counts_exactly_the_rows_its_link_shows,
    one_search_finds_parts_in_any_case_across_every_state,
    sign_in_returns_to_the_page_asked_for_and_keeps_the_name,
    the_small_things,
    pac_health_reads_a_recent_window,
);
