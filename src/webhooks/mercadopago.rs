//! Mercado Pago (`docs/webhooks.md` §4–5). A notification is only a pointer: the payment is
//! read with `GET {api_base}/v1/payments/{id}` and only that answer is trusted.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::basket::{self, SaleLine};
use crate::ingest::{self, CustomerData, Method, PaymentFacts};
use crate::webhooks::api_get::{Answer, get_with_bearer};

pub const PROVIDER: &str = "mercadopago";

/// The notification body (its `id` may be a number or a string).
#[derive(Debug, Clone, Deserialize)]
pub struct Notification {
    pub id: Option<Value>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub topic: Option<String>,
    pub action: Option<String>,
    pub live_mode: Option<bool>,
    pub user_id: Option<Value>,
    pub api_version: Option<String>,
    pub data: Option<NotificationData>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NotificationData {
    pub id: Option<Value>,
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Notification {
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let n: Notification = serde_json::from_slice(body)
            .map_err(|e| format!("not a Mercado Pago notification: {e}"))?;
        Ok(n)
    }

    pub fn kind(&self) -> &str {
        self.kind.as_deref().or(self.topic.as_deref()).unwrap_or("")
    }

    pub fn data_id(&self) -> Option<String> {
        self.data
            .as_ref()
            .and_then(|d| d.id.as_ref())
            .and_then(value_text)
    }

    /// The key a redelivery of this notification shares: its `id`, else the resource and action.
    pub fn event_key(&self, data_id: Option<&str>, request_id: Option<&str>) -> String {
        match self.id.as_ref().and_then(value_text) {
            Some(id) => id,
            None => format!(
                "{}:{}:{}",
                data_id.unwrap_or(""),
                self.action.as_deref().unwrap_or(""),
                request_id.unwrap_or("")
            ),
        }
    }
}

/// The fields of `GET /v1/payments/{id}` we use. Amounts are read from the exact JSON text.
#[derive(Debug, Deserialize)]
pub struct Payment {
    pub id: Value,
    pub status: String,
    pub status_detail: Option<String>,
    pub currency_id: String,
    pub transaction_amount: Box<RawValue>,
    pub date_approved: Option<String>,
    pub date_created: Option<String>,
    pub payment_type_id: Option<String>,
    pub payment_method_id: Option<String>,
    pub live_mode: Option<bool>,
    pub description: Option<String>,
    pub external_reference: Option<String>,
    pub payer: Option<Value>,
    pub metadata: Option<Value>,
    pub additional_info: Option<AdditionalInfo>,
    /// The coupon's discount, when the buyer used one.
    pub coupon_amount: Option<Box<RawValue>>,
    /// Shipping charged with the payment.
    pub shipping_amount: Option<Box<RawValue>>,
    /// Refunds so far (`refunds.rs`); absent in older answers.
    #[serde(default)]
    pub refunds: Option<Vec<Value>>,
    #[serde(default)]
    pub transaction_amount_refunded: Option<Box<RawValue>>,
    /// Mercado Pago's own conversion of a payment in another currency: MXN per unit of
    /// `currency_id`, read exactly like the amount.
    #[serde(default)]
    pub conversion_rate: Option<Box<RawValue>>,
}

/// `additional_info`: what the merchant said was sold.
#[derive(Debug, Deserialize)]
pub struct AdditionalInfo {
    #[serde(default)]
    pub items: Vec<Item>,
}

/// One item sold; numbers kept as their JSON text (a number, or a string such as `"1"`).
#[derive(Debug, Deserialize)]
pub struct Item {
    pub id: Option<Value>,
    pub title: Option<String>,
    pub description: Option<String>,
    pub quantity: Option<Box<RawValue>>,
    pub unit_price: Option<Box<RawValue>>,
}

/// What the fetched payment means.
#[derive(Debug)]
pub enum Meaning {
    Paid(Box<PaymentFacts>),
    Record(String),
    Attention(String),
}

/// Parses a JSON number's text exactly (`58.80`, `116`, `1.5e2`), never through f64.
pub fn exact_decimal(text: &str) -> Option<Decimal> {
    let t = text.trim();
    t.parse::<Decimal>()
        .ok()
        .or_else(|| Decimal::from_scientific(t).ok())
}

impl Payment {
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(body).map_err(|e| format!("unexpected payment JSON: {e}"))
    }

