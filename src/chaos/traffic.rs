//! The payments of a chaos run and their webhook deliveries: signed like Stripe and Mercado
//! Pago sign them, each payment delivered one to four times (redeliveries, a second event for
//! the same sale), some pairs at the same moment to different instances, later ones out of
//! order; every delivery retried until an instance acknowledges it, as the providers do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::check::{SaleKind, SentPayment};
use crate::config::{SANDBOX_MP_SECRET, SANDBOX_STRIPE_SECRET};
use crate::domain::StampKey;
use crate::webhooks::{signature, stripe};

/// One webhook request, re-signed at every attempt (as a provider's retry is).
#[derive(Debug, Clone)]
pub enum Delivery {
    Stripe { body: Arc<str> },
    MercadoPago { data_id: Arc<str>, body: Arc<str> },
}

/// Deliveries that go out together at `slot` (two of them: at the same moment, to different
/// instances).
#[derive(Debug, Clone)]
pub struct Group {
    pub slot: u64,
    pub deliveries: Vec<Delivery>,
}

#[derive(Debug)]
pub struct Plan {
    pub payments: Vec<SentPayment>,
    pub groups: Vec<Group>,
    pub deliveries: usize,
    /// How far (in slots) a payment's later deliveries may lag: a little (`near`), or much.
    spread: (u64, u64),
}

impl Plan {
    /// An empty plan for `n` payments sent at `rate` a second.
    fn new(n: usize, rate: f64) -> Plan {
        Plan {
            payments: Vec::with_capacity(n),
            groups: Vec::new(),
            deliveries: 0,
            spread: ((rate * 3.0).max(2.0) as u64, (rate * 10.0).max(4.0) as u64),
        }
    }

    /// Adds the `i`th payment, its deliveries `ds` scheduled from slot `i` on.
    fn add(&mut self, i: usize, sent: SentPayment, ds: Vec<Delivery>, rng: &mut StdRng) {
        self.deliveries += ds.len();
        self.payments.push(sent);
        schedule(&mut self.groups, i as u64, ds, self.spread, rng);
    }

    /// The plan with its groups in slot order, as they are sent.
    fn sorted(mut self) -> Plan {
        self.groups.sort_by_key(|g| g.slot);
        self
    }
}

/// A Stripe `checkout.session.completed` for the PaymentIntent of `suffix`: the same sale seen
/// through another event.
fn checkout_session(suffix: &str, created: i64) -> String {
    let object = serde_json::json!({
            "id": format!("cs_test_{suffix}"),
            "object": "checkout.session",
            "payment_intent": format!("pi_test_{suffix}"),
            "payment_status": "paid",
            "amount_total": 11600,
            "currency": "mxn",
            "customer_details": {
                "email": "cliente@example.mx",
                "name": "BERENICE XIMO QUEZADA",
                "address": { "postal_code": "26015" },
                "tax_ids": [{ "type": "mx_rfc", "value": "XIQB891116QE4" }]
            },
            "metadata": {
                "order_id": format!("ORD-{suffix}"),
                "regimen_fiscal": "612",
                "uso_cfdi": "G03"
            },
            "payment_method_types": ["card"]
    });
    stripe::sample_event(
        &format!("evt_test_{suffix}_cs"),
        "checkout.session.completed",
        created,
        false,
        object,
    )
}

/// A Mercado Pago payment notification (`payment.created` or `payment.updated`).
fn mp_notification(data_id: &str, notification_id: &str, action: &str) -> String {
    serde_json::json!({
        "id": notification_id, "live_mode": false, "type": "payment",
        "date_created": chrono::Utc::now().to_rfc3339(), "user_id": 44444, "api_version": "v1",
        "action": action, "data": { "id": data_id }
    })
    .to_string()
}

/// How long before a near-window payment's first delivery its SAT window closes for the
/// worker (which stops sending `window_margin_seconds`, 60, before the PAC's own limit).
pub const NEAR_WINDOW_LEFT_SECS: i64 = 6;

