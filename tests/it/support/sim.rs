//! The sandbox PAC's test-only routes: what it stamped (the ground truth for "exactly once") and
//! the faults it injects.

use serde_json::Value;

/// Every stamp the sandbox at `url` ever issued (`GET /_sim/stamps`).
pub async fn stamps(url: &str) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{url}/_sim/stamps"))
        .await
        .expect("sim")
        .json()
        .await
        .expect("stamps json");
    v.as_array().expect("stamps array").clone()
}

/// Replaces the faults the sandbox at `url` injects (`PUT /_sim/faults`).
pub async fn set_faults(url: &str, spec: &str) {
    let r = reqwest::Client::new()
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