    /// `conversion_rate` for a payment not in MXN, when it is a real rate: Mercado Pago writes
    /// `1` (or null) when it converted nothing, which is no rate to MXN.
    pub fn provider_rate(&self) -> Option<Decimal> {
        if self.currency_id.eq_ignore_ascii_case("MXN") {
            return None;
        }
        let rate = exact_decimal(self.conversion_rate.as_ref()?.get())?;
        (rate > Decimal::ZERO && rate != Decimal::ONE).then_some(rate)
    }

    pub fn id_text(&self) -> String {
        value_text(&self.id).unwrap_or_default()
    }

    pub fn meaning(&self, event_id: &str, notification_live: Option<bool>) -> Meaning {
        match self.status.as_str() {
            "approved" => {}
            "refunded" | "charged_back" => {
                return Meaning::Record(format!(
                    "payment {}: credited as a refund of what was not refunded yet",
                    self.status
                ));
            }
            "in_mediation" => {
                return Meaning::Record(format!("payment {}: kept for a later flow", self.status));
            }
            other => return Meaning::Record(format!("payment status {other}: not invoiced (yet)")),
        }
        let Some(amount) = exact_decimal(self.transaction_amount.get()) else {
            return Meaning::Attention(format!(
                "transaction_amount {} is not a number",
                self.transaction_amount.get()
            ));
        };
        let when = self
            .date_approved
            .as_deref()
            .or(self.date_created.as_deref());
        let Some(paid_at) = when
            .and_then(|w| DateTime::parse_from_rfc3339(w).ok())
            .map(|d| d.with_timezone(&Utc))
        else {
            return Meaning::Attention(format!(
                "approved payment without a readable date_approved ({when:?})"
            ));
        };
        let mut customer = CustomerData::default();
        if let Some(payer) = &self.payer {
            let ident = payer.get("identification");
            if ident.and_then(|i| i.get("type")).and_then(Value::as_str) == Some("RFC") {
                customer.rfc = ident
                    .and_then(|i| i.get("number"))
                    .and_then(Value::as_str)
                    .map(|s| s.trim().to_uppercase());
            }
            customer.email = payer
                .get("email")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let first = payer
                .get("first_name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let last = payer.get("last_name").and_then(Value::as_str).unwrap_or("");
            let full = format!("{first} {last}").trim().to_owned();
            if !full.is_empty() {
                customer.nombre = Some(full);
            }
            customer.codigo_postal = payer
                .get("address")
                .and_then(|a| a.get("zip_code"))
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if self.currency_id.eq_ignore_ascii_case("ARS") {
            customer.identification = Some(self.identification());
        }
        // Metadata (set by the merchant at checkout) is more specific than payer data.
        let mut from_meta = CustomerData::default();
        from_meta.fill_from_metadata(self.metadata.as_ref());
        for (slot, v) in [
            (&mut customer.rfc, from_meta.rfc),
            (&mut customer.nombre, from_meta.nombre),
            (&mut customer.regimen_fiscal, from_meta.regimen_fiscal),
            (&mut customer.codigo_postal, from_meta.codigo_postal),
            (&mut customer.uso_cfdi, from_meta.uso_cfdi),
        ] {
            if v.is_some() {
                *slot = v;
            }
        }
        let lines = match self.lines() {
            Ok(lines) => lines,
            Err(why) => return Meaning::Attention(format!("additional_info.items: {why}")),
        };
        Meaning::Paid(Box::new(PaymentFacts {
            provider: PROVIDER,
            payment_id: self.id_text(),
            event_id: event_id.to_owned(),
            amount,
            currency: self.currency_id.to_uppercase(),
            method: Method::MercadoPago {
                payment_type: self.payment_type_id.clone().unwrap_or_default(),
                payment_method: self.payment_method_id.clone().unwrap_or_default(),
            },
            paid_at,
            livemode: self.live_mode.or(notification_live).unwrap_or(true),
            customer,
            description: self.description.clone(),
            references: self
                .external_reference
                .iter()
                .cloned()
                .chain(ingest::order_reference(self.metadata.as_ref()))
                .collect(),
            lines,
            provider_rate: self.provider_rate(),
        }))
    }
}

impl Payment {
    /// An Argentine buyer's `payer.identification` (a number may come as a JSON number) and
    /// the IVA condition in the metadata (`condicion_iva`): what ARCA's voucher names.
    fn identification(&self) -> ingest::Identification {
        let ident = self.payer.as_ref().and_then(|p| p.get("identification"));
        let text = |v: Option<&Value>| {
            v.and_then(value_text)
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
        };
        ingest::Identification {
            kind: text(ident.and_then(|i| i.get("type"))),
            number: text(ident.and_then(|i| i.get("number"))),
            condicion_iva: text(self.metadata.as_ref().and_then(|m| m.get("condicion_iva"))),
        }
    }
}

/// A number Mercado Pago sends as a JSON number or as text (`"1"`, `"58.80"`), exactly.
fn number(v: Option<&RawValue>) -> Option<Decimal> {
    let text = v?.get().trim();
    let unquoted = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    exact_decimal(unquoted)
}

impl Payment {
    /// The items sold (`additional_info.items`), one line each; the coupon (`coupon_amount`)
    /// prorated over them and the shipping (`shipping_amount`) as a line of its own. None when
    /// the payment lists no items.
    fn lines(&self) -> Result<Vec<SaleLine>, String> {
        let Some(items) = self
            .additional_info
            .as_ref()
            .map(|a| &a.items)
            .filter(|i| !i.is_empty())
        else {
            return Ok(Vec::new());
        };
        let mut lines = Vec::new();
        for (n, item) in items.iter().enumerate() {
            let quantity = number(item.quantity.as_deref()).unwrap_or(Decimal::ONE);
            let unit = number(item.unit_price.as_deref())
                .ok_or_else(|| format!("item {} has no readable unit_price", n + 1))?;
            let text = |t: &Option<String>| {
                t.as_deref()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
            };
            lines.push(SaleLine {
                description: text(&item.title)
                    .or_else(|| text(&item.description))
                    .unwrap_or_default(),
                quantity,
                amount: quantity * unit,
                // Its SAT keys come from [invoice.products] by this id (items carry no metadata).
                product_id: item.id.as_ref().and_then(value_text),
                ..SaleLine::default()
            });
        }
        let coupon = number(self.coupon_amount.as_deref()).unwrap_or_default();
        if coupon > Decimal::ZERO {
            let dp = crate::cfdi::catalogs::currency_decimals(&self.currency_id.to_uppercase())
                .unwrap_or(2);
            basket::prorate_discount(&mut lines, coupon, dp)?;
        }
        let shipping = number(self.shipping_amount.as_deref()).unwrap_or_default();
        if shipping > Decimal::ZERO {
            lines.push(SaleLine {
                quantity: Decimal::ONE,
                amount: shipping,
                shipping: true,
                ..SaleLine::default()
            });
        }
        Ok(lines)
    }
}

/// Why a payment could not be fetched. Every variant is retried later.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("Mercado Pago API unreachable: {0}")]
    Network(String),
    #[error("Mercado Pago API answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Mercado Pago API answer unreadable: {0}")]
    Body(String),
    #[error("no Mercado Pago access_token is configured")]
    NoToken,
}

/// Reads payments from the Mercado Pago API.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    api_base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(api_base: &str, token: Option<String>, timeout: Duration) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            http,
            api_base: api_base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// `GET /v1/payments/{id}` with the access token.
    pub async fn payment(&self, id: &str) -> Result<Payment, FetchError> {
        let token = self.token.as_deref().ok_or(FetchError::NoToken)?;
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(FetchError::Body(format!(
                "payment id {id:?} is not a plain id"
            )));
        }
        let url = format!("{}/v1/payments/{id}", self.api_base);
        match get_with_bearer(&self.http, &url, token).await {
            Ok(Answer::Ok(bytes)) => Payment::parse(&bytes).map_err(FetchError::Body),
            Ok(Answer::Refused(status, body)) => Err(FetchError::Status { status, body }),
            Err(e) => Err(FetchError::Network(e)),
        }
    }
}

