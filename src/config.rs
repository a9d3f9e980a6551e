//! Settings: embedded defaults → TOML file → `AUTOFACTURA__SECTION__KEY` environment variables,
//! validated once at start. Nothing else in the program reads the environment for settings.
//!
//! Secrets are [`SecretString`]s: their `Debug` and `Display` print `[redacted]`, so a settings
//! dump in a log never leaks them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

/// The file `serve` reads when `--config` is not given, if it exists.
pub const DEFAULT_CONFIG_FILE: &str = "autofactura.toml";
/// Prefix of environment overrides: `AUTOFACTURA__STRIPE__WEBHOOK_SECRETS=whsec_a,whsec_b`.
pub const ENV_PREFIX: &str = "AUTOFACTURA__";
/// Stripe secret used when none is configured and the PAC is the sandbox, so a fresh install
/// can receive `send-test-webhook` at once. Refused with any real PAC.
pub const SANDBOX_STRIPE_SECRET: &str = "whsec_autofactura_sandbox";
/// Mercado Pago secret used under the same conditions.
pub const SANDBOX_MP_SECRET: &str = "autofactura_sandbox_mp_secret";

/// Every key with a default. Keys without one (secrets, CSD paths) are absent.
const DEFAULTS: &str = r#"
[server]
listen = "127.0.0.1:8080"
body_limit_bytes = 262144

[database]
url = "sqlite://data/autofactura.db"
max_connections = 16

[stripe]
webhook_secrets = []
tolerance_seconds = 300

[mercadopago]
api_base = "https://api.mercadopago.com"
tolerance_seconds = 0
fetch_timeout_seconds = 5
retry_interval_seconds = 60

[emisor]
rfc = "EKU9003173C9"
nombre = "ESCUELA KEMPER URGATE"
regimen_fiscal = "601"
lugar_expedicion = "42501"
serie = "A"

[invoice]
currencies = ["MXN"]
clave_prod_serv = "01010101"
clave_unidad = "ACT"
unidad = "Actividad"
descripcion = "Venta"
tax = "iva16"
prices_include_tax = true
uso_cfdi = "G03"
metodo_pago = "PUE"

[forma_pago]
default = "99"
card_credit = "04"
card_debit = "28"
card_prepaid = "28"
card_unknown = "04"
oxxo = "01"
spei = "03"

[forma_pago.mercadopago]
credit_card = "04"
debit_card = "28"
prepaid_card = "28"
ticket = "01"
bank_transfer = "03"
atm = "01"
account_money = "06"
digital_currency = "99"

[pac]
kind = "sandbox"

[worker]
concurrency = 8

[admin]
listen = "127.0.0.1:8080"
"#;

/// A secret: printed as `[redacted]` by `Debug` and `Display`; read with [`SecretString::expose`].
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub stripe: StripeSettings,
    pub mercadopago: MercadoPagoSettings,
    pub emisor: EmisorSettings,
    pub invoice: InvoiceSettings,
    pub forma_pago: FormaPagoSettings,
    /// Kept raw: the PAC module deserializes it into its own type. See [`Settings::pac_kind`].
    pub pac: toml::Table,
    pub worker: WorkerSettings,
    pub admin: AdminSettings,
    #[serde(default)]
    pub api: ApiSettings,
}

/// `[api]`: the invoicing API and the webhooks it sends to the merchant.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// How long `POST /v1/invoices` waits for the stamp before answering 202 (still queued) or
    /// 503 (outcome unknown), in milliseconds.
    pub wait_for_stamp_ms: u64,
    /// How long an idempotency key is kept after its request, in hours.
    pub key_retention_hours: u64,
    /// How often expired keys are purged, in seconds.
    pub purge_interval_seconds: u64,
    /// Where `invoice.stamped`, `invoice.failed` and `invoice.canceled` are sent (none = not sent).
    pub webhook_url: Option<String>,
    /// Standard Webhooks secret (`whsec_` + base64) the deliveries are signed with.
    pub webhook_secret: Option<SecretString>,
    /// Delays between delivery attempts, in seconds; after the last one the webhook is given up.
    pub webhook_retry_seconds: Vec<u64>,
    /// Seconds for one delivery.
    pub webhook_timeout_seconds: u64,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            wait_for_stamp_ms: 15_000,
            key_retention_hours: 96,
            purge_interval_seconds: 300,
            webhook_url: None,
            webhook_secret: None,
            // Standard Webhooks' schedule after the immediate first attempt (~75 h in all).
            webhook_retry_seconds: vec![5, 300, 1800, 7200, 18_000, 36_000, 50_400, 72_000, 86_400],
            webhook_timeout_seconds: 10,
        }
    }
}

