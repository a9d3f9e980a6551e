//! The rest of issue 23, over HTTP on SQLite and PostgreSQL: the dashboard's deadlines beyond
//! each document's window (the facturas globales due, the receptors' answers awaited), the
//! "send to the factura global" group action for sales that cannot be invoiced to their
//! customer (with CSRF, once however often sent), and the counts of the Duplicates and
//! Cancellations tabs, equal to what their pages list.

use crate::support;

use autofactura::domain::cancellation::{CancelOrder, Motivo};
use autofactura::global::{Planner, Scope, Timing, issue};
use support::admin::{Browser, PASSWORD, count, finish_cancellation, pay, stamped};
use support::portal::{sale_without_rfc, sale_without_rfc_at};
use support::sales::{at, month, payment_status};
use support::ux::{sale, sql};
use support::{Backend, TestApp, spawn_app_with};

async fn signed_in(b: Backend) -> Option<(TestApp, Browser, String)> {
    // The tests issue the globals themselves: `serve`'s loop would race them.
    let app = spawn_app_with(
        b,
        &format!("[admin]\npassword = \"{PASSWORD}\"\n[global]\nauto_issue = false\n"),
    )
    .await?;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    Some((app, br, csrf))
}

/// The part of `page` from the element with `id` to the end of its list.
fn part<'a>(page: &'a str, id: &str) -> &'a str {
    page.split(&format!("id=\"{id}\""))
        .nth(1)
        .and_then(|p| p.split("</ul>").next())
        .unwrap_or_else(|| panic!("no #{id} in {page}"))
}

/// A cancellation of stamped document `id` (UUID `uuid`), as the admin records one.
async fn cancel(app: &TestApp, id: i64, uuid: &str) {
    let order = CancelOrder {
        uuid: uuid.to_owned(),
        rfc_emisor: "EKU9003173C9".into(),
        rfc_receptor: "XIQB891116QE4".into(),
        total: "116.00".into(),
        motivo: Motivo::SinRelacion,
        folio_sustitucion: None,
        requires_acceptance: true,
    };
    app.db
        .request_cancellation(id, &order, "Ana")
        .await
        .expect("db")
        .expect("no conflict");
}

async fn the_dashboard_opens_with_the_globals_due_and_the_receptors_answers(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let last = month(1);
    sale_without_rfc_at(&app, "due_last1", at(last, 3, 12)).await;
    sale_without_rfc_at(&app, "due_last2", at(last, 9, 12)).await;
    sale_without_rfc(&app, "due_now").await;
    let s = pay(&app, "due_cancel").await;
    let uuid = stamped(&app, s).await;
    cancel(&app, s, &uuid).await;
    sql(
        &app,
        &format!("UPDATE cancellations SET state = 'pending_receiver' WHERE uuid = '{uuid}'"),
    )
    .await;

    let dash = br.get("/admin").await.body;
    // Deadlines come before the tiles.
    let deadlines = dash.find("id=\"deadlines\"").expect("deadlines");
    assert!(deadlines < dash.find("class=\"tiles\"").expect("tiles"));
    let globals = part(&dash, "globals-due");
    let label = |first: chrono::NaiveDate| first.format("%Y-%m").to_string();
    let last_period = format!("data-period=\"{}\" data-moneda=\"MXN\"", label(last));
    let this_period = format!("data-period=\"{}\" data-moneda=\"MXN\"", label(month(0)));
    // The closest deadline first: last month's (72 h after it closed), then this month's.
    let (a, b2) = (
        globals
            .find(&last_period)
            .unwrap_or_else(|| panic!("{globals}")),
        globals
            .find(&this_period)
            .unwrap_or_else(|| panic!("{globals}")),
    );
    assert!(a < b2, "{globals}");
    let due = (support::sales::month_end(last) + chrono::Days::new(4))
        .format("%Y-%m-%d 00:00:00 hora CDMX")
        .to_string();
    assert!(
        globals.contains(&format!("title=\"due {due}\"")),
        "{globals}"
    );
    assert!(globals.contains("2 sale(s)"), "{globals}");
    assert!(
        globals.contains("issue it: autofactura global issue"),
        "auto_issue is off: {globals}"
    );
    let receptors = part(&dash, "receptor-deadlines");
    assert!(receptors.contains(&uuid), "{receptors}");
    assert!(receptors.contains("window closes in"), "{receptors}");
    assert!(
        dash.contains("3 business days from the request; silence accepts"),
        "{dash}"
    );

    // Once the period's global is frozen, it is no longer due.
    let planner = Planner::new(&app.settings).expect("planner");
    issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("issue");
    let dash = br.get("/admin").await.body;
    let globals = part(&dash, "globals-due");
    assert!(!globals.contains(&last_period), "{globals}");
    assert!(globals.contains(&this_period), "{globals}");
}

