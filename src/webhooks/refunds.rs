//! Refunds → egresos: the succeeded refunds a delivery carries ([`stripe_refunds`],
//! [`mercadopago_refunds`]), recorded and credited in one transaction ([`credit`]), and the
//! loop that credits those that waited for their original ([`release_loop`]).
//!
//! Also: whether the refunds recorded for a sale (deliveries kept as `recorded`, `docs/webhooks.md`
//! §3 and §5) returned all of it: a sale refunded in full before its factura global is frozen
//! is left out of it.
//!
//! - Stripe `charge.refunded`: the Charge's `refunded` is `true` only for a full refund, and
//!   `amount_refunded` is cumulative.
//! - Stripe `refund.*` / `charge.refund.updated`: one Refund (`re_…`) each; the latest delivery
//!   of each refund says its status, and the `succeeded` ones add up.
//! - Mercado Pago: a payment read with status `refunded` was refunded in full (a partial refund
//!   keeps `approved`); the notification is recorded with that status in its reason. A payment
//!   read as `charged_back` (a chargeback the merchant lost) is refunded of all that its refunds
//!   had not given back yet (`{payment}-chargeback`); `in_mediation` (still open) is nothing yet.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde_json::Value;

use chrono::{DateTime, Utc};

use crate::ingest::from_minor_units;
use crate::refund::RefundFacts;

/// One recorded delivery of a sale.
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'a> {
    pub provider: &'a str,
    pub event_id: &'a str,
    pub event_type: &'a str,
    pub reason: Option<&'a str>,
    pub raw_body: &'a [u8],
}

/// The reason a Mercado Pago notification is recorded with when the payment it points to was
/// read as refunded (`Payment::meaning`).
pub fn is_mp_full_refund(reason: &str) -> bool {
    reason.starts_with("payment refunded:") || reason.starts_with("payment charged_back:")
}

/// What one Stripe delivery says about refunds.
enum StripeRefund {
    /// `charge.refunded`: refunded so far, and whether Stripe calls it full.
    Charge { refunded: Decimal, full: bool },
    /// One Refund and whether it went through.
    Refund {
        id: String,
        amount: Decimal,
        succeeded: bool,
    },
}

fn stripe_refund(event_type: &str, body: &[u8]) -> Option<StripeRefund> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let o = v.get("data")?.get("object")?;
    let currency = o.get("currency")?.as_str()?.to_uppercase();
    let minor = |k: &str| {
        o.get(k)
            .and_then(Value::as_i64)
            .and_then(|m| from_minor_units(m, &currency))
    };
    match o.get("object").and_then(Value::as_str) {
        Some("charge") if event_type.starts_with("charge.refunded") => Some(StripeRefund::Charge {
            refunded: minor("amount_refunded").unwrap_or_default(),
            full: o.get("refunded").and_then(Value::as_bool) == Some(true),
        }),
        Some("refund") => Some(StripeRefund::Refund {
            id: o.get("id")?.as_str()?.to_owned(),
            amount: minor("amount")?,
            succeeded: o.get("status").and_then(Value::as_str) == Some("succeeded"),
        }),
        _ => None,
    }
}