/// A realistic approved MX card payment (for `send-test-webhook`'s sandbox and tests).
pub fn sample_payment(id: &str, date_approved: &str) -> String {
    format!(
        r#"{{"id": {id}, "date_created": "{date_approved}", "date_approved": "{date_approved}", "operation_type": "regular_payment",
 "payment_method_id": "debvisa", "payment_type_id": "debit_card", "status": "approved", "status_detail": "accredited",
 "currency_id": "MXN", "description": "Plan Pro - agosto 2026", "live_mode": false, "transaction_amount": 116.00,
 "transaction_amount_refunded": 0, "installments": 1, "external_reference": "ORD-{id}",
 "additional_info": {{"items": [
   {{"id": "PLAN-PRO", "title": "Plan Pro - agosto 2026", "quantity": "1", "unit_price": "87", "category_id": "services"}},
   {{"id": "SOPORTE", "title": "Soporte prioritario", "quantity": "1", "unit_price": 29.00, "category_id": "services"}}]}},
 "payer": {{"id": "1234567890", "email": "cliente@example.mx", "first_name": "Berenice", "last_name": "Ximo Quezada",
   "identification": {{"type": "RFC", "number": "XIQB891116QE4"}}, "type": "guest"}},
 "metadata": {{"regimen_fiscal": "612", "codigo_postal": "26015", "uso_cfdi": "G03", "razon_social": "BERENICE XIMO QUEZADA"}}}}"#
    )
}

