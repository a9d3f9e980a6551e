//! `[worker]`: the worker pool of this process. Every default is in `config/default.toml`.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSettings {
    /// Rows processed at once by this process (1 to 1024).
    pub concurrency: usize,
    /// How long a claim lasts without a keepalive; a dead worker's rows return after this.
    pub lease_seconds: u64,
    /// Sleep between polls when there is nothing to do (each idle slot's; the pool looks for a
    /// cancellation about twice in that time).
    pub idle_poll_ms: u64,
    /// On shutdown, how long in-flight PAC calls may take before their rows are released.
    pub shutdown_grace_seconds: u64,
    /// The SAT window between Fecha and stamping.
    pub window_hours: u64,
    /// Treat a row as expired this long before the window closes (the PAC checks on arrival).
    pub window_margin_seconds: u64,
    /// First delay between status polls of a cancellation awaiting the receptor.
    pub cancel_poll_seconds: u64,
    /// Backoff between retries the PAC definitely did not process: first delay and cap.
    pub backoff_base_seconds: u64,
    pub backoff_cap_seconds: u64,
    /// Such retries before a document ends `failed`.
    pub max_attempts: u64,
}

impl WorkerSettings {
    /// Adds every problem of `[worker]` to `p`.
    pub(super) fn check(&self, p: &mut Vec<String>) {
        if self.concurrency == 0 {
            p.push("[worker] concurrency must be at least 1".into());
        } else if self.concurrency > 1024 {
            p.push(format!(
                "[worker] concurrency must be 1 to 1024, not {}",
                self.concurrency
            ));
        }
        for (key, value, least) in [
            ("lease_seconds", self.lease_seconds, 2),
            ("idle_poll_ms", self.idle_poll_ms, 10),
            ("window_hours", self.window_hours, 1),
            ("cancel_poll_seconds", self.cancel_poll_seconds, 1),
            ("backoff_base_seconds", self.backoff_base_seconds, 1),
            ("backoff_cap_seconds", self.backoff_cap_seconds, 1),
            ("max_attempts", self.max_attempts, 1),
        ] {
            if value < least {
                p.push(format!("[worker] {key} = {value} is too small"));
            }
        }
        if i32::try_from(self.max_attempts).is_err() {
            p.push("[worker] max_attempts is too large".into());
        }
    }
}
