//! The factura global per currency (issue 17): sales without RFC in MXN and USD of one period
//! make one global per currency; a USD global takes the TipoCambio its sales carry and is
//! stamped; USD sales that carry no rate (recorded before rates were kept) are held out of it
//! with the reason until they do; on SQLite and PostgreSQL.

use autofactura::global::{Planner, Scope, issue};
use serde_json::Value;

use crate::global_cli::wait_stamped;
use crate::support::rows::{Bind, fetch_rows};
use crate::support::sales::{at, month, payment_status, sale_body, sell};
use crate::support::{Backend, TestApp, exec_sql, spawn_app_with};

/// A sale of `minor` cents of a dollar without fiscal data: `pi_test_{suffix}`.
async fn sell_usd(app: &TestApp, suffix: &str, created: i64, minor: i64) {
    let mut v: Value = serde_json::from_str(&sale_body(suffix, created, minor)).expect("body");
    v["data"]["object"]["currency"] = "usd".into();
    let r = app.post_stripe_signed(&v.to_string()).await;
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["payment_status"], "awaiting_global", "{body}");
}

/// Sets the rate a sale carries (migration 0017's column), or clears it as for a sale
/// recorded before ingest kept its rate.
async fn carry_rate(app: &TestApp, suffix: &str, rate: Option<&str>) {
    let rate = rate.map_or("NULL".to_owned(), |r| format!("'{r}'"));
    exec_sql(
        &app.db,
        &format!("UPDATE payments SET tipo_cambio = {rate} WHERE payment_id = 'pi_test_{suffix}'"),
    )
    .await;
}

async fn one_global_per_currency_with_the_rate_its_sales_carry(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        "[global]\nauto_issue = false\n[invoice]\ncurrencies = [\"MXN\", \"USD\"]\n\
         [fx]\nsource = \"fixed\"\nrates = { USD = \"17.2512\" }\n",
    )
    .await
    else {
        return;
    };
    let oct = month(1);
    sell(&app, "mxn1", at(oct, 3, 9), 11600).await;
    sell(&app, "mxn2", at(oct, 4, 9), 5000).await;
    sell_usd(&app, "usd1", at(oct, 5, 9), 1000).await;
    sell_usd(&app, "usd2", at(oct, 6, 9), 2550).await;
    sell_usd(&app, "norate", at(oct, 7, 9), 700).await;
    // Ingest kept the rate it found ([fx] fixed) with each sale.
    let kept: Vec<(Option<String>,)> = fetch_rows(
        &app.db,
        "SELECT tipo_cambio FROM payments WHERE currency = 'USD' ORDER BY id",
        &[],
    )
    .await;
    assert_eq!(kept, vec![(Some("17.2512".to_owned()),); 3]);
    carry_rate(&app, "norate", None).await;

    let planner = Planner::new(&app.settings).expect("planner");
    let r = issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("issue");
    let mut issued: Vec<(String, usize, String)> = r
        .issued
        .iter()
        .map(|g| (g.moneda.clone(), g.payments, g.total.clone()))
        .collect();
    issued.sort();
    assert_eq!(
        issued,
        [
            ("MXN".into(), 2, "166.00".into()),
            ("USD".into(), 2, "35.50".into())
        ]
    );
    // The sale without a rate waits, saying why, and the period is reported.
    let (status, reason) = payment_status(&app, "pi_test_norate").await;
    assert_eq!(status, "awaiting_global");
    let reason = reason.unwrap_or_default();
    assert!(
        reason.contains("held out of the factura global")
            && reason.contains("(USD)")
            && reason.contains("TipoCambio"),
        "{reason}"
    );
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    assert!(r.problems[0].contains("is held"), "{:?}", r.problems);

    let (_pool, _services) = app.start_pool().await;
    let usd = r.issued.iter().find(|g| g.moneda == "USD").expect("usd");
    let d = wait_stamped(&app, usd.outbox_id).await;
    let xml = String::from_utf8(d.stamped_xml.expect("xml")).expect("utf-8");
    assert!(
        xml.contains("Moneda=\"USD\"") && xml.contains("TipoCambio=\"17.2512\""),
        "{xml}"
    );
    assert!(xml.contains("NoIdentificacion=\"pi_test_usd2\""), "{xml}");

    // Once the held sale carries a rate, the next run gives it a USD global of its own.
    carry_rate(&app, "norate", Some("17.30")).await;
    let again = issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("again");
    assert_eq!(again.issued.len(), 1, "{:?}", again.problems);
    assert_eq!(
        (again.issued[0].moneda.as_str(), again.issued[0].payments),
        ("USD", 1)
    );
    let members: Vec<(String, i64)> = fetch_rows(
        &app.db,
        "SELECT g.moneda, COUNT(*) FROM global_members m JOIN globals g ON g.outbox_id = m.outbox_id \
         GROUP BY g.moneda ORDER BY g.moneda",
        &[],
    )
    .await;
    assert_eq!(members, [("MXN".into(), 2), ("USD".into(), 3)]);
    let none: Vec<(i64,)> = fetch_rows(
        &app.db,
        "SELECT COUNT(*) FROM payments WHERE status = $1",
        &[Bind::Str("awaiting_global")],
    )
    .await;
    assert_eq!(none[0].0, 0);
}

on_both_backends!(one_global_per_currency_with_the_rate_its_sales_carry);