async fn sales_that_cannot_be_invoiced_nominatively_are_sent_to_the_global_once(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    let bad = |n: &str| format!("global_bad{n}");
    for n in ["1", "2"] {
        sale(&app, &bad(n), 1, |o| {
            o["metadata"]["rfc"] = "NOT-AN-RFC".into()
        })
        .await;
    }
    // A currency the appliance does not invoice: no global can hold it either.
    sale(&app, "global_usd", 1, |o| o["currency"] = "usd".into()).await;
    let dash = br.get("/admin").await.body;
    let group = dash
        .split("data-code=\"needs_attention\"")
        .nth(1)
        .and_then(|g| g.split("</li>").next())
        .unwrap_or_else(|| panic!("no needs-attention group: {dash}"));
    assert!(
        group.contains("action=\"/admin/errors/global\"") && group.contains("name=\"csrf\""),
        "{group}"
    );

    let forged = br.post("/admin/errors/global", &[("csrf", "forged")]).await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert_eq!(
        payment_status(&app, "pi_test_global_bad1").await.0,
        "needs_attention"
    );
    for _ in 0..2 {
        let r = br.post("/admin/errors/global", &[("csrf", &csrf)]).await;
        assert_eq!(
            (r.status, r.location.as_deref()),
            (303, Some("/admin?notice=sent_to_global"))
        );
    }
    for n in ["1", "2"] {
        let (status, reason) = payment_status(&app, &format!("pi_test_{}", bad(n))).await;
        assert_eq!(status, "awaiting_global");
        assert!(
            reason
                .unwrap_or_default()
                .contains("sent to the factura global by Ana"),
            "{n}"
        );
    }
    assert_eq!(
        payment_status(&app, "pi_test_global_usd").await.0,
        "needs_attention"
    );
    sent_once_then_in_the_global(&app, 2).await;
}

/// `sales` were each audited once as sent to the global (a second submit moved nothing), and
/// when this month closes, its one global holds them.
async fn sent_once_then_in_the_global(app: &TestApp, sales: usize) {
    assert_eq!(
        count(
            app,
            "SELECT COUNT(*) FROM admin_actions WHERE action = 'send_to_global'"
        )
        .await,
        i64::try_from(sales).expect("small"),
        "each sale audited once, the second submit moved nothing"
    );
    let planner = Planner::new(&app.settings).expect("planner");
    let timing = Timing {
        grace: chrono::Duration::zero(),
        portal_days: None,
    };
    let later = autofactura::domain::time::now_in_mexico() + chrono::Duration::days(40);
    let r = issue(&app.db, &planner, Scope::due_by(later, timing), "test")
        .await
        .expect("issue");
    assert_eq!(r.issued.len(), 1, "{:?}", r.problems);
    assert_eq!(r.issued[0].payments, sales);
}

/// `(data-tab, count)` of the invoices page's tabs.
fn tab_counts(page: &str) -> Vec<(String, Option<i64>)> {
    page.split("data-tab=\"")
        .skip(1)
        .map(|t| {
            let key = t.split('"').next().unwrap_or_default().to_owned();
            let label = t.split("</a>").next().unwrap_or_default();
            let n = label
                .split("<span class=\"count\">(")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .and_then(|n| n.parse().ok());
            (key, n)
        })
        .collect()
}

