//! The chaos run (`autofactura chaos --payments N [--database-url URL]`): the whole appliance,
//! as separate processes, under the failures it is built to survive, then an exact count.
//!
//! It starts the sandbox PAC (`pac-sim`) with faults (stamps committed with the answer lost,
//! 5xx, 429, latency, one outage window, and a long outage of its lookups), two `serve`
//! instances on one fresh PostgreSQL database (one instance on SQLite without a URL), and sends
//! signed Stripe and Mercado Pago webhooks ([`traffic`]), some dated at the edge of the SAT's
//! 72-hour window. Every few seconds it SIGKILLs a random instance and starts it again; once it
//! SIGKILLs and restarts the sandbox PAC. When everything is quiet it compares the payments
//! sent, our records and the sandbox's list of every stamp it issued ([`check`]) and prints
//!
//! ```text
//! payments=N stamped=S self_invoiced=P in_global=G expired=E lost=0 duplicated=0 orphans=0 kills=K faults=F
//! ```
//!
//! Some Stripe sales come without an RFC: some are paid in a closed period and must end in
//! exactly one stamped factura global (both instances' loops issue them while being killed),
//! the others' customers ([`customers`]) invoice them at the portal, submitting twice at once,
//! and must end with exactly one CFDI of their own (`self_invoiced`, counted in `stamped`). A
//! sale in two documents of any kind is `duplicated`.
//!
//! `kills` counts every SIGKILL (instances and the sandbox); `faults` counts the PAC calls in our
//! attempt log that did not get an answer (5xx, 429, lost answers, the outages, the sandbox
//! down). `expired` counts payments dated at the window's edge that rightly expired (the PAC
//! holds no stamp of them). The exit code is non-zero when any count is off or a row is left
//! unfinished.
//!
//! Two faults aim at the ways an unknown outcome could end as a second CFDI, or as a stamp we
//! never record: for most of the run the sandbox cannot answer for stamps it already issued
//! (`recover_outage`), so rows whose answer was lost exhaust their attempts while their outcome
//! is unknown; and every stamp of a payment at the window's edge loses its answer (`lose_late`),
//! so its window closes while nobody knows whether it was stamped. Both must end with the one
//! stamp recorded.
//!
//! With `--authority arca` the run is Argentina's instead ([`arca`]): Mercado Pago sales in
//! ARS, the sandbox ARCA (`arca-sim`) with its faults and outages, the same kills, and the
//! line of [`arca_check`] with `gaps=`.
//!
//! Who may import it: the CLI. It imports the store, the settings, the webhooks' signing and
//! samples, and the sandbox ARCA's voucher type.
//!
//! The instances run with time compressed (5 s leases, backoff capped at 2 s, 10 attempts
//! before a dead letter) so a run takes about a minute; periodic reconciliation is off, so the
//! worker path alone has to get every count right.

mod arca;
pub mod arca_check;
mod cast;
pub mod check;
mod credit;
pub mod customers;
mod mail;
pub mod procs;
mod quiet;
pub mod traffic;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::config::{DatabaseSettings, SecretString};
use crate::domain::{ArcaVoucherState, DocumentState};
use crate::store::{self, Db};
// `arca` starts and kills its processes with these too.
use cast::{Cast, SimKills, appliances, chaos_loop, sim_args};
use check::{Globals, Line, PacStamp};
use procs::{Proc, free_port};
use quiet::settle;
use traffic::SendStats;

/// Whom the run's sales are invoiced with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Authority {
    /// Mexico: Stripe and Mercado Pago sales stamped as CFDI by the sandbox PAC.
    #[default]
    Pac,
    /// Argentina: Mercado Pago sales in ARS authorized by the sandbox ARCA ([`arca`]).
    Arca,
}

/// What `autofactura chaos` was asked to do: its command-line arguments, as `--help` shows
/// them.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// `pac`: Mexican sales stamped by the sandbox PAC; `arca`: Argentine Mercado Pago
    /// sales authorized by the sandbox ARCA (`gaps=` in the line).
    #[arg(long, value_enum, default_value_t)]
    pub authority: Authority,
    /// Payments to send.
    #[arg(long)]
    pub payments: usize,
    /// PostgreSQL server (two instances on a fresh database of the run's own, dropped
    /// after); without it, SQLite in a temporary directory and one instance.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Payments sent per second.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Seed of the traffic, faults and kills (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep the working directory (logs, settings, sandbox journal) after a passing run.
    #[arg(long)]
    pub keep: bool,
}

