//! Wiring: connect and migrate the database, connect the PAC (starting the in-process sandbox
//! PAC for the embedded default, [`connect_pac`]), build the HTTP servers on bound listeners,
//! start the worker pool and the background loops (Mercado Pago fetches, reconciliation, the
//! factura global, the API's), all stopped by one [`Shutdown`].
//! `Application::build` binds first, so tests can use port 0 and read [`Application::port`]
//! and [`Application::admin_port`].
//!
//! Who may import it: the operator commands ([`crate::ops`]) and tests. Handlers and loops get
//! what they share from [`crate::state`], never from here.
//!
//! `[server] listen` serves the webhooks, the self-invoicing portal (`/facturar`, unless
//! `[portal] enabled = false`) and the health checks, and `/admin` and `/v1` too
//! unless `[admin] listen` names another address: then those two are served only there, and
//! the webhook listener answers 404 for them (webhooks public, admin private).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};

use crate::admin::{self, Admin};
use crate::config::Settings;
use crate::health::{self, Health};
use crate::ingest::Ingestor;
use crate::pac::{self, PacClient, PacConfig, PacError, PacKind};
use crate::pacsim::SandboxHandle;
use crate::pacsim::faults::FaultSpec;
use crate::portal::{self, Portal};
use crate::shutdown::Shutdown;
use crate::state::AppState;
use crate::store::{self, Db};
use crate::webhooks::{self, mercadopago};
use crate::worker;

pub struct Application {
    port: u16,
    server: Server,
    /// `[admin] listen` when it is its own listener: its port and server.
    admin_listener: Option<(u16, Server)>,
    state: web::Data<AppState>,
    /// The worker pool, when this application runs one (`serve` does; tests may not).
    workers: Option<(worker::Pool, worker::Services)>,
    admin: web::Data<Admin>,
    shutdown: Shutdown,
}

