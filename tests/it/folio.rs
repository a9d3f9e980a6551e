//! Folios assigned when the worker seals (issue 16): whatever the concurrency, the redeliveries,
//! the number of pools and instances, or a SIGKILL in the middle of a batch, the folios of a
//! serie end as exactly 1..N, N the number of distinct payments, each in its stamped document.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use autofactura::pacsim::faults::FaultSpec;
use autofactura::pacsim::{Sandbox, SandboxHandle};
use autofactura::startup::Application;
use autofactura::webhooks::{signature, stripe};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use serde_json::Value;
use support::admin::{assert_count, count};
use support::rows::{Bind, assert_gapless, fetch_rows, folios_of, wait_drained};
use support::{Backend, STRIPE_SECRET, TestApp, spawn_app_with};

/// The app with a zero-latency sandbox PAC of its own (so that several pools, and a child
/// process, stamp at the one PAC), and `worker_toml`.
async fn rig(b: Backend, worker_toml: &str) -> Option<(TestApp, SandboxHandle, tempfile::TempDir)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, sim) = Sandbox::start_in_process(
        &dir.path().join("sim.jsonl"),
        FaultSpec::parse("").expect("no faults"),
    )
    .await
    .expect("sandbox");
    let app = spawn_app_with(
        b,
        &format!("[pac]\nkind = \"sandbox\"\nurl = \"{url}\"\n{worker_toml}"),
    )
    .await?;
    Some((app, sim, dir))
}

/// The deliveries of `n` paid sales, shuffled with their redeliveries: about one sale in ten
/// delivered twice (the same event), one in twenty announced again by a second event.
fn deliveries(n: usize, seed: u64) -> Vec<String> {
    let created = chrono::Utc::now().timestamp();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n + n / 6);
    for i in 0..n {
        let body = stripe::sample_payment_intent(&format!("f{i}"), created, false);
        if rng.random_bool(0.1) {
            out.push(body.clone());
        }
        if rng.random_bool(0.05) {
            let mut again: Value = serde_json::from_str(&body).expect("json");
            again["id"] = format!("evt_test_f{i}_again").into();
            out.push(again.to_string());
        }
        out.push(body);
    }
    out.shuffle(&mut rng);
    out
}

/// Sends every delivery, signed now, from `senders` concurrent connections spread over the
/// instances at `addrs`, as Stripe does: a delivery answered 503 ("retry later": the store was
/// busy) or 408 (not read in time), or lost with its connection, is sent again, for about half
/// a minute at most (a redelivery, which must consume no folio; a loaded machine's store may
/// stay busy for seconds); every delivery must end in a 200. Returns how many were sent again.
async fn deliver(addrs: &[String], bodies: Vec<String>, senders: usize) -> usize {
    let bodies = Arc::new(bodies);
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..senders {
        let (bodies, addr) = (bodies.clone(), addrs[s % addrs.len()].clone());
        tasks.spawn(async move {
            let http = reqwest::Client::new();
            let mut again = 0;
            for body in bodies.iter().skip(s).step_by(senders) {
                for attempt in 1.. {
                    let t = chrono::Utc::now().timestamp();
                    let sig = signature::stripe_header(&[STRIPE_SECRET], t, body.as_bytes());
                    let sent = http
                        .post(format!("{addr}/webhooks/stripe"))
                        .header("Stripe-Signature", sig)
                        .body(body.clone())
                        .send()
                        .await;
                    let said = match sent {
                        Ok(r) if r.status() == 200 => break,
                        // Stripe retries any non-2xx; these are the ones load brings (a
                        // busy store, a request not read in time).
                        Ok(r) if r.status() == 503 || r.status() == 408 => {
                            format!("{}: {}", r.status(), r.text().await.unwrap_or_default())
                        }
                        Ok(r) => panic!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
                        Err(e) => e.to_string(),
                    };
                    assert!(attempt < 18, "no 200 after {attempt} deliveries: {said}");
                    again += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                }
            }
            again
        });
    }
    let mut again = 0;
    while let Some(t) = tasks.join_next().await {
        again += t.expect("sender");
    }
    again
}

