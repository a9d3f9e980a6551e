//! Operator commands: `serve`, `worker`, `migrate`, `invoices list` and `xml`, `global issue`,
//! `send-test-webhook`, `api-key`, `reconcile`, `portal link`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;

use crate::config::{Settings, Source, redact_url};
use crate::shutdown::{Shutdown, Signals};
use crate::startup::{self, Application};
use crate::store::{self, DocumentListing};
use crate::webhooks::{signature, stripe};

/// Which provider `send-test-webhook` imitates.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum TestProvider {
    Stripe,
    Mercadopago,
}

fn load(config: Option<&Path>) -> anyhow::Result<(Settings, Source)> {
    Ok(Settings::load(config)?)
}

/// `autofactura serve`: migrate, listen, print where to look, run until stopped.
pub async fn serve(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (settings, source) = load(config)?;
    let format = settings.log.format;
    let telemetry = crate::telemetry::init(&settings.log)?;
    let listen = settings.server.listen.clone();
    let banner = banner(&settings, &source);
    let app = Application::build(settings).await?.with_workers().await?;
    // In JSON the banner is a log line too, so every line of stderr parses.
    if crate::telemetry::json(format) {
        tracing::info!(%banner, "autofactura starting");
    } else {
        eprintln!("{banner}");
    }
    tracing::info!(%listen, port = app.port(), "autofactura serving");
    app.shutdown().stop_on(Signals::TermIntAndQuit);
    let ran = app.run_until_stopped().await;
    telemetry.shutdown();
    ran?;
    Ok(ExitCode::SUCCESS)
}

fn banner(s: &Settings, source: &Source) -> String {
    let from = match source {
        Source::Defaults => {
            "embedded defaults (no autofactura.toml; see autofactura.example.toml)".to_owned()
        }
        Source::File(p) => p.display().to_string(),
    };
    let mut b = format!(
        "autofactura\n  settings:   {from}\n  listening:  http://{}\n  database:   {}\n  PAC:        {}\n  emisor:     {} {} (serie {})\n  Fecha:      local time at LugarExpedicion {} ({})\n  currencies: {}\n  webhooks:   POST /webhooks/stripe, POST /webhooks/mercadopago\n  health:     GET /healthz, GET /readyz",
        s.server.listen,
        redact_url(s.database.url.expose()),
        s.pac_environment_label(),
        s.emisor.rfc,
        s.emisor.nombre,
        s.emisor.serie,
        s.emisor.lugar_expedicion,
        zone_label(&s.emisor.lugar_expedicion),
        currencies_label(s),
    );
    if s.separate_admin_listener() {
        b.push_str(&format!(
            "\n  admin, API: http://{}/admin, /v1 (not on the webhook listener)",
            s.admin_listen()
        ));
    }
    if !s.server.trusted_proxies.is_empty() {
        b.push_str(&format!(
            "\n  proxies:    forwarding headers believed from {}",
            s.server.trusted_proxies.join(", ")
        ));
    }
    b.push_str(&match (&s.email.smtp_url, &s.email.from) {
        (Some(url), Some(from)) => format!(
            "\n  email:      on: {from} via {}",
            crate::config::url_for_log(url.expose())
        ),
        _ => "\n  email:      off (no [email] smtp_url): nothing is sent or queued".to_owned(),
    });
    if let Some(url) = &s.log.otlp_endpoint {
        b.push_str(&format!(
            "\n  traces:     OpenTelemetry to {}",
            crate::config::url_for_log(url)
        ));
    }
    if s.is_sandbox() {
        b.push_str(
            "\n  sandbox:    no real stamps; test CSD from fixtures/csd unless [emisor] csd_* are set\
             \n  try:        autofactura send-test-webhook --provider stripe && autofactura invoices list",
        );
    }
    b
}

/// The huso of LugarExpedicion `cp` and its IANA zone, for the banner.
fn zone_label(cp: &str) -> String {
    let huso = crate::cfdi::catalogs::huso_horario(cp).map_or("?", |h| h.name());
    format!("{huso}, {}", crate::domain::time::zone_at(cp).name())
}