/// The share of Stripe payments dated at the window's edge.
const NEAR_WINDOW_SHARE: f64 = 0.1;

/// The shares of the other Stripe payments sold without an RFC: invoiced by their customer at
/// the portal, or left for the factura global.
const PORTAL_SHARE: f64 = 0.15;
const GLOBAL_SHARE: f64 = 0.2;

/// The share of nominative Stripe sales also refunded in part, and of those the share whose
/// refund is delivered before the sale itself.
const REFUND_SHARE: f64 = 0.15;
const REFUND_FIRST_SHARE: f64 = 0.3;

/// What those refunds give back of the sample's 116.00.
const REFUND_MINOR: i64 = 3000;

/// A Stripe `refund.created` (succeeded) of [`REFUND_MINOR`] for the PaymentIntent of `suffix`.
fn refund_created(suffix: &str, created: i64) -> String {
    let object = serde_json::json!({
        "id": format!("re_test_{suffix}"), "object": "refund", "amount": REFUND_MINOR,
        "currency": "mxn", "payment_intent": format!("pi_test_{suffix}"),
        "charge": format!("ch_test_{suffix}"), "status": "succeeded", "created": created
    });
    stripe::sample_event(
        &format!("evt_test_{suffix}_re"),
        "refund.created",
        created,
        false,
        object,
    )
}

/// A `payment_intent.succeeded` without the customer's fiscal data (only an order reference).
fn without_rfc(suffix: &str, paid: i64) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&stripe::sample_payment_intent(suffix, paid, false))
            .unwrap_or_default();
    v["data"]["object"]["metadata"] = serde_json::json!({ "order_id": format!("ORD-{suffix}") });
    v.to_string()
}

/// Plans `n` payments, half Stripe and half Mercado Pago, sent at `rate` payments per second
/// (slot `i` is the first delivery of payment `i`). `now` is the payments' time (Unix seconds),
/// except for about a tenth of the Stripe ones, dated 72 hours before their first delivery
/// (less the worker's margin and [`NEAR_WINDOW_LEFT_SECS`]): their clock starts at the edge of
/// the SAT window, which closes a few seconds after they arrive. Of the rest, some are sold
/// without an RFC: paid `now` for a customer who invoices at the portal, or paid at `closed`
/// (a time in a closed period) for the factura global.
pub fn plan(n: usize, rate: f64, run: &str, (now, closed): (i64, i64), rng: &mut StdRng) -> Plan {
    let mut plan = Plan::new(n, rate);
    let mut mp_count: i64 = 0;
    for i in 0..n {
        let k = rng.random_range(1..=4usize);
        let mut ds: Vec<Delivery> = Vec::with_capacity(k);
        let provider;
        let payment_id;
        let mut near_window = false;
        let mut kind = SaleKind::Nominative;
        let mut refund = None;
        if rng.random_bool(0.5) {
            provider = stripe::PROVIDER;
            let suffix = format!("chaos{run}{i:06}");
            payment_id = format!("pi_test_{suffix}");
            near_window = rng.random_bool(NEAR_WINDOW_SHARE);
            if !near_window {
                let r: f64 = rng.random();
                if r < PORTAL_SHARE {
                    kind = SaleKind::Portal;
                } else if r < PORTAL_SHARE + GLOBAL_SHARE {
                    kind = SaleKind::Global;
                }
            }
            let paid = if near_window {
                // 72 h before its first delivery, plus the worker's 60 s margin and a few
                // seconds to be sent in.
                now + (i as f64 / rate) as i64 - 72 * 3600 + 60 + NEAR_WINDOW_LEFT_SECS
            } else if kind == SaleKind::Global {
                closed
            } else {
                now
            };
            let pi: Arc<str> = match kind {
                SaleKind::Nominative => stripe::sample_payment_intent(&suffix, paid, false),
                _ => without_rfc(&suffix, paid),
            }
            .into();
            for _ in 0..k {
                ds.push(Delivery::Stripe { body: pi.clone() });
            }
            // A Checkout Session carries the customer's fiscal data: only for sales with them.
            if kind == SaleKind::Nominative && k >= 2 && rng.random_bool(0.25) {
                let at = rng.random_range(0..k);
                ds[at] = Delivery::Stripe {
                    body: checkout_session(&suffix, paid).into(),
                };
            }
            // A partial refund, delivered once or twice: some before the sale itself (it then
            // waits for the sale's ingreso).
            if kind == SaleKind::Nominative && !near_window && rng.random_bool(REFUND_SHARE) {
                let body: Arc<str> = refund_created(&suffix, paid).into();
                for _ in 0..rng.random_range(1..=2) {
                    let d = Delivery::Stripe { body: body.clone() };
                    if rng.random_bool(REFUND_FIRST_SHARE) {
                        ds.insert(0, d);
                    } else {
                        ds.push(d);
                    }
                }
                refund = Some(rust_decimal::Decimal::new(REFUND_MINOR, 2).to_string());
            }
        } else {
            provider = crate::webhooks::mercadopago::PROVIDER;
            payment_id = mp_payment(now, &mut mp_count, k, &mut ds, rng);
        }
        let sent = SentPayment {
            provider: provider.to_owned(),
            stamp_key: StampKey::derive(provider, &payment_id, "ingreso").to_string(),
            payment_id,
            near_window,
            kind,
            refund,
        };
        plan.add(i, sent, ds, rng);
    }
    plan.sorted()
}

