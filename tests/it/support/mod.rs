//! Shared test harness: the real server on 127.0.0.1:0 over SQLite (temp dir) or PostgreSQL (a
//! fresh database per test on AUTOFACTURA_TEST_DATABASE_URL), each a copy of a database
//! migrated once per set of migrations.
#![allow(dead_code)]

pub mod admin;
pub mod pdf;
pub mod pg;
pub mod portal;
pub mod receiver;
pub mod rows;
pub mod sales;
pub mod sim;
pub mod smtp;
pub mod stripe_api;
pub mod ux;
pub mod webdriver;

pub use rows::exec_sql;

use autofactura::config::Settings;
use autofactura::startup::Application;
use autofactura::state::AppState;
use autofactura::store::{self, Db};
use autofactura::webhooks::signature;
use autofactura::worker::{Pool, Services};
use sqlx::Connection;

/// A port for a child process to listen on: free a moment ago, outside the kernel's range for
/// outgoing connections (none of the suite's own clients can take it meanwhile) and handed out
/// once in this process.
pub fn free_port() -> u16 {
    autofactura::chaos::procs::free_port().expect("a free port")
}

pub const STRIPE_SECRET: &str = "whsec_test_secret";
pub const MP_SECRET: &str = "mp_test_secret";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct TestApp {
    pub address: String,
    /// Where `/admin` and `/v1` are served: `address` unless `[admin] listen` is set.
    pub admin_address: String,
    pub admin: actix_web::web::Data<autofactura::admin::Admin>,
    pub db: Db,
    pub state: actix_web::web::Data<AppState>,
    pub settings: Settings,
    pub http: reqwest::Client,
    pub config_file: std::path::PathBuf,
    /// A pool kept running by [`TestApp::run_workers`], stopped when the app is dropped.
    workers: std::sync::Mutex<Option<(tokio_util::sync::DropGuard, Services)>>,
    _dir: tempfile::TempDir,
    pg_db: Option<(String, String)>,
}

/// Spawns the app on `backend` with `tweak` applied to the settings file text. `None` (after a
/// loud SKIP line) when PostgreSQL is asked for but AUTOFACTURA_TEST_DATABASE_URL is unset.
pub async fn spawn_app_with(backend: Backend, extra_toml: &str) -> Option<TestApp> {
    spawn_app_with_env(backend, extra_toml, &[]).await
}

/// As [`spawn_app_with`], with `AUTOFACTURA__…` overrides in `env` (e.g. a `[server]` key the
/// settings text already has a table for).
pub async fn spawn_app_with_env(
    backend: Backend,
    extra_toml: &str,
    env: &[(&str, &str)],
) -> Option<TestApp> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (url, pg_db) = match backend {
        Backend::Sqlite => {
            let file = dir.path().join("test.db");
            std::fs::copy(sqlite_template().await, &file).expect("copy the migrated database");
            (format!("sqlite://{}", file.display()), None)
        }
        Backend::Postgres => {
            let admin = pg::admin_url("this test")?;
            let name = format!(
                "af_test_{}_{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..12]
            );
            pg::create_test_database(&admin, &name).await;
            let url = pg::url_of(&admin, &name);
            (url, Some((admin, name)))
        }
    };
    // The in-process sandbox PAC keeps its journal in the test's directory.
    let pac = if extra_toml.contains("[pac]") {
        String::new()
    } else {
        format!(
            "[pac]\nsandbox_state = \"{}\"\n",
            dir.path().join("pacsim.jsonl").display()
        )
    };
    let text = format!(
        "{pac}[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{url}\"\nmax_connections = 8\n\
         [stripe]\nwebhook_secrets = [\"whsec_other\", \"{STRIPE_SECRET}\"]\n\
         [mercadopago]\nwebhook_secret = \"{MP_SECRET}\"\naccess_token = \"TEST-token\"\n{extra_toml}\n"
    );
    let config_file = dir.path().join("autofactura.toml");
    std::fs::write(&config_file, &text).expect("write config");
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let settings = Settings::from_parts(Some(&text), &env).expect("test settings");
    let app = Application::build(settings.clone())
        .await
        .expect("build app");
    let address = format!("http://127.0.0.1:{}", app.port());
    let admin_address = format!("http://127.0.0.1:{}", app.admin_port());
    let admin = app.admin();
    let state = app.state();
    let db = state.db.clone();
    tokio::spawn(app.run_until_stopped());
    Some(TestApp {
        address,
        admin_address,
        admin,
        db,
        state,
        settings,
        http: reqwest::Client::new(),
        config_file,
        workers: std::sync::Mutex::default(),
        _dir: dir,
        pg_db,
    })
}

/// A SQLite database file migrated once per set of migrations (their digest names it, in
/// the target's temporary folder), which each test's file is a copy of; the app still
/// migrates at start and finds nothing to do. A copy is one write where the migrations were
/// dozens of synced commits.
async fn sqlite_template() -> &'static std::path::Path {
    static TEMPLATE: tokio::sync::OnceCell<std::path::PathBuf> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
            let file = dir.join(format!(
                "af_tmpl_{}.db",
                migrations_digest("migrations/sqlite")
            ));
            if file.exists() {
                return file;
            }
            // Built under a name of this process's own, then renamed into place at once.
            let building = dir.join(format!("af_tmpl_{}.building.db", std::process::id()));
            let _ = std::fs::remove_file(&building);
            let db = store::connect(&autofactura::config::DatabaseSettings {
                url: autofactura::config::SecretString::new(format!(
                    "sqlite://{}",
                    building.display()
                )),
                max_connections: 1,
            })
            .await
            .expect("create the template database");
            db.migrate().await.expect("migrate the template");
            // Closing the last connection checkpoints the WAL into the file.
            db.close().await;
            std::fs::rename(&building, &file).expect("template in place");
            // The templates of earlier migrations are of no more use here (a copy being made
            // from one keeps its open file).
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            for old in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let n = old.file_name().to_string_lossy().into_owned();
                if n.starts_with("af_tmpl_") && !n.contains(".building.") && n != name {
                    let _ = std::fs::remove_file(old.path());
                }
            }
            file
        })
        .await
}