impl fmt::Debug for ApiSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiSettings")
            .field("wait_for_stamp_ms", &self.wait_for_stamp_ms)
            .field("key_retention_hours", &self.key_retention_hours)
            .field("purge_interval_seconds", &self.purge_interval_seconds)
            .field("webhook_url", &self.webhook_url.as_deref().map(redact_url))
            .field("webhook_secret", &self.webhook_secret)
            .field("webhook_retry_seconds", &self.webhook_retry_seconds)
            .field("webhook_timeout_seconds", &self.webhook_timeout_seconds)
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    pub listen: String,
    /// Largest webhook body accepted, in bytes.
    pub body_limit_bytes: usize,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://path/to/file.db` or `postgres://user:pass@host/db`. May carry a password.
    pub url: SecretString,
    pub max_connections: u32,
}

impl fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &redact_url(self.url.expose()))
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// `postgres://user:pass@host/db` → `postgres://user:[redacted]@host/db`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:[redacted]@{host}")
        }
        None => url.to_owned(),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeSettings {
    /// Every active endpoint secret (`whsec_…`); several during a rotation.
    #[serde(deserialize_with = "list_or_csv")]
    pub webhook_secrets: Vec<SecretString>,
    /// Largest |now − t| accepted, in seconds (Stripe's libraries use 300).
    pub tolerance_seconds: i64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MercadoPagoSettings {
    pub webhook_secret: Option<SecretString>,
    pub access_token: Option<SecretString>,
    /// Base URL of the payments API (`GET {api_base}/v1/payments/{id}`).
    pub api_base: String,
    /// Largest age of `ts` accepted, in seconds; 0 = only logged. Mercado Pago's retry
    /// stamping is undocumented and a replayed notification only causes a re-fetch.
    pub tolerance_seconds: i64,
    pub fetch_timeout_seconds: u64,
    /// How often notifications whose payment could not be fetched are retried.
    pub retry_interval_seconds: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmisorSettings {
    pub rfc: String,
    pub nombre: String,
    pub regimen_fiscal: String,
    /// Postal code of the place of issue.
    pub lugar_expedicion: String,
    pub serie: String,
    /// CSD certificate and key (DER files from the SAT). Absent = the SAT test CSD.
    pub csd_cer: Option<PathBuf>,
    pub csd_key: Option<PathBuf>,
    pub csd_password: Option<SecretString>,
}

/// How a payment becomes comprobante lines.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvoiceSettings {
    /// Currencies invoiced; a payment in another is recorded as needing attention.
    pub currencies: Vec<String>,
    pub clave_prod_serv: String,
    pub clave_unidad: String,
    pub unidad: String,
    /// Description of the line when the payment carries none.
    pub descripcion: String,
    /// `iva16`, `iva8`, `iva0`, `exento` or `no_objeto`.
    pub tax: String,
    pub prices_include_tax: bool,
    /// UsoCFDI when the customer gave none.
    pub uso_cfdi: String,
    pub metodo_pago: String,
}

/// Payment method → c_FormaPago (`docs/cfdi-rules.md` §5). Industry convention, so editable.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormaPagoSettings {
    /// For methods not listed.
    pub default: String,
    pub card_credit: String,
    pub card_debit: String,
    pub card_prepaid: String,
    /// Card whose funding is unknown (Stripe `payment_intent.succeeded` carries no funding).
    pub card_unknown: String,
    pub oxxo: String,
    pub spei: String,
    /// Mercado Pago `payment_type_id` → FormaPago.
    pub mercadopago: BTreeMap<String, String>,
}