/// A Mercado Pago payment notified `k` times (some as `payment.updated`), its deliveries
/// pushed to `ds`; returns its id. The sandbox's stand-in payments API reads the approval time
/// from the id: Unix seconds, then three digits (`count` of them so far). A thousand payments
/// per second of the past.
fn mp_payment(
    now: i64,
    count: &mut i64,
    k: usize,
    ds: &mut Vec<Delivery>,
    rng: &mut StdRng,
) -> String {
    let secs = now - 1 - *count / 1000;
    let id = format!("{}", secs * 1000 + *count % 1000);
    *count += 1;
    let data_id: Arc<str> = id.clone().into();
    let created: Arc<str> = mp_notification(&id, &format!("{id}1"), "payment.created").into();
    for _ in 0..k {
        let body = if rng.random_bool(0.3) {
            mp_notification(&id, &format!("{id}2"), "payment.updated").into()
        } else {
            created.clone()
        };
        ds.push(Delivery::MercadoPago {
            data_id: data_id.clone(),
            body,
        });
    }
    id
}

/// Puts a payment's deliveries in groups: the first (two at once, sometimes) at `slot`, the
/// others a little later (`near` slots at most) or, one in ten, much later (`far`).
fn schedule(
    groups: &mut Vec<Group>,
    slot: u64,
    ds: Vec<Delivery>,
    (near, far): (u64, u64),
    rng: &mut StdRng,
) {
    let k = ds.len();
    let mut rest = ds.into_iter();
    let first: Vec<Delivery> = if k >= 2 && rng.random_bool(0.15) {
        rest.by_ref().take(2).collect()
    } else {
        rest.by_ref().take(1).collect()
    };
    groups.push(Group {
        slot,
        deliveries: first,
    });
    for d in rest {
        let later = if rng.random_bool(0.1) {
            rng.random_range(1..=far)
        } else {
            rng.random_range(1..=near)
        };
        groups.push(Group {
            slot: slot + later,
            deliveries: vec![d],
        });
    }
}

