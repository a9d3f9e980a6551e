//! The factura global: sales without RFC arrive as signed Stripe webhooks dated in a closed
//! month, then `global issue` freezes one global per period and currency, from two processes
//! (the real binary) or two connection pools at once, twice, with a sale taken meanwhile by
//! someone else, and by `serve`'s own loop; on SQLite and PostgreSQL.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use autofactura::global::{Planner, Scope, Timing, issue};
use autofactura::store::{self, Frozen};
use chrono::Datelike;

use crate::support::sales::{
    at, global_documents, label, memberships, month, month_end, payment_status, refund, sell,
};
use crate::support::{Backend, TestApp, exec_sql, spawn_app_with};

const MANUAL: &str = "[global]\nauto_issue = false\n";

fn global_issue(app: &TestApp, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_autofactura"));
    c.args(["global", "issue", "--config"])
        .arg(&app.config_file)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            c.env_remove(k);
        }
    }
    c
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Lines of `out` that announce a global.
fn global_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("global "))
        .map(str::to_owned)
        .collect()
}

async fn two_processes_at_once_issue_one_global_with_every_eligible_sale(b: Backend) {
    let Some(app) = spawn_app_with(b, MANUAL).await else {
        return;
    };
    let (oct, nov) = (month(2), month(1));
    let amounts = [11600, 5799, 100001, 2000, 45050];
    for (i, minor) in amounts.iter().enumerate() {
        let day = 3 + u32::try_from(i).expect("small");
        sell(&app, &format!("g{i}"), at(oct, day, 12), *minor).await;
    }
    // Refunded in full before the close: left out. Refunded in part: in the global.
    sell(&app, "refunded", at(oct, 9, 12), 5000).await;
    refund(&app, "refunded", 5000, 5000).await;
    sell(&app, "partial", at(oct, 10, 12), 8000).await;
    refund(&app, "partial", 8000, 4000).await;
    // The last day of the month, late in the evening (UTC: already the next month).
    sell(&app, "lastday", at(oct, month_end(oct).day(), 23), 1000).await;
    // The next month is closed too but beyond --through; the current one is still open.
    sell(&app, "nov", at(nov, 5, 12), 3000).await;
    sell(&app, "open", chrono::Utc::now().timestamp(), 7000).await;

    let through = month_end(oct).to_string();
    let args = ["--through", through.as_str()];
    let (a, b2) = (
        global_issue(&app, &args).spawn().expect("spawn"),
        global_issue(&app, &args).spawn().expect("spawn"),
    );
    let (a, b2) = (
        a.wait_with_output().expect("first"),
        b2.wait_with_output().expect("second"),
    );
    assert!(
        a.status.success() && b2.status.success(),
        "{}\n{}",
        text(&a),
        text(&b2)
    );
    let lines: Vec<String> = global_lines(&a)
        .into_iter()
        .chain(global_lines(&b2))
        .collect();
    // 116.00 + 57.99 + 1000.01 + 20.00 + 450.50 + 80.00 + 10.00
    let want = format!(
        "global period={} periodicidad=04 payments=7 total=1734.50 status=pending uuid=- moneda=MXN",
        label(oct)
    );
    assert_eq!(lines.len(), 1, "one global between both runs: {lines:?}");
    assert!(lines[0].starts_with(&want), "{}\nwant {want}", lines[0]);
    // The folio as the document holds it: G-1, or `-` where the outbox allocates folios when it
    // seals (global_cli checks it once stamped).
    assert!(
        lines[0].ends_with(" folio=G-1") || lines[0].ends_with(" folio=-"),
        "{}",
        lines[0]
    );
    let left: Vec<String> = [&a, &b2]
        .iter()
        .flat_map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|l| l.starts_with("left out"))
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0].starts_with("left out stripe pi_test_refunded: refunded in full"),
        "{}",
        left[0]
    );

    // Again: nothing left to issue through that date.
    let again = global_issue(&app, &args).output().expect("again");
    assert!(again.status.success(), "{}", text(&again));
    assert!(global_lines(&again).is_empty(), "{}", text(&again));
    assert!(
        text(&again).contains("no closed period through"),
        "{}",
        text(&again)
    );

    let members = memberships(&app).await;
    let mut ids: Vec<&str> = members.iter().map(|(_, _, p)| p.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "pi_test_g0",
            "pi_test_g1",
            "pi_test_g2",
            "pi_test_g3",
            "pi_test_g4",
            "pi_test_lastday",
            "pi_test_partial"
        ]
    );
    assert_eq!(global_documents(&app).await, 1);
    let (status, reason) = payment_status(&app, "pi_test_refunded").await;
    assert_eq!(status, "refunded");
    assert!(
        reason
            .as_deref()
            .unwrap_or("")
            .contains("charge.refunded evt_refund_refunded_5000"),
        "{reason:?}"
    );
    assert_eq!(payment_status(&app, "pi_test_g3").await.0, "in_global");
    assert_eq!(
        payment_status(&app, "pi_test_nov").await.0,
        "awaiting_global"
    );
    assert_eq!(
        payment_status(&app, "pi_test_open").await.0,
        "awaiting_global"
    );

    // Without --through: every closed period, so the next month's too, never the open one.
    let rest = global_issue(&app, &[]).output().expect("rest");
    let lines = global_lines(&rest);
    assert_eq!(lines.len(), 1, "{}", text(&rest));
    assert!(
        lines[0].starts_with(&format!(
            "global period={} periodicidad=04 payments=1 total=30.00",
            label(nov)
        )),
        "{}",
        lines[0]
    );
    assert_eq!(global_documents(&app).await, 2);
    assert_eq!(
        payment_status(&app, "pi_test_open").await.0,
        "awaiting_global"
    );
}

