//! The appliance and the sandbox PAC as processes of their own (the real binary), for the parts
//! that measure one process apart from the others: `memory` and `e2e`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A child process; killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The chaos harness's: below the kernel's range for outgoing connections, each port once.
pub use autofactura::chaos::procs::free_port;

/// `autofactura` without any `AUTOFACTURA__` setting of this environment.
fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_autofactura"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// `GET url` answers 2xx within a minute.
pub async fn wait_ready(url: &str, dir: &Path) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(r) = http.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{url} did not answer; see {}", dir.display())
}

/// The sandbox PAC as its own process, answering `latency` after each request arrived; its
/// state file and log in `dir`. Returns the process and its URL.
pub async fn start_pac(dir: &Path, latency: Duration) -> anyhow::Result<(Proc, String)> {
    let port = free_port()?;
    let log = std::fs::File::create(dir.join("pac-sim.log"))?;
    let mut cmd = command();
    cmd.args(["pac-sim", "--listen", &format!("127.0.0.1:{port}")]);
    if !latency.is_zero() {
        cmd.args(["--faults", &format!("latency={}ms", latency.as_millis())]);
    }
    let child = cmd
        .arg("--state")
        .arg(dir.join("pac-sim.jsonl"))
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("start autofactura pac-sim")?;
    let sim = Proc(child);
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&format!("{url}/_sim/stamps"), dir).await?;
    Ok((sim, url))
}

/// `autofactura serve --config dir/name.toml` with `config` written there, once `/healthz`
/// answers on `port`; its log is `dir/name.log`.
pub async fn start_serve(dir: &Path, name: &str, config: &str, port: u16) -> anyhow::Result<Proc> {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config)?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let child = command()
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .spawn()
        .context("start autofactura serve")?;
    let serve = Proc(child);
    wait_ready(&format!("http://127.0.0.1:{port}/healthz"), dir).await?;
    Ok(serve)
}

/// `VmHWM` and `VmRSS` of a process, in KiB.
pub fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// CPU seconds (user + system) a process has used so far, every thread, from /proc (`self` or
/// a pid).
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

/// CPU seconds so far of a process's threads that live as long as it does, by their names:
/// SQLite's connections (sqlx runs one thread each), then the HTTP server's workers. The rest
/// of the process's time ([`cpu_seconds`]) is the async runtime's and its blocking pool's,
/// whose threads come and go (an exited thread's time is in the process's total, not here).
pub fn thread_cpu_seconds(pid: &str) -> [f64; 2] {
    let mut by = [0.0; 2];
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let i = if comm.starts_with("sqlx-sqlite") {
            0
        } else if comm.starts_with("actix") {
            1
        } else {
            continue;
        };
        by[i] += cpu_seconds(&format!("{pid}/task/{}", t.file_name().to_string_lossy()));
    }
    by
}

/// Runs `autofactura args…` in `dir` to its end: whether it succeeded, its standard output,
/// and its peak resident memory in KiB (`VmHWM`, sampled every 10 ms until it exits).
pub async fn run_measured(dir: &Path, args: &[&str]) -> anyhow::Result<(bool, String, u64)> {
    let mut child = command()
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start autofactura")?;
    let mut peak = 0;
    let status = loop {
        peak = peak.max(memory_kib(child.id()).0);
        if let Some(status) = child.try_wait()? {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut out)?;
    }
    Ok((status.success(), out, peak))
}

/// The whole machine's CPU time so far: (busy, total, stolen by the hypervisor) in clock ticks,
/// from /proc/stat.
pub fn machine_cpu() -> (u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().sum();
    // idle and iowait
    let idle = f.get(3).unwrap_or(&0) + f.get(4).unwrap_or(&0);
    (total - idle, total, *f.get(7).unwrap_or(&0))
}

/// The SQLite write lock as a process's `GET /metrics` counts it so far, all zero when it does
/// not answer.
#[derive(Debug, Default, Clone)]
pub struct WriteLock {
    /// Seconds held, over every write.
    pub held: f64,
    /// Seconds waited, over every write.
    pub waited: f64,
    /// Writes.
    pub writes: f64,
    /// Seconds held and writes, by the store's name of the write.
    pub by_write: std::collections::BTreeMap<String, (f64, f64)>,
}

impl WriteLock {
    /// What was held between `self` and `later`, by write, most held first: (name, seconds
    /// held, writes).
    pub fn held_since(&self, later: &WriteLock) -> Vec<(String, f64, f64)> {
        let mut held: Vec<(String, f64, f64)> = later
            .by_write
            .iter()
            .map(|(k, (s, n))| {
                let (s0, n0) = self.by_write.get(k).copied().unwrap_or_default();
                (k.clone(), s - s0, n - n0)
            })
            .filter(|(_, _, n)| *n > 0.0)
            .collect();
        held.sort_by(|a, b| b.1.total_cmp(&a.1));
        held
    }
}

pub async fn write_lock(port: u16) -> WriteLock {
    let text = match reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let mut lock = WriteLock::default();
    let Ok(scrape) = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))) else {
        return lock;
    };
    for sample in scrape.samples {
        let (prometheus_parse::Value::Counter(value)
        | prometheus_parse::Value::Gauge(value)
        | prometheus_parse::Value::Untyped(value)) = sample.value
        else {
            continue;
        };
        let write = sample.labels.get("write").unwrap_or("").to_owned();
        match sample.metric.as_str() {
            "autofactura_sqlite_write_lock_wait_seconds_sum" => lock.waited += value,
            "autofactura_sqlite_write_lock_hold_seconds_sum" => {
                lock.held += value;
                lock.by_write.entry(write).or_default().0 += value;
            }
            "autofactura_sqlite_write_lock_hold_seconds_count" => {
                lock.writes += value;
                lock.by_write.entry(write).or_default().1 += value;
            }
            _ => {}
        }
    }
    lock
}