#[derive(Clone, Deserialize)]
pub struct WorkerSettings {
    pub concurrency: usize,
    /// Keys for the worker pool, kept for its own parser.
    #[serde(flatten)]
    pub extra: toml::Table,
}

#[derive(Clone, Deserialize)]
pub struct AdminSettings {
    pub password: Option<SecretString>,
    pub listen: String,
    #[serde(flatten)]
    pub extra: toml::Table,
}

impl fmt::Debug for AdminSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminSettings")
            .field("password", &self.password)
            .field("listen", &self.listen)
            .field("extra", &redact_table(&self.extra))
            .finish()
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("server", &self.server)
            .field("database", &self.database)
            .field("stripe", &self.stripe)
            .field("mercadopago", &self.mercadopago)
            .field("emisor", &self.emisor)
            .field("invoice", &self.invoice)
            .field("forma_pago", &self.forma_pago)
            .field("pac", &redact_table(&self.pac))
            .field("worker", &self.worker)
            .field("admin", &self.admin)
            .field("api", &self.api)
            .finish()
    }
}

impl fmt::Debug for WorkerSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerSettings")
            .field("concurrency", &self.concurrency)
            .field("extra", &redact_table(&self.extra))
            .finish()
    }
}

/// A table with every value under a key that looks secret replaced.
fn redact_table(t: &toml::Table) -> toml::Table {
    t.iter()
        .map(|(k, v)| {
            let v = match v {
                toml::Value::Table(inner) => toml::Value::Table(redact_table(inner)),
                _ if looks_secret(k) => toml::Value::String("[redacted]".into()),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

fn looks_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "token", "key", "pass"]
        .iter()
        .any(|s| k.contains(s))
}

/// Accepts a TOML array of strings or one comma-separated string (handy in env variables).
fn list_or_csv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SecretString>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<String>),
        Csv(String),
    }
    Ok(match Either::deserialize(d)? {
        Either::List(v) => v,
        Either::Csv(s) => s.split(',').map(str::to_owned).collect(),
    }
    .into_iter()
    .map(|s| s.trim().to_owned())
    .filter(|s| !s.is_empty())
    .map(SecretString)
    .collect())
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
        let mut merged: toml::Table =
            DEFAULTS
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    path: "(embedded defaults)".into(),
                    message: e.to_string(),
                })?;
        if let Some(text) = file {
            let t: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Syntax {
                        path: "config".into(),
                        message: e.to_string(),
                    })?;
            merge(&mut merged, t);
        }
        for (k, v) in env {
            if let Some(rest) = k.strip_prefix(ENV_PREFIX) {
                let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
                set_path(&mut merged, &path, v)?;
            }
        }
        let mut s: Settings = merged
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Shape(e.message().to_owned()))?;
        s.apply_sandbox_defaults();
        s.validate()?;
        Ok(s)
    }

    /// Embedded defaults only (no file, no environment).
    pub fn defaults() -> Result<Self, ConfigError> {
        Self::from_parts(None, &[])
    }

    /// `sandbox`, `sw` or `finkok`.
    pub fn pac_kind(&self) -> &str {
        self.pac
            .get("kind")
            .and_then(toml::Value::as_str)
            .unwrap_or("sandbox")
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

    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        if self.server.listen.parse::<SocketAddr>().is_err() {
            p.push(format!(
                "[server] listen = {:?} is not host:port with an IP address (e.g. \"127.0.0.1:8080\")",
                self.server.listen
            ));
        }
        if self.server.body_limit_bytes < 1024 {
            p.push("[server] body_limit_bytes must be at least 1024".into());
        }
        let url = self.database.url.expose();
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            p.push(format!(
                "[database] url = {:?} must start with sqlite:, postgres:// or postgresql://",
                redact_url(url)
            ));
        }
        if let Some(u) = &self.api.webhook_url {
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                p.push(format!(
                    "[api] webhook_url = {:?} must start with http:// or https://",
                    redact_url(u)
                ));
            }
            if self.api.webhook_secret.is_none() {
                p.push("[api] webhook_url needs webhook_secret (whsec_ + base64)".into());
            }
        }
        if let Some(secret) = &self.api.webhook_secret
            && crate::api::webhooks::decode_secret(secret.expose()).is_none()
        {
            p.push("[api] webhook_secret must be whsec_ followed by base64".into());
        }
        if self.api.key_retention_hours == 0 {
            p.push("[api] key_retention_hours must be at least 1".into());
        }
        if self.database.max_connections == 0 {
            p.push("[database] max_connections must be at least 1".into());
        }
        let kind = self.pac_kind();
        if !matches!(kind, "sandbox" | "sw" | "finkok") {
            p.push(format!(
                "[pac] kind = {kind:?}: expected \"sandbox\", \"sw\" or \"finkok\""
            ));
        }
        if kind != "sandbox" {
            if self
                .stripe
                .webhook_secrets
                .iter()
                .any(|s| s.expose() == SANDBOX_STRIPE_SECRET)
                || self
                    .mercadopago
                    .webhook_secret
                    .as_ref()
                    .is_some_and(|s| s.expose() == SANDBOX_MP_SECRET)
            {
                p.push("the sandbox webhook secrets cannot be used with a real PAC".into());
            }
            if self.emisor.csd_cer.is_none()
                || self.emisor.csd_key.is_none()
                || self.emisor.csd_password.is_none()
            {
                p.push(format!(
                    "[emisor] csd_cer, csd_key and csd_password are required with [pac] kind = {kind:?} \
                     (the SAT test CSD is only for the sandbox)"
                ));
            }
        }
        for (i, s) in self.stripe.webhook_secrets.iter().enumerate() {
            if s.expose().trim() != s.expose() || s.expose().is_empty() {
                p.push(format!(
                    "[stripe] webhook_secrets[{i}] is empty or has surrounding spaces"
                ));
            }
        }
        if !(0..=3600).contains(&self.stripe.tolerance_seconds)
            || self.stripe.tolerance_seconds == 0
        {
            p.push(
                "[stripe] tolerance_seconds must be between 1 and 3600 (Stripe uses 300)".into(),
            );
        }
        if self.mercadopago.tolerance_seconds < 0 {
            p.push("[mercadopago] tolerance_seconds must be 0 (log only) or positive".into());
        }
        if !(self.mercadopago.api_base.starts_with("http://")
            || self.mercadopago.api_base.starts_with("https://"))
        {
            p.push(format!(
                "[mercadopago] api_base = {:?} must be an http(s) URL",
                self.mercadopago.api_base
            ));
        }
        if self.mercadopago.retry_interval_seconds == 0
            || self.mercadopago.fetch_timeout_seconds == 0
        {
            p.push(
                "[mercadopago] retry_interval_seconds and fetch_timeout_seconds must be positive"
                    .into(),
            );
        }
        let e = &self.emisor;
        if let Err(err) = crate::cfdi::Rfc::parse(&e.rfc) {
            p.push(format!("[emisor] rfc: {err}"));
        }
        if e.nombre.trim().is_empty() {
            p.push("[emisor] nombre is required (the name registered with the SAT, without the régimen de capital)".into());
        }
        if !crate::cfdi::catalogs::is_regimen(&e.regimen_fiscal) {
            p.push(format!(
                "[emisor] regimen_fiscal = {:?} is not in c_RegimenFiscal (e.g. \"601\")",
                e.regimen_fiscal
            ));
        }
        if !is_postal_code(&e.lugar_expedicion) {
            p.push(format!(
                "[emisor] lugar_expedicion = {:?} must be a 5-digit postal code",
                e.lugar_expedicion
            ));
        }
        if e.serie.is_empty()
            || e.serie.len() > 25
            || !e.serie.chars().all(|c| c.is_ascii_alphanumeric())
        {
            p.push(format!(
                "[emisor] serie = {:?} must be 1 to 25 letters or digits",
                e.serie
            ));
        }
        if e.csd_cer.is_some() != e.csd_key.is_some() {
            p.push("[emisor] csd_cer and csd_key go together".into());
        }
        for f in [&e.csd_cer, &e.csd_key].into_iter().flatten() {
            if !f.exists() {
                p.push(format!("[emisor] CSD file {} does not exist", f.display()));
            }
        }
        let inv = &self.invoice;
        if inv.currencies.is_empty() {
            p.push("[invoice] currencies must list at least one currency (e.g. [\"MXN\"])".into());
        }
        for c in &inv.currencies {
            if crate::cfdi::catalogs::currency_decimals(c).is_none() {
                p.push(format!(
                    "[invoice] currencies: {c:?} is not a c_Moneda code (uppercase, e.g. \"MXN\")"
                ));
            }
        }
        if crate::cfdi::catalogs::uso_allows(&inv.uso_cfdi, "601").is_none() {
            p.push(format!(
                "[invoice] uso_cfdi = {:?} is not in c_UsoCFDI",
                inv.uso_cfdi
            ));
        }
        if self.tax_treatment().is_none() {
            p.push(format!(
                "[invoice] tax = {:?}: expected iva16, iva8, iva0, exento or no_objeto",
                inv.tax
            ));
        }
        if !matches!(inv.metodo_pago.as_str(), "PUE" | "PPD") {
            p.push(format!(
                "[invoice] metodo_pago = {:?}: expected PUE or PPD",
                inv.metodo_pago
            ));
        }
        let fp = &self.forma_pago;
        let codes = [
            ("default", &fp.default),
            ("card_credit", &fp.card_credit),
            ("card_debit", &fp.card_debit),
            ("card_prepaid", &fp.card_prepaid),
            ("card_unknown", &fp.card_unknown),
            ("oxxo", &fp.oxxo),
            ("spei", &fp.spei),
        ];
        for (k, v) in codes
            .into_iter()
            .chain(fp.mercadopago.iter().map(|(k, v)| (k.as_str(), v)))
        {
            if !crate::cfdi::catalogs::is_forma_pago(v) {
                p.push(format!(
                    "[forma_pago] {k} = {v:?} is not in c_FormaPago (e.g. \"04\")"
                ));
            }
        }
        if self.worker.concurrency == 0 {
            p.push("[worker] concurrency must be at least 1".into());
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p))
        }
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