/// Which currencies are invoiced and where their TipoCambio comes from.
fn currencies_label(s: &Settings) -> String {
    let which = if s.invoice.currencies.iter().any(|c| c == "*") {
        "every c_Moneda currency".to_owned()
    } else {
        s.invoice.currencies.join(", ")
    };
    let source = match s.fx.source {
        crate::config::FxSource::None => {
            "the provider's rate, else held in needs_attention ([fx] source = \"none\")"
        }
        crate::config::FxSource::Fixed => "the provider's rate, else [fx] rates",
        crate::config::FxSource::Banxico => "the provider's rate, else Banxico's FIX (SIE API)",
    };
    format!("{which}; TipoCambio: {source}")
}

/// `autofactura worker`: the worker pool without HTTP, until SIGTERM or Ctrl-C.
pub async fn worker(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let telemetry = crate::telemetry::init(&settings.log)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let db_for_courier = db.clone();
    let services = startup::worker_services(&settings, db).await?;
    let shutdown = Shutdown::new();
    let pool = services.worker.clone().start(shutdown.token(), None);
    let pdf = crate::pdf::PdfOptions::from_settings(&settings.pdf)?;
    let courier = startup::spawn_courier(&settings, db_for_courier, pdf, &shutdown.token())?;
    eprintln!(
        "autofactura worker {}: {} slots, PAC {}, ARCA {}, email {}; stop with Ctrl-C or SIGTERM",
        services.worker.id,
        services.worker.cfg.concurrency,
        services.worker.pac_label,
        if services.worker.arca.is_some() {
            "on"
        } else {
            "off"
        },
        if courier.is_some() { "on" } else { "off" }
    );
    shutdown.stop_on(Signals::TermAndInt);
    shutdown.cancelled().await;
    pool.shutdown().await;
    if let Some(task) = courier {
        let _ = task.await;
    }
    drop(services);
    telemetry.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// `autofactura migrate`.
pub async fn migrate(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    println!(
        "migrations applied ({}, {})",
        db.backend(),
        redact_url(settings.database.url.expose())
    );
    Ok(ExitCode::SUCCESS)
}

/// `autofactura api-key create --name NAME`: the key is the last line printed.
pub async fn api_key_create(config: Option<&Path>, name: &str) -> anyhow::Result<ExitCode> {
    let name = name.trim();
    anyhow::ensure!(!name.is_empty(), "--name must not be empty");
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let key = crate::api::keys::create_api_key(&db, name, &settings.emisor.rfc).await?;
    println!(
        "API key `{name}` created for emisor {}. It is shown only now; only its hash is stored.",
        settings.emisor.rfc
    );
    println!("Use it as `Authorization: Bearer <key>`:");
    println!("{}", key.expose());
    Ok(ExitCode::SUCCESS)
}

/// `autofactura api-key list`.
pub async fn api_key_list(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let keys = db.list_api_keys().await?;
    println!(
        "{:>4}  {:<24} {:<12} {:<13} {:<20} REVOKED",
        "ID", "NAME", "STARTS WITH", "EMISOR", "CREATED"
    );
    for k in &keys {
        println!(
            "{:>4}  {:<24} {:<12} {:<13} {:<20} {}",
            k.id,
            k.name,
            k.prefix,
            k.rfc_emisor,
            k.created_at.format("%Y-%m-%d %H:%M UTC"),
            k.revoked_at.map_or_else(
                || "-".to_owned(),
                |t| t.format("%Y-%m-%d %H:%M UTC").to_string()
            )
        );
    }
    if keys.is_empty() {
        println!("(no keys yet: `autofactura api-key create --name NAME`)");
    }
    Ok(ExitCode::SUCCESS)
}

/// `autofactura api-key revoke ID`.
pub async fn api_key_revoke(config: Option<&Path>, id: i64) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    if db.revoke_api_key(id).await? {
        println!("API key {id} revoked: requests with it now get 401.");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("no live API key has id {id} (see `autofactura api-key list`)");
        Ok(ExitCode::from(1))
    }
}

