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
/// The admin password written in `autofactura.example.toml`: refused beyond loopback.
pub const EXAMPLE_ADMIN_PASSWORD: &str = "change-me";

/// Every key with a default. Keys without one (secrets, CSD paths) are absent.
const DEFAULTS: &str = r#"
[server]
listen = "127.0.0.1:8080"
body_limit_bytes = 262144
trusted_proxies = []

[database]
url = "sqlite://data/autofactura.db"
max_connections = 16

[stripe]
webhook_secrets = []
tolerance_seconds = 300

[mercadopago]
api_base = "https://api.mercadopago.com"
tolerance_seconds = 1200
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
            .field("webhook_url", &self.webhook_url.as_deref().map(url_for_log))
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
    /// Address blocks (CIDR) of the reverse proxies whose `Fly-Client-IP`, `X-Forwarded-For`
    /// and `X-Forwarded-Proto` are believed. Empty: nobody's are.
    pub trusted_proxies: Vec<String>,
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

/// `postgres://user:pass@host/db` → `postgres://user:[redacted]@host/db`. The user info ends at
/// the last `@` (a password may hold `@`), and query parameters that look secret
/// (`?password=…`, `?sslpassword=…`, `?token=…`) are redacted too.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_query(url);
    };
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:[redacted]@{}", redact_query(host)),
            None => format!("{userinfo}@{}", redact_query(host)),
        },
        None => redact_query(rest),
    };
    format!("{scheme}://{rest}")
}