#[cfg(test)]
mod tests {
    // By full path: circles.py reads `super` here as webhooks/mod.rs, an edge that is not there.
    use crate::webhooks::mercadopago::*;

    #[test]
    fn amounts_are_read_from_the_json_text_exactly() {
        assert_eq!(exact_decimal("58.80"), Some(Decimal::new(5880, 2)));
        assert_eq!(exact_decimal("116"), Some(Decimal::new(116, 0)));
        assert_eq!(exact_decimal("1.5e2"), Some(Decimal::new(150, 0)));
        assert_eq!(exact_decimal("0.1"), Some(Decimal::new(1, 1)));
    }

    #[test]
    fn an_approved_payment_becomes_facts_with_rfc_and_metadata() {
        let p = Payment::parse(
            sample_payment("5466310457", "2026-08-19T09:40:03.000-06:00").as_bytes(),
        )
        .expect("payment");
        let Meaning::Paid(f) = p.meaning("n1", None) else {
            panic!("not paid")
        };
        assert_eq!(f.payment_id, "5466310457");
        assert_eq!(f.amount.to_string(), "116.00");
        assert_eq!(f.customer.rfc.as_deref(), Some("XIQB891116QE4"));
        assert_eq!(f.customer.regimen_fiscal.as_deref(), Some("612"));
        assert_eq!(
            crate::ingest::fecha_of(f.paid_at).to_string(),
            "2026-08-19 09:40:03"
        );
        assert!(!f.livemode);
    }

    #[test]
    fn notification_ids_may_be_numbers_or_strings() {
        let n = Notification::parse(br#"{"id": 12345, "type": "payment", "data": {"id": "999"}}"#)
            .expect("n");
        assert_eq!(n.event_key(Some("999"), None), "12345");
        let n = Notification::parse(br#"{"id": "a47f", "type": "payment", "data": {"id": 999}}"#)
            .expect("n");
        assert_eq!(
            (n.event_key(None, None).as_str(), n.data_id().as_deref()),
            ("a47f", Some("999"))
        );
    }
}