/// `autofactura portal link PAYMENT_ID [--provider P] [--days N]`: the signed link on stdout,
/// what it opens on stderr.
pub async fn portal_link(
    config: Option<&Path>,
    payment_id: &str,
    provider: Option<&str>,
    days: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    anyhow::ensure!(
        settings.portal.enabled,
        "the self-invoicing portal is off ([portal] enabled = false): a link would lead nowhere"
    );
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let found: Vec<_> = db
        .portal_lookup(&store::normalize_reference(payment_id), None)
        .await?
        .into_iter()
        .filter(|p| {
            p.payment.payment_id == payment_id.trim()
                && provider.is_none_or(|pr| p.payment.provider == pr)
        })
        .collect();
    let p = match found.as_slice() {
        [p] => p,
        [] => {
            eprintln!("no payment {payment_id:?} is recorded (see `autofactura invoices list`)");
            return Ok(ExitCode::from(1));
        }
        several => {
            let providers: Vec<&str> = several
                .iter()
                .map(|p| p.payment.provider.as_str())
                .collect();
            eprintln!(
                "payment {payment_id:?} exists for {}: say which with --provider",
                providers.join(", ")
            );
            return Ok(ExitCode::from(1));
        }
    };
    let days = days.unwrap_or(settings.portal.link_valid_days).max(1);
    let expires = Utc::now() + chrono::Duration::days(i64::from(days));
    let key = crate::portal::link_key(&settings, &db).await?;
    let token = crate::portal::link::sign(&key, p.id, expires.timestamp());
    let base = settings
        .portal
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", settings.server.listen));
    eprintln!(
        "{} payment {} ({} {}, {}): valid until {} UTC; until then the customer can see and invoice this sale",
        p.payment.provider,
        p.payment.payment_id,
        p.payment.amount,
        p.payment.currency,
        p.payment.status,
        expires.format("%Y-%m-%d %H:%M"),
    );
    println!("{}/facturar/{token}", base.trim_end_matches('/'));
    Ok(ExitCode::SUCCESS)
}

/// `autofactura invoices list [--status S] [--json]`: every document and every sale without
/// one of its own, oldest sale first (a global after the sales it was frozen with).
pub async fn invoices_list(
    config: Option<&Path>,
    status: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let rows = db.list_documents_and_sales(status).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// The human table of `invoices list`.
pub fn table(rows: &[DocumentListing]) -> String {
    let line = |cols: [&str; 10]| {
        format!(
            "{:<28} {:<12} {:<8} {:<18} {:<10} {:<13} {:<36} {:>12} {:>8}  {}\n",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            cols[6],
            cols[7],
            cols[8],
            cols[9]
        )
    };
    let mut out = line([
        "PAYMENT",
        "PROVIDER",
        "KIND",
        "STATUS",
        "FOLIO",
        "RECEPTOR",
        "UUID",
        "TOTAL",
        "ATTEMPTS",
        "LAST ERROR / GLOBAL",
    ]);
    for r in rows {
        // `—`: numbered when a worker seals it; `-`: no comprobante (yet) for this payment.
        let folio = match (&r.serie, &r.folio) {
            (Some(s), Some(f)) => format!("{s}-{f}"),
            (None, Some(f)) => f.clone(),
            (Some(s), None) => format!("{s}-—"),
            (None, None) => "-".into(),
        };
        let test = if r.livemode { "" } else { " (test)" };
        let note = match (r.global_id, &r.global_uuid) {
            (Some(id), Some(u)) => format!("in global #{id} {u}"),
            (Some(id), None) => format!("in global #{id}"),
            _ if r.kind == "egreso" => {
                format!("credits {}", r.related_uuid.as_deref().unwrap_or("-"))
            }
            _ if r.kind == "pago" => {
                format!("pays {}", r.related_uuid.as_deref().unwrap_or("-"))
            }
            _ => r.last_error.clone().unwrap_or_default(),
        };
        out.push_str(&line([
            r.payment_id.as_deref().unwrap_or("(global)"),
            r.provider.as_deref().unwrap_or("-"),
            &r.kind,
            &format!("{}{test}", r.status),
            &folio,
            r.receptor_rfc.as_deref().unwrap_or("-"),
            r.uuid.as_deref().unwrap_or("-"),
            &format!("{} {}", r.total, r.currency),
            &r.attempts.to_string(),
            &note,
        ]));
    }
    if rows.is_empty() {
        out.push_str("(no payments yet: try `autofactura send-test-webhook --provider stripe`)\n");
    }
    out
}

/// `autofactura invoices xml UUID`: the stamped XML, byte for byte, on standard output.
pub async fn invoices_xml(config: Option<&Path>, uuid: &str) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let Some(xml) = stamped_xml_of(config, uuid).await?.1 else {
        return Ok(ExitCode::FAILURE);
    };
    let mut out = std::io::stdout().lock();
    out.write_all(&xml)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `autofactura invoices pdf UUID --out FILE`: the representación impresa, as `[pdf]` prints it.
pub async fn invoices_pdf(
    config: Option<&Path>,
    uuid: &str,
    out: &Path,
) -> anyhow::Result<ExitCode> {
    let (settings, xml) = stamped_xml_of(config, uuid).await?;
    let Some(xml) = xml else {
        return Ok(ExitCode::FAILURE);
    };
    let opts = crate::pdf::PdfOptions::from_settings(&settings.pdf)?;
    let pdf = crate::pdf::render_blocking(xml, opts).await?;
    write_out(out, &pdf)
}

/// `autofactura arca pdf KEY --out FILE`: the printable voucher issued under `key`.
pub async fn arca_pdf(config: Option<&Path>, key: &str, out: &Path) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    let Some(row) = db.arca_voucher(key).await? else {
        eprintln!("no ARCA voucher was issued under key {key}");
        return Ok(ExitCode::FAILURE);
    };
    let print = crate::arca::print::printable(&row, &settings.arca)?;
    let opts = crate::pdf::PdfOptions::from_settings(&settings.pdf)?;
    let pdf = crate::pdf::voucher::render_voucher(&print, &opts);
    write_out(out, &pdf)
}