/// Plans `n` Mercado Pago payments only (the Argentine run: every one in ARS), delivered as
/// [`plan`] delivers them.
pub fn plan_mercadopago(n: usize, rate: f64, now: i64, rng: &mut StdRng) -> Plan {
    let mut plan = Plan::new(n, rate);
    let mut count = 0;
    for i in 0..n {
        let k = rng.random_range(1..=4usize);
        let mut ds = Vec::with_capacity(k);
        let payment_id = mp_payment(now, &mut count, k, &mut ds, rng);
        let provider = crate::webhooks::mercadopago::PROVIDER;
        let sent = SentPayment {
            provider: provider.to_owned(),
            stamp_key: StampKey::derive(provider, &payment_id, "ingreso").to_string(),
            payment_id,
            near_window: false,
            kind: SaleKind::Nominative,
            refund: None,
        };
        plan.add(i, sent, ds, rng);
    }
    plan.sorted()
}

/// What the sender has done so far.
#[derive(Debug, Default)]
pub struct SendStats {
    pub acknowledged: AtomicU64,
    /// Attempts that got no 2xx (instance down, killed mid-request, 5xx) and were retried.
    pub retried: AtomicU64,
}

/// Sends every group at its slot (`rate` slots per second), at most `concurrency` groups at a
/// time, each delivery retried until acknowledged or until `give_up`. Returns the deliveries
/// that never were, with why.
pub async fn send_all(
    plan_groups: Vec<Group>,
    targets: Arc<Vec<String>>,
    rate: f64,
    concurrency: usize,
    seed: u64,
    stats: Arc<SendStats>,
    give_up: Instant,
) -> Vec<String> {
    let http = match reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(concurrency)
        .build()
    {
        Ok(h) => h,
        Err(e) => return vec![format!("cannot build the HTTP client: {e}")],
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let sem = Arc::new(Semaphore::new(concurrency.max(1)));
    let start = tokio::time::Instant::now();
    let mut tasks = JoinSet::new();
    let mut errors = Vec::new();
    for g in plan_groups {
        // `--rate` is checked positive and finite, so the division always gives a duration.
        let due = start + Duration::try_from_secs_f64(g.slot as f64 / rate).unwrap_or_default();
        tokio::time::sleep_until(due).await;
        let Ok(permit) = sem.clone().acquire_owned().await else {
            break;
        };
        while let Some(done) = tasks.try_join_next() {
            collect(done, &mut errors);
        }
        let first = rng.random_range(0..targets.len());
        let (http, targets, stats) = (http.clone(), targets.clone(), stats.clone());
        tasks.spawn(async move {
            let mut sends = JoinSet::new();
            for (j, d) in g.deliveries.into_iter().enumerate() {
                let (http, targets, stats) = (http.clone(), targets.clone(), stats.clone());
                sends.spawn(async move {
                    deliver(&http, &targets, first + j, &d, &stats, give_up).await
                });
            }
            let mut errs = Vec::new();
            while let Some(r) = sends.join_next().await {
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => errs.push(e),
                    Err(e) => errs.push(format!("delivery task failed: {e}")),
                }
            }
            drop(permit);
            errs
        });
    }
    while let Some(done) = tasks.join_next().await {
        collect(done, &mut errors);
    }
    errors
}

fn collect(done: Result<Vec<String>, tokio::task::JoinError>, errors: &mut Vec<String>) {
    match done {
        Ok(e) => errors.extend(e),
        Err(e) => errors.push(format!("delivery task failed: {e}")),
    }
}