/// The fault mix of the brief: about 10 % of stamps committed with the answer lost, 10 % 5xx,
/// 5 % 429, 20–500 ms latency; the answer of every stamp within two minutes of its window's end
/// lost; and the windows, measured from the sandbox's start, of its lookup outage and of its
/// full outage.
fn fault_spec(
    seed: u64,
    recover_outage: (Duration, Duration),
    outage: Option<(Duration, Duration)>,
) -> String {
    let ms = |(a, b): (Duration, Duration)| format!("{}ms..{}ms", a.as_millis(), b.as_millis());
    let mut s = format!(
        "seed={seed},latency=20ms..500ms,lose_response=0.1,lose_late=2m,status500=0.05,status503=0.05,status429=0.05:retry_after=1,recover_outage={}",
        ms(recover_outage)
    );
    if let Some(o) = outage {
        s.push_str(&format!(",outage={}", ms(o)));
    }
    s
}

/// What every instance of a run has: its port, the shared database, Mercado Pago's retries
/// compressed (`mercadopago` opens that table), no reconciliation.
pub(crate) fn instance_settings(port: u16, database_url: &str, mercadopago: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:{port}"

[database]
url = "{database_url}"
max_connections = 8

[mercadopago]
{mercadopago}retry_interval_seconds = 1
fetch_timeout_seconds = 5

[admin]
reconcile_interval_seconds = 0
"#
    )
}

/// The settings of one instance: the external sandbox, compressed time, no reconciliation.
fn appliance_settings(port: u16, database_url: &str, sim_url: &str, smtp_port: u16) -> String {
    let head = instance_settings(port, database_url, "");
    format!(
        r#"{head}
[pac]
kind = "sandbox"
url = "{sim_url}"
api_url = "{sim_url}"
connect_timeout = 2
request_timeout = 15

[worker]
concurrency = 8
lease_seconds = 5
idle_poll_ms = 200
backoff_base_seconds = 1
backoff_cap_seconds = 2
max_attempts = 10
shutdown_grace_seconds = 2

[global]
grace_minutes = 0
interval_seconds = 1

[portal]
lookups_per_window = 1000000

[email]
smtp_url = "smtp://127.0.0.1:{smtp_port}"
from = "Facturas <facturas@example.mx>"
# A short timeout makes a short lease: a killed courier's claimed message is due again soon.
timeout_seconds = 3
retry_seconds = [1, 2, 5]
"#
    )
}

/// When the sandbox is killed and when its outages open, from the start of the chaos phase.
struct Schedule {
    sim_kill_at: Duration,
    outage: (Duration, Duration),
    /// Long enough for a row whose answer was lost early in it to use up its 10 attempts
    /// (about 20 s at the compressed backoff, with claims and kills) while its outcome is
    /// unknown. Rows the PAC definitely did not process (5xx, 429, the outage) are not held by
    /// it, so they stay far from 10.
    recover_outage: (Duration, Duration),
}

/// `window` as seen by a sandbox started `since` after the chaos phase began.
fn since_start((a, b): (Duration, Duration), since: Duration) -> (Duration, Duration) {
    (a.saturating_sub(since), b.saturating_sub(since))
}

