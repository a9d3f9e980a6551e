//! Sealed invoices per second on one core, as a ratio to this machine's own RSA-2048 signing
//! rate (`openssl speed rsa2048`, measured in the same run). Target: at least 0.8. Both rates
//! are per CPU second, so the ratio holds on a busy machine too.
//!
//! Run with `cargo bench -- seal`.

use std::process::Command;
use std::time::{Duration, Instant};

use autofactura::cfdi::{self, InvoiceRequest};

use super::Row;

const SECONDS: u64 = 1;
const ROUNDS: usize = 5;

/// RSA-2048 signatures per CPU second on this machine, by `openssl speed`.
pub(super) fn openssl_sign_per_sec() -> f64 {
    let out = Command::new("openssl")
        .args(["speed", "-seconds", &SECONDS.to_string(), "rsa2048"])
        .output()
        .expect("openssl speed (install openssl)");
    let text = String::from_utf8_lossy(&out.stdout);
    // "rsa 2048 bits 0.000437s 0.000025s   2290.6  40190.0": sign/s is the third number.
    let line = text
        .lines()
        .find(|l| l.starts_with("rsa 2048 bits"))
        .expect("openssl speed output");
    let nums: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    nums[nums.len() - 2]
}

/// Nanoseconds this thread has run on a CPU (`/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat (Linux)");
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat format")
}

pub fn run() -> Vec<Row> {
    let csd = autofactura::sandbox::csd().expect("test CSD");
    let (_, json) = autofactura::sandbox::SAMPLE_REQUESTS[0];
    let mut req: InvoiceRequest = serde_json::from_str(json).expect("sample");
    req.fecha = autofactura::domain::time::now_in_mexico();

    if std::env::var_os("SEAL_BREAKDOWN").is_some() {
        let cadena = cfdi::seal(&req, &csd).expect("seal").cadena;
        let t = Instant::now();
        for _ in 0..2000 {
            csd.sign(&cadena).expect("sign");
        }
        println!(
            "sign alone: {:.1} µs",
            t.elapsed().as_secs_f64() / 2000.0 * 1e6
        );
        let t = Instant::now();
        for _ in 0..2000 {
            let c = cfdi::build(&req, csd.no_certificado()).expect("build");
            let x = cfdi::xml::to_xml(&c);
            let root = cfdi::dom::Element::parse(&x).expect("parse");
            assert!(cfdi::validate::check_amounts(&root).is_empty());
            cfdi::cadena::cadena_comprobante(&root).expect("cadena");
        }
        println!(
            "build+xml+parse+validate+cadena: {:.1} µs",
            t.elapsed().as_secs_f64() / 2000.0 * 1e6
        );
    }

    // Warm up, then alternate one second of `openssl speed` with one second of sealing distinct
    // documents (a new folio each time), so both see the same machine load; report the median.
    for _ in 0..50 {
        cfdi::seal(&req, &csd).expect("seal");
    }
    // (ratio, rate, limit) per round.
    let mut rounds: Vec<(f64, f64, f64)> = Vec::new();
    let mut folio: u64 = 0;
    for round in 1..=ROUNDS {
        let limit = openssl_sign_per_sec();
        let start = Instant::now();
        let cpu_start = thread_cpu_ns();
        let mut n: u64 = 0;
        while start.elapsed() < Duration::from_secs(SECONDS) {
            folio += 1;
            req.folio = Some(folio.to_string());
            cfdi::seal(&req, &csd).expect("seal");
            n += 1;
        }
        // Per CPU second of this thread, as `openssl speed` divides by CPU time (not wall time,
        // unless given -elapsed): both then measure one core, whatever else the machine runs.
        let rate = n as f64 / ((thread_cpu_ns() - cpu_start) as f64 / 1e9);
        let ratio = rate / limit;
        println!(
            "seal: round {round}: {rate:.1} sealed invoices/s on one core; openssl speed rsa2048 {limit:.1} sign/s; ratio {ratio:.3}"
        );
        rounds.push((ratio, rate, limit));
    }
    rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, rate, limit) = rounds[rounds.len() / 2];
    println!(
        "seal: median ratio {ratio:.3} (target >= 0.80): {}",
        if ratio >= 0.8 { "MET" } else { "NOT MET" }
    );
    vec![
        Row::new(
            "seal",
            "sealed invoices per CPU second, one core (median of 5)",
            format!("{rate:.0}/s"),
        )
        .limit(format!("openssl speed rsa2048: {limit:.0} sign/s"), ratio)
        .target(">= 0.80", ratio >= 0.8),
    ]
}