/// One delivery, to `targets[first]` and then the next instance at each retry.
async fn deliver(
    http: &reqwest::Client,
    targets: &[String],
    first: usize,
    d: &Delivery,
    stats: &SendStats,
    give_up: Instant,
) -> Result<(), String> {
    let mut attempt: u32 = 0;
    loop {
        let base = &targets[(first + attempt as usize) % targets.len()];
        let now = chrono::Utc::now().timestamp();
        let req = match d {
            Delivery::Stripe { body } => http
                .post(format!("{base}/webhooks/stripe"))
                .header(
                    "Stripe-Signature",
                    signature::stripe_header(&[SANDBOX_STRIPE_SECRET], now, body.as_bytes()),
                )
                .header("Content-Type", "application/json")
                .body(body.to_string()),
            Delivery::MercadoPago { data_id, body } => {
                let request_id = uuid::Uuid::new_v4().to_string();
                let ts = now.to_string();
                let v1 =
                    signature::mp_sign(SANDBOX_MP_SECRET, Some(data_id), Some(&request_id), &ts);
                http.post(format!(
                    "{base}/webhooks/mercadopago?data.id={data_id}&type=payment"
                ))
                .header("x-signature", format!("ts={ts},v1={v1}"))
                .header("x-request-id", request_id)
                .header("Content-Type", "application/json")
                .body(body.to_string())
            }
        };
        let why = match req.send().await {
            Ok(r) if r.status().is_success() => {
                stats.acknowledged.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Ok(r) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                // A refusal of the request itself will not change by sending it again.
                if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 429 {
                    return Err(format!("{base} refused a delivery: {status} {text}"));
                }
                format!("{status} {text}")
            }
            Err(e) => e.to_string(),
        };
        stats.retried.fetch_add(1, Ordering::Relaxed);
        if Instant::now() > give_up {
            return Err(format!(
                "a delivery was never acknowledged after {} attempts; last: {why}",
                attempt + 1
            ));
        }
        attempt += 1;
        let pause = Duration::from_millis(100 * u64::from(attempt.min(20)));
        tokio::time::sleep(pause.mul_f64(rand::random_range(0.5..1.5))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_payment_is_delivered_one_to_four_times_first_at_its_slot() {
        let mut rng = StdRng::seed_from_u64(1);
        let p = plan(400, 20.0, "t", (1_760_000_000, 1_757_000_000), &mut rng);
        assert_eq!(p.payments.len(), 400);
        let sent: usize = p.groups.iter().map(|g| g.deliveries.len()).sum();
        assert_eq!(sent, p.deliveries);
        assert!(p.deliveries >= 400 && p.deliveries <= 1600);
        assert!(p.groups.windows(2).all(|w| w[0].slot <= w[1].slot));
        assert!(
            p.groups.iter().any(|g| g.deliveries.len() == 2),
            "some pairs"
        );
        let providers: std::collections::HashSet<_> =
            p.payments.iter().map(|s| s.provider.as_str()).collect();
        assert_eq!(providers.len(), 2);
        let ids: std::collections::HashSet<_> =
            p.payments.iter().map(|s| s.payment_id.as_str()).collect();
        assert_eq!(ids.len(), 400, "payment ids are unique");
        let near = p.payments.iter().filter(|s| s.near_window).count();
        assert!(
            (5..=40).contains(&near),
            "about a tenth of the Stripe ones: {near}"
        );
        assert!(
            p.payments
                .iter()
                .filter(|s| s.near_window)
                .all(|s| s.provider == stripe::PROVIDER)
        );
        let of = |k: SaleKind| p.payments.iter().filter(|s| s.kind == k).count();
        assert!(
            (10..=60).contains(&of(SaleKind::Portal)),
            "{}",
            of(SaleKind::Portal)
        );
        assert!(
            (15..=70).contains(&of(SaleKind::Global)),
            "{}",
            of(SaleKind::Global)
        );
        // Sales without an RFC are never completed by a Checkout Session with one.
        let bodies: Vec<&str> = p
            .groups
            .iter()
            .flat_map(|g| &g.deliveries)
            .filter_map(|d| match d {
                Delivery::Stripe { body } => Some(&**body),
                Delivery::MercadoPago { .. } => None,
            })
            .collect();
        for s in p.payments.iter().filter(|s| s.kind != SaleKind::Nominative) {
            let mine: Vec<&&str> = bodies
                .iter()
                .filter(|b| b.contains(&s.payment_id))
                .collect();
            assert!(!mine.is_empty());
            assert!(
                mine.iter()
                    .all(|b| !b.contains("rfc") && !b.contains("checkout.session")),
                "{}",
                s.payment_id
            );
        }
    }
}
