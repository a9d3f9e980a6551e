//! The worker pool against the sandbox PAC: every test checks the sandbox's own record of what it
//! stamped (`/_sim/stamps`), the ground truth for "exactly once".

use crate::support;

use std::time::Duration;

use crate::support::rows::{attempts_per_worker, outbox_status};
use autofactura::domain::{DocumentState, StampKey};
use autofactura::pacsim::faults::FaultSpec;
use autofactura::pacsim::{Sandbox, SandboxHandle};
use autofactura::store::DocFull;
use autofactura::webhooks::stripe;
use autofactura::worker::{self, Pool, Services};
use serde_json::Value;
use support::admin::{self as fx, Browser};
use support::{Backend, TestApp, spawn_app_with};

/// The app (no pool yet), and a sandbox PAC it points at.
struct Rig {
    app: TestApp,
    sim: SandboxHandle,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

/// The lease is 30 s: a pool's other slots take a row whose lease lapsed (about once a second),
/// and with 2 s a loaded machine that stalled a slot between its claim and its keepalive let
/// another ask the PAC about the row again (still one stamp, but not the attempt log the tests
/// check). A stopped pool releases its rows; only a killed process's rows wait out its lease.
const FAST_WORKER: &str = "[worker]\nconcurrency = 4\nlease_seconds = 30\nidle_poll_ms = 50\n\
     backoff_base_seconds = 1\nbackoff_cap_seconds = 2\nshutdown_grace_seconds = 1\n";

/// The PAC answers a stamp, then holds the answer past the client's timeout (`request_timeout`
/// in [`LOSES_ANSWERS`]): the stamp exists, and the worker does not know it.
const HANG: &str = "lose_response=1:mode=hang:hang=30s";
/// [`HANG`], and every question about the stamp (and a resend of its document) answers 503:
/// the worker cannot learn the outcome. Set from the start, so the worker's first question,
/// however soon it comes, already goes unanswered.
const HANG_UNASKABLE: &str = "lose_response=1:mode=hang:hang=30s,recover_unavailable=1";
/// `[pac]` lines that make the client give up on a held answer after 2 s.
const LOSES_ANSWERS: &str = "request_timeout = 2\n";

async fn rig(b: Backend, faults: &str, worker_toml: &str) -> Option<Rig> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, sim) = sandbox(&dir, "sim", faults).await;
    let extra = format!("[pac]\nkind = \"sandbox\"\nurl = \"{url}\"\n{worker_toml}");
    let app = spawn_app_with(b, &extra).await?;
    Some(Rig {
        app,
        sim,
        http: reqwest::Client::new(),
        dir,
    })
}

/// A rig with `faults` and `worker_toml`, and a sale paid at `created` (`suffix`): its key.
async fn rig_paid(
    b: Backend,
    faults: &str,
    worker_toml: &str,
    suffix: &str,
    created: i64,
) -> Option<(Rig, String)> {
    let rig = rig(b, faults, worker_toml).await?;
    let key = rig.pay(suffix, created).await;
    Some((rig, key))
}

/// A rig with `faults` and [`FAST_WORKER`], a sale paid now (`suffix`) and a running pool,
/// once the sale's row has reached `state` (within 20 s).
async fn paid_rig(
    b: Backend,
    faults: &str,
    suffix: &str,
    state: &str,
) -> Option<(Rig, String, DocFull, Pool, Services)> {
    let (rig, key) = rig_paid(b, faults, FAST_WORKER, suffix, now()).await?;
    let (pool, s) = rig.pool().await;
    let row = rig.wait_state(&key, state, 20).await;
    Some((rig, key, row, pool, s))
}

async fn sandbox(dir: &tempfile::TempDir, name: &str, faults: &str) -> (String, SandboxHandle) {
    let spec = FaultSpec::parse(faults).expect("fault spec");
    Sandbox::start_in_process(&dir.path().join(format!("{name}.jsonl")), spec)
        .await
        .expect("sandbox")
}

impl Rig {
    async fn pool(&self) -> (Pool, Services) {
        self.app.start_pool().await
    }

    async fn stamps(&self) -> Vec<Value> {
        support::sim::stamps(&self.http, self.sim.url()).await
    }

    async fn stamps_for(&self, key: &str) -> Vec<Value> {
        self.stamps()
            .await
            .into_iter()
            .filter(|s| s["customid"] == key)
            .collect()
    }

    async fn set_faults(&self, spec: &str) {
        support::sim::set_faults(&self.http, self.sim.url(), spec).await;
    }

    /// Delivers a signed payment and returns its stamp key.
    async fn pay(&self, suffix: &str, created: i64) -> String {
        let body = stripe::sample_payment_intent(suffix, created, false);
        let r = self.app.post_stripe_signed(&body).await;
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
        let v: Value = serde_json::from_str(&body).expect("json");
        let pi = v["data"]["object"]["id"].as_str().expect("pi id");
        StampKey::derive("stripe", pi, "ingreso").to_string()
    }

    async fn row(&self, key: &str) -> DocFull {
        outbox_status(&self.app.db, key).await.expect("outbox row")
    }

