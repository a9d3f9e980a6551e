//! The processes of a chaos run (the sandbox and the `serve` instances) and the loop that kills
//! them: what both runs, the PAC's and ARCA's ([`super::arca`]), start and SIGKILL alike.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio_util::sync::CancellationToken;

use super::procs::{Proc, free_port};

/// The arguments of sandbox `command` (`pac-sim`, `arca-sim`).
pub(super) fn sim_args(command: &str, state: &Path, port: u16, faults: &str) -> Vec<String> {
    vec![
        command.into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--state".into(),
        state.display().to_string(),
        "--faults".into(),
        faults.to_owned(),
    ]
}

/// Everything the run started, and what to undo at the end.
pub(super) struct Cast {
    pub(super) sim: Proc,
    pub(super) appliances: Vec<Proc>,
}

impl Cast {
    pub(super) fn all(&mut self) -> impl Iterator<Item = &mut Proc> {
        std::iter::once(&mut self.sim).chain(self.appliances.iter_mut())
    }

    /// Starts whatever is not running, then waits until everything answers.
    pub(super) async fn start(&mut self, http: &reqwest::Client) -> anyhow::Result<()> {
        for p in self.all() {
            if !p.is_running() {
                p.start()?;
            }
        }
        for p in self.all() {
            p.wait_ready(http, Duration::from_secs(90)).await?;
        }
        Ok(())
    }

    /// Says how often each process was killed, then stops them all.
    pub(super) async fn stop(&mut self) {
        let per_process: Vec<String> = self
            .all()
            .map(|p| format!("{} {}", p.name, p.kills))
            .collect();
        eprintln!("chaos: SIGKILLs per process: {}", per_process.join(", "));
        for p in self.all() {
            p.stop().await;
        }
    }

    pub(super) fn crashes(&self) -> Vec<String> {
        std::iter::once(&self.sim)
            .chain(self.appliances.iter())
            .filter(|p| p.crashes > 0)
            .map(|p| {
                format!(
                    "{} ended by itself {} time(s); see {}",
                    p.name,
                    p.crashes,
                    p.log().display()
                )
            })
            .collect()
    }
}

/// `n` instances (`appliance-1`, …), each `serve` with the settings `settings` gives for its
/// port, written to the working directory `dir`.
pub(super) fn appliances(
    dir: &Path,
    n: usize,
    settings: impl Fn(u16) -> String,
) -> anyhow::Result<Vec<Proc>> {
    (1..=n)
        .map(|k| {
            let port = free_port()?;
            let config = dir.join(format!("appliance-{k}.toml"));
            std::fs::write(&config, settings(port))
                .with_context(|| format!("cannot write {}", config.display()))?;
            let args = vec![
                "serve".into(),
                "--config".into(),
                config.display().to_string(),
            ];
            Proc::new(&format!("appliance-{k}"), port, args, dir, "/healthz")
        })
        .collect()
}

/// When the sandbox is SIGKILLed (from the start of the chaos phase), and the arguments it
/// is started again with, given the time since that start and which kill it was (its fault
/// spec, for the log, beside them).
pub(super) struct SimKills {
    pub(super) at: Vec<Duration>,
    pub(super) args: Box<dyn Fn(Duration, usize) -> (Vec<String>, String) + Send>,
}

/// Kills a random instance every `every` (a range in milliseconds) and starts it again; kills
/// and restarts the sandbox at `sim_kills`; restarts anything that ended by itself. Hands the
/// processes back when `stop` fires.
pub(super) async fn chaos_loop(
    mut cast: Cast,
    stop: CancellationToken,
    sim_kills: SimKills,
    kills: Arc<AtomicU64>,
    seed: u64,
    every: (u64, u64),
) -> anyhow::Result<Cast> {
    let mut rng = StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let mut next_kill = start + Duration::from_millis(rng.random_range(every.0..every.1));
    let mut sim_killed = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(cast),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        for p in cast.all() {
            if let Some(status) = p.ended_by_itself() {
                eprintln!(
                    "chaos: {} ended by itself ({status}); starting it again; see {}",
                    p.name,
                    p.log().display()
                );
                p.start()?;
            }
        }
        let now = Instant::now();
        if sim_kills
            .at
            .get(sim_killed)
            .is_some_and(|at| now >= start + *at)
        {
            sim_killed += 1;
            cast.sim.kill().await?;
            kills.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(rng.random_range(500..1500))).await;
            let (args, faults) = (sim_kills.args)(start.elapsed(), sim_killed);
            cast.sim.set_args(args);
            cast.sim.start()?;
            eprintln!(
                "chaos: {} SIGKILLed and restarted (faults {faults})",
                cast.sim.name
            );
        }
        if now >= next_kill {
            let i = rng.random_range(0..cast.appliances.len());
            let p = &mut cast.appliances[i];
            if p.is_running() {
                p.kill().await?;
                kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..800))).await;
                p.start()?;
            }
            next_kill = Instant::now() + Duration::from_millis(rng.random_range(every.0..every.1));
        }
    }
}
