//! Settings: embedded defaults (`config/default.toml`) → TOML file → `AUTOFACTURA__SECTION__KEY`
//! environment variables, typed and validated once at start. Nothing else in the program reads
//! the environment for settings.
//!
//! Secrets are [`SecretString`]s: their `Debug` and `Display` print `[redacted]`, so a settings
//! dump in a log never leaks them.
//!
//! # What lives here
//!
//! - `mod.rs`: [`Settings`], loading ([`Settings::load`], [`Settings::from_parts`]), the
//!   questions the rest of the program asks of the settings, [`ConfigError`].
//! - `sections.rs`: one typed struct per plain table (`[server]`, `[database]`, `[api]`, …).
//! - `pac.rs`: `[pac]` ([`PacConfig`], [`PacKind`]) and [`Settings::pac_config`].
//! - `worker.rs`, `admin.rs`, `global.rs`, `refunds.rs`, `portal.rs`, `fx.rs`: `[worker]`,
//!   `[admin]`, `[global]`, `[refunds]`, `[portal]` and `[fx]`, with their own checks;
//!   `deliver.rs`: `[pdf]` and `[email]`; `arca.rs`: `[arca]` (Argentina, off by default).
//! - `load.rs`: the layers (defaults, file, environment) merged into one table; error messages
//!   that never quote a value.
//! - `products.rs`: `[invoice.products]` and `[invoice.shipping]`, the SAT keys of what is
//!   sold, checked against the catalogs.
//! - `secret.rs`: [`SecretString`], [`WebhookSecret`] (the merchant's `whsec_` key), redaction
//!   of URLs.
//! - `validate.rs`: every problem of a loaded configuration, each naming its key and the fix.
//! - `exposure.rs`: what must not face anyone but this machine ([`Settings::check_exposure`]).
//!
//! Every default is in `config/default.toml`, except the timeouts of `[pac]` and `[pac.backup]`:
//! they are [`PacConfig`]'s own, as PAC clients are also built without settings (tests).
//!
//! Who may import it: anyone. It imports only leaves (the document engine's catalogs and RFC,
//! [`crate::proxy`]'s address parsing, [`crate::domain::period`]'s periodicidad), never the
//! parts that consume the settings.

mod admin;
mod arca;
mod deliver;
mod exposure;
mod fx;
mod global;
mod load;
mod pac;
mod portal;
mod products;
mod refunds;
mod secret;
mod sections;
mod validate;
mod worker;

#[cfg(test)]
mod env_tests;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use admin::AdminSettings;
pub use arca::{ArcaPrint, ArcaSettings, CondicionIva, Receptor};
pub use deliver::{EmailSettings, Paper, PdfSettings};
pub use fx::{FxSettings, FxSource};
pub use global::{GlobalSettings, MAX_CONCEPTOS_LIMIT};
pub use pac::{PacConfig, PacEnvironment, PacKind, environment_mismatch};
pub use portal::PortalSettings;
pub use products::{ProductKeys, ShippingSettings, key_problems};
pub use refunds::{FullRefund, RefundSettings};
pub use secret::{SecretString, WebhookSecret, redact_url, url_for_log};
pub use sections::{
    ApiSettings, DatabaseSettings, EmisorSettings, FormaPagoSettings, InvoiceSettings, LogFormat,
    LogSettings, MercadoPagoSettings, ServerSettings, StripeSettings,
};
pub use worker::WorkerSettings;

use load::{merge, read_file, secret_files, set_path, syntax_error, typed};

/// The file `serve` reads when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "autofactura.toml";
/// Prefix of environment overrides: `AUTOFACTURA__STRIPE__WEBHOOK_SECRETS=whsec_a,whsec_b`.
pub const ENV_PREFIX: &str = "AUTOFACTURA__";
/// Stripe secret used when none is configured and the PAC is the sandbox, so a fresh install
/// can receive `send-test-webhook` at once. Refused with any real PAC.
pub const SANDBOX_STRIPE_SECRET: &str = "whsec_autofactura_sandbox";
/// Mercado Pago secret used under the same conditions.
pub const SANDBOX_MP_SECRET: &str = "autofactura_sandbox_mp_secret";
/// The admin password written in `autofactura.example.toml`: refused beyond loopback.
pub const EXAMPLE_ADMIN_PASSWORD: &str = "change-me";

/// Every key with a default, layered under the file and the environment. Keys without one
/// (secrets, CSD paths) are absent.
const DEFAULTS: &str = include_str!("../../config/default.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub stripe: StripeSettings,
    pub mercadopago: MercadoPagoSettings,
    pub emisor: EmisorSettings,
    pub invoice: InvoiceSettings,
    pub forma_pago: FormaPagoSettings,
    pub pac: PacConfig,
    pub worker: WorkerSettings,
    pub admin: AdminSettings,
    pub api: ApiSettings,
    pub global: GlobalSettings,
    pub refunds: RefundSettings,
    pub portal: PortalSettings,
    pub log: LogSettings,
    pub pdf: PdfSettings,
    pub email: EmailSettings,
    pub fx: FxSettings,
    pub arca: ArcaSettings,
    /// A `[pac] kind` that names no PAC, kept to be reported with the other problems.
    #[serde(skip)]
    unknown_pac_kind: Option<String>,
}