async fn two_pools_at_once_split_a_large_period_and_take_no_sale_twice(b: Backend) {
    let Some(app) = spawn_app_with(b, "[global]\nauto_issue = false\nmax_conceptos = 2\n").await
    else {
        return;
    };
    let oct = month(1);
    for i in 0..5 {
        sell(
            &app,
            &format!("s{i}"),
            at(oct, 2 + i, 10),
            1000 + i64::from(i),
        )
        .await;
    }
    let planner = Planner::new(&app.settings).expect("planner");
    // A second instance: its own pool (and, on SQLite, its own write lock) on the same database.
    let other = store::connect(&app.settings.database)
        .await
        .expect("connect");
    let scope = Scope::now_through(None);
    let (r1, r2) = tokio::join!(
        issue(&app.db, &planner, scope, "instance 1"),
        issue(&other, &planner, scope, "instance 2")
    );
    let (r1, r2) = (r1.expect("first"), r2.expect("second"));
    let mut sizes: Vec<usize> = r1
        .issued
        .iter()
        .chain(&r2.issued)
        .map(|g| g.payments)
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [1, 2, 2], "{:?} {:?}", r1.issued, r2.issued);
    assert!(
        r1.problems.is_empty() && r2.problems.is_empty(),
        "{:?} {:?}",
        r1.problems,
        r2.problems
    );
    let again = issue(&other, &planner, scope, "instance 2")
        .await
        .expect("again");
    assert!(again.issued.is_empty(), "{:?}", again.issued);

    let members = memberships(&app).await;
    assert_eq!(members.len(), 5, "{members:?}");
    let mut sales: Vec<&str> = members.iter().map(|(_, _, p)| p.as_str()).collect();
    sales.sort_unstable();
    sales.dedup();
    assert_eq!(sales.len(), 5, "no sale in two globals: {members:?}");
    let mut seqs: Vec<i32> = members.iter().map(|(_, s, _)| *s).collect();
    seqs.dedup();
    assert_eq!(seqs, [1, 2, 3], "numbered within the period: {members:?}");
    assert_eq!(global_documents(&app).await, 3);
    other.close().await;
}

async fn a_sale_taken_meanwhile_rolls_the_whole_global_back(b: Backend) {
    let Some(app) = spawn_app_with(b, MANUAL).await else {
        return;
    };
    let oct = month(1);
    sell(&app, "kept", at(oct, 4, 10), 1000).await;
    sell(&app, "taken", at(oct, 5, 10), 2000).await;
    let planner = Planner::new(&app.settings).expect("planner");
    let g = crate::support::sales::planned_global(&app).await;
    // As the portal does when a customer asks for a nominative invoice first.
    exec_sql(
        &app.db,
        "UPDATE payments SET status = 'invoice_pending' WHERE payment_id = 'pi_test_taken'",
    )
    .await;
    match app.db.freeze_global(&g).await.expect("freeze") {
        Frozen::Changed(why) => assert!(why.contains("no longer awaiting"), "{why}"),
        other => panic!("froze over a sale taken meanwhile: {other:?}"),
    }
    assert_eq!(global_documents(&app).await, 0);
    assert!(memberships(&app).await.is_empty());
    assert_eq!(
        payment_status(&app, "pi_test_kept").await.0,
        "awaiting_global"
    );
    assert!(
        app.invoices().await.iter().all(|r| r.provider != "global"),
        "no global payment row left"
    );
    let r = issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("issue");
    assert_eq!(r.issued.len(), 1);
    assert_eq!(r.issued[0].payments, 1, "only the sale still waiting");
    assert_eq!(
        payment_status(&app, "pi_test_taken").await.0,
        "invoice_pending"
    );
    // The sales list (the chaos run's count) has the two sales, not the global's own row.
    let sales = app.invoices().await;
    assert_eq!(sales.len(), 2, "{sales:?}");
    assert!(sales.iter().all(|r| r.provider == "stripe"), "{sales:?}");
}

