//! Issue 22 through the real binary: JSON log lines that parse and carry the document's ids,
//! `healthcheck` against `/readyz`, `config check` and `hash-password`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli_e2e::{get_status, run, send_test_webhook, start_with};

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("af.db").display())
}

#[test]
fn json_log_lines_parse_and_carry_the_document_ids() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A set password: nothing but log lines on stderr (no generated password printed).
    let extra = "[log]\nformat = \"json\"\n[admin]\npassword = \"a-long-test-password\"\n";
    let (server, config, port) = start_with(dir.path(), &sqlite_url(dir.path()), extra);
    let config = config.display().to_string();
    let out = send_test_webhook(
        dir.path(),
        &config,
        "stripe",
        &format!("http://127.0.0.1:{port}"),
    );
    assert!(out.status.success(), "{}", server.log());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.log().contains("invoice stamped") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() > 3, "{log}");
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string(), "{l}");
    }
    // The worker's lines about the document: all three ids as fields.
    let stamped = lines
        .iter()
        .find(|l| l["message"] == "invoice stamped")
        .unwrap_or_else(|| panic!("no `invoice stamped` line:\n{log}"));
    let span = &stamped["span"];
    let payment = span["payment_id"].as_str().unwrap_or("");
    let key = span["stamp_key"].as_str().unwrap_or("");
    let uuid = span["uuid"].as_str().unwrap_or("");
    assert!(payment.starts_with("pi_test_"), "{stamped}");
    assert!(key.starts_with("af1-") && key.len() == 44, "{stamped}");
    assert_eq!(uuid.len(), 36, "{stamped}");
    // The webhook's line names the same payment and key, so the two can be joined.
    let ingested = lines
        .iter()
        .find(|l| l["message"] == "stripe payment")
        .unwrap_or_else(|| panic!("no `stripe payment` line:\n{log}"));
    assert_eq!(ingested["payment_id"].as_str(), Some(payment), "{ingested}");
    assert_eq!(ingested["stamp_key"].as_str(), Some(key), "{ingested}");
    // Every line the worker wrote inside the document's span carries its ids.
    for l in lines.iter().filter(|l| l["span"]["name"] == "invoice") {
        assert_eq!(l["span"]["stamp_key"].as_str(), Some(key), "{l}");
        assert_eq!(l["span"]["payment_id"].as_str(), Some(payment), "{l}");
    }

    // healthcheck asks /readyz of the running instance.
    let ok = run(dir.path(), &["healthcheck", "--config", &config]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(get_status(port, "/readyz"), Some(200));
    drop(server);
    let down = run(
        dir.path(),
        &["healthcheck", "--config", &config, "--timeout", "2"],
    );
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("not ready"));
}

#[test]
fn config_check_refuses_a_bad_file_naming_the_key_and_redacts_a_good_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[worker]\nshutdown_grace_seconds = \"soon\"\n").expect("write");
    let out = run(
        dir.path(),
        &["config", "check", "--config", &bad.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("worker.shutdown_grace_seconds"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[admin]\npassword = \"very-secret-words\"\n").expect("write");
    // AUTOFACTURA_CONFIG names the file when --config is not given.
    let out = crate::cli_e2e::autofactura(dir.path())
        .args(["config", "check"])
        .env("AUTOFACTURA_CONFIG", &good)
        .env("AUTOFACTURA__WORKER__CONCURRENCY", "5")
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("password = \"[redacted]\""), "{text}");
    assert!(!text.contains("very-secret-words"), "{text}");
    assert!(text.contains("concurrency = 5"), "{text}");
}

#[test]
fn hash_password_prints_a_hash_the_admin_accepts() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = crate::cli_e2e::autofactura(dir.path())
        .arg("hash-password")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"correct horse battery\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let hash = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(autofactura::admin::auth::verify_password(
        "correct horse battery",
        &hash
    ));
    assert!(!autofactura::admin::auth::verify_password(
        "correct horse",
        &hash
    ));
}