async fn the_duplicates_and_cancellations_tabs_count_what_their_pages_list(b: Backend) {
    let Some((app, br, _)) = signed_in(b).await else {
        return;
    };
    let mut uuids = Vec::new();
    for n in 0..3 {
        let id = pay(&app, &format!("tabs{n}")).await;
        let uuid = stamped(&app, id).await;
        cancel(&app, id, &uuid).await;
        uuids.push(uuid);
    }
    // One cancellation done: the page lists the two still in process.
    finish_cancellation(
        &app,
        &uuids[0],
        "canceled",
        "Cancelado sin aceptación",
        "<acuse/>",
    )
    .await;
    for (kind, uuid) in [
        ("duplicate", "DUP-0000-1"),
        ("duplicate", "DUP-0000-2"),
        ("orphan", "ORPHAN-0001"),
    ] {
        app.db
            .record_finding(kind, None, uuid, None, "{}")
            .await
            .expect("finding");
    }
    let page = br.get("/admin/invoices").await;
    assert_eq!(page.status, 200);
    let tabs = tab_counts(&page.body);
    let of = |k: &str| {
        tabs.iter()
            .find(|(t, _)| t == k)
            .and_then(|(_, n)| *n)
            .unwrap_or_else(|| panic!("no count on tab {k}: {tabs:?}"))
    };
    assert_eq!((of("duplicates"), of("cancellations")), (2, 2), "{tabs:?}");
    // What each tab opens lists exactly that many.
    let dup = br.get("/admin/invoices?view=duplicates").await;
    let dup = br
        .get(dup.location.as_deref().expect("redirect"))
        .await
        .body;
    assert_eq!(dup.matches("<tr data-finding=").count(), 2, "{dup}");
    let cancels = br.get("/admin/invoices?view=cancellations").await;
    let cancels = br
        .get(cancels.location.as_deref().expect("redirect"))
        .await
        .body;
    assert_eq!(cancels.matches("<tr data-uuid=").count(), 2, "{cancels}");
}

/// A group of failures whose fix is the factura global (CFDI40146: the generic RFC on a
/// nominative CFDI) sends its sales there from the dashboard: each failed document is set
/// aside, its sale waits for the global, once, and the global holds it. Another code's
/// failures stay as they are.
async fn a_failure_group_whose_fix_is_the_global_sends_its_sales_there_once(b: Backend) {
    let Some((app, br, csrf)) = signed_in(b).await else {
        return;
    };
    let generic = pay(&app, "generic_rfc").await;
    let other = pay(&app, "unregistered_rfc").await;
    let fail = |row: i64, code: &str| {
        format!(
            "UPDATE outbox SET state = 'failed', last_error_code = '{code}', \
             last_error_message = 'refused' WHERE payment_id = {row}"
        )
    };
    sql(&app, &fail(generic, "CFDI40146")).await;
    sql(&app, &fail(other, "CFDI40143")).await;
    let dash = br.get("/admin").await.body;
    let group = |code: &str| {
        dash.split(&format!("data-code=\"{code}\""))
            .nth(1)
            .and_then(|g| g.split("</li>").next())
            .unwrap_or_else(|| panic!("no {code} group: {dash}"))
            .to_owned()
    };
    let g = group("CFDI40146");
    assert!(
        g.contains("action=\"/admin/errors/global\"")
            && g.contains("name=\"code\" value=\"CFDI40146\""),
        "{g}"
    );
    assert!(
        !group("CFDI40143").contains("/admin/errors/global"),
        "CFDI40143's fix is the customer's data"
    );

    let forged = br
        .post(
            "/admin/errors/global",
            &[("csrf", "forged"), ("code", "CFDI40146")],
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    for _ in 0..2 {
        let r = br
            .post(
                "/admin/errors/global",
                &[("csrf", csrf.as_str()), ("code", "CFDI40146")],
            )
            .await;
        assert_eq!(
            (r.status, r.location.as_deref()),
            (303, Some("/admin?notice=sent_to_global"))
        );
    }
    let state_of = |row: i64| {
        format!("SELECT COUNT(*) FROM outbox WHERE payment_id = {row} AND state = 'superseded'")
    };
    assert_eq!(count(&app, &state_of(generic)).await, 1);
    assert_eq!(count(&app, &state_of(other)).await, 0);
    let (status, reason) = payment_status(&app, "pi_test_generic_rfc").await;
    assert_eq!(status, "awaiting_global");
    assert!(
        reason
            .unwrap_or_default()
            .contains("refused with CFDI40146"),
        "the reason says why"
    );
    assert_ne!(
        payment_status(&app, "pi_test_unregistered_rfc").await.0,
        "awaiting_global"
    );
    sent_once_then_in_the_global(&app, 1).await;
}

on_both_backends!(
    the_dashboard_opens_with_the_globals_due_and_the_receptors_answers,
    sales_that_cannot_be_invoiced_nominatively_are_sent_to_the_global_once,
    a_failure_group_whose_fix_is_the_global_sends_its_sales_there_once,
    the_duplicates_and_cancellations_tabs_count_what_their_pages_list,
);
