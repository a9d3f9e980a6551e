//! Stripe snapshot events (`docs/webhooks.md` §2–3): which ones invoice, and the payment facts
//! they carry. Parsing is tolerant: unknown fields are ignored, most fields optional.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use crate::ingest::{self, CustomerData, Method, PaymentFacts};

pub const PROVIDER: &str = "stripe";

/// The event envelope.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds since the epoch: when the event (the success) happened.
    pub created: i64,
    #[serde(default)]
    pub livemode: bool,
    pub api_version: Option<String>,
    pub account: Option<String>,
    pub data: EventData,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EventData {
    pub object: Value,
}

/// What an event means for us.
#[derive(Debug, Clone)]
pub enum Meaning {
    /// A paid sale to invoice.
    Paid(Box<PaymentFacts>),
    /// Kept for a later flow (refunds → egreso, disputes → review).
    Record {
        payment_ref: Option<String>,
        reason: String,
    },
    /// Nothing to do; answered 200 and kept as `ignored`.
    Ignore(String),
    /// Signed but unusable: recorded as needing attention.
    Attention {
        payment_ref: Option<String>,
        reason: String,
    },
}

/// Parses the body of a verified delivery.
pub fn parse(body: &[u8]) -> Result<Event, String> {
    let v: Event = serde_json::from_slice(body).map_err(|e| format!("not a Stripe event: {e}"))?;
    if v.id.is_empty() {
        return Err("not a Stripe event: empty id".into());
    }
    Ok(v)
}

fn s(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// An id field that is either the id string or an expanded object with `id`.
fn id_of(v: &Value, key: &str) -> Option<String> {
    match v.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(obj @ Value::Object(_)) => s(obj, "id"),
        _ => None,
    }
}

pub fn classify(ev: &Event) -> Meaning {
    let o = &ev.data.object;
    match ev.kind.as_str() {
        "payment_intent.succeeded" => paid(payment_intent(ev, o)),
        "checkout.session.completed" => match o.get("payment_status").and_then(Value::as_str) {
            Some("paid") => paid(checkout_session(ev, o)),
            other => Meaning::Ignore(format!(
                "checkout session with payment_status {}: waiting for async_payment_succeeded",
                other.unwrap_or("missing")
            )),
        },
        "checkout.session.async_payment_succeeded" => paid(checkout_session(ev, o)),
        "invoice.paid" if o.get("amount_paid").and_then(Value::as_i64) == Some(0) => {
            Meaning::Ignore("invoice paid with nothing charged (amount_paid 0)".into())
        }
        "invoice.paid" => paid(invoice(ev, o)),
        k if k.starts_with("charge.refunded") || k.starts_with("refund.") => Meaning::Record {
            payment_ref: id_of(o, "payment_intent")
                .or_else(|| id_of(o, "charge"))
                .or_else(|| s(o, "id")),
            reason: "refund: kept for the credit note (egreso)".into(),
        },
        k if k.starts_with("charge.dispute.") => Meaning::Record {
            payment_ref: id_of(o, "payment_intent").or_else(|| id_of(o, "charge")),
            reason: "dispute: kept for manual review".into(),
        },
        other => Meaning::Ignore(format!("event type {other} is not invoiced")),
    }
}

/// The facts of the sale `object` (a Checkout Session, an invoice) read as if event `ev` were
/// of type `kind` about it: a PaymentIntent's event takes the customer data and references of
/// the Session or invoice it paid. `None` when that object is not a paid sale.
pub fn facts_as(ev: &Event, kind: &str, object: &Value) -> Option<PaymentFacts> {
    let as_event = Event {
        kind: kind.to_owned(),
        data: EventData {
            object: object.clone(),
        },
        ..ev.clone()
    };
    match classify(&as_event) {
        Meaning::Paid(f) => Some(*f),
        _ => None,
    }
}

fn paid(r: Result<PaymentFacts, (Option<String>, String)>) -> Meaning {
    match r {
        Ok(f) => Meaning::Paid(Box::new(f)),
        Err((payment_ref, reason)) => Meaning::Attention {
            payment_ref,
            reason,
        },
    }
}

fn paid_at(ev: &Event) -> Result<DateTime<Utc>, (Option<String>, String)> {
    DateTime::from_timestamp(ev.created, 0)
        .ok_or((None, format!("event created {} is not a time", ev.created)))
}

fn amount(
    o: &Value,
    keys: &[&str],
    id: &str,
) -> Result<(rust_decimal::Decimal, String), (Option<String>, String)> {
    let minor = keys
        .iter()
        .find_map(|k| o.get(*k).and_then(Value::as_i64))
        .ok_or((Some(id.to_owned()), format!("missing {}", keys.join(" / "))))?;
    let currency = s(o, "currency")
        .ok_or((Some(id.to_owned()), "missing currency".into()))?
        .to_uppercase();
    let amount = ingest::from_minor_units(minor, &currency).ok_or((
        Some(id.to_owned()),
        format!("currency {currency} is not in c_Moneda"),
    ))?;
    Ok((amount, currency))
}

