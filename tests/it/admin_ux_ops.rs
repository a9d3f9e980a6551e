//! Operating through the admin during an incident (issue 23), over HTTP on SQLite and
//! PostgreSQL: failures grouped by code with a hint and one action, the fix form of a payment
//! that needs attention (one document however often it is sent), pausing a PAC, the chart and
//! the CSV export.

use crate::admin_ux::{cancel_02, signed_in};
use crate::support;

use support::admin::{Browser, assert_count, count, doc, outbox_of, pay, rejected, stamped};
use support::ux::{listed, log_call, result_count, sale};
use support::{Backend, TestApp};

async fn failures_are_grouped_by_code_with_a_hint_and_one_action(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    let mut rfc = Vec::new();
    for n in 0..3 {
        rfc.push(
            rejected(
                &app,
                &format!("grp_rfc{n}"),
                "CFDI40143",
                "CFDI40143 - Este RFC del receptor no existe.",
            )
            .await,
        );
    }
    let mut sello = Vec::new();
    for n in 0..2 {
        sello.push(
            rejected(
                &app,
                &format!("grp_sello{n}"),
                "CFDI40102",
                "CFDI40102 - sello",
            )
            .await,
        );
    }
    let dash = br.get("/admin").await.body;
    let groups = dash
        .split("id=\"error-groups\"")
        .nth(1)
        .and_then(|g| g.split("</section>").next())
        .unwrap_or_else(|| panic!("no groups: {dash}"));
    assert!(
        groups.contains(
            "<strong>3 ×</strong> <code>CFDI40143</code></a> — RFC not registered with the SAT"
        ),
        "{groups}"
    );
    assert!(
        groups.contains("Constancia de Situación Fiscal"),
        "the hint: {groups}"
    );
    assert!(
        groups.contains("<strong>2 ×</strong> <code>CFDI40102</code>"),
        "{groups}"
    );
    assert!(groups.contains("Retry all 2"), "{groups}");
    assert!(
        !groups.contains("Retry all 3"),
        "a data problem is not retried as is: {groups}"
    );
    // The group's link lists exactly its documents.
    let list = br
        .get("/admin/invoices?state=failed&q=CFDI40143")
        .await
        .body;
    assert_eq!(result_count(&list), 3, "{list}");
    // Retry all: every document of the code, and only those.
    let r = br
        .post(
            "/admin/errors/retry",
            &[("csrf", &csrf), ("code", "CFDI40102")],
        )
        .await;
    assert_eq!(
        (r.status, r.location.as_deref()),
        (303, Some("/admin?notice=group_retried"))
    );
    for id in &sello {
        assert_eq!(doc(&app, *id).await.state.as_str(), "pending");
    }
    for id in &rfc {
        assert_eq!(doc(&app, *id).await.state.as_str(), "failed");
    }
    let refused = br
        .post(
            "/admin/errors/retry",
            &[("csrf", &csrf), ("code", "CFDI40143")],
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(
        br.post(
            "/admin/errors/retry",
            &[("csrf", "forged"), ("code", "CFDI40102")]
        )
        .await
        .status,
        403
    );
}

async fn the_fix_form_issues_one_document_under_a_double_submit(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    let usd = sale(&app, "fix_usd", 1, |o| o["currency"] = "usd".into()).await;
    let list = br.get("/admin/invoices?state=needs_attention").await.body;
    assert_eq!(listed(&list), vec![usd.clone()], "{list}");
    let row = payment_row(&app, &br, &usd).await;
    let page = br.get(&format!("/admin/payments/{row}")).await.body;
    assert!(page.contains(&format!("id=\"fix-{row}\"")), "{page}");
    let form = br.get(&format!("/admin/payments/{row}/fix")).await;
    assert_eq!(form.status, 200, "{}", form.body);
    assert!(
        form.body.contains("no exchange rate for currency USD"),
        "{}",
        form.body
    );
    assert!(
        form.body.contains("value=\"XIQB891116QE4\""),
        "prefilled: {}",
        form.body
    );
    let path = format!("/admin/payments/{row}/fix");
    let submission = form
        .body
        .split("name=\"submission\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| panic!("no submission token in the form: {}", form.body))
        .to_owned();
    let fields = |rate: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("rfc", "xiqb891116qe4".to_owned()),
            ("nombre", "Berenice Ximo Quezada".to_owned()),
            ("codigo_postal", "26015".to_owned()),
            ("regimen_fiscal", "612".to_owned()),
            ("uso_cfdi", "G03".to_owned()),
            ("email", String::new()),
            ("tipo_cambio", rate.to_owned()),
            ("submission", submission.clone()),
        ]
    };
    let as_refs = |v: &Vec<(&'static str, String)>| -> Vec<(&'static str, String)> { v.clone() };
    // Without the rate it is refused with what to give.
    let missing = post_owned(&br, &path, &as_refs(&fields(""))).await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert!(
        missing
            .body
            .contains("TipoCambio: give the exchange rate of USD"),
        "{}",
        missing.body
    );
    assert!(
        missing.body.contains("Berenice Ximo Quezada"),
        "the form keeps what was typed"
    );
    // Sent twice at once: one document.
    let good = fields("17.25");
    let (a, c) = tokio::join!(post_owned(&br, &path, &good), post_owned(&br, &path, &good));
    assert_eq!((a.status, c.status), (303, 303), "{} / {}", a.body, c.body);
    let sql = format!(
        "SELECT COUNT(*) FROM outbox o JOIN payments p ON p.id = o.payment_id WHERE p.id = {row}"
    );
    assert_eq!(count(&app, &sql).await, 1);
    let d = outbox_of(&app, &usd).await;
    assert_eq!(d.state.as_str(), "pending");
    assert!(
        d.request_json.contains("\"moneda\":\"USD\""),
        "{}",
        d.request_json
    );
    assert!(
        d.request_json.contains("\"tipo_cambio\":\"17.25\"")
            || d.request_json.contains("\"tipo_cambio\":17.25"),
        "{}",
        d.request_json
    );
    assert_count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM admin_actions WHERE action = 'reissue' AND target_id = '{row}'"
        ),
        1,
    )
    .await;
    // The same form sent once more, later, is shown its result...
    let again = post_owned(&br, &path, &good).await;
    assert_eq!(again.status, 303, "{}", again.body);
    // ...while another form (another submission) is refused: no attention is needed any more.
    let mut other = good.clone();
    other[8].1 = "another-form".into();
    let again = post_owned(&br, &path, &other).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(
        again.body.contains("does not need attention any more"),
        "{}",
        again.body
    );
    let page = br
        .get(&format!("/admin/payments/{row}?notice=reissued"))
        .await
        .body;
    assert!(page.contains("The corrected data was frozen"), "{page}");

    // An invalid RFC: refused with the reason, then issued with a valid one.
    let bad = sale(&app, "fix_rfc", 1, |o| {
        o["metadata"]["rfc"] = "NOT-AN-RFC".into()
    })
    .await;
    let row = payment_row(&app, &br, &bad).await;
    let path = format!("/admin/payments/{row}/fix");
    let mut wrong = fields("");
    wrong[1].1 = "ABC".into();
    let r = post_owned(&br, &path, &wrong).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("not a valid RFC"), "{}", r.body);
    let r = post_owned(&br, &path, &fields("")).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(outbox_of(&app, &bad).await.state.as_str(), "pending");
}

