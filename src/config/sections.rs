//! The typed sections of the settings file, one struct per table.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

use super::secret::{SecretString, WebhookSecret, list_or_csv, redact_url, url_for_log};

/// `[api]`: the invoicing API and the webhooks it sends to the merchant.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub webhook_secret: Option<WebhookSecret>,
    /// Delays between delivery attempts, in seconds; after the last one the webhook is given up.
    pub webhook_retry_seconds: Vec<u64>,
    /// Seconds for one delivery.
    pub webhook_timeout_seconds: u64,
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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeSettings {
    /// Every active endpoint secret (`whsec_…`); several during a rotation.
    #[serde(deserialize_with = "list_or_csv")]
    pub webhook_secrets: Vec<SecretString>,
    /// Largest |now − t| accepted, in seconds (Stripe's libraries use 300).
    pub tolerance_seconds: i64,
    /// A restricted key (`rk_…`, read access to Checkout Sessions, Products, Invoices, Charges,
    /// PaymentIntents and Balance transactions) to read what the webhook does not carry: the
    /// line items of a Checkout Session, the lines of an invoice, the exchange rate. Unset: a
    /// sale is one Concepto with the `[invoice]` keys.
    pub api_key: Option<SecretString>,
    /// Base URL of the Stripe API (tests point it at a local server).
    pub api_base: String,
    pub fetch_timeout_seconds: u64,
    /// First delay before an event whose data could not be fetched is tried again; it doubles
    /// on every failure, up to an hour.
    pub retry_interval_seconds: u64,
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
    /// Currencies invoiced (`"*"`: every c_Moneda currency); a payment in another is recorded
    /// as needing attention.
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
    /// SAT keys by Stripe product id, price id or tax code (`txcd_…`), for products whose
    /// metadata does not carry them.
    #[serde(default)]
    pub products: BTreeMap<String, super::products::ProductKeys>,
    pub shipping: super::products::ShippingSettings,
}

impl InvoiceSettings {
    /// Whether sales in `currency` are invoiced (it still needs a TipoCambio unless MXN).
    pub fn invoices(&self, currency: &str) -> bool {
        currency != "XXX"
            && crate::cfdi::catalogs::currency_decimals(currency).is_some()
            && self.currencies.iter().any(|c| c == "*" || c == currency)
    }
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

/// `[log]`: how log lines are written (to stderr; the filter is `RUST_LOG`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// OpenTelemetry: the collector's OTLP/HTTP traces URL (e.g.
    /// `http://collector:4318/v1/traces`); spans are exported there when set. Needs a binary
    /// built with the `otel` feature.
    pub otlp_endpoint: Option<String>,
}

/// `[log] format`: `auto` (JSON when stderr is not a terminal, as under a container platform
/// or systemd; text on a terminal), `text` or `json` (one JSON object per line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Auto,
    Text,
    Json,
}