/// The first 16 hex digits of the SHA-256 of the migration files under `folder` (names and
/// contents, in order): what names a migrated template.
pub fn migrations_digest(folder: &str) -> String {
    use sha2::Digest;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut digest = sha2::Sha256::new();
    for f in &files {
        digest.update(f.file_name().expect("name").as_encoded_bytes());
        digest.update(std::fs::read(f).expect("migration"));
    }
    hex::encode(digest.finalize())[..16].to_owned()
}

/// A port that refuses connections and that no other test can be given meanwhile: a socket
/// bound to it but not listening. An endpoint that is down; dropping the socket frees the port
/// for a server to come up on (`addr` is `127.0.0.1:port`).
pub fn refusing_port() -> (tokio::net::TcpSocket, String) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind");
    let addr = socket.local_addr().expect("addr").to_string();
    (socket, addr)
}

pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    spawn_app_with(backend, "").await
}

impl TestApp {
    /// Starts the worker pool on this app's settings and database, as `serve` does.
    pub async fn start_pool(&self) -> (Pool, Services) {
        let services = autofactura::startup::worker_services(&self.settings, self.db.clone())
            .await
            .expect("worker services");
        let pool = services
            .worker
            .clone()
            .start(tokio_util::sync::CancellationToken::new(), None);
        (pool, services)
    }

    /// Keeps a worker pool running, as `serve` does, for as long as this app lives (with
    /// `[arca]` on, its ARCA lane issues the ARS sales).
    pub async fn run_workers(&self) {
        let services = autofactura::startup::worker_services(&self.settings, self.db.clone())
            .await
            .expect("worker services");
        let token = tokio_util::sync::CancellationToken::new();
        // The pool stops with the token; its handle is not needed to keep it running.
        drop(services.worker.clone().start(token.clone(), None));
        *self.workers.lock().expect("workers") = Some((token.drop_guard(), services));
    }

    /// Runs a worker pool until no outbox row waits for a stamp (failing if none drains for
    /// `secs`), then stops it.
    pub async fn drain(&self, secs: u64) {
        let (pool, _services) = self.start_pool().await;
        rows::wait_drained(&self.db, secs).await;
        pool.shutdown().await;
    }

    pub async fn post_stripe(&self, body: &str, header: Option<String>) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}/webhooks/stripe", self.address))
            .body(body.to_owned());
        if let Some(h) = header {
            req = req.header("Stripe-Signature", h);
        }
        req.send().await.expect("request")
    }

    /// Signs `body` now with the configured test secret, as Stripe does.
    pub async fn post_stripe_signed(&self, body: &str) -> reqwest::Response {
        let t = chrono::Utc::now().timestamp();
        self.post_stripe(
            body,
            Some(signature::stripe_header(
                &[STRIPE_SECRET],
                t,
                body.as_bytes(),
            )),
        )
        .await
    }

    pub async fn post_mp_signed(&self, data_id: &str, body: &str) -> reqwest::Response {
        let ts = chrono::Utc::now().timestamp().to_string();
        let rid = uuid::Uuid::new_v4().to_string();
        let v1 = signature::mp_sign(MP_SECRET, Some(data_id), Some(&rid), &ts);
        self.http
            .post(format!(
                "{}/webhooks/mercadopago?data.id={data_id}&type=payment",
                self.address
            ))
            .header("x-signature", format!("ts={ts},v1={v1}"))
            .header("x-request-id", rid)
            .body(body.to_owned())
            .send()
            .await
            .expect("request")
    }

    /// `GET` of `path` on the webhook listener.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.address))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    pub async fn invoices(&self) -> Vec<store::InvoiceRow> {
        self.db.list_invoices(None).await.expect("list invoices")
    }

    /// The invoices in `status` (as `invoices list --status`).
    pub async fn invoices_in(&self, status: &str) -> Vec<store::InvoiceRow> {
        self.db
            .list_invoices(Some(status))
            .await
            .expect("list invoices")
    }

    pub async fn events(&self) -> Vec<store::NewEvent> {
        rows::events(&self.db).await
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some((admin, name)) = self.pg_db.take() {
            // Best effort, in the background: the test need not wait for it, and a database
            // this process leaves behind is dropped by the next test run (its name carries
            // this process's id; see `pg::create_test_database`).
            drop(std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async {
                    if let Ok(mut c) = sqlx::PgConnection::connect(&admin).await {
                        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .execute(&mut c)
                        .await;
                    }
                });
            }));
        }
    }
}

/// `autofactura worker` on the app's settings file, as a child process the test can SIGKILL.
/// `env`: `AUTOFACTURA__…` overrides of its own.
pub fn worker_process(
    app: &TestApp,
    log: &std::path::Path,
    env: &[(&str, &str)],
) -> std::process::Child {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AUTOFACTURA__") {
            c.env_remove(k);
        }
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log");
    c.envs(env.iter().copied());
    c.arg("--config")
        .arg(&app.config_file)
        .arg("worker")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(log.try_clone().expect("log")))
        .stderr(std::process::Stdio::from(log))
        .spawn()
        .expect("start autofactura worker")
}

/// Runs each named `async fn(Backend)` once per backend, as `<name>_sqlite` and `<name>_postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() { super::$name($crate::support::Backend::Sqlite).await } )*
        }
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() { super::$name($crate::support::Backend::Postgres).await } )*
        }
    };
}