/// `…?a=1&password=x` → `…?a=1&password=[redacted]`.
fn redact_query(text: &str) -> String {
    let Some((head, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if looks_secret(k) => format!("{k}=[redacted]"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// A URL for a log line: redacted and without its query string, which often carries a token
/// (the merchant's webhook URL).
pub fn url_for_log(url: &str) -> String {
    let redacted = redact_url(url);
    match redacted.split_once('?') {
        Some((head, _)) => format!("{head}?[query not shown]"),
        None => redacted,
    }
}

/// A TOML or serde message with the values it quotes taken out (`invalid type: string "…"`,
/// `integer `…``): the value may be a secret in the wrong place. Keys (`unknown field `x``)
/// stay, since they are what to fix.
fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let next = [
            ("string \"", '"'),
            ("integer `", '`'),
            ("floating point `", '`'),
            ("character `", '`'),
            ("boolean `", '`'),
        ]
        .into_iter()
        .filter_map(|(open, close)| rest.find(open).map(|i| (i, open, close)))
        .min_by_key(|(i, _, _)| *i);
        let Some((i, open, close)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + open.len()]);
        out.push_str("(value not shown)");
        let after = &rest[i + open.len()..];
        match after.find(close) {
            Some(end) => {
                out.push(close);
                rest = &after[end + 1..];
            }
            None => {
                out.push(close);
                return out;
            }
        }
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
    /// Largest age of `ts` accepted, in seconds (default 1200: Mercado Pago retries every
    /// 15 minutes and does not say whether a retry is signed anew); 0 = only logged.
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
    /// A listener of its own for `/admin` and `/v1`; unset (or `[server] listen`) = the same.
    pub listen: Option<String>,
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
        let mut merged: toml::Table = DEFAULTS
            .parse()
            .map_err(|e: toml::de::Error| syntax_error("(embedded defaults)", DEFAULTS, &e))?;
        if let Some(text) = file {
            let t: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| syntax_error("config", text, &e))?;
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
            // Its Display names the key (`in `admin.password``); no source line, as there is no text.
            .map_err(|e: toml::de::Error| {
                ConfigError::Shape(without_values(e.to_string().trim()).replace('\n', " "))
            })?;
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
        if let Err(e) = crate::proxy::TrustedProxies::parse(&self.server.trusted_proxies) {
            p.push(format!("[server] trusted_proxies: {e}"));
        }
        if let Some(admin) = &self.admin.listen
            && admin.parse::<SocketAddr>().is_err()
        {
            p.push(format!(
                "[admin] listen = {admin:?} is not host:port with an IP address (e.g. \"127.0.0.1:8081\"); \
                 leave it unset to serve the admin on [server] listen"
            ));
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
                    url_for_log(u)
                ));
            }
            if self.api.webhook_secret.is_none() {
                p.push("[api] webhook_url needs webhook_secret (whsec_ + base64)".into());
            }
        }
        if let Some(secret) = &self.api.webhook_secret
            && crate::notify::sign::decode_secret(secret.expose()).is_none()
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

    /// What must not face anyone but this machine: the sandbox webhook secrets and the
    /// Mercado Pago stand-in on a webhook listener beyond loopback (anyone could sign a
    /// "payment" with secrets published in the source), and the example admin password on an
    /// admin listener beyond loopback. `serve` refuses to start while any is left.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        let mut p = Vec::new();
        if let Some(why) = self.exposed(&self.server.listen, "[server] listen") {
            if self
                .stripe
                .webhook_secrets
                .iter()
                .any(|s| s.expose() == SANDBOX_STRIPE_SECRET)
            {
                p.push(format!(
                    "{why}, and the Stripe webhook secret is the built-in sandbox one, published in \
                     the source: set [stripe] webhook_secrets (AUTOFACTURA__STRIPE__WEBHOOK_SECRETS) \
                     to your endpoint's signing secret"
                ));
            }
            if self
                .mercadopago
                .webhook_secret
                .as_ref()
                .is_some_and(|s| s.expose() == SANDBOX_MP_SECRET)
            {
                p.push(format!(
                    "{why}, and the Mercado Pago webhook secret is the built-in sandbox one: set \
                     [mercadopago] webhook_secret (AUTOFACTURA__MERCADOPAGO__WEBHOOK_SECRET) to your \
                     application's secret"
                ));
            }
            if self.uses_mp_stand_in() {
                p.push(format!(
                    "{why}, and without [mercadopago] access_token Mercado Pago payments would be read \
                     from the built-in stand-in, which calls every payment approved: set \
                     [mercadopago] access_token (AUTOFACTURA__MERCADOPAGO__ACCESS_TOKEN)"
                ));
            }
        }
        let key = if self.separate_admin_listener() {
            "[admin] listen"
        } else {
            "[server] listen (which also serves the admin)"
        };
        if let Some(why) = self.exposed(self.admin_listen(), key)
            && self
                .admin
                .password
                .as_ref()
                .is_some_and(|s| s.expose() == EXAMPLE_ADMIN_PASSWORD)
        {
            p.push(format!(
                "{why}, and [admin] password is the example {EXAMPLE_ADMIN_PASSWORD:?}: set \
                 [admin] password (AUTOFACTURA__ADMIN__PASSWORD) or password_hash (an argon2 PHC \
                 string) to one of your own"
            ));
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(p))
        }
    }

    /// Why `listen` is reachable from beyond this machine, if it is: not a loopback address,
    /// or requests arrive through a reverse proxy (`trusted_proxies` is set).
    fn exposed(&self, listen: &str, key: &str) -> Option<String> {
        if !crate::proxy::is_loopback(listen) {
            Some(format!(
                "{key} = {listen:?} is reachable from beyond this machine"
            ))
        } else if !self.server.trusted_proxies.is_empty() {
            Some(format!(
                "{key} is loopback, but [server] trusted_proxies is set: a proxy forwards \
                 requests from beyond this machine"
            ))
        } else {
            None
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

/// Where the TOML text is wrong and why, without the offending line: it may hold a secret.
fn syntax_error(path: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e
        .span()
        .map(|span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: ")
        })
        .unwrap_or_default();
    ConfigError::Syntax {
        path: path.to_owned(),
        message: format!("{at}{}", without_values(e.message())),
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
    // The value is echoed only under a key that cannot hold a secret.
    let secret = path.iter().any(|p| looks_secret(p) || p.ends_with("url"));
    let bad = |what: &str| {
        if secret {
            ConfigError::Shape(format!("{name}: expected {what} (value not shown)"))
        } else {
            ConfigError::Shape(format!("{name}={raw:?}: expected {what}"))
        }
    };
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

    #[test]
    fn urls_are_redacted_through_every_at_and_secret_query_parameters() {
        for (url, secret, keeps) in [
            (
                "postgres://app:hunter2@db/af",
                "hunter2",
                "postgres://app:[redacted]@db/af",
            ),
            // A password holding `@`: the user info ends at the last one.
            (
                "postgres://app:p@ss@word@db:5432/af",
                "ss@word",
                "@db:5432/af",
            ),
            (
                "postgres://app@db/af?sslmode=require&password=hunter2",
                "hunter2",
                "postgres://app@db/af?sslmode=require&password=[redacted]",
            ),
            (
                "postgres://db/af?sslpassword=k3y&application_name=af",
                "k3y",
                "application_name=af",
            ),
            (
                "https://erp.example/hooks?token=t0ken",
                "t0ken",
                "https://erp.example/hooks?",
            ),
            (
                "https://u:pw@erp.example/h?x=a@b",
                "pw",
                "https://u:[redacted]@",
            ),
        ] {
            let r = redact_url(url);
            assert!(!r.contains(secret), "{url} → {r}");
            assert!(r.contains(keeps), "{url} → {r}");
        }
        assert_eq!(
            url_for_log("https://erp.example/hooks?token=t0ken&id=1"),
            "https://erp.example/hooks?[query not shown]"
        );
        assert_eq!(
            url_for_log("https://erp.example/hooks"),
            "https://erp.example/hooks"
        );
        // The settings dump shows the merchant URL without its query.
        let s = Settings::from_parts(
            Some(
                "[api]\nwebhook_url = \"https://erp.example/h?key=LEAK1\"\n\
                 webhook_secret = \"whsec_MDEyMzQ1Njc4OWFiY2RlZg==\"\n",
            ),
            &[],
        )
        .expect("settings");
        let dump = format!("{s:?}");
        assert!(
            !dump.contains("LEAK1") && dump.contains("erp.example/h"),
            "{dump}"
        );
    }

    #[test]
    fn configuration_errors_never_echo_a_secret() {
        // A TOML syntax error on the line of a secret: the place, not the line.
        let err = Settings::from_parts(Some("[stripe]\nwebhook_secrets = [whsec_LEAK2]\n"), &[])
            .expect_err("syntax")
            .to_string();
        assert!(!err.contains("LEAK2") && err.contains("line 2"), "{err}");
        // A secret of the wrong type.
        for file in [
            "[admin]\npassword = 31415926\n",
            "[mercadopago]\nwebhook_secret = 31415926\n",
            "[mercadopago]\naccess_token = [\"31415926\"]\n",
        ] {
            let err = Settings::from_parts(Some(file), &[])
                .expect_err("wrong type")
                .to_string();
            assert!(!err.contains("31415926"), "{err}");
        }
        let err = Settings::from_parts(Some("[worker]\nconcurrency = \"LEAK3\"\n"), &[])
            .expect_err("wrong type")
            .to_string();
        assert!(
            !err.contains("LEAK3") && err.contains("worker.concurrency"),
            "{err}"
        );
        // An environment override that does not parse.
        let err = Settings::from_parts(
            None,
            &env(&[("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS", "[\"whsec_LEAK4\"")]),
        )
        .expect_err("bad array")
        .to_string();
        assert!(
            !err.contains("LEAK4") && err.contains("AUTOFACTURA__STRIPE__WEBHOOK_SECRETS"),
            "{err}"
        );
        // Where no secret can be, the value helps.
        let err =
            Settings::from_parts(None, &env(&[("AUTOFACTURA__WORKER__CONCURRENCY", "eight")]))
                .expect_err("bad integer")
                .to_string();
        assert!(err.contains("eight"), "{err}");
    }

    #[test]
    fn exposure_beyond_loopback_needs_real_secrets_and_password() {
        let public = "[server]\nlisten = \"0.0.0.0:8080\"\n";
        let s = Settings::from_parts(Some(public), &[]).expect("settings");
        let err = s.check_exposure().expect_err("sandbox secrets").to_string();
        for key in [
            "[stripe] webhook_secrets",
            "[mercadopago] webhook_secret",
            "[mercadopago] access_token",
        ] {
            assert!(err.contains(key), "{key} missing from: {err}");
        }
        let own = format!(
            "{public}[stripe]\nwebhook_secrets = [\"whsec_mine\"]\n[mercadopago]\n\
             webhook_secret = \"mine\"\naccess_token = \"APP_USR-mine\"\n"
        );
        let s = Settings::from_parts(Some(&own), &[]).expect("settings");
        assert!(s.check_exposure().is_ok());
        let err = Settings::from_parts(
            Some(&format!("{own}[admin]\npassword = \"change-me\"\n")),
            &[],
        )
        .expect("settings")
        .check_exposure()
        .expect_err("example password")
        .to_string();
        assert!(err.contains("[admin] password"), "{err}");
        // The admin on a loopback listener of its own may keep it; a proxy in front may not.
        let private =
            format!("{own}[admin]\npassword = \"change-me\"\nlisten = \"127.0.0.1:8081\"\n");
        assert!(
            Settings::from_parts(Some(&private), &[])
                .expect("settings")
                .check_exposure()
                .is_ok()
        );
        let proxied = "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n";
        let err = Settings::from_parts(Some(proxied), &[])
            .expect("settings")
            .check_exposure()
            .expect_err("behind a proxy")
            .to_string();
        assert!(err.contains("trusted_proxies"), "{err}");
        // On loopback the sandbox conveniences stay.
        assert!(
            Settings::defaults()
                .expect("defaults")
                .check_exposure()
                .is_ok()
        );
        let err =
            Settings::from_parts(Some("[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n"), &[])
                .expect_err("bad block")
                .to_string();
        assert!(err.contains("[server] trusted_proxies"), "{err}");
    }
}