async fn serve_issues_a_closed_period_by_itself(b: Backend) {
    let Some(app) = spawn_app_with(b, "[global]\ngrace_minutes = 0\ninterval_seconds = 1\n").await
    else {
        return;
    };
    let oct = month(1);
    sell(&app, "auto1", at(oct, 4, 10), 1000).await;
    sell(&app, "auto2", at(oct, 5, 10), 2000).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while memberships(&app).await.len() < 2 {
        assert!(Instant::now() < deadline, "the loop issued nothing");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A round may run between the two deliveries: then the second sale gets a global of its
    // own (number 2 of the period). Either way each sale is in one global, and more rounds
    // change nothing.
    let globals = global_documents(&app).await;
    assert!((1..=2).contains(&globals), "{globals} globals");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(global_documents(&app).await, globals);
    let members = memberships(&app).await;
    let sales: Vec<&str> = members.iter().map(|(_, _, p)| p.as_str()).collect();
    assert_eq!(sales.len(), 2, "{members:?}");
    assert_ne!(sales[0], sales[1], "{members:?}");
}

/// Local midnight `days` after the last day of the month starting at `first`, plus `hours`.
fn after_month_end(first: chrono::NaiveDate, days: u64, hours: u32) -> chrono::NaiveDateTime {
    (month_end(first) + chrono::Days::new(days))
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        + chrono::Duration::hours(i64::from(hours))
}

/// How many globals `serve`'s loop issues in a round at local time `now`.
async fn loop_round(
    app: &TestApp,
    planner: &Planner,
    now: chrono::NaiveDateTime,
    timing: Timing,
) -> usize {
    let r = issue(&app.db, planner, Scope::due_by(now, timing), "loop")
        .await
        .expect("issue");
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    r.issued.len()
}

async fn the_loop_waits_for_the_portal_cutoff_of_days_after_month_end(b: Backend) {
    let Some(app) = spawn_app_with(b, MANUAL).await else {
        return;
    };
    let oct = month(1);
    sell(&app, "portal1", at(oct, 4, 10), 1000).await;
    let planner = Planner::new(&app.settings).expect("planner");
    // Customers may self-invoice October's sales until the end of 1 November.
    let timing = Timing {
        grace: chrono::Duration::minutes(60),
        portal_days: Some(1),
    };
    for (now, issued) in [
        // Closed, and its grace has passed, but the portal still takes its sales.
        (after_month_end(oct, 1, 2), 0),
        (after_month_end(oct, 1, 23), 0),
        // The portal closed at midnight.
        (after_month_end(oct, 2, 0), 1),
    ] {
        assert_eq!(
            loop_round(&app, &planner, now, timing).await,
            issued,
            "at {now}"
        );
    }
    assert_eq!(memberships(&app).await.len(), 1);
    // With the portal off, the grace alone decides.
    sell(&app, "portal2", at(oct, 5, 10), 2000).await;
    let off = Timing {
        portal_days: None,
        ..timing
    };
    let now = after_month_end(oct, 1, 2);
    assert_eq!(loop_round(&app, &planner, now, off).await, 1);
}

async fn the_loop_issues_within_the_sat_72_hours_whatever_the_portal_allows(b: Backend) {
    let Some(app) = spawn_app_with(
        b,
        "[global]\nauto_issue = false\nperiodicidad = \"diaria\"\n",
    )
    .await
    else {
        return;
    };
    let oct = month(1);
    // A daily global: the portal would take the sale until the month ends (and ten days
    // more), the SAT wants the global within 72 hours of the day's close (5th, 00:00).
    sell(&app, "day4", at(oct, 4, 10), 1000).await;
    let planner = Planner::new(&app.settings).expect("planner");
    let timing = Timing {
        grace: chrono::Duration::minutes(60),
        portal_days: Some(10),
    };
    let day = |d: u32, h: u32| {
        oct.with_day(d)
            .and_then(|d| d.and_hms_opt(h, 0, 0))
            .expect("time")
    };
    for (now, issued) in [(day(5, 2), 0), (day(6, 23), 0), (day(7, 0), 1)] {
        assert_eq!(
            loop_round(&app, &planner, now, timing).await,
            issued,
            "at {now}"
        );
    }
    // Frozen 24 hours before the deadline, which the dashboard shows.
    let period = planner.period_of(chrono::DateTime::from_timestamp(at(oct, 4, 10), 0).expect("t"));
    assert_eq!(autofactura::global::due::deadline(&period), day(8, 0));
}

on_both_backends!(
    the_loop_waits_for_the_portal_cutoff_of_days_after_month_end,
    the_loop_issues_within_the_sat_72_hours_whatever_the_portal_allows,
    two_processes_at_once_issue_one_global_with_every_eligible_sale,
    two_pools_at_once_split_a_large_period_and_take_no_sale_twice,
    a_sale_taken_meanwhile_rolls_the_whole_global_back,
    serve_issues_a_closed_period_by_itself,
);