/// Why the settings cannot be used. Messages name the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: String, message: String },
    #[error("configuration: {0}")]
    Shape(String),
    #[error("configuration is not valid:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// Where the settings came from, for the start-up banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Defaults,
    File(PathBuf),
}

impl Settings {
    /// Loads `path` (or `autofactura.toml` when present, or nothing), applies environment
    /// overrides and validates.
    pub fn load(path: Option<&Path>) -> Result<(Self, Source), ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let (file, source) = match path {
            Some(p) => (Some(read_file(p)?), Source::File(p.to_owned())),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                let p = Path::new(DEFAULT_CONFIG_FILE);
                (Some(read_file(p)?), Source::File(p.to_owned()))
            }
            None => (None, Source::Defaults),
        };
        let settings = Self::from_parts(file.as_deref(), &env)?;
        Ok((settings, source))
    }

    /// Defaults, then the TOML text `file`, then the `AUTOFACTURA__…` pairs in `env`.
    pub fn from_parts(file: Option<&str>, env: &[(String, String)]) -> Result<Self, ConfigError> {
        Self::layered(file, env).map(|(s, _)| s)
    }

    /// `autofactura config check`: loads and validates `path` (or the default file) with the
    /// environment, and gives the merged configuration as TOML with every secret redacted.
    pub fn check(path: Option<&Path>) -> Result<String, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let file = match path {
            Some(p) => Some(read_file(p)?),
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                Some(read_file(Path::new(DEFAULT_CONFIG_FILE))?)
            }
            None => None,
        };
        let (_, mut merged) = Self::layered(file.as_deref(), &env)?;
        load::redact(&mut merged);
        toml::to_string_pretty(&merged)
            .map_err(|e| ConfigError::Shape(format!("cannot print the configuration: {e}")))
    }

    /// The settings and the merged table they were typed from.
    fn layered(
        file: Option<&str>,
        env: &[(String, String)],
    ) -> Result<(Self, toml::Table), ConfigError> {
        let defaults: toml::Table = DEFAULTS
            .parse()
            .map_err(|e: toml::de::Error| syntax_error("(embedded defaults)", DEFAULTS, &e))?;
        let mut merged = defaults.clone();
        if let Some(text) = file {
            let t: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| syntax_error("config", text, &e))?;
            merge(&mut merged, t);
        }
        let mut from_env = Vec::new();
        for (k, v) in env {
            if let Some(rest) = k.strip_prefix(ENV_PREFIX) {
                let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
                set_path(&mut merged, &path, v)?;
                from_env.push((path, v.clone()));
            }
        }
        secret_files(&mut merged, &defaults)?;
        let shown = merged.clone();
        let unknown_pac_kind = pac::take_unknown_kind(&mut merged);
        let mut s: Settings = typed(merged, &from_env)?;
        s.unknown_pac_kind = unknown_pac_kind;
        s.apply_sandbox_defaults();
        s.validate()?;
        Ok((s, shown))
    }

    /// Embedded defaults only (no file, no environment).
    pub fn defaults() -> Result<Self, ConfigError> {
        Self::from_parts(None, &[])
    }

    /// `sandbox`, `sw` or `finkok`.
    pub fn pac_kind(&self) -> &str {
        self.unknown_pac_kind
            .as_deref()
            .unwrap_or(self.pac.kind.name())
    }

    pub fn is_sandbox(&self) -> bool {
        self.pac_kind() == "sandbox"
    }

    /// With the sandbox PAC and no secrets configured, well-known secrets let a fresh install
    /// receive signed test webhooks. Never with a real PAC (validation refuses it).
    fn apply_sandbox_defaults(&mut self) {
        if !self.is_sandbox() {
            return;
        }
        if self.stripe.webhook_secrets.is_empty() {
            self.stripe
                .webhook_secrets
                .push(SecretString::new(SANDBOX_STRIPE_SECRET));
        }
        if self.mercadopago.webhook_secret.is_none() {
            self.mercadopago.webhook_secret = Some(SecretString::new(SANDBOX_MP_SECRET));
        }
    }

    /// The address `/admin` and `/v1` are served on: `[admin] listen`, else `[server] listen`.
    pub fn admin_listen(&self) -> &str {
        self.admin.listen.as_deref().unwrap_or(&self.server.listen)
    }

    /// Whether `/admin` and `/v1` get a listener of their own: `[admin] listen` is another
    /// address than `[server] listen`, or asks for any free port (`:0`, as tests do).
    pub fn separate_admin_listener(&self) -> bool {
        self.admin.listen.as_deref().is_some_and(|a| {
            a != self.server.listen || a.parse::<SocketAddr>().is_ok_and(|s| s.port() == 0)
        })
    }

    /// Whether Mercado Pago payments are read from the built-in stand-in (sandbox PAC, no
    /// access token), which calls every payment approved.
    pub fn uses_mp_stand_in(&self) -> bool {
        self.is_sandbox() && self.mercadopago.access_token.is_none()
    }

    /// The configured tax treatment of invoice lines.
    pub fn tax_treatment(&self) -> Option<crate::cfdi::TaxTreatment> {
        serde_json::from_value(serde_json::Value::String(self.invoice.tax.clone())).ok()
    }

    /// Whether the database is SQLite (the embedded default).
    pub fn is_sqlite(&self) -> bool {
        self.database.url.expose().starts_with("sqlite:")
    }
}
