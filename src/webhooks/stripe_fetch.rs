//! A paid Stripe event whose lines or exchange rate come from the Stripe API: stored first as
//! `pending_fetch` (its raw body, exactly as signed), then completed from the API and planned.
//! When the API cannot be read the event stays stored and the retry loop tries it again with
//! backoff, as Mercado Pago notifications are; nothing is invoiced on partial data.

use crate::domain::PaymentStatus;
use chrono::Utc;
use serde_json::Value;
use tracing::Instrument;

use crate::ingest::PaymentFacts;
use crate::state::AppState;
use crate::store::{Completion, EventRow, NewEvent, PendingFetch, StoreError};
use crate::webhooks::stripe::{self, Event, Meaning};
use crate::webhooks::stripe_api::{self, Client, FetchError};
use crate::webhooks::{outcome_name, retry_delay_seconds};

/// Stores `row` (the delivery of `ev`) as `pending_fetch`, then tries to complete it now.
pub async fn store_and_resolve(
    state: &AppState,
    mut row: NewEvent,
    payment_id: &str,
) -> Result<&'static str, StoreError> {
    row.status = "pending_fetch".into();
    row.reason = Some("waiting for the Stripe API".into());
    row.payment_ref = Some(payment_id.to_owned());
    row.next_attempt_at = Some(Utc::now() + chrono::Duration::seconds(delay(state, 0)));
    let id = match state.db.record_event(&row).await? {
        Some(id) => id,
        None => match state
            .db
            .event_status(stripe::PROVIDER, &row.event_id)
            .await?
        {
            Some((id, status)) if status == "pending_fetch" => id,
            _ => return Ok("duplicate"),
        },
    };
    let pending = PendingFetch {
        id,
        provider: stripe::PROVIDER.into(),
        event_id: row.event_id.clone(),
        payment_ref: row.payment_ref.clone(),
        livemode: row.livemode,
        attempts: 0,
    };
    resolve(state, &pending).await
}

fn delay(state: &AppState, attempts: i32) -> i64 {
    retry_delay_seconds(state.settings.stripe.retry_interval_seconds, attempts)
}

/// Completes a stored Stripe event from the API and records what it means. A failed read
/// only reschedules it.
pub async fn resolve(state: &AppState, p: &PendingFetch) -> Result<&'static str, StoreError> {
    let ev = match state.db.event_body(p.id).await? {
        Some(body) => stripe::parse(&body),
        None => Err("the stored event is gone".into()),
    };
    let facts = match ev.as_ref().map(|ev| (ev, stripe::classify(ev))) {
        Ok((ev, Meaning::Paid(facts))) => (ev, facts),
        Ok(_) => return finish(state, p, "the stored event is not a paid sale").await,
        Err(reason) => return finish(state, p, reason).await,
    };
    let (ev, mut facts) = facts;
    let Some(client) = state.stripe.as_ref() else {
        return finish(
            state,
            p,
            "[stripe] api_key was removed while this event waited for the Stripe API: set it again",
        )
        .await;
    };
    match complete(client, ev, &mut facts).await {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => {
            // The API answered, and what it says cannot be invoiced as it is: the payment is
            // recorded as needing attention, with the reason.
            return plan(state, p, &facts, Some(reason)).await;
        }
        Err(e) => {
            let at = Utc::now() + chrono::Duration::seconds(delay(state, p.attempts));
            tracing::warn!(event_id = %p.event_id, payment_id = ?p.payment_ref, error = %e, next_attempt = %at, "Stripe API read failed; event kept for retry");
            state.db.reschedule_fetch(p.id, at, &e.to_string()).await?;
            return Ok("stored_pending_fetch");
        }
    }
    plan(state, p, &facts, None).await
}

/// Records the stored event as needing attention for `reason`, without a payment.
async fn finish(
    state: &AppState,
    p: &PendingFetch,
    reason: &str,
) -> Result<&'static str, StoreError> {
    state
        .db
        .finish_pending_event(p.id, "needs_attention", Some(reason), None, None)
        .await?;
    Ok("needs_attention")
}