/// `autofactura chaos`.
pub async fn run(opts: Options) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(opts.payments > 0, "--payments must be at least 1");
    anyhow::ensure!(
        opts.rate.is_finite() && opts.rate > 0.0,
        "--rate must be a positive number"
    );
    let seed = opts.seed.unwrap_or_else(rand::random);
    let run_id = format!("{:08x}", rand::random::<u32>());
    let dir = std::env::temp_dir().join(format!("autofactura-chaos-{run_id}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let backend = if opts.database_url.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    eprintln!(
        "chaos: {} payments on {backend}, seed {seed}, rate {}/s, working directory {}",
        opts.payments,
        opts.rate,
        dir.display()
    );

    let pg_name = format!("af_chaos_{run_id}");
    let database_url = match &opts.database_url {
        Some(admin) => {
            store::create_postgres_database(admin, &pg_name).await?;
            store::postgres_url_with_database(admin, &pg_name)
        }
        None => format!("sqlite://{}", dir.join("chaos.db").display()),
    };
    let result = match opts.authority {
        Authority::Pac => run_in(&opts, seed, &run_id, &dir, &database_url).await,
        Authority::Arca => arca::run_in(&opts, seed, &dir, &database_url).await,
    };
    if let Some(admin) = &opts.database_url
        && let Err(e) = store::drop_postgres_database(admin, &pg_name).await
    {
        eprintln!("chaos: could not drop the database {pg_name}: {e}");
    }
    let passed = matches!(result, Ok(true));
    if passed && !opts.keep {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        eprintln!("chaos: logs and settings kept in {}", dir.display());
    }
    result.map(|ok| {
        if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

/// The run proper; `Ok(false)` when the counts are off.
async fn run_in(
    opts: &Options,
    seed: u64,
    run_id: &str,
    dir: &Path,
    database_url: &str,
) -> anyhow::Result<bool> {
    let (db, http) = connect(database_url).await?;
    let mut rng = StdRng::seed_from_u64(seed);

    let instances = if opts.database_url.is_some() { 2 } else { 1 };
    // The busier part of the run, sending, sets when the sandbox dies and when its outage is.
    let chaos_for = Duration::try_from_secs_f64((opts.payments as f64 / opts.rate).max(30.0))
        .unwrap_or(Duration::from_secs(30));
    let outage_len = (chaos_for / 10).clamp(Duration::from_secs(5), Duration::from_secs(20));
    let schedule = Schedule {
        sim_kill_at: chaos_for / 4,
        outage: (chaos_for / 2, chaos_for / 2 + outage_len),
        recover_outage: (chaos_for / 10, chaos_for * 9 / 10),
    };

    let sim_port = free_port()?;
    let state = dir.join("pacsim-state.jsonl");
    let first_faults = fault_spec(seed, schedule.recover_outage, None);
    let sim = Proc::new(
        "pac-sim",
        sim_port,
        sim_args("pac-sim", &state, sim_port, &first_faults),
        dir,
        "/_sim/stamps",
    )?;
    // The customers' mailbox: every instance's courier sends there.
    let mailbox = mail::Mailbox::start().await?;
    let appliances = appliances(dir, instances, |port| {
        appliance_settings(port, database_url, &sim.url(), mailbox.port)
    })?;
    let mut cast = Cast { sim, appliances };
    cast.start(&http).await?;
    let targets: Arc<Vec<String>> = Arc::new(cast.appliances.iter().map(Proc::url).collect());
    eprintln!(
        "chaos: pac-sim at {} (faults {first_faults}), {} instance(s) at {}",
        cast.sim.url(),
        targets.len(),
        targets.join(", ")
    );

    let now = chrono::Utc::now().timestamp();
    let plan = traffic::plan(
        opts.payments,
        opts.rate,
        run_id,
        (now, last_month_noon()?.timestamp()),
        &mut rng,
    );
    eprintln!(
        "chaos: {} payments ({} at the window's edge), {} deliveries; sandbox killed at {:?}, outage {:?}..{:?}, lookups down {:?}..{:?}",
        plan.payments.len(),
        plan.payments.iter().filter(|p| p.near_window).count(),
        plan.deliveries,
        schedule.sim_kill_at,
        schedule.outage.0,
        schedule.outage.1,
        schedule.recover_outage.0,
        schedule.recover_outage.1
    );

    let kills = Arc::new(AtomicU64::new(0));
    let stats = Arc::new(SendStats::default());
    let stop = CancellationToken::new();
    let started = Instant::now();
    let sim_kills = SimKills {
        at: vec![schedule.sim_kill_at],
        args: Box::new(move |since, _| {
            // The outages are measured from the sandbox's own start: the restarted one has
            // the full one and the rest of the lookup outage.
            let faults = fault_spec(
                seed.wrapping_add(1),
                since_start(schedule.recover_outage, since),
                Some(since_start(schedule.outage, since)),
            );
            (sim_args("pac-sim", &state, sim_port, &faults), faults)
        }),
    };
    let chaos = tokio::spawn(chaos_loop(
        cast,
        stop.clone(),
        sim_kills,
        kills.clone(),
        rng.random(),
        (2000, 5000),
    ));
    let reporter = tokio::spawn(report_loop(
        db.clone(),
        stats.clone(),
        kills.clone(),
        plan.deliveries,
        opts.payments,
        started,
        false,
    ));
    let give_up = Instant::now() + chaos_for * 3 + Duration::from_secs(300);
    let mut errors = traffic::send_all(
        plan.groups,
        targets.clone(),
        opts.rate,
        32,
        rng.random(),
        stats.clone(),
        give_up,
    )
    .await;
    // While instances are still being killed, the customers without an RFC who want their
    // own invoice ask for it at the portal.
    errors.extend(customers::self_invoice_all(&plan.payments, targets, 8, give_up).await);
    let min_end = started + chaos_for;
    if Instant::now() < min_end {
        tokio::time::sleep_until(min_end.into()).await;
    }
    let (mut cast, moving) = settle(chaos, &stop, &http, &db, opts.payments, false, &kills).await?;
    reporter.abort();

    let ours = db.list_invoices(None).await?;
    let globals = Globals::from_listing(&db.list_documents_and_sales(None).await?);
    let pac = sim_stamps(&http, &cast.sim.url()).await?;
    let faults: i64 = db
        .attempt_outcome_counts()
        .await?
        .iter()
        .filter(|(_, outcome, _)| {
            matches!(outcome.as_str(), "retryable" | "unknown" | "unresolved")
        })
        .map(|(_, _, n)| n)
        .sum();
    let mut verdict = check::check_with_globals(&plan.payments, &ours, &globals, &pac, &moving);
    verdict
        .problems
        .extend(errors.iter().map(|e| format!("sender: {e}")));
    verdict.problems.extend(cast.crashes());
    let mailed = mail::check(&db, &mailbox).await?;
    verdict.emails = mailed.expected;
    verdict.emailed = mailed.mailed;
    verdict.problems.extend(mailed.problems);

    cast.stop().await;
    db.close().await;
    let line = Line {
        verdict: &verdict,
        kills: kills.load(Ordering::Relaxed),
        faults: u64::try_from(faults).unwrap_or(0),
    };
    report(&verdict.problems, verdict.is_ok(), started, &stats, &line);
    Ok(verdict.is_ok())
}

/// The run's own connection to the database (migrated) and its HTTP client.
async fn connect(database_url: &str) -> anyhow::Result<(Db, reqwest::Client)> {
    let db = store::connect(&DatabaseSettings {
        url: SecretString::new(database_url),
        max_connections: 2,
    })
    .await?;
    db.migrate().await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    Ok((db, http))
}

/// The end of a run on stderr (the problems, passed or failed) and its line on stdout.
fn report(
    problems: &[String],
    ok: bool,
    started: Instant,
    stats: &SendStats,
    line: &dyn std::fmt::Display,
) {
    if !problems.is_empty() {
        eprintln!("chaos: {} problem(s):", problems.len());
        for p in problems.iter().take(40) {
            eprintln!("  {p}");
        }
    }
    eprintln!(
        "chaos: {} in {:.0?}: {} deliveries acknowledged, {} retried",
        if ok { "passed" } else { "FAILED" },
        started.elapsed(),
        stats.acknowledged.load(Ordering::Relaxed),
        stats.retried.load(Ordering::Relaxed)
    );
    println!("{line}");
}

/// Progress on stderr every five seconds.
async fn report_loop(
    db: Db,
    stats: Arc<SendStats>,
    kills: Arc<AtomicU64>,
    deliveries: usize,
    payments: usize,
    started: Instant,
    arca: bool,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (what, done) = if arca {
            let by_state = db.arca_voucher_counts().await.unwrap_or_default();
            let n = by_state
                .iter()
                .find(|(s, _)| *s == ArcaVoucherState::Authorized);
            ("authorized", n.map_or(0, |(_, n)| *n))
        } else {
            let n = db.outbox_count(DocumentState::Stamped).await.unwrap_or(0);
            ("stamped", n)
        };
        eprintln!(
            "chaos: {:>4.0?}  deliveries {}/{deliveries} acknowledged ({} retried)  {what} {done}/{payments}  kills {}",
            started.elapsed(),
            stats.acknowledged.load(Ordering::Relaxed),
            stats.retried.load(Ordering::Relaxed),
            kills.load(Ordering::Relaxed)
        );
    }
}

/// Noon on the last day of the previous month, Mexico City: a time in a closed period
/// (monthly or shorter) for the sales of the factura global.
fn last_month_noon() -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    use chrono::Datelike;
    let today = crate::domain::time::now_in_mexico().date();
    let noon = today
        .with_day(1)
        .and_then(|d| d.pred_opt())
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .context("no last day of the previous month")?;
    crate::domain::time::from_local(noon).context("noon is not a local time")
}

/// The sandbox's ground truth: every stamp it ever issued.
async fn sim_stamps(http: &reqwest::Client, sim: &str) -> anyhow::Result<Vec<PacStamp>> {
    let list: Vec<serde_json::Value> = http
        .get(format!("{sim}/_sim/stamps"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    list.into_iter()
        .map(|s| {
            Ok(PacStamp {
                uuid: s["uuid"]
                    .as_str()
                    .context("a /_sim/stamps entry without uuid")?
                    .to_owned(),
                customid: s["customid"].as_str().map(str::to_owned),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// Both runs' instance settings are one TOML document each (no table written twice) and
    /// keep the shared head's values.
    #[test]
    fn instance_settings_are_valid_toml_with_the_shared_head() {
        for text in [
            super::appliance_settings(7001, "sqlite://run.db", "http://127.0.0.1:9", 2525),
            super::arca::appliance_settings(7001, "sqlite://run.db", "http://a", "http://mp"),
        ] {
            let t: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(t["server"]["listen"].as_str(), Some("127.0.0.1:7001"));
            assert_eq!(
                t["admin"]["reconcile_interval_seconds"].as_integer(),
                Some(0)
            );
            assert_eq!(
                t["mercadopago"]["retry_interval_seconds"].as_integer(),
                Some(1)
            );
        }
    }
}
