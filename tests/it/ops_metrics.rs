//! `GET /metrics` (issue 22): the exposition parses with a real Prometheus parser, is served on
//! the admin listener only when one is set, and its counters and gauges move with traffic.
//!
//! The process's counters are shared by every test of this binary (one registry per process,
//! as in production), so they are compared before and after this test's own traffic: they must
//! have grown by at least what it sent. The document gauges are this app's database, exactly.

use std::time::{Duration, Instant};

use autofactura::domain::DeliveryState;
use autofactura::webhooks::stripe;
use prometheus_parse::{Scrape, Value};

use crate::deliveries::{all_in, wait_for};
use crate::support::admin::pay;
use crate::support::smtp::Smtp;
use crate::support::{Backend, TestApp, spawn_app_with};

/// Scrapes `base/metrics` and parses it.
pub async fn scrape(app: &TestApp, base: &str) -> Scrape {
    let r = app
        .http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(r.status(), 200, "/metrics answers 200");
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(ct.contains("openmetrics-text"), "content type: {ct}");
    let text = r.text().await.expect("body");
    assert!(
        text.ends_with("# EOF\n"),
        "an OpenMetrics exposition ends with # EOF"
    );
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a valid exposition")
}

/// The value of `metric` whose labels include `labels` (0 when absent: a counter not yet
/// touched).
pub fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(_) | Value::Summary(_) => 0.0,
        })
        .sum()
}

async fn metrics_move_with_traffic(b: Backend) {
    let Some(app) = spawn_app_with(b, "[admin]\nlisten = \"127.0.0.1:0\"\n").await else {
        return;
    };
    // The public (webhook) listener does not serve the metrics when the admin has its own.
    assert_ne!(app.address, app.admin_address);
    let public = app.get("/metrics").await;
    assert_eq!(
        public.status(),
        404,
        "/metrics is private when [admin] listen is set"
    );

    let before = scrape(&app, &app.admin_address).await;
    let now = chrono::Utc::now().timestamp();
    for i in 0..2 {
        let body = stripe::sample_payment_intent(&format!("metrics_{b:?}_{i}"), now, false);
        assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    }
    let forged = app
        .post_stripe(
            &stripe::sample_payment_intent("metrics_forged", now, false),
            Some(format!("t={now},v1=00")),
        )
        .await;
    assert_eq!(forged.status(), 400);
    app.drain(30).await;

    // The gauges are cached for a few seconds: poll until this app's two stamps show.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let s = scrape(&app, &app.admin_address).await;
        let stamped = value(
            &s,
            "autofactura_documents",
            &[("state", "stamped"), ("kind", "ingreso")],
        );
        if stamped == 2.0 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(
        value(
            &after,
            "autofactura_documents",
            &[("state", "stamped"), ("kind", "ingreso")]
        ),
        2.0,
        "the documents gauge counts this app's stamped rows"
    );
    assert_eq!(
        value(&after, "autofactura_documents", &[("state", "pending")]),
        0.0
    );
    let grew = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    let accepted = [("provider", "stripe"), ("outcome", "accepted")];
    assert!(grew("autofactura_webhooks_total", &accepted) >= 2.0);
    let rejected = [("provider", "stripe"), ("outcome", "rejected")];
    assert!(grew("autofactura_webhooks_total", &rejected) >= 1.0);
    let stamp = [("operation", "stamp"), ("outcome", "stamped")];
    assert!(grew("autofactura_pac_requests_total", &stamp) >= 2.0);
    assert!(grew("autofactura_stamps_total", &[("kind", "ingreso")]) >= 2.0);
    assert!(
        grew(
            "autofactura_pac_request_duration_seconds_count",
            &[("operation", "stamp")]
        ) >= 2.0
    );
    assert!(
        grew(
            "autofactura_webhook_ack_duration_seconds_count",
            &[("provider", "stripe")]
        ) >= 3.0
    );
    // SQLite: each write took its turn on the one writer and said how long it waited and held
    // it (the two webhooks' transactions, the claims and settles of their stamps).
    if b == Backend::Sqlite {
        for name in [
            "autofactura_sqlite_write_lock_wait_seconds_count",
            "autofactura_sqlite_write_lock_hold_seconds_count",
        ] {
            assert!(grew(name, &[]) >= 4.0, "{name} grew with the writes");
        }
        assert!(grew("autofactura_sqlite_write_lock_hold_seconds_sum", &[]) > 0.0);
        // The two new sales were committed, alone or with others, each hold named for its
        // write, and their log synced outside the lock before they were acknowledged.
        assert!(grew("autofactura_sqlite_sales_per_commit_sum", &[]) >= 2.0);
        let sale = [("write", "record a new sale")];
        assert!(grew("autofactura_sqlite_write_lock_hold_seconds_count", &sale) >= 2.0);
        // A sale alone commits in its own hold; sales that queued together, in one commit.
        assert!(grew("autofactura_sqlite_sales_per_commit_count", &[]) >= 1.0);
        assert!(grew("autofactura_sqlite_log_sync_seconds_count", &[]) >= 1.0);
        for name in [
            "autofactura_sqlite_write_lock_hold_seconds",
            "autofactura_sqlite_log_sync_seconds",
        ] {
            assert!(after.docs.contains_key(name), "{name} has a HELP line");
        }
    }
    // The histograms parse as histograms, with their buckets.
    let hist = after
        .samples
        .iter()
        .find(|x| x.metric == "autofactura_pac_request_duration_seconds")
        .expect("the PAC duration histogram");
    assert!(matches!(&hist.value, Value::Histogram(b) if b.len() > 5));
    // Every metric is documented.
    for name in [
        "autofactura_documents",
        "autofactura_pac_requests",
        "autofactura_webhooks",
        "autofactura_stamps",
        "autofactura_worker_slots",
        "autofactura_sqlite_sales_per_commit",
    ] {
        assert!(after.docs.contains_key(name), "{name} has a HELP line");
    }
}

// Issue 20: the customer's emails, by state from the database and by send outcome.
async fn email_metrics_count_deliveries_and_sends(b: Backend) {
    let smtp = Smtp::start().await;
    let toml = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[worker]\nidle_poll_ms = 50\n\
         [email]\nsmtp_url = \"smtp://{}\"\nfrom = \"Facturas <facturas@example.mx>\"\n\
         timeout_seconds = 5\nretry_seconds = [1, 1, 1]\n",
        smtp.addr
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    let before = scrape(&app, &app.admin_address).await;
    let id = pay(&app, &format!("metrics_mail_{b:?}")).await;
    app.drain(60).await;
    wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    // The gauges are cached for a few seconds: poll until this app's one email shows.
    let sent = [("state", "sent")];
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let s = scrape(&app, &app.admin_address).await;
        if value(&s, "autofactura_deliveries", &sent) == 1.0 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(value(&after, "autofactura_deliveries", &sent), 1.0);
    assert_eq!(
        value(&after, "autofactura_deliveries", &[("state", "pending")]),
        0.0
    );
    let outcome = [("outcome", "sent")];
    let grew = value(&after, "autofactura_emails_sent_total", &outcome)
        - value(&before, "autofactura_emails_sent_total", &outcome);
    assert!(grew >= 1.0, "the courier's send is counted: {grew}");
    for name in ["autofactura_deliveries", "autofactura_emails_sent"] {
        assert!(after.docs.contains_key(name), "{name} has a HELP line");
    }
}

on_both_backends!(
    metrics_move_with_traffic,
    email_metrics_count_deliveries_and_sends
);
