//! The processes a chaos run starts, kills with SIGKILL and starts again: each is this very
//! executable with its own arguments, port and log file.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

/// One child process, restartable with the same arguments on the same port.
pub struct Proc {
    pub name: String,
    pub port: u16,
    exe: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    log: PathBuf,
    /// Path answered with 200 once the process serves (`/healthz`, `/_sim/stamps`).
    ready_path: &'static str,
    child: Option<Child>,
    /// SIGKILLs sent to it.
    pub kills: u64,
    /// Times it ended without being killed.
    pub crashes: u64,
}

impl Proc {
    pub fn new(
        name: &str,
        port: u16,
        args: Vec<String>,
        dir: &Path,
        ready_path: &'static str,
    ) -> anyhow::Result<Proc> {
        Ok(Proc {
            name: name.to_owned(),
            port,
            exe: std::env::current_exe().context("cannot find this executable")?,
            args,
            dir: dir.to_owned(),
            log: dir.join(format!("{name}.log")),
            ready_path,
            child: None,
            kills: 0,
            crashes: 0,
        })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Replaces the arguments used by the next start (the sandbox's fault spec changes).
    pub fn set_args(&mut self, args: Vec<String>) {
        self.args = args;
    }

    /// Starts the process; its output is appended to its log. Settings come from the arguments
    /// alone: no `AUTOFACTURA__…` variable of the caller's shell leaks in.
    pub fn start(&mut self) -> anyhow::Result<()> {
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .with_context(|| format!("cannot open {}", self.log.display()))
        };
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(open()?))
            .stderr(Stdio::from(open()?))
            .kill_on_drop(true);
        for (k, _) in std::env::vars() {
            if k.starts_with(crate::config::ENV_PREFIX) {
                cmd.env_remove(k);
            }
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info,actix_web=warn,sqlx=warn");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, then reap. No-op when it is not running.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            if c.try_wait()?.is_none() {
                self.kills += 1;
            }
            c.start_kill().ok();
            c.wait().await?;
        }
        Ok(())
    }

    /// Stops it at the end of a run (not counted as a chaos kill).
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.start_kill().ok();
            c.wait().await.ok();
        }
    }

    /// Whether the process ended on its own since the last look; counted as a crash.
    pub fn ended_by_itself(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        self.crashes += 1;
        Some(status)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Waits until the process answers its ready path with 200.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let url = format!("{}{}", self.url(), self.ready_path);
        loop {
            if let Ok(r) = http.get(&url).timeout(Duration::from_secs(2)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if let Some(status) = self.ended_by_itself() {
                anyhow::bail!(
                    "{} exited ({status}) while starting; see {}",
                    self.name,
                    self.log.display()
                );
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "{} did not answer {url} within {limit:?}; see {}",
                    self.name,
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A port that was free a moment ago (children take their address from their arguments),
/// below the kernel's range for outgoing connections: a process restarted on it must not find
/// it taken by one of the run's own client connections. A port is handed out once per run:
/// the processes are started after all their ports are picked, so a port still free because
/// its process has not started yet must not be picked again for another.
pub fn free_port() -> anyhow::Result<u16> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let free = |port: u16| {
        !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
    };
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let picked = (low > 11_000)
        .then(|| {
            (0..200)
                .map(|_| rand::random_range(10_000..low))
                .find(|&p| free(p))
        })
        .flatten();
    let port = match picked {
        Some(port) => port,
        None => loop {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            if !given.contains(&port) {
                break port;
            }
        },
    };
    given.push(port);
    Ok(port)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_port_is_handed_out_once_even_while_nothing_listens_on_it() {
        let mut ports: Vec<u16> = (0..2_000).map(|_| super::free_port().unwrap()).collect();
        ports.sort_unstable();
        let picked = ports.len();
        ports.dedup();
        assert_eq!(ports.len(), picked, "a port was handed out twice");
    }
}
