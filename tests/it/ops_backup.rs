//! `autofactura backup` (issue 22): a consistent copy of the SQLite database taken by the real
//! binary while the appliance serves and its workers stamp, restored into a new instance with
//! every stamped document byte-exact; PostgreSQL is refused with where to look (pg_dump).

use std::collections::HashMap;
use std::time::Duration;

use autofactura::webhooks::stripe;

use crate::support::rows::fetch_rows;
use crate::support::{Backend, TestApp, spawn_app, spawn_app_with_env};

type Stamped = HashMap<String, (String, Vec<u8>)>;

/// Every stamped document: stamp key → (UUID, stamped XML).
async fn stamped(app: &TestApp) -> Stamped {
    let rows: Vec<(String, String, Vec<u8>)> = fetch_rows(
        &app.db,
        "SELECT stamp_key, uuid, stamped_xml FROM outbox WHERE state = 'stamped'",
        &[],
    )
    .await;
    rows.into_iter().map(|(k, u, x)| (k, (u, x))).collect()
}

async fn pay(app: &TestApp, suffix: &str) {
    let body = stripe::sample_payment_intent(suffix, chrono::Utc::now().timestamp(), false);
    assert_eq!(app.post_stripe_signed(&body).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backup_while_serving_restores_every_stamped_document_byte_exact() {
    let Some(app) = spawn_app(Backend::Sqlite).await else {
        return;
    };
    for i in 0..5 {
        pay(&app, &format!("bk_before_{i}")).await;
    }
    app.drain(30).await;
    let before = stamped(&app).await;
    assert_eq!(before.len(), 5);

    // Traffic and stamping go on while the binary takes the copy.
    let (pool, _services) = app.start_pool().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("backup.db");
    let traffic = async {
        for i in 0..20 {
            pay(&app, &format!("bk_during_{i}")).await;
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    };
    let copy = {
        let (config, out, cwd) = (app.config_file.clone(), out.clone(), dir.path().to_owned());
        async move {
            tokio::time::sleep(Duration::from_millis(120)).await;
            tokio::task::spawn_blocking(move || {
                crate::cli_e2e::autofactura(&cwd)
                    .args(["backup", "--config"])
                    .arg(&config)
                    .arg("--out")
                    .arg(&out)
                    .output()
                    .expect("run autofactura backup")
            })
            .await
            .expect("join")
        }
    };
    let ((), done) = tokio::join!(traffic, copy);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    crate::support::rows::wait_drained(&app.db, 30).await;
    pool.shutdown().await;
    let after = stamped(&app).await;

    // A second backup never overwrites the first.
    let again = crate::cli_e2e::run(
        dir.path(),
        &[
            "backup",
            "--config",
            &app.config_file.display().to_string(),
            "--out",
            &out.display().to_string(),
        ],
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    // Restore: a new instance on the copy.
    let url = format!("sqlite://{}", out.display());
    let restored = spawn_app_with_env(
        Backend::Sqlite,
        "",
        &[("AUTOFACTURA__DATABASE__URL", url.as_str())],
    )
    .await
    .expect("restored instance");
    assert_eq!(restored.get("/readyz").await.status(), 200);
    let copy = stamped(&restored).await;
    for (key, doc) in &before {
        assert_eq!(
            copy.get(key),
            Some(doc),
            "{key}: stamped before the backup, byte-exact"
        );
    }
    for (key, doc) in &copy {
        assert_eq!(
            after.get(key),
            Some(doc),
            "{key}: in the copy as it was stamped"
        );
    }
    // Taken during traffic: the copy holds payments that arrived meanwhile.
    let payments: Vec<(i64,)> =
        fetch_rows(&restored.db, "SELECT COUNT(*) FROM payments", &[]).await;
    assert!(payments[0].0 >= 5, "{payments:?}");
    let check: Vec<(String,)> = fetch_rows(&restored.db, "PRAGMA integrity_check", &[]).await;
    assert_eq!(check[0].0, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backup_of_postgres_says_to_use_pg_dump() {
    let Some(app) = spawn_app(Backend::Postgres).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let err = app
        .db
        .backup_into(&dir.path().join("x.db"))
        .await
        .expect_err("PostgreSQL");
    assert!(err.to_string().contains("pg_dump"), "{err}");
}