/// Why a sale of `amount` counts as refunded in full, from its recorded deliveries (oldest
/// first); `None` while something of it is still paid.
pub fn refunded_in_full(amount: Decimal, events: &[Recorded<'_>]) -> Option<String> {
    let mut refunds: BTreeMap<String, (Decimal, bool)> = BTreeMap::new();
    let mut last = None;
    for e in events {
        match e.provider {
            super::mercadopago::PROVIDER if e.reason.is_some_and(is_mp_full_refund) => {
                return Some(format!(
                    "refunded in full before its factura global (Mercado Pago payment read as \
                     refunded, notification {})",
                    e.event_id
                ));
            }
            super::stripe::PROVIDER => match stripe_refund(e.event_type, e.raw_body) {
                Some(StripeRefund::Charge { refunded, full }) if full || refunded >= amount => {
                    return Some(format!(
                        "refunded in full before its factura global (Stripe {} {})",
                        e.event_type, e.event_id
                    ));
                }
                Some(StripeRefund::Refund {
                    id,
                    amount,
                    succeeded,
                }) => {
                    refunds.insert(id, (amount, succeeded));
                    last = Some(e);
                }
                _ => {}
            },
            _ => {}
        }
    }
    let refunded: Decimal = refunds.values().filter(|(_, ok)| *ok).map(|(a, _)| a).sum();
    match last {
        Some(e) if refunded >= amount => Some(format!(
            "refunded in full before its factura global ({refunded} in Stripe refunds, last {} {})",
            e.event_type, e.event_id
        )),
        _ => None,
    }
}

/// The succeeded refunds one Stripe event carries, each to become an egreso: a Refund
/// (`refund.*`, `charge.refund.updated`), the Refunds listed on a `charge.refunded`'s Charge (a
/// Charge that lists none carries none: its `refund.*` events do), or a dispute closed as
/// `lost` (a full refund under the dispute's id). A won dispute carries nothing.
pub fn stripe_refunds(event_type: &str, created: i64, object: &Value) -> Vec<RefundFacts> {
    let at = DateTime::from_timestamp(created, 0).unwrap_or_else(Utc::now);
    let id_of = |o: &Value, k: &str| match o.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(v @ Value::Object(_)) => v.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let one = |o: &Value, payment_ref: Option<String>| -> Option<RefundFacts> {
        let currency = o.get("currency")?.as_str()?.to_uppercase();
        let amount = from_minor_units(o.get("amount")?.as_i64()?, &currency)?;
        Some(RefundFacts {
            provider: super::stripe::PROVIDER,
            refund_id: o.get("id")?.as_str()?.to_owned(),
            payment_ref: id_of(o, "payment_intent").or(payment_ref)?,
            amount,
            currency,
            refunded_at: o
                .get("created")
                .and_then(Value::as_i64)
                .and_then(|t| DateTime::from_timestamp(t, 0))
                .unwrap_or(at),
        })
    };
    let succeeded = |o: &Value| o.get("status").and_then(Value::as_str) == Some("succeeded");
    match object.get("object").and_then(Value::as_str) {
        Some("refund") if succeeded(object) => one(object, None).into_iter().collect(),
        Some("charge") if event_type == "charge.refunded" => {
            let pi = id_of(object, "payment_intent");
            object
                .get("refunds")
                .and_then(|r| r.get("data"))
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter(|r| succeeded(r))
                        .filter_map(|r| one(r, pi.clone()))
                        .collect()
                })
                .unwrap_or_default()
        }
        Some("dispute")
            if event_type == "charge.dispute.closed"
                && object.get("status").and_then(Value::as_str) == Some("lost") =>
        {
            one(object, None).into_iter().collect()
        }
        _ => Vec::new(),
    }
}

/// The approved refunds of a Mercado Pago payment as read from its API (`refunds[]`); a payment
/// read as `refunded` that lists none is one refund of what `transaction_amount_refunded` says
/// (else the whole amount) under the id `{payment}-full`.
pub fn mercadopago_refunds(p: &super::mercadopago::Payment) -> Vec<RefundFacts> {
    use super::mercadopago::exact_decimal;
    let currency = p.currency_id.to_uppercase();
    let payment_ref = p.id_text();
    let at = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .and_then(|d| DateTime::parse_from_rfc3339(d).ok())
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_else(Utc::now)
    };
    let listed: Vec<RefundFacts> = p
        .refunds
        .iter()
        .flatten()
        .filter(|r| r.get("status").and_then(Value::as_str) == Some("approved"))
        .filter_map(|r| {
            let id = match r.get("id")? {
                Value::Number(n) => n.to_string(),
                Value::String(s) if !s.is_empty() => s.clone(),
                _ => return None,
            };
            Some(RefundFacts {
                provider: super::mercadopago::PROVIDER,
                refund_id: id,
                payment_ref: payment_ref.clone(),
                amount: exact_decimal(&r.get("amount")?.to_string())?,
                currency: currency.clone(),
                refunded_at: at(r.get("date_created")),
            })
        })
        .collect();
    if p.status == "charged_back" {
        // A lost chargeback takes back what the refunds left: one refund of the rest, under an
        // id of its own, so a notification read again records it once.
        let refunded: Decimal = listed.iter().map(|f| f.amount).sum();
        let rest = exact_decimal(p.transaction_amount.get())
            .map(|total| total - refunded)
            .filter(|r| *r > Decimal::ZERO);
        return listed
            .into_iter()
            .chain(rest.map(|amount| RefundFacts {
                provider: super::mercadopago::PROVIDER,
                refund_id: format!("{payment_ref}-chargeback"),
                payment_ref: payment_ref.clone(),
                amount,
                currency: currency.clone(),
                refunded_at: Utc::now(),
            }))
            .collect();
    }
    if !listed.is_empty() || p.status != "refunded" {
        return listed;
    }
    let amount = p
        .transaction_amount_refunded
        .as_ref()
        .and_then(|a| exact_decimal(a.get()))
        .filter(|a| *a > Decimal::ZERO)
        .or_else(|| exact_decimal(p.transaction_amount.get()));
    amount
        .map(|amount| RefundFacts {
            provider: super::mercadopago::PROVIDER,
            refund_id: format!("{payment_ref}-full"),
            payment_ref: payment_ref.clone(),
            amount,
            currency,
            refunded_at: Utc::now(),
        })
        .into_iter()
        .collect()
}

