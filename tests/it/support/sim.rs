//! The sandbox PAC's test-only routes: what it stamped (the ground truth for "exactly once") and
//! the faults it injects.

use serde_json::Value;

/// Every stamp the sandbox at `url` ever issued (`GET /_sim/stamps`), asked through `http`.
pub async fn stamps(http: &reqwest::Client, url: &str) -> Vec<Value> {
    let v: Value = http
        .get(format!("{url}/_sim/stamps"))
        .send()
        .await
        .expect("sim")
        .json()
        .await
        .expect("stamps json");
    v.as_array().expect("stamps array").clone()
}

/// Replaces the faults the sandbox at `url` injects (`PUT /_sim/faults`), through `http`.
pub async fn set_faults(http: &reqwest::Client, url: &str, spec: &str) {
    let r = http
        .put(format!("{url}/_sim/faults"))
        .body(spec.to_owned())
        .send()
        .await
        .expect("sim");
    let status = r.status();
    assert!(
        status.is_success(),
        "faults {spec}: {status} {}",
        r.text().await.unwrap_or_default()
    );
}

/// Moves the clock of the sandbox at `url` forward by `seconds` (`POST /_sim/clock/advance`).
pub async fn advance_clock(http: &reqwest::Client, url: &str, seconds: i64) {
    let r = http
        .post(format!("{url}/_sim/clock/advance?seconds={seconds}"))
        .send()
        .await
        .expect("sim");
    assert!(r.status().is_success(), "advance the clock: {}", r.status());
}

/// Runs `autofactura SUBCOMMAND --listen 127.0.0.1:0 ARGS…` (a sandbox: `pac-sim`, `arca-sim`)
/// and returns the child and the URL its first line announces (`… listening on URL …`).
pub fn spawn_sandbox(subcommand: &str, args: &[&std::ffi::OsStr]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .args([subcommand, "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the sandbox");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the sandbox's first line");
    let url = line
        .split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (child, url)
}