    /// Waits until the sandbox has stamped `key` (its answer may still be on its way).
    async fn wait_stamped_at_pac(&self, key: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while self.stamps_for(key).await.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the PAC never stamped {key}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the worker has asked the PAC about the row `n` times without an answer,
    /// checking at each look that the row stayed `unknown` (or in a call).
    async fn wait_unresolved_asks(&self, key: &str, n: usize) -> DocFull {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let row = self.row(key).await;
            assert!(
                matches!(row.state.as_str(), "unknown" | "stamping"),
                "an unresolved outcome must stay unknown: {}",
                brief(&row)
            );
            let log = self.app.db.attempts_of(row.id).await.expect("attempts");
            let asks = log.iter().filter(|a| a.outcome == "unresolved").count();
            if asks >= n && row.state.as_str() == "unknown" {
                return row;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {asks} unanswered questions: {}",
                brief(&row)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last PAC call logged for outbox row `id`: operation and outcome.
    async fn last_call(&self, id: i64) -> Option<(String, String)> {
        let log = self.app.db.attempts_of(id).await.expect("attempts");
        log.last().map(|a| (a.operation.clone(), a.outcome.clone()))
    }

    /// Waits until the worker has asked about the row twice, unanswered, after `closes` (its
    /// window's end); it stays `unknown` throughout.
    async fn wait_asks_after(&self, key: &str, closes: chrono::DateTime<chrono::Utc>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let row = self.wait_unresolved_asks(key, 1).await;
            let log = self.app.db.attempts_of(row.id).await.expect("attempts");
            if log.iter().filter(|a| a.at > closes).count() >= 2 {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{log:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the row is stamped (or fails the test after `secs`), then checks that the PAC
    /// stamped it exactly once (`why`), with the UUID the row records.
    async fn wait_stamped_once(&self, key: &str, secs: u64, why: &str) -> DocFull {
        let row = self.wait_state(key, "stamped", secs).await;
        let stamps = self.stamps_for(key).await;
        assert_eq!(stamps.len(), 1, "{why}: {stamps:?}");
        assert_eq!(row.uuid.as_deref(), stamps[0]["uuid"].as_str());
        row
    }

    /// Waits until the row reaches `state` (or fails the test after `secs`).
    async fn wait_state(&self, key: &str, state: &str, secs: u64) -> DocFull {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let mut row = self.row(key).await;
        while row.state.as_str() != state {
            assert!(
                tokio::time::Instant::now() < deadline,
                "row never reached {state}: {}",
                brief(&row)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            row = self.row(key).await;
        }
        row
    }
}

/// A row without its XML, for failure messages.
fn brief(r: &DocFull) -> String {
    format!(
        "#{} {} attempts={} uuid={:?} code={:?} message={:?} run_at={}",
        r.id, r.state, r.attempts, r.uuid, r.last_error_code, r.last_error_message, r.run_at
    )
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn a_paid_sale_is_sealed_stamped_and_logged(b: Backend) {
    let Some(rig) = rig(b, "", FAST_WORKER).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let key = rig.pay("happy", now()).await;
    let row = rig.wait_stamped_once(&key, 20, "one stamp").await;
    // Numbered when sealed: the serie's first folio, in the row and in the stamped document.
    assert_eq!(row.folio.as_deref(), Some("1"));
    let stamped = row.stamped_xml.expect("stamped xml");
    assert!(
        String::from_utf8_lossy(&stamped).contains(r#" Serie="A" Folio="1""#),
        "{}",
        String::from_utf8_lossy(&stamped)
    );
    let report = autofactura::cfdi::verify::verify(
        &stamped,
        &autofactura::cfdi::verify::VerifyOptions {
            tfd_certs: &autofactura::cli::known_tfd_certificates(),
        },
    );
    assert!(report.is_valid(), "{:?}", report.problems);
    assert!(
        report.notes.is_empty(),
        "the TFD verifies with the sandbox certificate: {:?}",
        report.notes
    );
    let attempts = rig.app.db.attempts_of(row.id).await.expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (attempts[0].operation.as_str(), attempts[0].outcome.as_str()),
        ("stamp", "stamped")
    );
    assert_eq!(attempts[0].pac, "sandbox");
    let db = &rig.app.db;
    assert_eq!(db.outbox_count(DocumentState::Stamped).await.ok(), Some(1));
    assert_eq!(db.outbox_count(DocumentState::Pending).await.ok(), Some(0));
    let list = rig.app.invoices().await;
    assert!(
        list.iter()
            .any(|i| i.uuid == row.uuid && i.status.as_str() == "stamped"),
        "{list:?}"
    );
    pool.shutdown().await;
}

async fn a_lost_response_is_recovered_without_a_second_stamp(b: Backend) {
    // The sandbox stamps, then drops the connection: the outcome is unknown to us.
    let Some((rig, key, row, pool, _s)) =
        paid_rig(b, "lose_response=1:mode=drop", "lost", "unknown").await
    else {
        return;
    };
    assert_eq!(rig.stamps_for(&key).await.len(), 1, "the PAC did stamp");
    rig.set_faults("").await;
    rig.wait_stamped_once(&key, 20, "recovered, not stamped twice")
        .await;
    let log = rig.app.db.attempts_of(row.id).await.expect("attempts");
    let ops: Vec<(&str, &str)> = log
        .iter()
        .map(|a| (a.operation.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(ops.first(), Some(&("stamp", "unknown")), "{ops:?}");
    assert_eq!(
        ops.last(),
        Some(&("recover", "found")),
        "the next attempt asks first: {ops:?}"
    );
    assert!(
        !ops.iter().skip(1).any(|(op, _)| *op == "stamp"),
        "no fresh stamp after an unknown: {ops:?}"
    );
    pool.shutdown().await;
}

async fn server_errors_and_429_are_retried_with_backoff(b: Backend) {
    let Some((rig, key, row, pool, _s)) =
        paid_rig(b, "status503=1", "busy", "retry_scheduled").await
    else {
        return;
    };
    // Ahead of the moment the 503 was stored, not of the moment it was read (a loaded machine
    // may read it late).
    assert!(row.run_at > row.updated_at, "scheduled ahead: {row:?}");
    assert!(rig.stamps_for(&key).await.is_empty());
    rig.set_faults("status429=1:retry_after=3").await;
    // Wait for a 429 attempt and check the schedule honours Retry-After.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let log = rig.app.db.attempts_of(row.id).await.expect("attempts");
        if let Some(a) = log.iter().find(|a| a.http_status == Some(429)) {
            let r = rig.row(&key).await;
            assert_eq!(r.state.as_str(), "retry_scheduled");
            // The backoff alone is under 2 s; 2 s, not 3, leaves room for a thread paused
            // between the schedule and the write.
            assert!(
                r.run_at >= a.at + chrono::Duration::seconds(2),
                "Retry-After 3 s honoured: {r:?} after {a:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no 429 attempt: {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rig.set_faults("").await;
    let done = rig.wait_state(&key, "stamped", 30).await;
    assert_eq!(rig.stamps_for(&key).await.len(), 1);
    let log = rig.app.db.attempts_of(done.id).await.expect("attempts");
    assert!(
        log.iter()
            .any(|a| a.outcome == "retryable" && a.http_status == Some(503)),
        "{log:?}"
    );
    assert_eq!(log.last().map(|a| a.outcome.as_str()), Some("stamped"));
    pool.shutdown().await;
}

async fn retries_stop_after_max_attempts_as_a_dead_letter(b: Backend) {
    let worker = format!("{FAST_WORKER}max_attempts = 2\n");
    let Some((rig, key)) = rig_paid(b, "status503=1", &worker, "dead", now()).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let row = rig.wait_state(&key, "failed", 30).await;
    assert_eq!(row.last_error_code.as_deref(), Some("EXHAUSTED"), "{row:?}");
    assert!(rig.stamps_for(&key).await.is_empty());
    pool.shutdown().await;
}

async fn a_rejection_fails_with_the_pacs_code_and_message(b: Backend) {
    let Some((rig, key)) = rig_paid(b, "", FAST_WORKER, "tampered", now()).await else {
        return;
    };
    // Store bytes that are not what the Sello signed (as if altered after sealing), before
    // any worker seals: the worker must send them as they are, and the PAC must refuse them.
    let row = rig.row(&key).await;
    let (_, json) = autofactura::sandbox::SAMPLE_REQUESTS[0];
    let mut req: autofactura::cfdi::InvoiceRequest = serde_json::from_str(json).expect("sample");
    req.fecha = autofactura::domain::time::now_in_mexico();
    let sealed =
        autofactura::cfdi::seal(&req, &autofactura::sandbox::csd().expect("csd")).expect("seal");
    let tampered =
        String::from_utf8(sealed.xml)
            .expect("utf8")
            .replacen("Folio=\"101\"", "Folio=\"999\"", 1);
    rig.app
        .db
        .save_sealed(row.id, tampered.as_bytes())
        .await
        .expect("store");
    let (pool, _s) = rig.pool().await;
    let failed = rig.wait_state(&key, "failed", 20).await;
    assert_eq!(
        failed.last_error_code.as_deref(),
        Some("CFDI40102"),
        "{failed:?}"
    );
    assert!(
        failed
            .last_error_message
            .as_deref()
            .unwrap_or_default()
            .contains("CFDI40102"),
        "verbatim: {failed:?}"
    );
    assert!(rig.stamps_for(&key).await.is_empty());
    // SW answers rejections with HTTP 400, but the log has never recorded a status for them:
    // the message is the PAC's own text.
    let log = rig.app.db.attempts_of(failed.id).await.expect("attempts");
    let statuses: Vec<_> = log
        .iter()
        .map(|a| (a.outcome.as_str(), a.http_status))
        .collect();
    assert_eq!(statuses, [("rejected", None)], "{log:?}");
    pool.shutdown().await;
}

async fn a_500_is_logged_with_its_status_as_unknown_then_unresolved(b: Backend) {
    let Some((rig, key, row, pool, _s)) = paid_rig(b, "status500=1", "status500", "unknown").await
    else {
        return;
    };
    // The next attempt asks first, and the PAC still answers 500.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let log = loop {
        let log = rig.app.db.attempts_of(row.id).await.expect("attempts");
        if log.iter().any(|a| a.operation == "recover") {
            break log;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no recovery: {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    pool.shutdown().await;
    let logged: Vec<_> = log
        .iter()
        .take(2)
        .map(|a| (a.operation.as_str(), a.outcome.as_str(), a.http_status))
        .collect();
    assert_eq!(
        logged,
        [
            ("stamp", "unknown", Some(500)),
            ("recover", "unresolved", Some(500))
        ],
        "{log:?}"
    );
    assert!(rig.stamps_for(&key).await.is_empty());
}

async fn a_sale_past_the_72_hour_window_expires_unsent(b: Backend) {
    let Some((rig, key)) = rig_paid(b, "", FAST_WORKER, "late", now() - 73 * 3600).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let row = rig.wait_state(&key, "expired", 20).await;
    assert_eq!(row.last_error_code.as_deref(), Some("WINDOW"));
    assert!(
        row.last_error_message
            .as_deref()
            .unwrap_or_default()
            .contains("72-hour"),
        "{row:?}"
    );
    assert!(rig.stamps_for(&key).await.is_empty(), "nothing was sent");
    pool.shutdown().await;
}

async fn an_unknown_outcome_past_the_window_expires_only_once_the_pac_confirms_no_stamp(
    b: Backend,
) {
    // The window is 72 h; a sale 12 s short of it is sent and the connection drops: the outcome
    // is unknown (12 s, not less: on a loaded machine the first claim may take several seconds,
    // and a sale past its window by then is expired unsent, which is another test). The window
    // closes while the PAC cannot be asked: still unknown, however long, since the PAC may hold
    // a stamp. Once the PAC answers that it holds none, it is expired.
    let worker = format!("{FAST_WORKER}window_margin_seconds = 0\n");
    let Some(rig) = rig(b, "reset=1", &worker).await else {
        return;
    };
    // Dated once the app is up (creating a PostgreSQL database may take seconds).
    let key = rig.pay("edge", now() - 72 * 3600 + 12).await;
    let closes = chrono::Utc::now() + chrono::Duration::seconds(12);
    let (pool, _s) = rig.pool().await;
    rig.wait_state(&key, "unknown", 20).await;
    rig.wait_asks_after(&key, closes).await;
    let row = rig.wait_unresolved_asks(&key, 3).await;
    assert_eq!(row.last_error_code, None, "not final, no code: {row:?}");
    rig.set_faults("").await;
    let row = rig.wait_state(&key, "expired", 30).await;
    assert_eq!(row.last_error_code.as_deref(), Some("WINDOW"), "{row:?}");
    assert!(
        row.last_error_message
            .as_deref()
            .unwrap_or_default()
            .contains("confirms it was never stamped"),
        "{row:?}"
    );
    assert!(rig.stamps_for(&key).await.is_empty());
    assert_eq!(
        rig.last_call(row.id).await,
        Some(("recover".into(), "not_found".into()))
    );
    pool.shutdown().await;
}

/// The PAC stamps a sale at the edge of its window and the answer is lost; the window closes
/// while the PAC cannot be asked. The row stays `unknown` (a terminal state would lose the
/// stamp, and a refreeze or a new request would issue a second CFDI) and ends with that stamp.
async fn a_stamp_whose_answer_was_lost_as_the_window_closed_is_recovered(b: Backend) {
    let worker = format!("{LOSES_ANSWERS}{FAST_WORKER}");
    let Some(rig) = rig(b, HANG_UNASKABLE, &worker).await else {
        return;
    };
    // The worker stops sending 60 s before the PAC's limit: 12 s from now (room for a slow
    // first claim on a loaded machine).
    let key = rig.pay("edge_lost", now() - 72 * 3600 + 72).await;
    let closes = chrono::Utc::now() + chrono::Duration::seconds(12);
    let (pool, _s) = rig.pool().await;
    rig.wait_stamped_at_pac(&key).await;
    rig.wait_asks_after(&key, closes).await;
    rig.set_faults("").await;
    rig.wait_stamped_once(&key, 30, "one stamp").await;
    pool.shutdown().await;
}

/// Every attempt the PAC leaves unanswered used to count towards `max_attempts`, after which
/// the row ended `failed` (`UNKNOWN`) while the PAC held its stamp. An unknown outcome is never
/// final: the row is asked for past `max_attempts` and ends with the one stamp.
async fn an_unknown_outcome_is_asked_for_past_max_attempts(b: Backend) {
    let worker = format!("{LOSES_ANSWERS}{FAST_WORKER}max_attempts = 2\n");
    let Some(rig) = rig(b, HANG_UNASKABLE, &worker).await else {
        return;
    };
    let key = rig.pay("outlasting", now()).await;
    let (pool, _s) = rig.pool().await;
    rig.wait_stamped_at_pac(&key).await;
    let row = rig.wait_unresolved_asks(&key, 4).await;
    assert!(row.attempts > 2, "past max_attempts: {row:?}");
    assert!(
        row.run_at <= chrono::Utc::now() + chrono::Duration::seconds(3),
        "asked again with the usual backoff: {row:?}"
    );
    rig.set_faults("").await;
    let done = rig.wait_stamped_once(&key, 30, "one stamp").await;
    let log = rig.app.db.attempts_of(done.id).await.expect("attempts");
    assert_eq!(
        log.iter().filter(|a| a.operation == "stamp").count(),
        1,
        "sent once, then only asked: {log:?}"
    );
    assert_eq!(
        log.last()
            .map(|a| (a.operation.as_str(), a.outcome.as_str())),
        Some(("recover", "found"))
    );
    pool.shutdown().await;
}

/// A document sent long ago whose outcome the PAC still cannot tell, 72 hours after its window
/// closed: it stays `unknown`, asked once a day, and the admin lists it as unresolved. "Ask the
/// PAC now" asks at once; the PAC's "no stamp" then settles it as expired.
async fn an_outcome_unresolved_past_its_asking_period_is_asked_daily_and_listed(b: Backend) {
    let worker = format!(
        "{FAST_WORKER}[admin]\npassword = \"{}\"\n",
        support::admin::PASSWORD
    );
    let Some((rig, key)) =
        rig_paid(b, "status503=1", &worker, "asked_daily", now() - 150 * 3600).await
    else {
        return;
    };
    let id = rig.row(&key).await.id;
    fx::seal(&rig.app, id).await;
    fx::mark_unknown(&rig.app, id, chrono::Utc::now()).await;
    let (pool, _s) = rig.pool().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let row = loop {
        let row = rig.row(&key).await;
        assert!(
            matches!(row.state.as_str(), "unknown" | "stamping"),
            "{row:?}"
        );
        if row.last_error_code.is_some() {
            break row;
        }
        assert!(tokio::time::Instant::now() < deadline, "{row:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(row.state.as_str(), "unknown");
    assert_eq!(
        row.last_error_code.as_deref(),
        Some(worker::UNRESOLVED),
        "{row:?}"
    );
    let message = row.last_error_message.clone().unwrap_or_default();
    assert!(message.contains("once a day"), "{message}");
    assert!(
        row.run_at > chrono::Utc::now() + chrono::Duration::hours(23),
        "asked daily: {row:?}"
    );

    let br = Browser::new(&rig.app);
    let csrf = br.login().await;
    for view in ["unresolved", "pending", "all"] {
        let list = br.get(&format!("/admin/invoices?view={view}")).await;
        assert!(
            list.body.contains("pi_test_asked_daily"),
            "listed under {view}: {}",
            list.body
        );
    }
    let failed = br.get("/admin/invoices?view=failed").await;
    assert!(!failed.body.contains("pi_test_asked_daily"));
    let page = br
        .get(&format!(
            "/admin/payments/{}",
            fx::doc(&rig.app, id).await.payment_id
        ))
        .await;
    assert!(page.body.contains("Ask the PAC now"), "{}", page.body);
    assert!(page.body.contains("UNRESOLVED"), "{}", page.body);

    // The PAC answers again; the admin does not wait a day.
    rig.set_faults("").await;
    let r = br
        .post(&format!("/admin/documents/{id}/retry"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.location.unwrap_or_default().contains("notice=asked"));
    let row = rig.wait_state(&key, "expired", 20).await;
    assert_eq!(row.last_error_code.as_deref(), Some("WINDOW"), "{row:?}");
    assert_eq!(
        rig.last_call(id).await,
        Some(("recover".into(), "not_found".into()))
    );
    let log = rig.app.db.attempts_of(id).await.expect("attempts");
    assert!(
        !log.iter()
            .any(|a| a.operation == "stamp" && a.worker.as_deref() != Some("test")),
        "nothing was sent, only asked: {log:?}"
    );
    assert!(rig.stamps_for(&key).await.is_empty());
    pool.shutdown().await;
}

/// SW's `CFDI3307`: the key already holds a stamp of other content. The row fails with the
/// code and the other UUID, nothing is recorded as its stamp and nothing more is stamped.
async fn a_key_already_used_for_other_content_fails_with_cfdi3307(b: Backend) {
    let Some((rig, key)) = rig_paid(b, "", FAST_WORKER, "key_reused", now()).await else {
        return;
    };
    // Another document stamped under this row's key before the worker sends it.
    let (_, json) = autofactura::sandbox::SAMPLE_REQUESTS[0];
    let mut other: autofactura::cfdi::InvoiceRequest = serde_json::from_str(json).expect("sample");
    other.fecha = autofactura::domain::time::now_in_mexico();
    let sealed =
        autofactura::cfdi::seal(&other, &autofactura::sandbox::csd().expect("csd")).expect("seal");
    let k = StampKey::parse(&key).expect("key");
    let first = match rig.app.state.pac.stamp(&sealed.xml, &k).await {
        autofactura::pac::StampOutcome::Stamped(s) => s,
        other => panic!("the sandbox did not stamp the other document: {other:?}"),
    };
    let (pool, _s) = rig.pool().await;
    let row = rig.wait_state(&key, "failed", 20).await;
    assert_eq!(row.last_error_code.as_deref(), Some("CFDI3307"), "{row:?}");
    let message = row.last_error_message.clone().unwrap_or_default();
    assert!(
        message.contains(&first.uuid) && message.contains("reconcile"),
        "{message}"
    );
    assert_eq!(row.uuid, None, "another document's stamp is not this row's");
    assert!(row.stamped_xml.is_none());
    let stamps = rig.stamps_for(&key).await;
    assert_eq!(stamps.len(), 1, "nothing more was stamped: {stamps:?}");
    assert_eq!(stamps[0]["uuid"].as_str(), Some(first.uuid.as_str()));
    let log = rig.app.db.attempts_of(row.id).await.expect("attempts");
    let last = log.last().expect("the attempt is logged");
    assert_eq!(
        (
            last.operation.as_str(),
            last.outcome.as_str(),
            last.code.as_deref(),
            last.uuid.as_deref()
        ),
        (
            "stamp",
            "key_reused",
            Some("CFDI3307"),
            Some(first.uuid.as_str())
        )
    );
    pool.shutdown().await;
}

fn attempt<'a>(id: i64, operation: &'a str, outcome: &'a str) -> autofactura::store::Attempt<'a> {
    autofactura::store::Attempt {
        outbox_id: Some(id),
        cancellation_id: None,
        operation,
        pac: "sandbox",
        outcome,
        http_status: None,
        code: None,
        message: None,
        latency_ms: 1,
        uuid: None,
        worker: "test",
    }
}

/// Rows an earlier version ended while their outcome was unknown (`failed`/`UNKNOWN` after
/// max_attempts, `expired` after an unanswered question) are open again after migration 7;
/// rows the PAC definitely did not stamp stay as they are.
async fn migration_7_reopens_rows_given_up_while_their_outcome_was_unknown(b: Backend) {
    let Some(rig) = rig(b, "", FAST_WORKER).await else {
        return;
    };
    let app = &rig.app;
    let mut ids = Vec::new();
    for suffix in ["gave_up", "expired_open", "expired_confirmed", "rejected"] {
        let id = rig.row(&rig.pay(suffix, now()).await).await.id;
        fx::seal(app, id).await;
        fx::mark_unknown(app, id, chrono::Utc::now()).await;
        ids.push(id);
    }
    let [gave_up, expired_open, expired_confirmed, rejected] = ids[..] else {
        unreachable!()
    };
    let log = |id, op, outcome| async move {
        app.db
            .log_attempt(&attempt(id, op, outcome))
            .await
            .expect("log");
    };
    log(gave_up, "recover", "unresolved").await;
    fx::mark_failed(
        app,
        gave_up,
        "UNKNOWN",
        "outcome still unknown after 10 attempts",
    )
    .await;
    log(expired_open, "recover", "unresolved").await;
    fx::mark_failed(app, expired_open, "WINDOW", "the PAC could not confirm").await;
    fx::mark_state(app, expired_open, "expired").await;
    log(expired_confirmed, "recover", "not_found").await;
    fx::mark_failed(app, expired_confirmed, "WINDOW", "never stamped").await;
    fx::mark_state(app, expired_confirmed, "expired").await;
    log(rejected, "stamp", "rejected").await;
    fx::mark_failed(app, rejected, "CFDI40102", "CFDI40102 - …").await;

    // Migration 7 as it ran on the earlier database (it changes nothing twice).
    let (_, name, text) = match b {
        Backend::Sqlite => autofactura::store::SQLITE_MIGRATIONS[6],
        Backend::Postgres => autofactura::store::POSTGRES_MIGRATIONS[6],
    };
    assert_eq!(name, "unknown_outcomes");
    crate::support::rows::exec_sql(&app.db, text).await;
    for id in [gave_up, expired_open] {
        let d = fx::doc(app, id).await;
        assert_eq!(
            (d.state.as_str(), d.last_error_code.as_deref()),
            ("unknown", None),
            "{d:?}"
        );
        assert!(
            d.last_error_message
                .unwrap_or_default()
                .contains("reopened"),
            "#{id}"
        );
    }
    assert_eq!(
        fx::doc(app, expired_confirmed).await.state.as_str(),
        "expired"
    );
    assert_eq!(fx::doc(app, rejected).await.state.as_str(), "failed");

    // The worker asks the PAC about the reopened ones before anything else.
    let (pool, _s) = rig.pool().await;
    for id in [gave_up, expired_open] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while fx::doc(app, id).await.state.as_str() != "stamped" {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}",
                fx::doc(app, id).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = app.db.attempts_of(id).await.expect("attempts");
        assert_eq!(log.last().map(|a| a.operation.as_str()), Some("recover"));
    }
    pool.shutdown().await;
}

/// The app with a failover pair: two sandboxes, `[pac.backup]` the second.
async fn failover_rig(b: Backend, primary: &str, backup: &str) -> Option<(Rig, SandboxHandle)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, sim) = sandbox(&dir, "primary", primary).await;
    let (backup_url, backup_sim) = sandbox(&dir, "backup", backup).await;
    let extra = format!(
        "[pac]\nkind = \"sandbox\"\nurl = \"{url}\"\n{LOSES_ANSWERS}\
         [pac.backup]\nkind = \"sandbox\"\nurl = \"{backup_url}\"\n{LOSES_ANSWERS}{FAST_WORKER}"
    );
    let app = spawn_app_with(b, &extra).await?;
    let rig = Rig {
        app,
        sim,
        http: reqwest::Client::new(),
        dir,
    };
    Some((rig, backup_sim))
}

/// Failover through the worker: the backup gets a document only once the primary definitely
/// did not stamp it; the route is recorded in the database before each send, and a worker
/// started later (nothing in its memory) asks only the PACs recorded there.
async fn failover_through_the_worker_follows_the_route_log(b: Backend) {
    let Some((rig, backup)) = failover_rig(b, "status503=1", HANG).await else {
        return;
    };
    let key = rig.pay("failover", now()).await;
    let (pool, s) = rig.pool().await;
    // The primary refuses before processing; the backup stamps and its answer is lost.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while support::sim::stamps(&rig.http, backup.url())
        .await
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backup never stamped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rig.wait_state(&key, "unknown", 20).await;
    pool.shutdown().await;
    drop(s);
    let row = rig.row(&key).await;
    assert_eq!(
        rig.app.db.pac_routes(&key).await.expect("routes"),
        ["primary", "backup"],
        "{row:?}"
    );
    let log = rig.app.db.attempts_of(row.id).await.expect("attempts");
    assert!(
        log.iter()
            .any(|a| a.operation == "stamp" && a.pac == "backup" && a.outcome == "unknown"),
        "{log:?}"
    );

    // A new pool: it knows where the key went only from the database.
    backup.sim().set_faults(FaultSpec::default());
    let (pool, _s) = rig.pool().await;
    let done = rig.wait_state(&key, "stamped", 30).await;
    let at_backup = support::sim::stamps(&rig.http, backup.url()).await;
    assert_eq!(at_backup.len(), 1, "{at_backup:?}");
    assert_eq!(done.uuid.as_deref(), at_backup[0]["uuid"].as_str());
    assert!(rig.stamps().await.is_empty(), "nothing at the primary");
    assert_eq!(
        rig.last_call(row.id).await,
        Some(("recover".into(), "found".into()))
    );
    pool.shutdown().await;
}

/// The primary stamps and its answer is lost, and it cannot be asked: the outcome is unknown
/// there. Recovering must not ask the backup, which never had the document: asking SW means
/// resending, so the backup would stamp it, a second CFDI.
async fn an_unknown_outcome_at_the_primary_is_never_sent_to_the_backup(b: Backend) {
    let Some((rig, backup)) = failover_rig(b, HANG_UNASKABLE, "").await else {
        return;
    };
    let key = rig.pay("failover_unknown", now()).await;
    let (pool, _s) = rig.pool().await;
    rig.wait_stamped_at_pac(&key).await;
    let row = rig.wait_unresolved_asks(&key, 3).await;
    assert_eq!(
        rig.app.db.pac_routes(&key).await.expect("routes"),
        ["primary"]
    );
    assert!(
        support::sim::stamps(&rig.http, backup.url())
            .await
            .is_empty(),
        "the backup was sent a document the primary may hold"
    );
    rig.set_faults("").await;
    let done = rig.wait_state(&key, "stamped", 30).await;
    let at_primary = rig.stamps_for(&key).await;
    assert_eq!(at_primary.len(), 1);
    assert_eq!(done.uuid.as_deref(), at_primary[0]["uuid"].as_str());
    assert!(
        support::sim::stamps(&rig.http, backup.url())
            .await
            .is_empty(),
        "one CFDI"
    );
    assert_eq!(row.id, done.id);
    pool.shutdown().await;
}

async fn shutdown_releases_in_flight_rows_as_unknown_and_they_end_stamped_once(b: Backend) {
    let Some((rig, key)) = rig_paid(b, "latency=30s", FAST_WORKER, "shutdown", now()).await else {
        return;
    };
    let (pool, s) = rig.pool().await;
    rig.wait_state(&key, "stamping", 30).await;
    // The grace period (1 s) is shorter than the PAC's latency (30 s, so that a loaded machine
    // that sees the claim late still stops the pool mid-call): the row is released.
    pool.shutdown().await;
    drop(s);
    let row = rig.row(&key).await;
    assert_eq!(row.state.as_str(), "unknown", "{row:?}");
    rig.set_faults("").await;
    let (pool, _s) = rig.pool().await;
    rig.wait_stamped_once(&key, 20, "one stamp").await;
    pool.shutdown().await;
}

/// The application's one stop ([`autofactura::shutdown::Shutdown`], what `serve` cancels on
/// SIGTERM) ends its servers and its pool: the row in a call past the grace period is released
/// as `unknown`, the listener is closed, and `run_until_stopped` returns.
async fn one_stop_ends_the_servers_and_the_pool(b: Backend) {
    // The PAC's latency (30 s) outlasts the grace period (1 s) and a slow look at the claim.
    let Some(rig) = rig(b, "latency=30s", FAST_WORKER).await else {
        return;
    };
    let app = autofactura::startup::Application::build(rig.app.settings.clone())
        .await
        .expect("app")
        .with_workers()
        .await
        .expect("workers");
    let health = format!("http://127.0.0.1:{}/healthz", app.port());
    let shutdown = app.shutdown();
    let running = tokio::spawn(app.run_until_stopped());
    assert!(rig.http.get(&health).send().await.is_ok(), "serving");
    let key = rig.pay("one-stop", now()).await;
    rig.wait_state(&key, "stamping", 30).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .expect("stopped in time")
        .expect("no panic")
        .expect("stopped cleanly");
    assert_eq!(rig.row(&key).await.state.as_str(), "unknown");
    assert!(
        rig.http.get(&health).send().await.is_err(),
        "listener closed"
    );
}

/// A slot claims and seals its next row while its PAC call runs. When the pool stops, that
/// row was never sent: it goes back to `pending` with its attempt given back and needs no
/// recovery, while the row whose call was in flight is released as `unknown`.
async fn shutdown_gives_back_a_row_prepared_but_never_sent(b: Backend) {
    let one_slot = FAST_WORKER.replace("concurrency = 4", "concurrency = 1");
    // The first call lasts 30 s: the pool stops while it runs, however slowly the test sees the
    // second row prepared.
    let Some(rig) = rig(b, "latency=30s", &one_slot).await else {
        return;
    };
    let first = rig.pay("inflight", now()).await;
    let second = rig.pay("prepared", now()).await;
    let (pool, s) = rig.pool().await;
    rig.wait_state(&first, "stamping", 30).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let row = rig.row(&second).await;
        if row.state.as_str() == "stamping" && row.sealed_xml.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never prepared: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pool.shutdown().await;
    drop(s);
    let (a, b_row) = (rig.row(&first).await, rig.row(&second).await);
    assert_eq!(a.state.as_str(), "unknown", "{a:?}");
    assert_eq!(
        (b_row.state.as_str(), b_row.attempts),
        ("pending", 0),
        "{b_row:?}"
    );
    assert!(rig.stamps_for(&second).await.is_empty());
    let sealed = b_row.sealed_xml.clone().expect("sealed bytes kept");

    rig.set_faults("").await;
    let (pool, _s) = rig.pool().await;
    for key in [&first, &second] {
        rig.wait_state(key, "stamped", 20).await;
        assert_eq!(rig.stamps_for(key).await.len(), 1, "{key}");
    }
    let done = rig.row(&second).await;
    assert_eq!(
        done.sealed_xml.as_deref(),
        Some(sealed.as_slice()),
        "same bytes sent"
    );
    let db = &rig.app.db;
    let operations = |id| async move {
        let log = db.attempts_of(id).await.expect("attempts");
        log.into_iter().map(|a| a.operation).collect::<Vec<_>>()
    };
    assert_eq!(
        operations(done.id).await,
        ["stamp"],
        "no recovery for a row never sent"
    );
    let ops_first = operations(a.id).await;
    assert!(ops_first.contains(&"recover".to_owned()), "{ops_first:?}");
    pool.shutdown().await;
}

/// A child process that is killed if the test ends early.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `autofactura worker` of `rig`'s app with a lease of `lease_seconds`, logging beside its
/// database.
fn spawn_worker_process(rig: &Rig, lease_seconds: &str) -> Child {
    let log = rig.dir.path().join("worker.log");
    let env = [("AUTOFACTURA__WORKER__LEASE_SECONDS", lease_seconds)];
    Child(support::worker_process(&rig.app, &log, &env))
}

async fn a_worker_killed_between_the_pacs_answer_and_the_database_write_ends_with_one_uuid(
    b: Backend,
) {
    // The sandbox commits the stamp and then holds its answer: the worker process is waiting for
    // it when it is killed with SIGKILL, so the stamp exists at the PAC and not in our database.
    let Some((rig, key)) = rig_paid(
        b,
        "lose_response=1:mode=hang:hang=120s",
        FAST_WORKER,
        "killed",
        now(),
    )
    .await
    else {
        return;
    };
    killed_between_answer_and_write(&rig, &key).await;
}

/// `key`'s row is due and the sandbox holds its next answer: a worker process sends it, is
/// SIGKILLed while waiting for the answer, and a restarted one ends with the one UUID the PAC
/// holds, asking the PAC first and sending nothing again.
async fn killed_between_answer_and_write(rig: &Rig, key: &str) {
    // A 2 s lease, so that the restarted worker takes the row soon after the kill.
    let mut worker = spawn_worker_process(rig, "2");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while rig.stamps_for(key).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker process never reached the PAC"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.0.kill().expect("SIGKILL");
    worker.0.wait().expect("wait");
    let row = rig.row(key).await;
    assert_eq!(
        (row.state.as_str(), row.uuid.as_deref()),
        ("stamping", None),
        "the database never heard back"
    );
    rig.set_faults("").await;
    // Its own lease is 30 s: with the killed one's 2 s, a loaded machine can let it lapse
    // mid-recovery, and a second question (found again, still one stamp) breaks the log below.
    let _restarted = spawn_worker_process(rig, "30");
    let done = rig
        .wait_stamped_once(key, 60, "one UUID after the restart")
        .await;
    let log = rig.app.db.attempts_of(done.id).await.expect("attempts");
    assert_eq!(
        log.iter()
            .map(|a| (a.operation.as_str(), a.outcome.as_str()))
            .collect::<Vec<_>>(),
        vec![("recover", "found")],
        "the killed attempt left no log line; the restarted worker asked the PAC first"
    );
}

async fn an_egreso_whose_worker_is_killed_between_the_pacs_answer_and_the_write_has_one_uuid(
    b: Backend,
) {
    let Some((rig, ingreso)) = rig_paid(b, "", FAST_WORKER, "killedrefund", now()).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    rig.wait_stamped_once(&ingreso, 20, "the ingreso").await;
    pool.shutdown().await;
    rig.set_faults("lose_response=1:mode=hang:hang=120s").await;
    let out = crate::refunds::refund_event(
        &rig.app,
        "killedrefund",
        "refund.created",
        "killedrefund",
        "killedrefund",
        5800,
    )
    .await;
    assert_eq!(out["refunds"], serde_json::json!(["egreso"]), "{out}");
    let key = StampKey::derive("stripe", "pi_test_killedrefund", "egreso:re_killedrefund");
    killed_between_answer_and_write(&rig, key.as_str()).await;
    let row = rig.row(key.as_str()).await;
    assert_eq!(row.kind.as_str(), "egreso");
}

async fn request_cancel(rig: &Rig, key: &str, total: &str, requires_acceptance: bool) -> i64 {
    let row = rig.row(key).await;
    let c = autofactura::domain::cancellation::CancelOrder {
        uuid: row.uuid.clone().expect("stamped"),
        rfc_emisor: "EKU9003173C9".into(),
        rfc_receptor: "XIQB891116QE4".into(),
        total: total.into(),
        motivo: autofactura::pac::Motivo::SinRelacion,
        folio_sustitucion: None,
        requires_acceptance,
    };
    rig.app
        .db
        .request_cancellation(row.id, &c, "test")
        .await
        .expect("db")
        .expect("no conflict")
}

async fn wait_cancel(rig: &Rig, id: i64, state: &str) -> autofactura::store::CancellationRow {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let c = rig.app.db.cancellation(id).await.expect("db").expect("row");
        if c.state.as_str() == state {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cancellation never reached {state}: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_cancellation_without_acceptance_is_sent_and_ends_cancelled(b: Backend) {
    let Some(rig) = rig(b, "", FAST_WORKER).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let key = rig.pay("cancel_small", now()).await;
    rig.wait_state(&key, "stamped", 20).await;
    let id = request_cancel(&rig, &key, "116.00", false).await;
    let c = wait_cancel(&rig, id, "canceled").await;
    assert!(
        c.acuse_xml.as_deref().is_some_and(|a| !a.is_empty()),
        "the acuse is kept: {c:?}"
    );
    assert!(c.estatus_cancelacion.is_some(), "{c:?}");
    assert_eq!(rig.row(&key).await.state.as_str(), "canceled");
    let log = rig
        .app
        .db
        .attempts_of(c.outbox_id.expect("outbox"))
        .await
        .expect("log");
    assert!(
        log.iter()
            .any(|a| a.operation == "cancel" && a.outcome == "requested"),
        "{log:?}"
    );
    pool.shutdown().await;
}

async fn a_cancellation_needing_acceptance_waits_for_the_receptor(b: Backend) {
    let worker = format!("{FAST_WORKER}cancel_poll_seconds = 1\n");
    let Some(rig) = rig(b, "", &worker).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    // 2,500.00 MXN to a nominative receptor, cancelled days after issue: the receptor decides.
    let body = stripe::sample_payment_intent("cancel_big", now(), false).replace("11600", "250000");
    let r = rig.app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
    let v: Value = serde_json::from_str(&body).expect("json");
    let key = StampKey::derive(
        "stripe",
        v["data"]["object"]["id"].as_str().expect("id"),
        "ingreso",
    )
    .to_string();
    let row = rig.wait_state(&key, "stamped", 20).await;
    crate::support::sim::advance_clock(&rig.http, rig.sim.url(), 5 * 86_400).await;
    let id = request_cancel(&rig, &key, "2500.00", true).await;
    let c = wait_cancel(&rig, id, "pending_receiver").await;
    assert!(c.acuse_xml.is_some(), "{c:?}");
    assert_eq!(
        rig.row(&key).await.state.as_str(),
        "stamped",
        "still vigente while the receptor decides"
    );
    let uuid = row.uuid.expect("uuid");
    let r = rig
        .http
        .post(format!(
            "{}/_sim/cancellations/{uuid}/accept",
            rig.sim.url()
        ))
        .send()
        .await
        .expect("sim");
    assert!(r.status().is_success(), "{}", r.status());
    let c = wait_cancel(&rig, id, "canceled").await;
    assert_eq!(c.sat_estado.as_deref(), Some("Cancelado"), "{c:?}");
    assert_eq!(rig.row(&key).await.state.as_str(), "canceled");
    pool.shutdown().await;
}

on_both_backends!(
    a_cancellation_without_acceptance_is_sent_and_ends_cancelled,
    a_cancellation_needing_acceptance_waits_for_the_receptor,
    a_worker_killed_between_the_pacs_answer_and_the_database_write_ends_with_one_uuid,
    an_egreso_whose_worker_is_killed_between_the_pacs_answer_and_the_write_has_one_uuid,
    a_paid_sale_is_sealed_stamped_and_logged,
    a_lost_response_is_recovered_without_a_second_stamp,
    server_errors_and_429_are_retried_with_backoff,
    retries_stop_after_max_attempts_as_a_dead_letter,
    a_rejection_fails_with_the_pacs_code_and_message,
    a_500_is_logged_with_its_status_as_unknown_then_unresolved,
    a_sale_past_the_72_hour_window_expires_unsent,
    an_unknown_outcome_past_the_window_expires_only_once_the_pac_confirms_no_stamp,
    a_stamp_whose_answer_was_lost_as_the_window_closed_is_recovered,
    an_unknown_outcome_is_asked_for_past_max_attempts,
    an_outcome_unresolved_past_its_asking_period_is_asked_daily_and_listed,
    a_key_already_used_for_other_content_fails_with_cfdi3307,
    failover_through_the_worker_follows_the_route_log,
    an_unknown_outcome_at_the_primary_is_never_sent_to_the_backup,
    migration_7_reopens_rows_given_up_while_their_outcome_was_unknown,
    shutdown_releases_in_flight_rows_as_unknown_and_they_end_stamped_once,
    shutdown_gives_back_a_row_prepared_but_never_sent,
    one_stop_ends_the_servers_and_the_pool,
);

/// Two pools on one PostgreSQL (as two appliance instances would be) drain 1,000 rows: every
/// row is stamped exactly once, and both pools take part.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_on_one_postgresql_stamp_a_thousand_rows_exactly_once() {
    let Some(rig) = rig(
        Backend::Postgres,
        "",
        "[worker]\nconcurrency = 8\nidle_poll_ms = 20\n",
    )
    .await
    else {
        return;
    };
    let n = 1000;
    let mut keys = Vec::with_capacity(n);
    let mut tasks = tokio::task::JoinSet::new();
    let base = now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(n / 16) {
        let chunk = chunk.to_vec();
        let app_addr = rig.app.address.clone();
        tasks.spawn(async move {
            let http = reqwest::Client::new();
            let mut ks = Vec::new();
            for i in chunk {
                let body = stripe::sample_payment_intent(&format!("bulk{i}"), base, false);
                let t = chrono::Utc::now().timestamp();
                let sig = autofactura::webhooks::signature::stripe_header(
                    &[support::STRIPE_SECRET],
                    t,
                    body.as_bytes(),
                );
                let r = http
                    .post(format!("{app_addr}/webhooks/stripe"))
                    .header("Stripe-Signature", sig)
                    .body(body.clone())
                    .send()
                    .await
                    .expect("post");
                assert_eq!(r.status(), 200);
                let v: Value = serde_json::from_str(&body).expect("json");
                ks.push(
                    StampKey::derive(
                        "stripe",
                        v["data"]["object"]["id"].as_str().expect("id"),
                        "ingreso",
                    )
                    .to_string(),
                );
            }
            ks
        });
    }
    while let Some(ks) = tasks.join_next().await {
        keys.extend(ks.expect("task"));
    }
    let (a, sa) = rig.pool().await;
    let (b, sb) = rig.pool().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let counts = rig.app.db.outbox_counts().await.expect("counts");
        let stamped = counts
            .iter()
            .find(|(s, _)| s == "stamped")
            .map_or(0, |c| c.1);
        if stamped == i64::try_from(n).expect("n") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not drained: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stamps = rig.stamps().await;
    assert_eq!(stamps.len(), n, "one stamp per row, no more");
    let mut customids: Vec<&str> = stamps
        .iter()
        .filter_map(|s| s["customid"].as_str())
        .collect();
    customids.sort_unstable();
    customids.dedup();
    assert_eq!(customids.len(), n, "no key stamped twice");
    for k in keys.iter().step_by(97) {
        let row = rig.row(k).await;
        let s = rig.stamps_for(k).await;
        assert_eq!(row.uuid.as_deref(), s[0]["uuid"].as_str());
    }
    // Both pools took part (neither was starved).
    let ids = [sa.worker.id.clone(), sb.worker.id.clone()];
    let per_worker = attempts_per_worker(&rig.app.db).await;
    for id in &ids {
        let c = per_worker.iter().find(|(w, _)| w == id).map_or(0, |x| x.1);
        assert!(c > 0, "pool {id} stamped nothing: {per_worker:?}");
    }
    a.shutdown().await;
    b.shutdown().await;
}