/// The method from an expanded charge, else from the single allowed method type.
fn method(o: &Value) -> Method {
    let details = o
        .get("latest_charge")
        .and_then(|c| c.get("payment_method_details"))
        .or_else(|| o.get("payment_method_details"));
    if let Some(d) = details {
        return method_from_details(d);
    }
    let types: Vec<&str> = o
        .get("payment_method_types")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match types.as_slice() {
        ["oxxo"] => Method::Oxxo,
        ["customer_balance"] => Method::Spei,
        ["card"] | [] => Method::Card(None),
        _ => Method::Card(None),
    }
}

fn method_from_details(d: &Value) -> Method {
    match d.get("type").and_then(Value::as_str) {
        Some("card") => Method::Card(d.get("card").and_then(|c| s(c, "funding"))),
        Some("oxxo") => Method::Oxxo,
        Some("customer_balance") => Method::Spei,
        Some(other) => Method::Other(other.to_owned()),
        None => Method::Card(None),
    }
}

fn payment_intent(ev: &Event, o: &Value) -> Result<PaymentFacts, (Option<String>, String)> {
    let id = s(o, "id").ok_or((None, "payment intent without id".into()))?;
    let amount = amount(o, &["amount_received", "amount"], &id)?;
    let customer = CustomerData {
        email: s(o, "receipt_email"),
        ..CustomerData::default()
    };
    // The receipt number is on the charge, present only when it came expanded.
    let receipt = o.get("latest_charge").and_then(|c| s(c, "receipt_number"));
    facts(ev, o, id, amount, customer, s(o, "description"), receipt)
}

fn checkout_session(ev: &Event, o: &Value) -> Result<PaymentFacts, (Option<String>, String)> {
    let session = s(o, "id").ok_or((None, "checkout session without id".into()))?;
    // The PaymentIntent id, when there is one, so the same sale seen through
    // payment_intent.succeeded is recognised as the same payment.
    let id = id_of(o, "payment_intent").unwrap_or_else(|| session.clone());
    let amount = amount(o, &["amount_total"], &id)?;
    // What the customer typed for the invoice (custom fields) first; then what Checkout
    // collects for itself (the mx_rfc tax id, the business or customer name, the billing
    // postal code); then the metadata.
    let mut customer = CustomerData::default();
    customer.fill_from_custom_fields(o.get("custom_fields"));
    if let Some(cd) = o.get("customer_details") {
        ingest::fill(&mut customer.rfc, mx_rfc(cd.get("tax_ids")));
        let name = s(cd, "business_name")
            .or_else(|| s(cd, "name"))
            .filter(|n| !n.trim().is_empty());
        ingest::fill(&mut customer.nombre, name);
        let cp = cd.get("address").and_then(|a| s(a, "postal_code"));
        ingest::fill(&mut customer.codigo_postal, cp);
        customer.email = s(cd, "email");
    }
    facts(ev, o, id, amount, customer, None, Some(session))
}

/// The value of the `mx_rfc` entry of a list of tax ids, in capitals.
fn mx_rfc(tax_ids: Option<&Value>) -> Option<String> {
    tax_id(tax_ids, "mx_rfc").map(|v| v.to_uppercase())
}

