//! The Stripe API, read only, with `[stripe] api_key` (README, "Line items and SAT keys"): what a webhook
//! does not carry. The line items of a Checkout Session (with `data.price.product` expanded,
//! for the product's metadata), the Checkout Session of a PaymentIntent, and the exchange rate
//! of the charge's balance transaction. Lists are read to their end (`has_more`).

use std::time::Duration;

use rust_decimal::Decimal;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::basket::{self, SaleLine};
use crate::config::{SecretString, StripeSettings};
use crate::ingest;
use crate::webhooks::api_get::{Answer, get_with_bearer};
use crate::webhooks::mercadopago::exact_decimal;

/// Why something could not be read from Stripe. Every variant is retried later.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("Stripe API unreachable: {0}")]
    Network(String),
    #[error("Stripe API answered {status} to {path}: {body}")]
    Status {
        path: String,
        status: u16,
        body: String,
    },
    #[error("Stripe API answer to {path} unreadable: {why}")]
    Body { path: String, why: String },
}

/// A read-only Stripe API client.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    api_base: String,
    key: SecretString,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("stripe_api::Client")
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

/// The most items a Stripe list page holds.
const PAGE: &str = "100";

impl Client {
    /// The client of `[stripe]`, or `None` when no `api_key` is set.
    pub fn from_settings(s: &StripeSettings) -> Result<Option<Self>, String> {
        let Some(key) = s.api_key.clone() else {
            return Ok(None);
        };
        let timeout = Duration::from_secs(s.fetch_timeout_seconds);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Some(Self {
            http,
            api_base: s.api_base.trim_end_matches('/').to_owned(),
            key,
        }))
    }

    /// `GET {api_base}{path}?{query}` with the key; the body of a 2xx.
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Vec<u8>, FetchError> {
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect();
        let sep = if query.is_empty() { "" } else { "?" };
        let url = format!("{}{path}{sep}{}", self.api_base, query.join("&"));
        match get_with_bearer(&self.http, &url, self.key.expose()).await {
            Ok(Answer::Ok(bytes)) => Ok(bytes),
            Ok(Answer::Refused(status, body)) => Err(FetchError::Status {
                path: path.to_owned(),
                status,
                body,
            }),
            Err(e) => Err(FetchError::Network(e)),
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, FetchError> {
        let bytes = self.get(path, query).await?;
        serde_json::from_slice(&bytes).map_err(|e| FetchError::Body {
            path: path.to_owned(),
            why: e.to_string(),
        })
    }

    /// Every object of the list at `path`, page after page while `has_more`.
    async fn list(&self, path: &str, query: &[(&str, &str)]) -> Result<Vec<Value>, FetchError> {
        #[derive(Deserialize)]
        struct Page {
            data: Vec<Value>,
            #[serde(default)]
            has_more: bool,
        }
        let mut out: Vec<Value> = Vec::new();
        loop {
            let after = out
                .last()
                .and_then(|o| o.get("id"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let mut q: Vec<(&str, &str)> = query.to_vec();
            q.push(("limit", PAGE));
            if let Some(a) = after.as_deref() {
                q.push(("starting_after", a));
            }
            let page: Page = self.get_json(path, &q).await?;
            let more = page.has_more && !page.data.is_empty();
            out.extend(page.data);
            if !more {
                return Ok(out);
            }
        }
    }

    /// The line items of Checkout Session `session`, each with its product expanded.
    pub async fn checkout_line_items(&self, session: &str) -> Result<Vec<Value>, FetchError> {
        let path = format!("/v1/checkout/sessions/{}/line_items", plain_id(session)?);
        self.list(&path, &[("expand[]", "data.price.product")])
            .await
    }

    /// The Checkout Session a PaymentIntent was paid through, if any.
    pub async fn session_of_payment_intent(
        &self,
        payment_intent: &str,
    ) -> Result<Option<Value>, FetchError> {
        let id = plain_id(payment_intent)?;
        let path = "/v1/checkout/sessions";
        let page: Vec<Value> = self
            .get_json::<ListPage>(path, &[("payment_intent", id), ("limit", "1")])
            .await?
            .data;
        Ok(page.into_iter().next())
    }

    /// Every line of invoice `invoice` (`GET /v1/invoices/{id}/lines`, every page).
    pub async fn invoice_lines(&self, invoice: &str) -> Result<Vec<Value>, FetchError> {
        let path = format!("/v1/invoices/{}/lines", plain_id(invoice)?);
        self.list(&path, &[]).await
    }

    /// The Billing invoice a PaymentIntent paid, if any (`GET /v1/invoice_payments`).
    pub async fn invoice_of_payment_intent(
        &self,
        payment_intent: &str,
    ) -> Result<Option<Value>, FetchError> {
        let id = plain_id(payment_intent)?;
        let q = [
            ("payment[type]", "payment_intent"),
            ("payment[payment_intent]", id),
            ("limit", "1"),
        ];
        let page: ListPage = self.get_json("/v1/invoice_payments", &q).await?;
        let Some(invoice) = page.data.first().and_then(|p| id_field(p, "invoice")) else {
            return Ok(None);
        };
        let path = format!("/v1/invoices/{}", plain_id(&invoice)?);
        self.get_json(&path, &[]).await.map(Some)
    }

    /// Product `id` (for its metadata: invoice lines name their product by id only).
    pub async fn product(&self, id: &str) -> Result<Value, FetchError> {
        let path = format!("/v1/products/{}", plain_id(id)?);
        self.get_json(&path, &[]).await
    }

    /// MXN per unit of the charge's currency, as the balance transaction of PaymentIntent
    /// `payment_intent`'s charge reports it; `None` when Stripe converted nothing (the account
    /// settles in that currency).
    pub async fn exchange_rate(&self, payment_intent: &str) -> Result<Option<Decimal>, FetchError> {
        let pi: Value = self
            .get_json(
                &format!("/v1/payment_intents/{}", plain_id(payment_intent)?),
                &[],
            )
            .await?;
        let charge = id_field(&pi, "latest_charge").ok_or_else(|| FetchError::Body {
            path: format!("/v1/payment_intents/{payment_intent}"),
            why: "no latest_charge".into(),
        })?;
        let ch: Value = self
            .get_json(&format!("/v1/charges/{}", plain_id(&charge)?), &[])
            .await?;
        let Some(txn) = id_field(&ch, "balance_transaction") else {
            return Ok(None);
        };
        #[derive(Deserialize)]
        struct Txn {
            currency: String,
            exchange_rate: Option<Box<RawValue>>,
        }
        let path = format!("/v1/balance_transactions/{}", plain_id(&txn)?);
        let t: Txn = self.get_json(&path, &[]).await?;
        let rate = match t.exchange_rate.as_deref().map(RawValue::get) {
            None | Some("null") => return Ok(None),
            Some(text) => exact_decimal(text).ok_or_else(|| FetchError::Body {
                path: path.clone(),
                why: format!("exchange_rate {text} is not a number"),
            })?,
        };
        // The rate converts into the balance's currency; only an MXN balance gives TipoCambio.
        Ok((t.currency.eq_ignore_ascii_case("mxn") && rate > Decimal::ZERO).then_some(rate))
    }
}

#[derive(Deserialize)]
struct ListPage {
    data: Vec<Value>,
}

/// `s` percent-encoded for a query string (every byte but the unreserved ones).
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An id that can go in a URL path as it is.
fn plain_id(id: &str) -> Result<&str, FetchError> {
    if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(id)
    } else {
        Err(FetchError::Body {
            path: String::new(),
            why: format!("id {id:?} is not a plain Stripe id"),
        })
    }
}

/// An id field that is either the id string or an expanded object with `id`.
fn id_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(id_of)
}

/// The id of a reference: the id string itself, or an expanded object's `id`.
fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(_) => v.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

fn minor(v: &Value, key: &str, currency: &str) -> Option<Decimal> {
    ingest::from_minor_units(v.get(key)?.as_i64()?, currency)
}

/// The IVA percent, amount and whether it is included, of a line's `taxes` (Stripe Tax), when
/// there are any.
fn taxes_of(v: &Value, currency: &str) -> Taxes {
    let Some(t) = v
        .get("taxes")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    else {
        return Taxes::default();
    };
    let rate = t.get("rate");
    let percent = rate
        .and_then(|r| r.get("percentage"))
        .and_then(|p| exact_decimal(&p.to_string()));
    let inclusive = rate
        .and_then(|r| r.get("inclusive"))
        .and_then(Value::as_bool);
    Taxes {
        percent,
        amount: minor(t, "amount", currency),
        inclusive,
    }
}

/// A line's tax as Stripe Tax computed it.
#[derive(Default)]
struct Taxes {
    percent: Option<Decimal>,
    amount: Option<Decimal>,
    inclusive: Option<bool>,
}

/// A Checkout line item (its `price.product` expanded) as a sale line.
pub fn sale_line(item: &Value, currency: &str) -> Result<SaleLine, String> {
    let id = item.get("id").and_then(Value::as_str).unwrap_or("?");
    let price = item.get("price");
    let product = price.and_then(|p| p.get("product"));
    let tax = taxes_of(item, currency);
    let amount = minor(item, "amount_subtotal", currency)
        .ok_or_else(|| format!("line item {id} has no amount_subtotal"))?;
    Ok(SaleLine {
        description: item
            .get("description")
            .and_then(Value::as_str)
            .or_else(|| product.and_then(|p| p.get("name")).and_then(Value::as_str))
            .unwrap_or("")
            .to_owned(),
        quantity: Decimal::from(item.get("quantity").and_then(Value::as_i64).unwrap_or(1)),
        amount,
        discount: minor(item, "amount_discount", currency).unwrap_or_default(),
        tax_percent: tax.percent,
        tax_amount: tax.amount,
        tax_inclusive: tax.inclusive,
        product_id: product.and_then(id_of),
        price_id: price
            .and_then(|p| p.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        tax_code: product
            .and_then(|p| id_field(p, "tax_code"))
            .filter(|c| !c.is_empty()),
        keys: basket::keys_from_metadata(product.and_then(|p| p.get("metadata"))),
        shipping: false,
    })
}

/// The shipping a Checkout Session charged (`shipping_cost`), as a sale line; `None` when free
/// or absent.
pub fn shipping_line(session: &Value, currency: &str) -> Option<SaleLine> {
    let cost = session.get("shipping_cost").filter(|c| c.is_object())?;
    let amount = minor(cost, "amount_subtotal", currency)?;
    if amount.is_zero() {
        return None;
    }
    let tax = taxes_of(cost, currency);
    Some(SaleLine {
        quantity: Decimal::ONE,
        amount,
        tax_percent: tax.percent,
        tax_amount: tax.amount,
        tax_inclusive: tax.inclusive,
        price_id: id_field(cost, "shipping_rate"),
        shipping: true,
        ..SaleLine::default()
    })
}

/// The lines of Checkout Session `session` from its `items`: one per item, shipping last,
/// and the part of the order's discount (`total_details.amount_discount`) the items do not
/// already carry, prorated over them to the centavo.
pub fn checkout_lines(
    session: &Value,
    items: &[Value],
    currency: &str,
) -> Result<Vec<SaleLine>, String> {
    if items.is_empty() {
        return Err("the Checkout Session has no line items".into());
    }
    let mut lines = items
        .iter()
        .map(|i| sale_line(i, currency))
        .collect::<Result<Vec<_>, _>>()?;
    let order_discount = session
        .get("total_details")
        .and_then(|t| minor(t, "amount_discount", currency))
        .unwrap_or_default();
    spread_rest(&mut lines, order_discount, currency)?;
    lines.extend(shipping_line(session, currency));
    Ok(lines)
}

/// The sum of the `amount`s (minor units) of a list of discount amounts.
fn sum_amounts(list: Option<&Value>, currency: &str) -> Decimal {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| minor(d, "amount", currency))
        .sum()
}

/// Prorates the part of the order's discount `order` that no line carries yet.
fn spread_rest(lines: &mut [SaleLine], order: Decimal, currency: &str) -> Result<(), String> {
    let carried: Decimal = lines.iter().map(|l| l.discount).sum();
    if order > carried {
        let dp = crate::cfdi::catalogs::currency_decimals(currency).unwrap_or(2);
        basket::prorate_discount(lines, order - carried, dp)?;
    }
    Ok(())
}

/// The product id of an invoice line: `pricing.price_details.product` (API 2025-03-31 and
/// later), else `price.product`.
pub fn invoice_line_product(line: &Value) -> Option<String> {
    line.pointer("/pricing/price_details/product")
        .or_else(|| line.pointer("/price/product"))
        .and_then(id_of)
}

/// `start`–`end` (seconds) as the service period of a description, in Mexico City dates.
fn period_text(line: &Value) -> Option<String> {
    let day = |k: &str| {
        let t = line.pointer(&format!("/period/{k}"))?.as_i64()?;
        let d = chrono::DateTime::from_timestamp(t, 0)?;
        Some(
            d.with_timezone(&chrono_tz::America::Mexico_City)
                .format("%d/%m/%Y")
                .to_string(),
        )
    };
    Some(format!("periodo {} al {}", day("start")?, day("end")?))
}

/// The lines of a paid Billing invoice: one per invoice line (its description with the
/// subscription period, its discounts), the product's SAT keys from `products` (id →
/// product object). The part of the invoice's discounts no line carries is prorated.
pub fn invoice_lines(
    invoice: &Value,
    items: &[Value],
    products: &std::collections::HashMap<String, Value>,
    currency: &str,
) -> Result<Vec<SaleLine>, String> {
    if items.is_empty() {
        return Err("the invoice has no lines".into());
    }
    let mut lines = Vec::new();
    for item in items {
        let id = item.get("id").and_then(Value::as_str).unwrap_or("?");
        let amount = minor(item, "amount", currency)
            .ok_or_else(|| format!("invoice line {id} has no amount"))?;
        let discount = sum_amounts(item.get("discount_amounts"), currency);
        let product_id = invoice_line_product(item);
        let product = product_id.as_ref().and_then(|p| products.get(p));
        let description = item
            .get("description")
            .and_then(Value::as_str)
            .or_else(|| product.and_then(|p| p.get("name")).and_then(Value::as_str))
            .unwrap_or("");
        let description = match period_text(item) {
            Some(p) => format!("{description} ({p})"),
            None => description.to_owned(),
        };
        lines.push(SaleLine {
            description,
            quantity: Decimal::from(
                item.get("quantity")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
                    .max(1),
            ),
            amount,
            discount,
            price_id: item
                .pointer("/pricing/price_details/price")
                .or_else(|| item.pointer("/price/id"))
                .and_then(id_of),
            tax_code: product.and_then(|p| id_field(p, "tax_code")),
            keys: basket::keys_from_metadata(product.and_then(|p| p.get("metadata"))),
            product_id,
            ..SaleLine::default()
        });
    }
    let invoice_discount = sum_amounts(invoice.get("total_discount_amounts"), currency);
    spread_rest(&mut lines, invoice_discount, currency)?;
    Ok(lines)
}
