//! Pausing the backup PAC from the admin (issue 23, "pause and resume stamping per PAC"), on
//! SQLite and PostgreSQL: with `[pac.backup]`, the dashboard offers the backup its own pause
//! (CSRF, audited); while it is paused nothing fails over to it, even when the primary
//! refuses every call, and the primary's own pause is untouched. Once resumed, a new document
//! the primary refuses fails over and is stamped there; the one the primary was sent while the
//! backup was paused stays with the primary (its outcome there is asked first, as always) and
//! is stamped there once it answers: one stamp each.

use crate::support;

use std::time::Duration;

use autofactura::domain::StampKey;
use autofactura::pacsim::faults::FaultSpec;
use autofactura::pacsim::{Sandbox, SandboxHandle};
use autofactura::webhooks::stripe;
use support::admin::{Browser, PASSWORD, count};
use support::rows::outbox_status;
use support::{Backend, TestApp, spawn_app_with};

async fn sandbox(dir: &tempfile::TempDir, name: &str, faults: &str) -> (String, SandboxHandle) {
    let spec = FaultSpec::parse(faults).expect("fault spec");
    Sandbox::start_in_process(&dir.path().join(format!("{name}.jsonl")), spec)
        .await
        .expect("sandbox")
}

/// The state, last error and attempts of the document of `key`.
async fn doc_of(app: &TestApp, key: &str) -> (String, String) {
    let d = outbox_status(&app.db, key).await.expect("outbox row");
    (
        d.state.as_str().to_owned(),
        d.last_error_message.unwrap_or_default(),
    )
}

async fn wait_stamped(app: &TestApp, key: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while doc_of(app, key).await.0 != "stamped" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{key}: {:?}",
            doc_of(app, key).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_paused_backup_gets_nothing_until_resumed(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    // The primary refuses every call before processing it: each document may fail over.
    let (primary, primary_sim) = sandbox(&dir, "primary", "status503=1").await;
    let (backup_url, backup) = sandbox(&dir, "backup", "").await;
    let extra = format!(
        "[admin]\npassword = \"{PASSWORD}\"\n\
         [pac]\nkind = \"sandbox\"\nurl = \"{primary}\"\n\
         [pac.backup]\nkind = \"sandbox\"\nurl = \"{backup_url}\"\n\
         [worker]\nconcurrency = 2\nlease_seconds = 2\nidle_poll_ms = 50\n\
         backoff_base_seconds = 1\nbackoff_cap_seconds = 1\nmax_attempts = 100\n"
    );
    let Some(app) = spawn_app_with(b, &extra).await else {
        return;
    };
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let dash = br.get("/admin").await.body;
    assert!(
        dash.contains("Backup PAC <code>sandbox-backup</code>")
            && dash.contains("id=\"pause-backup\""),
        "{dash}"
    );
    let paused = br
        .post(
            "/admin/pac/pause",
            &[
                ("csrf", csrf.as_str()),
                ("pac", "sandbox-backup"),
                ("reason", "backup incident"),
            ],
        )
        .await;
    assert_eq!(paused.status, 303, "{}", paused.body);
    // Another PAC's name is refused, and so is a forged form.
    let bad = br
        .post(
            "/admin/pac/pause",
            &[("csrf", csrf.as_str()), ("pac", "finkok"), ("reason", "x")],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let forged = br
        .post(
            "/admin/pac/resume",
            &[("csrf", "forged"), ("pac", "sandbox-backup")],
        )
        .await;
    assert_eq!(forged.status, 403);
    let dash = br.get("/admin").await.body;
    assert!(dash.contains("id=\"backup-paused\""), "{dash}");
    assert!(
        !dash.contains("id=\"paused\""),
        "the primary is not paused: {dash}"
    );

    let body =
        stripe::sample_payment_intent("backup_paused", chrono::Utc::now().timestamp(), false);
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    let key = StampKey::derive("stripe", "pi_test_backup_paused", "ingreso").to_string();
    let (pool, _s) = app.start_pool().await;
    // The primary refuses, the backup is paused: the document is tried and waits. Read from
    // the attempt log, which keeps it: the row shows it (`retry_scheduled`) only until its
    // next try a second later, which asks the primary first and leaves it `unknown`.
    let id = outbox_status(&app.db, &key).await.expect("outbox row").id;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let log = app.db.attempts_of(id).await.expect("attempts");
        let waited = log.iter().any(|a| {
            a.outcome == "retryable"
                && a.message
                    .as_deref()
                    .is_some_and(|m| m.contains("the backup PAC is paused"))
        });
        if waited {
            break;
        }
        let (state, error) = doc_of(&app, &key).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{state}: {error} {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let http = reqwest::Client::new();
    assert!(
        support::sim::stamps(&http, backup.url()).await.is_empty(),
        "nothing reached the paused backup"
    );
    assert_eq!(
        app.db.pac_routes(&key).await.expect("routes"),
        ["primary"],
        "never sent to the backup"
    );

    let resumed = br
        .post(
            "/admin/pac/resume",
            &[("csrf", csrf.as_str()), ("pac", "sandbox-backup")],
        )
        .await;
    assert_eq!(resumed.status, 303, "{}", resumed.body);
    // Resumed: the next document the primary refuses fails over.
    let body =
        stripe::sample_payment_intent("backup_resumed", chrono::Utc::now().timestamp(), false);
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
    let resumed_key = StampKey::derive("stripe", "pi_test_backup_resumed", "ingreso").to_string();
    wait_stamped(&app, &resumed_key).await;
    assert_eq!(support::sim::stamps(&http, backup.url()).await.len(), 1);
    // The primary answers again: the first one is stamped there.
    primary_sim.sim().set_faults(FaultSpec::default());
    wait_stamped(&app, &key).await;
    assert_eq!(
        support::sim::stamps(&http, primary_sim.url()).await.len(),
        1
    );
    assert_eq!(
        support::sim::stamps(&http, backup.url()).await.len(),
        1,
        "one stamp each"
    );
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM admin_actions WHERE target_id = 'sandbox-backup'"
        )
        .await,
        2,
        "paused and resumed, audited"
    );
    pool.shutdown().await;
}

on_both_backends!(a_paused_backup_gets_nothing_until_resumed);