/// Plans `facts` (as needing attention for `problem`, when there is one) and writes the
/// payment with its comprobante, taking the stored event over.
async fn plan(
    state: &AppState,
    p: &PendingFetch,
    facts: &PaymentFacts,
    problem: Option<String>,
) -> Result<&'static str, StoreError> {
    let (mut payment, mut draft, outage) = super::plan(state, facts).await;
    if problem.is_none() {
        let base = state.settings.stripe.retry_interval_seconds;
        if let Some(waiting) = super::wait_for_rate(state, p, outage, base).await? {
            return Ok(waiting);
        }
    }
    if let Some(reason) = problem {
        payment.status = PaymentStatus::NeedsAttention;
        payment.reason = Some(reason);
        draft = None;
    }
    let span = super::recording_span(&facts.payment_id, &super::key_of(draft.as_ref()));
    let out = state
        .db
        .ingest(
            &EventRow::Stored {
                id: p.id,
                payment_ref: facts.payment_id.clone(),
                livemode: facts.livemode,
                finish: true,
            },
            &payment,
            draft,
            // The session's fiscal data completes a sale its PaymentIntent recorded first.
            if facts.customer.rfc.is_some() {
                Completion::FiscalData
            } else {
                Completion::None
            },
        )
        .instrument(span.clone())
        .await?;
    span.in_scope(|| tracing::info!(payment_id = %facts.payment_id, outcome = outcome_name(&out), status = %payment.status, reason = ?payment.reason, "stripe payment"));
    Ok(outcome_name(&out))
}

/// Fills `facts` from the API: the line items of the sale's Checkout Session and, for a sale
/// not in MXN, the exchange rate of its charge. `Err` = the API could not be read (retried);
/// `Ok(Err)` = it answered with something that cannot be invoiced as it is.
async fn complete(
    client: &Client,
    ev: &Event,
    facts: &mut PaymentFacts,
) -> Result<Result<(), String>, FetchError> {
    let o = &ev.data.object;
    let (session, invoice): (Option<Value>, Option<Value>) = match ev.kind.as_str() {
        k if k.starts_with("checkout.session.") => (Some(o.clone()), None),
        "invoice.paid" => (None, Some(o.clone())),
        // A PaymentIntent paid through a Checkout Session or for a Billing invoice: the sale
        // is that one, whichever of its events comes first.
        "payment_intent.succeeded" => {
            match client.session_of_payment_intent(&facts.payment_id).await? {
                Some(s) => (Some(s), None),
                None => (
                    None,
                    client.invoice_of_payment_intent(&facts.payment_id).await?,
                ),
            }
        }
        _ => (None, None),
    };
    if ev.kind == "payment_intent.succeeded" {
        let found = match (&session, &invoice) {
            (Some(s), _) => stripe::facts_as(ev, "checkout.session.completed", s),
            (_, Some(i)) => stripe::facts_as(ev, "invoice.paid", i),
            _ => None,
        };
        // Only the same payment: the customer data of the Session or invoice it paid.
        if let Some(f) = found.filter(|f| f.payment_id == facts.payment_id) {
            *facts = f;
        }
    }
    if let Some(session) = session {
        let id = session.get("id").and_then(Value::as_str).unwrap_or("");
        let items = client.checkout_line_items(id).await?;
        match stripe_api::checkout_lines(&session, &items, &facts.currency) {
            Ok(lines) => facts.lines = lines,
            Err(reason) => return Ok(Err(format!("Checkout Session {id}: {reason}"))),
        }
    }
    if let Some(invoice) = invoice {
        let id = invoice.get("id").and_then(Value::as_str).unwrap_or("");
        let first = invoice.pointer("/lines/data").and_then(Value::as_array);
        let more = invoice.pointer("/lines/has_more").and_then(Value::as_bool);
        // The lines the event carries, unless there are more: then all of them, from the API.
        let items = match (first, more) {
            (Some(lines), Some(false)) => lines.clone(),
            _ => client.invoice_lines(id).await?,
        };
        let mut products = std::collections::HashMap::new();
        for p in items.iter().filter_map(stripe_api::invoice_line_product) {
            if let std::collections::hash_map::Entry::Vacant(e) = products.entry(p) {
                let product = client.product(e.key()).await?;
                e.insert(product);
            }
        }
        match stripe_api::invoice_lines(&invoice, &items, &products, &facts.currency) {
            Ok(lines) => facts.lines = lines,
            Err(reason) => return Ok(Err(format!("invoice {id}: {reason}"))),
        }
    }
    if facts.currency != "MXN" && facts.payment_id.starts_with("pi_") {
        facts.provider_rate = client.exchange_rate(&facts.payment_id).await?;
    }
    Ok(Ok(()))
}