/// Records `facts` (carried by `event`, written in the same transaction when given) and what
/// each becomes: an egreso frozen now, a wait for the original, a reduced global share.
pub async fn credit(
    state: &crate::state::AppState,
    event: Option<&crate::store::NewEvent>,
    event_id: &str,
    facts: &[RefundFacts],
) -> Result<crate::store::RefundOutcome, crate::store::StoreError> {
    let planner = crate::refund::Planner::new(&state.settings);
    let rows: Vec<_> = facts
        .iter()
        .map(|f| crate::refund::Planner::new_refund(f, event_id))
        .collect();
    let now = Utc::now();
    let out = state
        .db
        .record_refunds(event, &rows, |v| planner.decide(v, now))
        .await?;
    // A duplicate event says no status, so it logs nothing.
    for (f, status) in facts.iter().zip(out.said()) {
        tracing::info!(provider = f.provider, refund_id = %f.refund_id, payment_id = %f.payment_ref, amount = %f.amount, %status, "refund");
    }
    Ok(out)
}

/// Credits, every `[refunds] interval_seconds`, the refunds that waited for their sale's
/// ingreso (or global) once it is stamped. Runs until `token` is cancelled.
pub async fn release_loop(
    state: actix_web::web::Data<crate::state::AppState>,
    token: tokio_util::sync::CancellationToken,
) {
    let every = std::time::Duration::from_secs(state.settings.refunds.interval_seconds.max(1));
    let planner = crate::refund::Planner::new(&state.settings);
    while token
        .run_until_cancelled(release_round(&state, &planner, every))
        .await
        .is_some()
    {}
}

async fn release_round(
    state: &crate::state::AppState,
    planner: &crate::refund::Planner,
    every: std::time::Duration,
) {
    if let Err(e) = cancel_round(state).await {
        tracing::warn!(error = %e, "cannot follow the cancellations of refunded sales; retried");
    }
    let now = Utc::now();
    match state
        .db
        .release_waiting_refunds(|v| planner.decide(v, now))
        .await
    {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            refunds = n,
            "refunds credited once their original was stamped"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot credit the waiting refunds; retried"),
    }
    tokio::time::sleep(every).await;
}

