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
