//! The accountant's month export (`autofactura export`, the real binary) of a month of 10,000
//! stamped documents, against the same command exporting an empty month in the same run: peak
//! resident memory (`VmHWM`). The claim it checks: the export streams page by page, so its
//! memory does not grow with the month (target: at most 1.5 × the empty month's), and the ZIP
//! holds every document (10,000 XMLs, 10,000 CSV rows).
//!
//! Run with `cargo bench -- export` (SQLite; the documents are stamped by a sandbox PAC of its
//! own process first, which takes a minute or two).

use std::io::Read;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use autofactura::config::Settings;

use super::Row;
use super::memory::{SECRET, settings_text, stamped, start};
use super::procs::{run_measured, start_pac};

const ROWS: usize = 10_000;
const TARGET: f64 = 1.5;

pub async fn run() -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let (pac, pac_url) = start_pac(dir.path(), Duration::ZERO).await?;
    let db_path = dir.path().join("month.db");
    let text = settings_text(&db_path, 0, 0, &pac_url);
    super::fill_backlog(&text, SECRET, "exp", ROWS).await?;
    let serve = start(dir.path(), &db_path, "export", &pac_url).await?;
    let watch =
        autofactura::store::connect(&Settings::from_parts(Some(&text), &[])?.database).await?;
    let t = Instant::now();
    while stamped(&watch).await < i64::try_from(ROWS)? {
        if t.elapsed() > Duration::from_secs(900) {
            bail!(
                "{ROWS} documents were not stamped in 15 minutes; see {}",
                dir.path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(serve);
    drop(pac);
    watch.close().await;
    let config = dir.path().join("export.toml");
    std::fs::write(&config, &text)?;
    let config = config.display().to_string();
    let month = autofactura::domain::time::now_in_mexico()
        .format("%Y-%m")
        .to_string();

    let empty_zip = dir.path().join("empty.zip").display().to_string();
    let args = [
        "export", "--config", &config, "--month", "2020-01", "--out", &empty_zip,
    ];
    let (ok, _, empty_peak) = run_measured(dir.path(), &args).await?;
    ensure!(ok, "the export of an empty month failed");

    let zip_path = dir.path().join("month.zip");
    let full = zip_path.display().to_string();
    let t = Instant::now();
    let (ok, said, peak) = run_measured(
        dir.path(),
        &[
            "export", "--config", &config, "--month", &month, "--out", &full,
        ],
    )
    .await?;
    let secs = t.elapsed().as_secs_f64();
    ensure!(ok, "the export of {month} failed: {said}");
    // The counts: every document once as XML and once in the CSV.
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&zip_path)?)?;
    let xmls = zip
        .file_names()
        .filter(|n| n.as_ref().is_ok_and(|n| n.ends_with(".xml")))
        .count();
    let mut csv = String::new();
    zip.by_name("documentos.csv")?.read_to_string(&mut csv)?;
    let rows = csv.lines().count() - 1;
    ensure!(
        xmls == ROWS && rows == ROWS,
        "the ZIP holds {xmls} XMLs and {rows} CSV rows, not {ROWS}"
    );
    let ratio = peak as f64 / empty_peak.max(1) as f64;
    println!(
        "export: {ROWS} documents in {secs:.1} s ({} bytes): peak {:.1} MiB; empty month {:.1} MiB; ratio {ratio:.2} (target <= {TARGET}): {}",
        std::fs::metadata(&zip_path)?.len(),
        peak as f64 / 1024.0,
        empty_peak as f64 / 1024.0,
        if ratio <= TARGET { "MET" } else { "NOT MET" }
    );
    Ok(vec![
        Row::new(
            "export",
            format!("`autofactura export` of a month of {ROWS} documents (SQLite): peak RSS"),
            format!("{:.1} MiB ({secs:.1} s)", peak as f64 / 1024.0),
        )
        .limit(
            format!(
                "same command, empty month: {:.1} MiB",
                empty_peak as f64 / 1024.0
            ),
            ratio,
        )
        .target(format!("<= {TARGET}"), ratio <= TARGET),
    ])
}