/// Full refunds cancelling their ingreso (`[refunds] full = "cancel"`): the cancellation (motivo
/// 02) is asked through the one cancel path, and followed; when it cannot be had (refused by the
/// rules, rejected by the receptor or SAT, failed) the refund goes back to be credited by an
/// egreso.
async fn cancel_round(state: &crate::state::AppState) -> Result<(), crate::store::StoreError> {
    use crate::domain::DocumentState;
    use crate::domain::cancellation::CancelFacts;
    for c in state.db.canceling_refunds().await? {
        let ended = match c.cancellation.as_deref() {
            None => {
                let facts = state
                    .db
                    .document(c.outbox_id)
                    .await?
                    .filter(|d| d.state == DocumentState::Stamped)
                    .and_then(|d| d.stamped_xml)
                    .and_then(|x| CancelFacts::from_stamped(&x));
                let actor = format!("refund {}", c.refund_id);
                let asked = match &facts {
                    Some(f) => {
                        crate::cancel::request(&state.db, c.outbox_id, f, "02", None, &actor)
                            .await?
                            .map_err(|r| format!("{r:?}"))
                    }
                    None => Err("the ingreso is not stamped".to_owned()),
                };
                match asked {
                    Ok(()) => {
                        tracing::info!(refund_id = %c.refund_id, outbox_id = c.outbox_id, "full refund: ingreso cancellation (motivo 02) requested");
                        None
                    }
                    Err(why) => Some((false, format!("its ingreso cannot be cancelled ({why})"))),
                }
            }
            Some("canceled") => Some((true, "its ingreso was cancelled (motivo 02)".to_owned())),
            Some(s @ ("rejected" | "failed")) => Some((
                false,
                format!(
                    "the ingreso's cancellation was {s} ({})",
                    c.cancel_error.as_deref().unwrap_or("no reason given")
                ),
            )),
            Some(_) => None,
        };
        if let Some((canceled, why)) = ended {
            let reason = if canceled {
                why
            } else {
                format!("{why}: credited by an egreso instead")
            };
            tracing::info!(refund_id = %c.refund_id, canceled, %reason, "full refund");
            state
                .db
                .settle_refund_cancel(c.id, canceled, &reason)
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    // By full path, as in the other files of this folder (the circle check reads `super`).
    use crate::webhooks::mercadopago::{Meaning, Payment, sample_payment};
    use crate::webhooks::refunds::*;
    use crate::webhooks::stripe::sample_event;

    fn stripe(kind: &str, object: Value) -> Vec<u8> {
        sample_event("evt_r", kind, 1_700_000_000, false, object)
            .as_bytes()
            .to_vec()
    }

    fn recorded<'a>(provider: &'a str, kind: &'a str, body: &'a [u8]) -> Recorded<'a> {
        Recorded {
            provider,
            event_id: "evt_r",
            event_type: kind,
            reason: None,
            raw_body: body,
        }
    }

    #[test]
    fn a_charge_refunded_in_full_or_partly() {
        let amount = Decimal::new(11600, 2);
        let charge = |refunded: i64, full: bool| {
            stripe(
                "charge.refunded",
                serde_json::json!({"object": "charge", "id": "ch_1", "payment_intent": "pi_1",
                    "amount": 11600, "amount_refunded": refunded, "refunded": full, "currency": "mxn"}),
            )
        };
        let partial = charge(5800, false);
        let full = charge(11600, true);
        assert_eq!(
            refunded_in_full(amount, &[recorded("stripe", "charge.refunded", &partial)]),
            None
        );
        let why = refunded_in_full(amount, &[recorded("stripe", "charge.refunded", &full)]);
        assert!(
            why.is_some_and(|w| w.contains("charge.refunded evt_r")),
            "full"
        );
    }

    #[test]
    fn stripe_refunds_add_up_by_id_and_only_when_succeeded() {
        let amount = Decimal::new(11600, 2);
        let refund = |id: &str, minor: i64, status: &str| {
            stripe(
                "refund.updated",
                serde_json::json!({"object": "refund", "id": id, "amount": minor,
                    "currency": "mxn", "payment_intent": "pi_1", "status": status}),
            )
        };
        let a = refund("re_a", 5800, "succeeded");
        let a_again = refund("re_a", 5800, "succeeded");
        let b_pending = refund("re_b", 5800, "pending");
        let b_done = refund("re_b", 5800, "succeeded");
        let r = |b: &'static str, body| recorded("stripe", b, body);
        // The same refund twice is one refund; a pending one does not count.
        assert_eq!(
            refunded_in_full(
                amount,
                &[
                    r("refund.created", &a),
                    r("refund.updated", &a_again),
                    r("refund.created", &b_pending)
                ]
            ),
            None
        );
        assert!(
            refunded_in_full(
                amount,
                &[
                    r("refund.created", &a),
                    r("refund.created", &b_pending),
                    r("refund.updated", &b_done)
                ]
            )
            .is_some()
        );
    }

    #[test]
    fn mercado_pago_refunds_are_read_from_the_payment_one_each() {
        let body = sample_payment("5466310457", "2026-08-19T09:40:03.000-06:00").replace(
            "\"transaction_amount_refunded\": 0,",
            "\"transaction_amount_refunded\": 30.5, \"refunds\": [\
             {\"id\": 111, \"amount\": 20.50, \"status\": \"approved\", \"date_created\": \"2026-08-20T10:00:00.000-06:00\"},\
             {\"id\": 112, \"amount\": 10, \"status\": \"approved\"},\
             {\"id\": 113, \"amount\": 5, \"status\": \"rejected\"}],",
        );
        let p = Payment::parse(body.as_bytes()).expect("payment");
        let r = mercadopago_refunds(&p);
        let got: Vec<(&str, Decimal)> =
            r.iter().map(|f| (f.refund_id.as_str(), f.amount)).collect();
        assert_eq!(got, [("111", Decimal::new(2050, 2)), ("112", Decimal::TEN)]);
        assert_eq!(r[0].payment_ref, "5466310457");
        // Read as refunded without a list: one refund of the whole payment.
        let full = sample_payment("5466310457", "2026-08-19T09:40:03.000-06:00")
            .replace("\"status\": \"approved\"", "\"status\": \"refunded\"");
        let p = Payment::parse(full.as_bytes()).expect("payment");
        let r = mercadopago_refunds(&p);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].refund_id, "5466310457-full");
        assert_eq!(Some(r[0].amount), exact_payment_amount(&p));
    }

    #[test]
    fn a_mercado_pago_chargeback_refunds_what_its_refunds_left() {
        let body = sample_payment("5466310457", "2026-08-19T09:40:03.000-06:00")
            .replace("\"status\": \"approved\"", "\"status\": \"charged_back\"")
            .replace(
                "\"transaction_amount_refunded\": 0,",
                "\"refunds\": [{\"id\": 111, \"amount\": 16, \"status\": \"approved\"}],",
            );
        let p = Payment::parse(body.as_bytes()).expect("payment");
        assert_eq!(p.status, "charged_back", "the sample's status was replaced");
        let r = mercadopago_refunds(&p);
        let got: Vec<(&str, Decimal)> =
            r.iter().map(|f| (f.refund_id.as_str(), f.amount)).collect();
        assert_eq!(
            got,
            [
                ("111", Decimal::new(16, 0)),
                ("5466310457-chargeback", Decimal::new(10000, 2))
            ]
        );
        // Still in mediation: nothing is credited yet.
        let open = body.replace("charged_back", "in_mediation");
        let p = Payment::parse(open.as_bytes()).expect("payment");
        assert_eq!(mercadopago_refunds(&p).len(), 1);
    }

    fn exact_payment_amount(p: &Payment) -> Option<Decimal> {
        crate::webhooks::mercadopago::exact_decimal(p.transaction_amount.get())
    }

    #[test]
    fn a_lost_dispute_is_a_refund_and_a_charge_refunded_lists_its_refunds() {
        let dispute = |status: &str| {
            serde_json::json!({"object": "dispute", "id": "dp_1", "amount": 11600,
                "currency": "mxn", "payment_intent": "pi_1", "status": status})
        };
        let lost = stripe_refunds("charge.dispute.closed", 1_700_000_000, &dispute("lost"));
        assert_eq!(lost.len(), 1);
        assert_eq!(
            (lost[0].refund_id.as_str(), lost[0].amount),
            ("dp_1", Decimal::new(11600, 2))
        );
        assert!(stripe_refunds("charge.dispute.closed", 1, &dispute("won")).is_empty());
        let charge = serde_json::json!({"object": "charge", "id": "ch_1", "payment_intent": "pi_1",
            "currency": "mxn", "refunds": {"data": [
                {"object": "refund", "id": "re_1", "amount": 100, "currency": "mxn", "status": "succeeded"},
                {"object": "refund", "id": "re_2", "amount": 100, "currency": "mxn", "status": "pending"}]}});
        let r = stripe_refunds("charge.refunded", 1, &charge);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].refund_id.as_str(), r[0].payment_ref.as_str()),
            ("re_1", "pi_1")
        );
    }

    #[test]
    fn a_mercado_pago_payment_read_as_refunded_is_a_full_refund() {
        let body = sample_payment("5466310457", "2026-08-19T09:40:03.000-06:00")
            .replace("\"status\": \"approved\"", "\"status\": \"refunded\"");
        let p = Payment::parse(body.as_bytes()).expect("payment");
        assert_eq!(p.status, "refunded", "the sample's status was replaced");
        let Meaning::Record(reason) = p.meaning("n1", None) else {
            panic!("a refunded payment is recorded")
        };
        let e = Recorded {
            provider: "mercadopago",
            event_id: "n1",
            event_type: "payment",
            reason: Some(&reason),
            raw_body: b"{}",
        };
        assert!(refunded_in_full(Decimal::ONE, &[e]).is_some(), "{reason}");
        let other = Recorded {
            reason: Some("payment in_mediation: kept for a later flow"),
            ..e
        };
        assert_eq!(refunded_in_full(Decimal::ONE, &[other]), None);
    }
}
