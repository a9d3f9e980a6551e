//! Memory of `autofactura serve` (the real binary) with 10,000 pending rows in its outbox,
//! drained by 32 workers, against the same binary with an empty outbox in the same run. Peak
//! resident memory (`VmHWM`) is read from /proc. The claim it checks: a backlog costs disk, not
//! memory (target: peak with the backlog at most 1.5 × empty). The sandbox PAC runs as its own
//! process (`autofactura pac-sim`), as a real PAC is remote: the sandbox keeps every stamp it
//! issued in memory, which is its own cost, reported beside.
//!
//! Run with `cargo bench -- memory` (SQLite).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use autofactura::config::Settings;

use super::Row;
use super::procs::{Proc, free_port, memory_kib, start_pac, start_serve};

const ROWS: usize = 10_000;
pub(super) const SECRET: &str = "whsec_bench_memory";
const TARGET: f64 = 1.5;

pub(super) fn settings_text(db: &Path, port: u16, admin: u16, pac_url: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\n[database]\nurl = \"sqlite://{}\"\n\
         [stripe]\nwebhook_secrets = [\"{SECRET}\"]\n[pac]\nkind = \"sandbox\"\nurl = \"{pac_url}\"\n\
         [worker]\nconcurrency = 32\nidle_poll_ms = 50\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n",
        db.display()
    )
}

pub(super) async fn start(
    dir: &Path,
    db: &Path,
    name: &str,
    pac_url: &str,
) -> anyhow::Result<Proc> {
    let (port, admin) = (free_port()?, free_port()?);
    start_serve(dir, name, &settings_text(db, port, admin, pac_url), port).await
}

pub(super) async fn stamped(db: &autofactura::store::Db) -> i64 {
    db.outbox_count(autofactura::domain::DocumentState::Stamped)
        .await
        .unwrap_or(0)
}

pub async fn run() -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let (pac, pac_url) = start_pac(dir.path(), Duration::from_millis(20)).await?;

    // The same binary and settings with nothing to do.
    let empty_db = dir.path().join("empty.db");
    let empty = start(dir.path(), &empty_db, "empty", &pac_url).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (empty_peak, empty_rss) = memory_kib(empty.0.id());
    drop(empty);
    println!(
        "memory: serve with an empty outbox: peak {:.1} MiB, now {:.1} MiB",
        empty_peak as f64 / 1024.0,
        empty_rss as f64 / 1024.0
    );

    let db_path = dir.path().join("backlog.db");
    let t = Instant::now();
    super::fill_backlog(
        &settings_text(&db_path, 0, 0, &pac_url),
        SECRET,
        "mem",
        ROWS,
    )
    .await?;
    println!(
        "memory: {ROWS} pending rows written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let serve = start(dir.path(), &db_path, "backlog", &pac_url).await?;
    let pid = serve.0.id();
    let watch = autofactura::store::connect(
        &Settings::from_parts(Some(&settings_text(&db_path, 0, 0, &pac_url)), &[])?.database,
    )
    .await?;
    let t = Instant::now();
    let mut rss_max = 0;
    loop {
        rss_max = rss_max.max(memory_kib(pid).1);
        if stamped(&watch).await >= i64::try_from(ROWS)? {
            break;
        }
        if t.elapsed() > Duration::from_secs(900) {
            bail!(
                "the backlog did not drain in 15 minutes; see {}",
                dir.path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    let (peak, _) = memory_kib(pid);
    let (pac_peak, _) = memory_kib(pac.0.id());
    drop(serve);
    drop(pac);
    watch.close().await;
    let ratio = peak as f64 / empty_peak.max(1) as f64;
    println!(
        "memory: serve draining {ROWS} pending rows ({:.0}/s): peak {:.1} MiB (RSS sampled up to {:.1} MiB); empty {:.1} MiB; ratio {ratio:.2} (target <= {TARGET}): {}",
        ROWS as f64 / secs,
        peak as f64 / 1024.0,
        rss_max as f64 / 1024.0,
        empty_peak as f64 / 1024.0,
        if ratio <= TARGET { "MET" } else { "NOT MET" }
    );
    println!(
        "memory: the sandbox PAC (its own process, every stamp kept in memory): peak {:.1} MiB",
        pac_peak as f64 / 1024.0
    );
    Ok(vec![
        Row::new(
            "memory",
            format!("serve draining {ROWS} pending rows (SQLite, 32 workers): peak RSS"),
            format!("{:.1} MiB", peak as f64 / 1024.0),
        )
        .limit(
            format!(
                "same binary, empty outbox: {:.1} MiB",
                empty_peak as f64 / 1024.0
            ),
            ratio,
        )
        .target(format!("<= {TARGET}"), ratio <= TARGET),
    ])
}
