//! Operating through the admin during an incident (issue 23), over HTTP on SQLite and
//! PostgreSQL: failures grouped by code with a hint and one action, the fix form of a payment
//! that needs attention (one document however often it is sent), pausing a PAC, the chart and
//! the CSV export.

use crate::support;

use support::admin::{Browser, admin_app, count, doc, outbox_of, rejected};
use support::ux::{listed, result_count, sale};
use support::{Backend, TestApp};

async fn signed_in(b: Backend) -> Option<(TestApp, Browser, String)> {
    let app = admin_app(b).await?;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    Some((app, br, csrf))
}

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
        form.body.contains("currency USD is not invoiced"),
        "{}",
        form.body
    );
    assert!(
        form.body.contains("value=\"XIQB891116QE4\""),
        "prefilled: {}",
        form.body
    );
    let path = format!("/admin/payments/{row}/fix");
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
    assert_eq!(
        count(&app, &format!("SELECT COUNT(*) FROM admin_actions WHERE action = 'reissue' AND target_id = '{row}'")).await,
        1
    );
    // A third send, later, is refused: it is not in need of attention any more.
    let again = post_owned(&br, &path, &good).await;
    assert_eq!(again.status, 409, "{}", again.body);
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

on_both_backends!(
    failures_are_grouped_by_code_with_a_hint_and_one_action,
    the_fix_form_issues_one_document_under_a_double_submit,
);