/// Every row stamped once at the PAC, under its own key, and every stamped document carries
/// the folio of its row.
async fn assert_stamped_with_their_folios(app: &TestApp, sim: &SandboxHandle, n: usize) {
    let stamps = support::sim::stamps(&reqwest::Client::new(), sim.url()).await;
    let mut keys: Vec<&str> = stamps
        .iter()
        .filter_map(|s| s["customid"].as_str())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!((stamps.len(), keys.len()), (n, n), "one stamp per payment");
    let rows: Vec<(Option<String>, Option<Vec<u8>>)> = fetch_rows(
        &app.db,
        "SELECT folio, stamped_xml FROM outbox WHERE id % $1 = 0",
        &[Bind::I64(if n > 1000 { 97 } else { 1 })],
    )
    .await;
    for (folio, xml) in rows {
        let folio = folio.expect("numbered");
        let xml = String::from_utf8(xml.expect("stamped")).expect("utf-8");
        assert!(
            xml.contains(&format!(" Folio=\"{folio}\"")),
            "folio {folio}: {xml}"
        );
    }
}

async fn ten_thousand_concurrent_webhooks_are_numbered_1_to_n(b: Backend) {
    let Some((app, sim, _dir)) = rig(b, "[worker]\nconcurrency = 16\nidle_poll_ms = 20\n").await
    else {
        return;
    };
    let started = Instant::now();
    let n = 10_000;
    let mut addrs = vec![app.address.clone()];
    let mut pools = vec![app.start_pool().await];
    if b == Backend::Postgres {
        // A second instance on the same database: its own HTTP server and its own pool.
        let second = Application::build(app.settings.clone())
            .await
            .expect("second instance");
        addrs.push(format!("http://127.0.0.1:{}", second.port()));
        tokio::spawn(second.run_until_stopped());
        pools.push(app.start_pool().await);
    }
    // The pools drain while the webhooks come in.
    let again = deliver(&addrs, deliveries(n, 16), 32).await;
    let ingested = started.elapsed();
    wait_drained(&app.db, 120).await;
    eprintln!(
        "{n} payments on {b:?}: ingested in {ingested:?} ({again} sent again), drained in {:?}",
        started.elapsed()
    );
    let ids: Vec<String> = pools.iter().map(|(_, s)| s.worker.id.clone()).collect();
    for (pool, _) in pools {
        pool.shutdown().await;
    }
    assert_count(&app, "SELECT COUNT(*) FROM payments", 10_000).await;
    assert_count(
        &app,
        "SELECT COUNT(*) FROM outbox WHERE state = 'stamped'",
        10_000,
    )
    .await;
    assert_gapless(&folios_of(&app.db, "A").await, n);
    assert_stamped_with_their_folios(&app, &sim, n).await;
    let per_worker = support::rows::attempts_per_worker(&app.db).await;
    for id in &ids {
        assert!(
            per_worker.iter().any(|(w, c)| w == id && *c > 0),
            "pool {id} stamped nothing: {per_worker:?}"
        );
    }
}

async fn numbered(app: &TestApp) -> i64 {
    count(app, "SELECT COUNT(*) FROM outbox WHERE folio IS NOT NULL").await
}

async fn a_worker_killed_mid_batch_leaves_no_folio_used_twice(b: Backend) {
    // Short leases, so a killed worker's rows are claimed again quickly; batches of 8 (a
    // batch is as many rows as the slots), so that a worker's life numbers a few of them.
    let worker = "[worker]\nconcurrency = 8\nlease_seconds = 2\nidle_poll_ms = 20\n";
    let Some((app, sim, dir)) = rig(b, worker).await else {
        return;
    };
    let n = 600;
    deliver(std::slice::from_ref(&app.address), deliveries(n, 9), 8).await;
    let log = dir.path().join("worker.log");
    let mut rng = StdRng::seed_from_u64(9);
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while kills < 6 && Instant::now() < deadline {
        let mut child = support::worker_process(&app, &log, &[]);
        // SIGKILL while it numbers and seals: as soon as it has numbered rows, after a random
        // few milliseconds more.
        let before = numbered(&app).await;
        while numbered(&app).await == before && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        kills += 1;
    }
    let at_last_kill = numbered(&app).await;
    assert!(
        kills == 6 && at_last_kill < i64::try_from(n).expect("n"),
        "{kills} kills, {at_last_kill} of {n} numbered: the kills did not land mid-run\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // A last worker takes over the killed ones' rows when their leases expire, and drains.
    let mut last = support::worker_process(&app, &log, &[]);
    wait_drained(&app.db, 60).await;
    last.kill().expect("stop");
    last.wait().expect("reap");
    assert_gapless(&folios_of(&app.db, "A").await, n);
    assert_stamped_with_their_folios(&app, &sim, n).await;
    eprintln!("{kills} kills, {at_last_kill} of {n} numbered at the last one");
}

on_both_backends!(
    ten_thousand_concurrent_webhooks_are_numbered_1_to_n,
    a_worker_killed_mid_batch_leaves_no_folio_used_twice,
);
