//! The command line. Each subcommand is a thin call into the library.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cfdi::{self, InvoiceRequest};
use crate::ops::{self, TestProvider};

#[derive(Debug, Parser)]
#[command(
    name = "autofactura",
    version,
    about = "Paid sales in, stamped CFDI 4.0 out, exactly once"
)]
pub struct Cli {
    /// Settings file (default: autofactura.toml if present, else embedded defaults).
    #[arg(long, global = true, env = "AUTOFACTURA_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Work with CFDI documents: cadena original, verification, samples.
    #[command(subcommand)]
    Cfdi(CfdiCommand),
    /// Argentine vouchers authorized by ARCA.
    #[command(subcommand)]
    Arca(ArcaCommand),
    /// Receive webhooks and queue invoices (the default command).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Run the worker pool (sealing, stamping, cancellations) without the HTTP server.
    Worker,
    /// Inspect invoices.
    #[command(subcommand)]
    Invoices(InvoicesCommand),
    /// The factura global of the sales without the customer's RFC.
    #[command(subcommand)]
    Global(GlobalCommand),
    /// Send a realistic signed sample payment to a running instance.
    SendTestWebhook {
        #[arg(long, value_enum)]
        provider: TestProvider,
        /// Base URL of the instance (default: http://<[server] listen>).
        #[arg(long)]
        url: Option<String>,
    },
    /// Compare what the PAC holds for our keys and RFC with our records: adopt unrecorded
    /// stamps, list duplicates (exit 1 when something needs a human).
    Reconcile,
    /// Manage keys of the invoicing API (`/v1`).
    #[command(subcommand)]
    ApiKey(ApiKeyCommand),
    /// The self-invoicing portal (`/facturar`).
    #[command(subcommand)]
    Portal(PortalCommand),
    /// Chaos run: the sandbox PAC with faults, instances killed with SIGKILL, signed webhooks
    /// delivered 1–4 times; then check one stamp per payment (exit 1 when a count is off).
    Chaos(crate::chaos::Options),
    /// Check the configuration (file, environment, `*_file` secrets): print it with secrets
    /// redacted, or name the key that is wrong (exit 2).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Write a consistent copy of the SQLite database to FILE while the appliance serves
    /// (PostgreSQL: use pg_dump, docs/ops/backups.md).
    Backup {
        /// Where the copy goes; it must not exist yet.
        #[arg(long)]
        out: PathBuf,
    },
    /// The accountant's month in one ZIP: every stamped XML whose Fecha is in the month, by
    /// kind, a CSV with one row per document, and the cancellation acuses.
    Export {
        /// The month, YYYY-MM (Mexico City, like Fecha).
        #[arg(long)]
        month: String,
        /// The ZIP to write; it must not exist yet.
        #[arg(long)]
        out: PathBuf,
        /// Leave the PDFs out (only the XMLs, the CSV and the acuses): faster for a very large
        /// month, as every PDF is printed from its XML.
        #[arg(long)]
        without_pdf: bool,
    },
    /// Print an argon2 hash of a password (read from standard input) for `[admin] password_hash`.
    HashPassword,
    /// Ask a running instance's `/readyz` (exit 0 when ready, 1 otherwise): the container's
    /// health check, without curl.
    Healthcheck {
        /// Base URL of the instance (default: http://<[server] listen>, 127.0.0.1 for 0.0.0.0).
        #[arg(long)]
        url: Option<String>,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Run the sandbox PAC as a server (SW's REST shape and Finkok's SOAP shape).
    PacSim {
        /// Address to listen on, e.g. 127.0.0.1:8089 (port 0 picks one).
        #[arg(long)]
        listen: String,
        /// Journal file that keeps every stamp and cancellation across restarts.
        #[arg(long, default_value = "pacsim-state.jsonl")]
        state: PathBuf,
        /// Fault spec, e.g. `seed=7,latency=50ms,lose_response=0.2` (see docs/pac.md).
        #[arg(long)]
        faults: Option<String>,
        /// Credentials `/security/authenticate` accepts.
        #[arg(long, default_value = "sandbox")]
        user: String,
        #[arg(long, default_value = "sandbox")]
        password: String,
    },
    /// Run the sandbox ARCA (WSFEv1) as a server.
    ArcaSim {
        /// Address to listen on, e.g. 127.0.0.1:8090 (port 0 picks one).
        #[arg(long)]
        listen: String,
        /// File that keeps every authorized voucher across restarts.
        #[arg(long, default_value = "arcasim-state.json")]
        state: PathBuf,
        /// Fault spec, e.g. `seed=7,latency=20ms..300ms,lose_response=0.1,outage=20s..30s`,
        /// `lose_next=N`, `down=true` (see docs/arca.md).
        #[arg(long)]
        faults: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and print it with secrets redacted.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum InvoicesCommand {
    /// Every document (ingresos and facturas globales) and every sale without one of its own:
    /// kind, status, serie-folio, UUID, receptor, total, and a sale's global.
    List {
        /// Only this status (e.g. pending, stamped, awaiting_global, in_global, needs_attention).
        #[arg(long)]
        status: Option<String>,
        /// One JSON array (one object per document or sale) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the stamped XML of the document with this UUID.
    Xml { uuid: String },
    /// Write the printable PDF (representación impresa, with the SAT QR) of the document with
    /// this UUID: the same bytes the API, the admin and the email give.
    Pdf {
        uuid: String,
        /// Where to write it (`-` for standard output).
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum ArcaCommand {
    /// Write the printable voucher (RG 1415, with ARCA's QR) of the voucher issued under this
    /// key (`mercadopago:PAYMENT_ID` for a sale).
    Pdf {
        key: String,
        /// Where to write it (`-` for standard output).
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum GlobalCommand {
    /// Issue the factura global of every closed period not issued yet (up to --through): one
    /// line per global frozen.
    Issue {
        /// Only periods whose last day is this date or earlier (YYYY-MM-DD, Mexico City).
        #[arg(long)]
        through: Option<String>,
        /// Wait up to this many seconds for the worker (`serve` or `worker`) to stamp them
        /// before printing.
        #[arg(long, default_value_t = 0)]
        wait: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApiKeyCommand {
    /// Create a key for the configured emisor; the key is the last line of the output, shown
    /// only this once (only its hash is stored).
    Create {
        #[arg(long)]
        name: String,
    },
    /// List the keys (id, name, first characters, emisor, created, revoked); never the keys.
    List,
    /// Revoke a key by its id (from `api-key list`): its requests get 401 from now on.
    Revoke { id: i64 },
}

#[derive(Debug, Subcommand)]
pub enum PortalCommand {
    /// Print the signed link to a sale's page on the portal, for a receipt or an email: the
    /// customer invoices that sale there without typing its reference and total.
    Link {
        /// The provider's payment id, as `invoices list` shows it (e.g. pi_…, a Mercado Pago
        /// operation number, an API invoice's inv_…).
        payment_id: String,
        /// stripe, mercadopago or api, when the same id exists for more than one.
        #[arg(long)]
        provider: Option<String>,
        /// Days the link stays valid (default `[portal] link_valid_days`).
        #[arg(long)]
        days: Option<u32>,
    },
}

#[derive(Debug, Subcommand)]
pub enum CfdiCommand {
    /// Print the cadena original of a CFDI 4.0 (or, with --tfd, of its TimbreFiscalDigital).
    Cadena {
        file: PathBuf,
        #[arg(long)]
        tfd: bool,
    },
    /// Check structure, sums, Sello and (when stamped) the TFD. Exit 0 when valid, 1 when not.
    Verify { file: PathBuf },
    /// Write sealed sample CFDIs built from the invoice requests in fixtures/requests.
    Sample {
        #[arg(long)]
        out: PathBuf,
        /// Fecha for every sample, `YYYY-MM-DDThh:mm:ss` (default: now in Mexico City).
        #[arg(long)]
        fecha: Option<String>,
    },
}

/// Runs the command line and returns the process exit code.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Cfdi(cmd)) => run_cfdi(cmd),
        Some(Command::Serve) | None => serve_on(ops::serve(cli.config.as_deref())),
        Some(Command::Config(ConfigCommand::Check)) => config_check(cli.config.as_deref()),
        Some(Command::HashPassword) => hash_password(),
        Some(Command::Backup { out }) => block_on(ops::backup(cli.config.as_deref(), &out)),
        Some(Command::Export {
            month,
            out,
            without_pdf,
        }) => block_on(ops::export_month(
            cli.config.as_deref(),
            &month,
            &out,
            !without_pdf,
        )),
        Some(Command::Healthcheck { url, timeout }) => block_on(ops::healthcheck(
            cli.config.as_deref(),
            url.as_deref(),
            timeout,
        )),
        Some(Command::Migrate) => block_on(ops::migrate(cli.config.as_deref())),
        Some(Command::Worker) => block_on(ops::worker(cli.config.as_deref())),
        Some(Command::Reconcile) => block_on(ops::reconcile(cli.config.as_deref())),
        Some(Command::Invoices(InvoicesCommand::List { status, json })) => block_on(
            ops::invoices_list(cli.config.as_deref(), status.as_deref(), json),
        ),
        Some(Command::Invoices(InvoicesCommand::Xml { uuid })) => {
            block_on(ops::invoices_xml(cli.config.as_deref(), &uuid))
        }
        Some(Command::Invoices(InvoicesCommand::Pdf { uuid, out })) => {
            block_on(ops::invoices_pdf(cli.config.as_deref(), &uuid, &out))
        }
        Some(Command::Arca(ArcaCommand::Pdf { key, out })) => {
            block_on(ops::arca_pdf(cli.config.as_deref(), &key, &out))
        }
        Some(Command::Global(GlobalCommand::Issue { through, wait })) => block_on(
            ops::global_issue(cli.config.as_deref(), through.as_deref(), wait),
        ),
        Some(Command::SendTestWebhook { provider, url }) => block_on(ops::send_test_webhook(
            cli.config.as_deref(),
            provider,
            url.as_deref(),
        )),
        Some(Command::ApiKey(ApiKeyCommand::Create { name })) => {
            block_on(ops::api_key_create(cli.config.as_deref(), &name))
        }
        Some(Command::ApiKey(ApiKeyCommand::List)) => {
            block_on(ops::api_key_list(cli.config.as_deref()))
        }
        Some(Command::ApiKey(ApiKeyCommand::Revoke { id })) => {
            block_on(ops::api_key_revoke(cli.config.as_deref(), id))
        }
        Some(Command::Portal(PortalCommand::Link {
            payment_id,
            provider,
            days,
        })) => block_on(ops::portal_link(
            cli.config.as_deref(),
            &payment_id,
            provider.as_deref(),
            days,
        )),
        Some(Command::Chaos(opts)) => block_on(crate::chaos::run(opts)),
        Some(Command::PacSim {
            listen,
            state,
            faults,
            user,
            password,
        }) => run_pac_sim(&listen, &state, faults.as_deref(), user, password),
        Some(Command::ArcaSim {
            listen,
            state,
            faults,
        }) => run_arca_sim(&listen, &state, faults.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `config check`: the redacted configuration on stdout, or the problem (naming its key) and
/// exit code 2.
fn config_check(path: Option<&Path>) -> anyhow::Result<ExitCode> {
    match crate::config::Settings::check(path) {
        Ok(text) => {
            println!("{text}");
            eprintln!("configuration is valid");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// `hash-password`: one line from standard input (not an argument, which `ps` and the shell's
/// history would show) → its argon2id PHC string.
fn hash_password() -> anyhow::Result<ExitCode> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| anyhow::anyhow!("cannot read the password from standard input: {e}"))?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        anyhow::bail!(
            "no password on standard input: `echo -n 'the password' | autofactura hash-password`"
        );
    }
    let hash = crate::admin::auth::hash_password(password).map_err(|e| anyhow::anyhow!(e))?;
    println!("{hash}");
    Ok(ExitCode::SUCCESS)
}

/// Runs `serve` on a runtime with half the cores as worker threads (at least one), unless
/// `TOKIO_WORKER_THREADS` says otherwise. The HTTP server runs threads of its own, one per core,
/// beside them; what the runtime's threads do (the worker pool's PAC calls and writes) mostly
/// waits, and the seal runs on the blocking threads. Every thread more is one more to wake and
/// put to sleep between sales: with one worker thread instead of two, the appliance's CPU per
/// stamp fell 5–9 % in the end-to-end bench on a 2-core machine (BENCHMARKS.md), with no loss
/// of throughput.
fn serve_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    f: F,
) -> anyhow::Result<ExitCode> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        rt.worker_threads((cores / 2).max(1));
    }
    rt.enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?
        .block_on(f)
}

/// Runs an async command on a fresh multi-threaded runtime.
fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    f: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?
        .block_on(f)
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))
}

fn run_cfdi(cmd: CfdiCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CfdiCommand::Cadena { file, tfd } => {
            let root = cfdi::dom::Element::parse(&read(&file)?)?;
            let cadena = if tfd {
                let t = cfdi::cadena::find_tfd(&root).ok_or(cfdi::cadena::CadenaError::NoTfd)?;
                cfdi::cadena::cadena_tfd(t)
            } else {
                cfdi::cadena::cadena_comprobante(&root)?
            };
            let mut out = std::io::stdout().lock();
            out.write_all(cadena.as_bytes())?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        CfdiCommand::Verify { file } => {
            let certs = known_tfd_certificates();
            let report = cfdi::verify::verify(
                &read(&file)?,
                &cfdi::verify::VerifyOptions { tfd_certs: &certs },
            );
            for n in &report.notes {
                eprintln!("note: {n}");
            }
            if report.is_valid() {
                println!("valid: {}", file.display());
                if let Some(u) = &report.uuid {
                    println!("UUID: {u}");
                }
                if let Some(f) = &report.fecha_timbrado {
                    println!("FechaTimbrado: {f}");
                }
                Ok(ExitCode::SUCCESS)
            } else {
                for p in &report.problems {
                    println!("{p}");
                }
                Ok(ExitCode::FAILURE)
            }
        }
        CfdiCommand::Sample { out, fecha } => {
            // Without --fecha, now at each sample's LugarExpedicion (its Fecha's zone).
            let fecha =
                match fecha {
                    Some(f) => Some(cfdi::verify::parse_fecha(&f).ok_or_else(|| {
                        anyhow::anyhow!("--fecha `{f}` is not YYYY-MM-DDThh:mm:ss")
                    })?),
                    None => None,
                };
            let csd = crate::sandbox::csd()?;
            std::fs::create_dir_all(&out)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
            for (name, json) in crate::sandbox::SAMPLE_REQUESTS {
                let mut req: InvoiceRequest = serde_json::from_str(json)
                    .map_err(|e| anyhow::anyhow!("sample {name}: {e}"))?;
                req.fecha = fecha
                    .unwrap_or_else(|| crate::domain::time::now_at(&req.emisor.lugar_expedicion));
                let sealed =
                    cfdi::seal(&req, &csd).map_err(|e| anyhow::anyhow!("sample {name}: {e}"))?;
                let path = out.join(format!("{name}.xml"));
                std::fs::write(&path, &sealed.xml)
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
                println!(
                    "{}  Total {} {}",
                    path.display(),
                    sealed.total,
                    sealed.moneda
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_pac_sim(
    listen: &str,
    state: &Path,
    faults: Option<&str>,
    user: String,
    password: String,
) -> anyhow::Result<ExitCode> {
    use crate::pacsim;
    let spec = pacsim::faults::FaultSpec::parse(faults.unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut sim = pacsim::Sim::open(state, spec.clone())?;
        sim.user = user;
        sim.password = password;
        let handle = pacsim::server::start(std::sync::Arc::new(sim), listen)?;
        announce_until_ctrl_c(format!(
            "pac-sim listening on {} (state {}, faults {spec})",
            handle.url(),
            state.display()
        ))
        .await?;
        handle.stop().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Prints a sandbox's `listening` line and waits for Ctrl-C. Tests and scripts read the line
/// to learn the port, so it is flushed at once.
async fn announce_until_ctrl_c(line: String) -> anyhow::Result<()> {
    println!("{line}");
    std::io::stdout().flush()?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}

fn run_arca_sim(listen: &str, state: &Path, faults: Option<&str>) -> anyhow::Result<ExitCode> {
    use crate::arcasim;
    let sim = arcasim::ArcaSim::open(state)?;
    sim.set_faults(faults.unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let handle = arcasim::server::start(std::sync::Arc::new(sim), listen)?;
        announce_until_ctrl_c(format!(
            "arca-sim listening on {} (WSFEv1 at {}, state {})",
            handle.url(),
            handle.wsfe_url(),
            state.display()
        ))
        .await?;
        handle.stop().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Certificates that sign TFDs: the SAT test PACs' and production ones shipped in
/// `fixtures/tfd`.
pub fn known_tfd_certificates() -> Vec<cfdi::Certificate> {
    const CERTS: &[&[u8]] = &[
        include_bytes!("../fixtures/tfd/30001000000500003456.cer"),
        include_bytes!("../fixtures/tfd/30001000000400002495.cer"),
        include_bytes!("../fixtures/tfd/00001000000708361114.cer"),
        crate::pacsim::SANDBOX_PAC_CER,
    ];
    CERTS
        .iter()
        .filter_map(|c| cfdi::Certificate::from_bytes(c).ok())
        .collect()
}