impl Application {
    /// Connects, migrates and binds `[server] listen`.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.check_exposure()?;
        let db = store::connect(&settings.database).await?;
        db.migrate().await?;
        let connected = connect_pac(&settings.pac_config()?).await?;
        let pac = Arc::new(connected.client);
        let sim = connected.sandbox.as_ref().map(|h| h.sim().clone());
        let admin = Admin::new(&settings, &db, pac.clone(), sim).await?;
        let portal = match settings.portal.enabled {
            true => Some(Portal::new(&settings, &db).await?),
            false => None,
        };
        Self::build_with_db(settings, db, pac, connected.sandbox, admin, portal)
    }

    /// Binds with an already connected and migrated database and PAC.
    fn build_with_db(
        settings: Settings,
        db: Db,
        pac: Arc<PacClient>,
        pac_sandbox: Option<SandboxHandle>,
        admin: Admin,
        portal: Option<Portal>,
    ) -> anyhow::Result<Self> {
        // Sandbox conveniences and the example password stay on this machine.
        settings.check_exposure()?;
        let listener = TcpListener::bind(&settings.server.listen).map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {} ([server] listen): {e}",
                settings.server.listen
            )
        })?;
        let port = listener.local_addr()?.port();
        let admin_listener = if settings.separate_admin_listener() {
            let at = settings.admin_listen();
            let l = TcpListener::bind(at).map_err(|e| {
                anyhow::anyhow!(
                    "cannot listen on {at} ([admin] listen): {e}; give it an address and port of \
                     its own, or leave it unset to serve the admin on [server] listen"
                )
            })?;
            Some(l)
        } else {
            None
        };
        let ingestor = Ingestor::new(&settings).map_err(|e| anyhow::anyhow!(e))?;
        let fx = crate::fx::Rates::from_settings(&settings.fx).map_err(|e| anyhow::anyhow!(e))?;
        let mp_settings = &settings.mercadopago;
        // The sandbox without Mercado Pago credentials reads payments from its own stand-in
        // API, so `send-test-webhook --provider mercadopago` works on a fresh install.
        let mp_sandbox = settings.uses_mp_stand_in();
        let (api_base, token) = if mp_sandbox {
            (
                format!("http://127.0.0.1:{port}/sandbox/mercadopago"),
                Some("sandbox".to_owned()),
            )
        } else {
            (
                mp_settings.api_base.clone(),
                mp_settings
                    .access_token
                    .as_ref()
                    .map(|t| t.expose().to_owned()),
            )
        };
        let mp = mercadopago::Client::new(
            &api_base,
            token,
            Duration::from_secs(mp_settings.fetch_timeout_seconds),
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        let stripe = webhooks::stripe_api::Client::from_settings(&settings.stripe)
            .map_err(|e| anyhow::anyhow!(e))?;
        let health = Health::default();
        health.register(
            health::MP_FETCH_RETRY,
            Duration::from_secs(
                mp_settings.retry_interval_seconds * 3
                    + mp_settings.fetch_timeout_seconds * 20
                    + 30,
            ),
        );
        let body_limit = settings.server.body_limit_bytes;
        let mp_replay = webhooks::replay::ReplayWindow::new(mp_settings.tolerance_seconds);
        let pdf = crate::pdf::PdfOptions::from_settings(&settings.pdf)?;
        let state = web::Data::new(AppState {
            pdf,
            settings: Arc::new(settings),
            db,
            ingestor,
            mp,
            fx,
            stripe,
            mp_replay,
            health,
            pac,
            pac_sandbox,
        });
        let admin = web::Data::new(admin);
        let portal = portal.map(web::Data::new);
        let separate = admin_listener.is_some();
        let public = Routes {
            webhooks: true,
            admin: !separate,
            mp_sandbox,
        };
        let server = serve(
            listener,
            public,
            state.clone(),
            admin.clone(),
            portal,
            body_limit,
        )?;
        let admin_listener = match admin_listener {
            Some(l) => {
                let port = l.local_addr()?.port();
                let private = Routes {
                    webhooks: false,
                    admin: true,
                    mp_sandbox: false,
                };
                let server = serve(l, private, state.clone(), admin.clone(), None, body_limit)?;
                Some((port, server))
            }
            None => None,
        };
        Ok(Self {
            port,
            server,
            admin_listener,
            state,
            workers: None,
            admin,
            shutdown: Shutdown::new(),
        })
    }

    /// Starts the worker pool beside the HTTP server (`serve`).
    pub async fn with_workers(mut self) -> anyhow::Result<Self> {
        let db = self
            .state
            .db
            .for_workers(&self.state.settings.database)
            .await?;
        let worker = worker::worker_for(&self.state.settings, db, self.state.pac.clone())?;
        let services = worker::Services {
            worker,
            sandbox: None,
        };
        let pool = services
            .worker
            .clone()
            .start(self.shutdown.token(), Some(self.state.health.clone()));
        self.workers = Some((pool, services));
        Ok(self)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port `/admin` and `/v1` are served on (the same as [`Application::port`] unless
    /// `[admin] listen` is set).
    pub fn admin_port(&self) -> u16 {
        self.admin_listener.as_ref().map_or(self.port, |(p, _)| *p)
    }

    pub fn admin(&self) -> web::Data<Admin> {
        self.admin.clone()
    }

    pub fn state(&self) -> web::Data<AppState> {
        self.state.clone()
    }

    /// The process's stop: cancel it (or let `serve` cancel it on a signal) and every server
    /// and loop of this application ends; [`Application::run_until_stopped`] then returns.
    pub fn shutdown(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Serves until [`Application::shutdown`] is cancelled (`serve`: SIGTERM, Ctrl-C, SIGQUIT)
    /// or a server ends; then every loop ends and the pool drains with its deadline.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let token = self.shutdown.token();
        let retry = tokio::spawn(webhooks::fetch_retry_loop(
            self.state.clone(),
            token.clone(),
        ));
        let refunds = tokio::spawn(webhooks::refunds::release_loop(
            self.state.clone(),
            token.clone(),
        ));
        let reconcile = self.admin.reconcile_interval.map(|every| {
            tokio::spawn(admin::reconcile::periodic(
                self.state.db.clone(),
                self.admin.clone(),
                every,
                token.clone(),
            ))
        });
        // The factura global of each closed period (`[global] auto_issue`).
        let global = if self.state.settings.global.auto_issue {
            let planner = crate::global::Planner::new(&self.state.settings)
                .map_err(|e| anyhow::anyhow!("[global]: {e}"))?;
            let timing = crate::global::Timing::of(&self.state.settings);
            Some(tokio::spawn(crate::global::issue_loop(
                self.state.db.clone(),
                planner,
                timing,
                token.clone(),
            )))
        } else {
            None
        };
        // The invoicing API's loops: merchant webhooks and the purge of expired keys. They end
        // with the token on their own (a delivery in flight is not waited for).
        let api_settings = &self.state.settings.api;
        if let Some(sender) =
            crate::notify::Sender::from_settings(self.state.db.clone(), api_settings)?
        {
            tokio::spawn(sender.run(token.clone()));
        }
        // The customer's emails (`[email]`): finishes a send under way when stopped.
        let courier = spawn_courier(
            &self.state.settings,
            self.state.db.clone(),
            self.state.pdf.clone(),
            &token,
        )?;
        tokio::spawn(crate::api::idempotency::purge_loop(
            self.state.db.clone(),
            Duration::from_secs(api_settings.purge_interval_seconds),
            token.clone(),
        ));
        let admin_server = self.admin_listener.map(|(_, s)| s);
        stop_with(&self.server, &self.shutdown);
        if let Some(s) = &admin_server {
            stop_with(s, &self.shutdown);
        }
        let result = match admin_server {
            Some(admin) => {
                let (public, admin) = tokio::join!(self.server, admin);
                public.and(admin)
            }
            None => self.server.await,
        };
        // A server that ended on its own stops the rest too.
        self.shutdown.cancel();
        for task in [retry, refunds]
            .into_iter()
            .chain(reconcile)
            .chain(global)
            .chain(courier)
        {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a background loop ended abnormally");
            }
        }
        if let Some((pool, services)) = self.workers {
            pool.shutdown().await;
            drop(services);
        }
        result.map_err(Into::into)
    }
}