/// The value of the entry of type `kind` of a list of tax ids, trimmed.
fn tax_id(tax_ids: Option<&Value>, kind: &str) -> Option<String> {
    tax_ids
        .and_then(Value::as_array)?
        .iter()
        .find(|t| t.get("type").and_then(Value::as_str) == Some(kind))
        .and_then(|t| s(t, "value"))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// An Argentine buyer (a sale in ARS, which ARCA invoices): the `ar_cuit` tax id Checkout or
/// the invoice collected, else the metadata's `cuit` or `dni`; the IVA condition from the
/// metadata's `condicion_iva`, as for Mercado Pago ([`crate::arca::buyer`] checks them).
fn ar_identification(o: &Value) -> ingest::Identification {
    let tax_ids = o
        .get("customer_details")
        .and_then(|c| c.get("tax_ids"))
        .or_else(|| o.get("customer_tax_ids"));
    let meta = |k: &str| {
        o.get("metadata")
            .and_then(|m| s(m, k))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let (kind, number) = match (tax_id(tax_ids, "ar_cuit"), meta("cuit"), meta("dni")) {
        (Some(cuit), _, _) | (None, Some(cuit), _) => (Some("CUIT"), Some(cuit)),
        (None, None, Some(dni)) => (Some("DNI"), Some(dni)),
        (None, None, None) => (None, None),
    };
    ingest::Identification {
        kind: kind.map(str::to_owned),
        number,
        condicion_iva: meta("condicion_iva"),
    }
}

/// The PaymentIntent that paid invoice `o`: `payments.data[].payment.payment_intent` (API
/// 2025-03-31 and later), else the older `payment_intent` field.
pub fn invoice_payment_intent(o: &Value) -> Option<String> {
    let from_payments = o
        .get("payments")
        .and_then(|p| p.get("data"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|p| p.get("payment").and_then(|p| id_of(p, "payment_intent")));
    from_payments.or_else(|| id_of(o, "payment_intent"))
}

/// A Stripe Billing invoice: the PaymentIntent id as the payment id (so its
/// `payment_intent.succeeded` is the same payment), the customer's `mx_rfc` tax id, name and
/// postal code, and the invoice's metadata.
fn invoice(ev: &Event, o: &Value) -> Result<PaymentFacts, (Option<String>, String)> {
    let invoice_id = s(o, "id").ok_or((None, "invoice without id".into()))?;
    let id = invoice_payment_intent(o).unwrap_or_else(|| invoice_id.clone());
    let amount = amount(o, &["amount_paid"], &id)?;
    let mut customer = CustomerData::default();
    ingest::fill(&mut customer.rfc, mx_rfc(o.get("customer_tax_ids")));
    ingest::fill(&mut customer.nombre, s(o, "customer_name"));
    let cp = o.get("customer_address").and_then(|a| s(a, "postal_code"));
    ingest::fill(&mut customer.codigo_postal, cp);
    customer.email = s(o, "customer_email");
    // A subscription's metadata may carry the fiscal data too (after the invoice's own).
    for details in [
        o.get("subscription_details"),
        o.pointer("/parent/subscription_details"),
    ] {
        let mut more = CustomerData::default();
        more.fill_from_metadata(details.and_then(|d| d.get("metadata")));
        for (slot, v) in [
            (&mut customer.regimen_fiscal, more.regimen_fiscal),
            (&mut customer.codigo_postal, more.codigo_postal),
            (&mut customer.uso_cfdi, more.uso_cfdi),
            (&mut customer.rfc, more.rfc),
            (&mut customer.nombre, more.nombre),
        ] {
            ingest::fill(slot, v);
        }
    }
    let reference = s(o, "number").or(Some(invoice_id));
    facts(ev, o, id, amount, customer, s(o, "description"), reference)
}

/// The facts of a paid sale read from `o` (a payment intent or a checkout session) of `ev`;
/// the customer's metadata fills what the object itself did not say. `reference` is one more
/// the customer may hold (the Checkout Session id, the receipt number).
fn facts(
    ev: &Event,
    o: &Value,
    payment_id: String,
    (amount, currency): (rust_decimal::Decimal, String),
    mut customer: CustomerData,
    description: Option<String>,
    reference: Option<String>,
) -> Result<PaymentFacts, (Option<String>, String)> {
    customer.fill_from_metadata(o.get("metadata"));
    if currency == "ARS" {
        customer.identification = Some(ar_identification(o));
    }
    let references = reference
        .into_iter()
        .chain(ingest::order_reference(o.get("metadata")))
        .collect();
    Ok(PaymentFacts {
        provider: PROVIDER,
        payment_id,
        event_id: ev.id.clone(),
        amount,
        currency,
        method: method(o),
        paid_at: paid_at(ev)?,
        livemode: ev.livemode,
        customer,
        description,
        references,
        // Filled from the Stripe API, when it is configured (webhooks/stripe_api.rs).
        lines: Vec::new(),
        provider_rate: None,
    })
}

/// A realistic signed-ready `payment_intent.succeeded` body for `send-test-webhook` and tests.
/// `suffix` makes the event and payment ids unique.
pub fn sample_payment_intent(suffix: &str, created: i64, livemode: bool) -> String {
    let object = serde_json::json!({
            "id": format!("pi_test_{suffix}"),
            "object": "payment_intent",
            "amount": 11600,
            "amount_received": 11600,
            "currency": "mxn",
            "customer": null,
            "description": "Plan Pro - suscripción mensual",
            "latest_charge": format!("ch_test_{suffix}"),
            "livemode": livemode,
            "metadata": {
                "order_id": format!("ORD-{suffix}"),
                "rfc": "XIQB891116QE4",
                "razon_social": "BERENICE XIMO QUEZADA",
                "regimen_fiscal": "612",
                "codigo_postal": "26015",
                "uso_cfdi": "G03"
            },
            "payment_method_types": ["card"],
            "receipt_email": "cliente@example.mx",
            "status": "succeeded"
    });
    sample_event(
        &format!("evt_test_{suffix}"),
        "payment_intent.succeeded",
        created,
        livemode,
        object,
    )
}

/// A Stripe event envelope of type `kind` around `object`, as Stripe sends it (sample traffic).
pub fn sample_event(id: &str, kind: &str, created: i64, livemode: bool, object: Value) -> String {
    serde_json::json!({
        "id": id,
        "object": "event",
        "api_version": "2026-06-24.dahlia",
        "created": created,
        "data": { "object": object },
        "livemode": livemode,
        "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null },
        "type": kind
    })
    .to_string()
}