/// Writes `bytes` to `out` (`-`: standard output).
fn write_out(out: &Path, bytes: &[u8]) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    if out == Path::new("-") {
        let mut o = std::io::stdout().lock();
        o.write_all(bytes)?;
        o.flush()?;
    } else {
        std::fs::write(out, bytes)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
        eprintln!("{}: {} bytes", out.display(), bytes.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// The settings and the stamped XML of the document `uuid` (`None` after saying why).
async fn stamped_xml_of(
    config: Option<&Path>,
    uuid: &str,
) -> anyhow::Result<(Settings, Option<Vec<u8>>)> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let xml = db
        .document_by_uuid(uuid.trim())
        .await?
        .and_then(|d| d.stamped_xml);
    if xml.is_none() {
        eprintln!(
            "no stamped document has UUID {uuid}; `autofactura invoices list` shows the UUIDs"
        );
    }
    Ok((settings, xml))
}

/// `autofactura global issue [--through YYYY-MM-DD] [--wait S]`: one line per global frozen,
/// then what was left out and what could not be issued.
pub async fn global_issue(
    config: Option<&Path>,
    through: Option<&str>,
    wait: u64,
) -> anyhow::Result<ExitCode> {
    let through = through
        .map(|t| {
            chrono::NaiveDate::parse_from_str(t.trim(), "%Y-%m-%d")
                .with_context(|| format!("--through {t:?} is not a date: write YYYY-MM-DD"))
        })
        .transpose()?;
    let (settings, _) = load(config)?;
    let planner = crate::global::Planner::new(&settings).map_err(|e| anyhow::anyhow!(e))?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let scope = crate::global::Scope::now_through(through);
    let mut report = crate::global::issue(&db, &planner, scope, "global issue (command)").await?;
    crate::global::request_substitution_cancels(&db).await?;
    let wait = std::time::Duration::from_secs(wait);
    crate::global::issue::wait_for_stamps(&db, &mut report.issued, wait).await?;
    for g in &report.issued {
        println!("{g}");
    }
    for l in &report.left_out {
        println!("left out {} {}: {}", l.provider, l.payment_id, l.reason);
    }
    for p in &report.problems {
        eprintln!("not issued: {p}");
    }
    if report.issued.is_empty() && report.problems.is_empty() {
        eprintln!(
            "no closed period{} has sales awaiting the factura global",
            through.map_or(String::new(), |t| format!(" through {t}"))
        );
    }
    db.close().await;
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `autofactura send-test-webhook --provider stripe|mercadopago [--url URL]`.
pub async fn send_test_webhook(
    config: Option<&Path>,
    provider: TestProvider,
    url: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let base = url.map_or_else(
        || format!("http://{}", settings.server.listen),
        |u| u.trim_end_matches('/').to_owned(),
    );
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()?;
    let now = Utc::now();
    let suffix = format!("{}{:03}", now.timestamp(), rand::random::<u16>() % 1000);
    let resp = match provider {
        TestProvider::Stripe => {
            let secret = settings
                .stripe
                .webhook_secrets
                .first()
                .context("no [stripe] webhook_secrets configured")?;
            let body = stripe::sample_payment_intent(&suffix, now.timestamp(), false);
            let sig = signature::stripe_header(&[secret.expose()], now.timestamp(), body.as_bytes());
            println!("sending payment_intent.succeeded pi_test_{suffix} (MXN 116.00, RFC XIQB891116QE4) to {base}/webhooks/stripe");
            http.post(format!("{base}/webhooks/stripe"))
                .header("Stripe-Signature", sig)
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await
        }
        TestProvider::Mercadopago => {
            let secret = settings
                .mercadopago
                .webhook_secret
                .as_ref()
                .context("no [mercadopago] webhook_secret configured")?;
            let request_id = uuid::Uuid::new_v4().to_string();
            let ts = now.timestamp().to_string();
            let v1 = signature::mp_sign(secret.expose(), Some(&suffix), Some(&request_id), &ts);
            let body = serde_json::json!({
                "id": format!("{suffix}1"), "live_mode": false, "type": "payment",
                "date_created": now.to_rfc3339(), "user_id": 44444, "api_version": "v1",
                "action": "payment.created", "data": { "id": suffix }
            })
            .to_string();
            println!(
                "sending payment notification for payment {suffix} to {base}/webhooks/mercadopago \
                 (the instance reads it from its [mercadopago] api_base)"
            );
            http.post(format!("{base}/webhooks/mercadopago?data.id={suffix}&type=payment"))
                .header("x-signature", format!("ts={ts},v1={v1}"))
                .header("x-request-id", request_id)
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await
        }
    }
    .with_context(|| format!("cannot reach {base}; is `autofactura serve` running?"))?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    println!("{status} {text}");
    if status.is_success() {
        println!("now run: autofactura invoices list");
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

/// `autofactura reconcile`: one run, the report on standard output; exit 1 when something
/// needs a human (new duplicates, unmatched stamps or unresolved keys).
pub async fn reconcile(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    let db = store::connect(&settings.database).await?;
    db.migrate().await?;
    let connected = startup::connect_pac(&settings.pac_config()?).await?;
    let sim = connected.sandbox.as_ref().map(|h| h.sim().clone());
    let lock = tokio::sync::Mutex::new(());
    let report = crate::admin::reconcile::run(
        &db,
        &connected.client,
        sim.as_deref(),
        &lock,
        &settings.emisor.rfc,
        "reconcile (command)",
        settings.email.message_domain().as_deref(),
    )
    .await?;
    println!("{}", report.summary());
    for (id, uuid) in &report.adopted {
        println!("adopted   document #{id}: {uuid} (flagged)");
    }
    for (id, uuid) in &report.duplicates {
        println!(
            "duplicate document #{id}: extra live UUID {uuid}; cancel it from /admin/reconcile"
        );
    }
    for uuid in &report.orphans {
        println!("unmatched {uuid}: see /admin/reconcile");
    }
    for (id, reason) in &report.unresolved {
        println!("unresolved document #{id}: {reason}");
    }
    if let Some(h) = connected.sandbox {
        h.stop().await;
    }
    db.close().await;
    let attention = !report.duplicates.is_empty()
        || !report.orphans.is_empty()
        || !report.unresolved.is_empty();
    Ok(if attention {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `autofactura healthcheck`: GET `/readyz` of a running instance (the container's health
/// check, so the image needs no curl). Ready: exit 0; not ready or unreachable: exit 1, with
/// why on stderr.
pub async fn healthcheck(
    config: Option<&Path>,
    url: Option<&str>,
    timeout_secs: u64,
) -> anyhow::Result<ExitCode> {
    let base = match url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => {
            let (settings, _) = load(config)?;
            // A wildcard listen address is reached on loopback from inside the container.
            let listen = settings
                .server
                .listen
                .replace("0.0.0.0", "127.0.0.1")
                .replace("[::]", "[::1]");
            format!("http://{listen}")
        }
    };
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(timeout_secs))
        .build()?;
    match http.get(format!("{base}/readyz")).send().await {
        Ok(r) if r.status().is_success() => {
            println!("ready: {base}/readyz answered {}", r.status().as_u16());
            Ok(ExitCode::SUCCESS)
        }
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            eprintln!("not ready: {base}/readyz answered {status}: {body}");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("not ready: cannot reach {base}/readyz: {}", e.without_url());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `autofactura backup --out FILE`: a consistent online copy of the SQLite database (the
/// appliance may be serving meanwhile). Refuses to overwrite FILE.
pub async fn backup(config: Option<&Path>, out: &Path) -> anyhow::Result<ExitCode> {
    let (settings, _) = load(config)?;
    if out.exists() {
        anyhow::bail!(
            "{} already exists: name a new file (a backup never overwrites one)",
            out.display()
        );
    }
    let db = store::connect(&settings.database).await?;
    let started = std::time::Instant::now();
    db.backup_into(out).await?;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    println!(
        "backup of {} written to {} ({bytes} bytes, {} ms); restore: stop autofactura, put it in \
         place of the database file, start it",
        redact_url(settings.database.url.expose()),
        out.display(),
        started.elapsed().as_millis()
    );
    Ok(ExitCode::SUCCESS)
}

/// `autofactura export --month YYYY-MM --out FILE.zip`.
pub async fn export_month(
    config: Option<&Path>,
    month: &str,
    out: &Path,
    with_pdf: bool,
) -> anyhow::Result<ExitCode> {
    crate::export::month_range(month).map_err(|e| anyhow::anyhow!(e))?;
    let (settings, _) = load(config)?;
    let pdf = with_pdf
        .then(|| crate::pdf::PdfOptions::from_settings(&settings.pdf))
        .transpose()?;
    let db = store::connect(&settings.database).await?;
    // create_new: an export never overwrites a file.
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("cannot create {} (it must not exist yet)", out.display()))?;
    let counts =
        crate::export::write_month(&db, month, std::io::BufWriter::new(file), pdf.as_ref()).await?;
    println!(
        "export of {month} written to {}: {} stamped documents ({} with their PDF), {} cancellation acuses",
        out.display(),
        counts.documents,
        counts.pdfs,
        counts.acuses
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_names_the_pac_environment_and_the_place_of_issue() {
        let file = "[pac]\nkind = \"sw\"\nurl = \"https://services.test.sw.com.mx\"\nuser = \"u\"\npassword = \"p\"\n\
                    [emisor]\nlugar_expedicion = \"22000\"\ncsd_cer = \"Cargo.toml\"\ncsd_key = \"Cargo.toml\"\ncsd_password = \"x\"\n";
        let s = Settings::from_parts(Some(file), &[]).expect("settings");
        let b = banner(&s, &Source::Defaults);
        assert!(
            b.contains("PAC:        sw (test environment): test-mode payments are stamped; live payments are held in needs_attention"),
            "{b}"
        );
        assert!(
            b.contains("LugarExpedicion 22000 (Tiempo del Noroeste, America/Tijuana)"),
            "{b}"
        );
        assert!(
            b.contains(
                "currencies: every c_Moneda currency; TipoCambio: the provider's rate, else held"
            ),
            "{b}"
        );
        let sandbox = banner(&Settings::defaults().expect("settings"), &Source::Defaults);
        assert!(sandbox.contains("sandbox (test environment)"), "{sandbox}");
        assert!(sandbox.contains("email:      off"), "{sandbox}");
    }

    #[test]
    fn the_banner_says_email_is_on_without_the_smtp_password() {
        let file = "[email]\nsmtp_url = \"smtp://ana:hunter2@smtp.example.mx:587?tls=required\"\nfrom = \"facturas@example.mx\"\n";
        let s = Settings::from_parts(Some(file), &[]).expect("settings");
        let b = banner(&s, &Source::Defaults);
        assert!(
            b.contains("email:      on: facturas@example.mx via smtp://"),
            "{b}"
        );
        assert!(!b.contains("hunter2"), "{b}");
    }
}