/// Stops `server` when the process's stop is asked for: gracefully (open requests finish) unless
/// the stop is forced.
fn stop_with(server: &Server, shutdown: &Shutdown) {
    let (handle, shutdown) = (server.handle(), shutdown.clone());
    tokio::spawn(async move {
        shutdown.cancelled().await;
        handle.stop(shutdown.graceful()).await;
    });
}

/// What one listener serves besides the health checks.
#[derive(Debug, Clone, Copy)]
struct Routes {
    webhooks: bool,
    /// `/admin` and `/v1`.
    admin: bool,
    /// The Mercado Pago stand-in (`/sandbox/mercadopago`), next to the webhooks that use it.
    mp_sandbox: bool,
}

/// An HTTP server on `listener` with `routes`; the portal (`/facturar`, public) beside the
/// webhooks when it is on.
fn serve(
    listener: TcpListener,
    routes: Routes,
    data: web::Data<AppState>,
    admin: web::Data<Admin>,
    portal: Option<web::Data<Portal>>,
    body_limit: usize,
) -> std::io::Result<Server> {
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::Logger::new("%r %s %Dms").exclude("/healthz"))
            .wrap(crate::error::security_headers())
            .app_data(data.clone())
            .configure(health::routes)
            .configure(|cfg| {
                if routes.webhooks {
                    webhooks::routes(cfg, body_limit);
                    if let Some(p) = &portal {
                        portal::routes(cfg, p.clone());
                    }
                }
                if routes.admin {
                    crate::api::routes(cfg, body_limit);
                    admin::routes(cfg, admin.clone());
                    health::metrics_route(cfg);
                }
                if routes.mp_sandbox {
                    crate::sandbox::mp_routes(cfg);
                }
            })
    })
    // Stopped by the process's token ([`Application::run_until_stopped`]), not by actix.
    .disable_signals()
    .listen(listener)?
    .run();
    Ok(server)
}

/// A connected PAC client, plus the in-process sandbox PAC it talks to when there is one (keep
/// it alive as long as the client).
pub struct ConnectedPac {
    pub client: PacClient,
    pub sandbox: Option<SandboxHandle>,
}

/// Builds the client `cfg` describes, first starting the in-process sandbox PAC when
/// `kind = "sandbox"` and no `url` is given (the embedded default).
pub async fn connect_pac(cfg: &PacConfig) -> anyhow::Result<ConnectedPac> {
    let mut cfg = cfg.clone();
    let mut sandbox = None;
    if cfg.kind == PacKind::Sandbox && cfg.url.as_deref().is_none_or(str::is_empty) {
        let faults = match &cfg.sandbox_faults {
            Some(spec) => FaultSpec::parse(spec)
                .map_err(|e| PacError::Config(format!("sandbox_faults: {e}")))?,
            None => FaultSpec::default(),
        };
        let state = cfg
            .sandbox_state
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("pacsim-state.jsonl"));
        let (url, handle) = crate::pacsim::Sandbox::start_in_process(&state, faults)
            .await
            .map_err(|e| anyhow::anyhow!("sandbox PAC: {e}"))?;
        cfg.url = Some(url);
        sandbox = Some(handle);
    }
    let client = pac::connect(&cfg)?;
    Ok(ConnectedPac { client, sandbox })
}

/// Starts the courier of the customer's emails until `token` is cancelled; `None` when
/// `[email]` is off (`serve` and `autofactura worker` both run one: claims are leased, so
/// several couriers share the outbox).
pub fn spawn_courier(
    settings: &Settings,
    db: Db,
    pdf: crate::pdf::PdfOptions,
    token: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let courier = crate::deliver::courier::Courier::from_settings(db, &settings.email, pdf)?;
    Ok(courier.map(|c| tokio::spawn(c.with_arca(&settings.arca).run(token.clone()))))
}

/// Connects the PAC (starting the in-process sandbox for the embedded default) and builds the
/// worker: for `autofactura worker` and tests, which have no running application.
pub async fn worker_services(settings: &Settings, db: Db) -> anyhow::Result<worker::Services> {
    let connected = connect_pac(&settings.pac_config()?).await?;
    let db = db.for_workers(&settings.database).await?;
    let worker = worker::worker_for(settings, db, Arc::new(connected.client))?;
    Ok(worker::Services {
        worker,
        sandbox: connected.sandbox,
    })
}