async fn post_owned(
    br: &Browser,
    path: &str,
    form: &[(&'static str, String)],
) -> support::admin::Page {
    let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    br.post(path, &pairs).await
}

/// The payment row of `payment_id`, from its list row's link.
async fn payment_row(app: &TestApp, br: &Browser, payment_id: &str) -> i64 {
    let _ = app;
    let list = br
        .get(&format!("/admin/invoices?q={payment_id}"))
        .await
        .body;
    list.split(&format!("\">{payment_id}</a>"))
        .next()
        .and_then(|h| h.rsplit("/admin/payments/").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no link to {payment_id} in {list}"))
}

async fn a_paused_pac_claims_nothing_until_resumed(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    let id = pay(&app, "pause_pending").await;
    let st = pay(&app, "pause_stamped").await;
    stamped(&app, st).await;
    cancel_02(&br, &csrf, st).await;
    // A reason is required.
    let r = br
        .post("/admin/pac/pause", &[("csrf", &csrf), ("reason", " ")])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = br
        .post(
            "/admin/pac/pause",
            &[("csrf", &csrf), ("reason", "PAC incident #42")],
        )
        .await;
    assert_eq!(
        (r.status, r.location.as_deref()),
        (303, Some("/admin?notice=paused"))
    );
    let dash = br.get("/admin").await.body;
    assert!(dash.contains("id=\"paused\""), "{dash}");
    assert!(
        dash.contains("Stamping at sandbox is paused") && dash.contains("PAC incident #42"),
        "{dash}"
    );
    assert!(dash.contains("id=\"resume-pac\""), "{dash}");
    let now = chrono::Utc::now();
    let lease = now + chrono::Duration::seconds(30);
    let claim = |pac: &'static str| {
        let db = app.db.clone();
        async move {
            (
                db.claim_stamps("test-worker", lease, now, true, 8, pac)
                    .await
                    .expect("claim"),
                db.claim_cancellation("test-worker", lease, now, pac)
                    .await
                    .expect("claim cancellation"),
            )
        }
    };
    let (stamps, cancel) = claim("sandbox").await;
    assert!(
        stamps.is_empty() && cancel.is_none(),
        "nothing is claimed while paused"
    );
    assert_eq!(doc(&app, id).await.state.as_str(), "pending");
    // Pausing twice is refused; the audit log has the pause.
    let again = br
        .post("/admin/pac/pause", &[("csrf", &csrf), ("reason", "again")])
        .await;
    assert_eq!(again.status, 409);
    let audit = "SELECT COUNT(*) FROM admin_actions WHERE action = 'pause_pac' AND actor = 'Ana' AND target_id = 'sandbox' AND detail = 'PAC incident #42'";
    assert_eq!(count(&app, audit).await, 1);
    let r = br.post("/admin/pac/resume", &[("csrf", &csrf)]).await;
    assert_eq!(
        (r.status, r.location.as_deref()),
        (303, Some("/admin?notice=resumed"))
    );
    assert_count(
        &app,
        "SELECT COUNT(*) FROM admin_actions WHERE action = 'resume_pac'",
        1,
    )
    .await;
    let (stamps, cancel) = claim("sandbox").await;
    assert_eq!(stamps.iter().map(|c| c.id).collect::<Vec<_>>(), vec![id]);
    assert!(cancel.is_some(), "the cancellation is claimed again");
    assert!(!br.get("/admin").await.body.contains("id=\"paused\""));
    assert_eq!(
        br.post("/admin/pac/resume", &[("csrf", &csrf)])
            .await
            .status,
        409
    );
}

async fn the_chart_the_csv_export_and_the_payment_date_order(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let older = sale(&app, "csv_older", 5, |_| {}).await;
    let newer = sale(&app, "csv_newer", 1, |_| {}).await;
    let f = rejected(
        &app,
        "csv_formula",
        "CFDI40108",
        "=HYPERLINK(\"http://evil\")",
    )
    .await;
    let st = pay(&app, "csv_stamped").await;
    stamped(&app, st).await;
    log_call(&app, st, "stamp", "stamped", Some(200), "ok").await;
    log_call(&app, f, "stamp", "rejected", Some(400), "x").await;
    log_call(&app, f, "stamp", "retryable", Some(503), "x").await;
    let dash = br.get("/admin").await.body;
    let chart = dash
        .split("id=\"throughput\"")
        .nth(1)
        .and_then(|c| c.split("</section>").next())
        .unwrap_or_else(|| panic!("no chart: {dash}"));
    assert!(
        chart.contains("1 stamp(s), 2 error(s); busiest minute 2."),
        "{chart}"
    );
    // This minute is the last column: the stamp up from the middle, the errors down.
    // (Or the one before, if the minute turned meanwhile.)
    let last = |start: &str| {
        ["M1439 ", "M1438 "]
            .iter()
            .any(|m| chart.contains(&format!("{m}{start}")))
    };
    assert!(last("50v-"), "{chart}");
    assert!(last("51v"), "{chart}");
    assert!(!chart.contains("<script"), "{chart}");

    // "All", by payment date both ways.
    let newest = br.get("/admin/invoices?view=all").await.body;
    let asc = br.get("/admin/invoices?view=all&sort=paid_asc").await.body;
    let (n, a) = (listed(&newest), listed(&asc));
    assert_eq!(a.first(), Some(&older), "{a:?}");
    assert_eq!(n.last(), Some(&older), "{n:?}");
    assert!(n.iter().position(|p| *p == newer) < n.iter().position(|p| *p == older));
    assert!(newest.contains("id=\"sort-paid\""), "{newest}");

    // The export is the list as filtered: every row, quoted, formulas defused.
    let csv = br.get("/admin/invoices.csv?view=failed&q=csv").await;
    assert_eq!(csv.status, 200, "{}", csv.body);
    assert!(csv.header("content-type").starts_with("text/csv"));
    assert!(
        csv.header("content-disposition")
            .starts_with("attachment; filename=\"invoices-failed-")
    );
    let lines: Vec<&str> = csv.body.lines().collect();
    assert!(
        lines[0].starts_with("payment_id,provider,amount"),
        "{}",
        csv.body
    );
    assert_eq!(lines.len(), 2, "{}", csv.body);
    assert!(
        lines[1].starts_with("\"pi_test_csv_formula\",\"stripe\",\"116.00\",\"MXN\""),
        "{}",
        lines[1]
    );
    assert!(
        lines[1].contains("\"'=HYPERLINK(\"\"http://evil\"\")\""),
        "{}",
        lines[1]
    );
    let all = br.get("/admin/invoices.csv?view=all&q=csv").await.body;
    assert_eq!(all.lines().count(), 5, "{all}");
    let list = br.get("/admin/invoices?view=failed&q=csv").await.body;
    assert!(
        list.contains("href=\"/admin/invoices.csv?view=failed&#38;q=csv\"")
            || list.contains("href=\"/admin/invoices.csv?view=failed&amp;q=csv\""),
        "{list}"
    );
}

on_both_backends!(
    failures_are_grouped_by_code_with_a_hint_and_one_action,
    the_fix_form_issues_one_document_under_a_double_submit,
    a_paused_pac_claims_nothing_until_resumed,
    the_chart_the_csv_export_and_the_payment_date_order,
);