fn is_postal_code(s: &str) -> bool {
    s.len() == 5 && s.chars().all(|c| c.is_ascii_digit())
}

fn read_file(p: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
        path: p.to_owned(),
        source,
    })
}

/// Deep-merges `over` into `base` (tables merge, everything else replaces).
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Sets `path` to the environment value `raw`, typed like the value it replaces: an integer
/// where the default is an integer, a list where it is a list (TOML array syntax or
/// comma-separated), a string otherwise. So a password of digits stays a string.
fn set_path(t: &mut toml::Table, path: &[String], raw: &str) -> Result<(), ConfigError> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut cur = t;
    for p in parents {
        let entry = cur
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(inner) => inner,
            _ => {
                return Err(ConfigError::Shape(format!(
                    "{ENV_PREFIX}{}: `{p}` is not a section",
                    path.join("__").to_uppercase()
                )));
            }
        };
    }
    let name = format!("{ENV_PREFIX}{}", path.join("__").to_uppercase());
    let bad = |what: &str| ConfigError::Shape(format!("{name}={raw:?}: expected {what}"));
    let value = match cur.get(last) {
        Some(toml::Value::Integer(_)) => {
            toml::Value::Integer(raw.trim().parse().map_err(|_| bad("an integer"))?)
        }
        Some(toml::Value::Boolean(_)) => {
            toml::Value::Boolean(raw.trim().parse().map_err(|_| bad("true or false"))?)
        }
        Some(toml::Value::Float(_)) => {
            toml::Value::Float(raw.trim().parse().map_err(|_| bad("a number"))?)
        }
        Some(toml::Value::Array(_)) if raw.trim_start().starts_with('[') => {
            let t: toml::Table = format!("v = {raw}")
                .parse()
                .map_err(|_| bad("a TOML array"))?;
            t.get("v").cloned().ok_or_else(|| bad("a TOML array"))?
        }
        Some(toml::Value::Array(_)) => toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.into()))
                .collect(),
        ),
        _ => toml::Value::String(raw.to_owned()),
    };
    cur.insert(last.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn embedded_defaults_are_valid_and_use_sqlite_and_the_sandbox() {
        let s = Settings::defaults().expect("defaults");
        assert!(s.is_sqlite());
        assert_eq!(s.pac_kind(), "sandbox");
        assert_eq!(s.emisor.serie, "A");
        assert_eq!(s.worker.concurrency, 8);
        assert_eq!(
            s.stripe.webhook_secrets.len(),
            1,
            "sandbox secret filled in"
        );
    }

    #[test]
    fn the_example_file_documents_valid_settings() {
        let text = include_str!("../autofactura.example.toml");
        let s = Settings::from_parts(Some(text), &[]).expect("example config");
        assert_eq!(s.stripe.webhook_secrets.len(), 2);
        assert_eq!(s.pac_kind(), "sandbox");
    }

    #[test]
    fn environment_overrides_the_file_with_the_type_of_the_default() {
        let file = "[stripe]\nwebhook_secrets = [\"whsec_file\"]\n[worker]\nconcurrency = 2\n";
        let s = Settings::from_parts(
            Some(file),
            &env(&[
                ("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS", "whsec_a, whsec_b"),
                ("AUTOFACTURA__WORKER__CONCURRENCY", "3"),
                ("AUTOFACTURA__ADMIN__PASSWORD", "12345678"),
                ("AUTOFACTURA__PAC__KIND", "sandbox"),
                ("UNRELATED", "x"),
            ]),
        )
        .expect("settings");
        let secrets: Vec<&str> = s
            .stripe
            .webhook_secrets
            .iter()
            .map(SecretString::expose)
            .collect();
        assert_eq!(secrets, ["whsec_a", "whsec_b"]);
        assert_eq!(s.worker.concurrency, 3);
        assert_eq!(
            s.admin.password.as_ref().map(SecretString::expose),
            Some("12345678")
        );
    }

    #[test]
    fn validation_lists_every_problem_with_its_key() {
        let file = "[server]\nlisten = \"localhost\"\n[emisor]\nrfc = \"nope\"\nlugar_expedicion = \"123\"\n[pac]\nkind = \"acme\"\n";
        let err = Settings::from_parts(Some(file), &[])
            .expect_err("invalid")
            .to_string();
        for needle in [
            "[server] listen",
            "[emisor] rfc",
            "[emisor] lugar_expedicion",
            "[pac] kind",
        ] {
            assert!(err.contains(needle), "{needle} missing from: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_reported() {
        let err = Settings::from_parts(Some("[stripe]\nwebhook_secret = \"x\"\n"), &[])
            .expect_err("typo");
        assert!(err.to_string().contains("webhook_secret"), "{err}");
    }

    #[test]
    fn a_real_pac_refuses_the_sandbox_secrets_and_needs_a_csd() {
        let err = Settings::from_parts(Some("[pac]\nkind = \"sw\"\n"), &[])
            .expect_err("needs CSD")
            .to_string();
        assert!(err.contains("csd_cer"), "{err}");
        let file = format!(
            "[pac]\nkind = \"sw\"\n[stripe]\nwebhook_secrets = [\"{SANDBOX_STRIPE_SECRET}\"]\n"
        );
        let err = Settings::from_parts(Some(&file), &[])
            .expect_err("sandbox secret")
            .to_string();
        assert!(err.contains("sandbox webhook secrets"), "{err}");
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let file = "[database]\nurl = \"postgres://app:hunter2@db/af\"\n[stripe]\nwebhook_secrets = [\"whsec_topsecret\"]\n\
                    [mercadopago]\naccess_token = \"APP_USR-tok\"\n[admin]\npassword = \"pw-secret\"\napi_key = \"k-secret\"\n";
        let s = Settings::from_parts(Some(file), &[]).expect("settings");
        let dump = format!("{s:?}");
        for secret in [
            "hunter2",
            "whsec_topsecret",
            "APP_USR-tok",
            "pw-secret",
            "k-secret",
        ] {
            assert!(!dump.contains(secret), "{secret} leaked: {dump}");
        }
        assert!(dump.contains("postgres://app:[redacted]@db/af"));
    }
}
