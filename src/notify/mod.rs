//! Outbound webhooks to the merchant (`invoice.stamped`, `invoice.failed`, `invoice.canceled`)
//! for every document — Stripe and Mercado Pago sales, API invoices, egresos, globals, REPs —
//! signed per Standard Webhooks ([`mod@sign`]), delivered at least once from their own outbox with
//! backoff by the [`Sender`]. Inbound webhooks (Stripe, Mercado Pago) are [`crate::webhooks`].
//!
//! The rows are written in the transaction of the state change (see `store::settle`,
//! `store::outbox` and `store::cancellations`), so a stamp that is only confirmed later — after
//! a PAC timeout — still reaches the merchant.
//!
//! Who may import it: `startup` (to run the [`Sender`]), the settings' validation
//! ([`sign::decode_secret`]) and tests. It uses the store, the `[api]` settings, the invoice's
//! JSON view of the API ([`crate::api::view`]) and, for other documents, its own ([`view`]).

pub mod sign;
pub mod view;

use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::ApiSettings;
use crate::store::api::ClaimedWebhook;
use crate::store::{Db, StoreError};
use sign::{decode_secret, message_id, sign};

/// Where and how deliveries go.
#[derive(Clone)]
pub struct Sender {
    pub db: Db,
    pub url: String,
    key: Vec<u8>,
    pub retry: Vec<Duration>,
    pub http: reqwest::Client,
    /// How often to look for due webhooks when idle.
    pub idle_poll: Duration,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("url", &crate::config::url_for_log(&self.url))
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// `None` when no `[api] webhook_url` is configured.
    pub fn from_settings(db: Db, s: &ApiSettings) -> anyhow::Result<Option<Self>> {
        let (Some(url), Some(secret)) = (&s.webhook_url, &s.webhook_secret) else {
            return Ok(None);
        };
        let key = decode_secret(secret.expose())
            .ok_or_else(|| anyhow::anyhow!("[api] webhook_secret must be whsec_ + base64"))?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(s.webhook_timeout_seconds.max(1)))
            .build()?;
        Ok(Some(Self {
            db,
            url: url.clone(),
            key,
            retry: s
                .webhook_retry_seconds
                .iter()
                .map(|n| Duration::from_secs(*n))
                .collect(),
            http,
            idle_poll: Duration::from_millis(500),
        }))
    }

    /// Delivers due webhooks until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        info!(url = %crate::config::url_for_log(&self.url), "merchant webhooks: sender started");
        crate::shutdown::drain_until_cancelled(token, self.idle_poll, "merchant webhooks", || {
            self.deliver_next()
        })
        .await;
    }

    /// One due webhook; `false` when none was due.
    pub async fn deliver_next(&self) -> Result<bool, StoreError> {
        let now = Utc::now();
        // A sender that dies mid-delivery leaves the row due again after this lease.
        let lease = now + chrono::Duration::seconds(60);
        let Some(w) = self.db.claim_api_webhook(now, lease).await? else {
            return Ok(false);
        };
        // An API invoice keeps its API view and public id; any other document has its own.
        let (public_id, data) = match self.db.api_invoice_by_outbox(w.outbox_id).await? {
            Some(inv) => (
                inv.public_id.clone(),
                Some(crate::api::view::invoice_json(
                    &inv,
                    status_of(&w.event_type),
                )),
            ),
            None => match self.db.document(w.outbox_id).await? {
                Some(d) => {
                    let status = status_of(&w.event_type).unwrap_or("unknown");
                    (
                        view::document_id(d.id),
                        Some(view::document_json(&d, status)),
                    )
                }
                None => (view::document_id(w.outbox_id), None),
            },
        };
        let payload = match (&w.payload, data) {
            (Some(p), _) => p.clone(),
            (None, Some(data)) => {
                let p = payload(&w, data);
                self.db.fix_webhook_payload(w.id, &p).await?
            }
            (None, None) => {
                self.db
                    .settle_api_webhook(w.id, "failed", now, Some("document not found"))
                    .await?;
                return Ok(true);
            }
        };
        let msg_id = message_id(&public_id, w.id);
        let ts = Utc::now().timestamp();
        let signature = sign(&self.key, &msg_id, ts, payload.as_bytes());
        let sent = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("webhook-id", &msg_id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signature)
            .body(payload)
            .send()
            .await;
        let error = match sent {
            Ok(r) if r.status().is_success() => {
                info!(event = %w.event_type, document = %public_id, "merchant webhook delivered");
                crate::metrics::merchant_webhook("delivered");
                self.db
                    .settle_api_webhook(w.id, "delivered", Utc::now(), None)
                    .await?;
                return Ok(true);
            }
            Ok(r) if r.status() == reqwest::StatusCode::GONE => {
                warn!(event = %w.event_type, "merchant endpoint answered 410 Gone: webhook dropped");
                crate::metrics::merchant_webhook("gone");
                self.db
                    .settle_api_webhook(w.id, "failed", Utc::now(), Some("410 Gone"))
                    .await?;
                return Ok(true);
            }
            Ok(r) => format!("HTTP {}", r.status().as_u16()),
            // Without the URL: its query may carry the merchant's token (logged and stored).
            Err(e) => format!("delivery failed: {}", e.without_url()),
        };
        let done = usize::try_from(w.attempts).unwrap_or(usize::MAX);
        match self.retry.get(done.saturating_sub(1)) {
            Some(delay) => {
                let jitter = delay.mul_f64(rand::random_range(0.9..1.1));
                let at = Utc::now() + chrono::Duration::from_std(jitter).unwrap_or_default();
                warn!(event = %w.event_type, attempts = w.attempts, %error, "merchant webhook will be retried");
                crate::metrics::merchant_webhook("retry");
                self.db
                    .settle_api_webhook(w.id, "pending", at, Some(&error))
                    .await?;
            }
            None => {
                warn!(event = %w.event_type, attempts = w.attempts, %error, "merchant webhook given up");
                crate::metrics::merchant_webhook("given_up");
                self.db
                    .settle_api_webhook(w.id, "failed", Utc::now(), Some(&error))
                    .await?;
            }
        }
        Ok(true)
    }
}

/// The document's status an event reports.
fn status_of(event_type: &str) -> Option<&'static str> {
    match event_type {
        "invoice.stamped" => Some("stamped"),
        "invoice.failed" => Some("failed"),
        "invoice.canceled" => Some("canceled"),
        _ => None,
    }
}

/// The event body: type, when it happened, and the document as the event saw it (`data`).
fn payload(w: &ClaimedWebhook, data: serde_json::Value) -> String {
    serde_json::json!({
        "type": w.event_type,
        "timestamp": w.created_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "data": data,
    })
    .to_string()
}
