//! The customer's emails (`deliveries`, migration 0022): the row a stamp queues in its own
//! write (see `settle.rs`) and the one a cancellation queues in its own (`cancellations.rs`),
//! the courier's claim and settle, the admin's list and resend.
//!
//! A row is claimed with a lease by moving its `run_at` to the lease's end under a claim id
//! (`lease_owner`): a courier that dies while sending leaves it due again when the lease ends,
//! and it is sent again under the same Message-ID. Only the claim that holds the row settles
//! it.

use chrono::{DateTime, Utc};

use super::admin::audit_in;
use super::exec::{Dialect, Dialected, Tx, stmt};
use super::{Db, StoreError};
use crate::domain::DeliveryState;
use crate::domain::delivery::{Event, resent_message_id};

/// The customer's address of a document: its payment's `customer_json.email`, blank as none;
/// for an egreso, that of the sale it credits, and for a REP that of the invoice it pays
/// (their own payment rows carry none). JSON is read differently by each backend (the only
/// reason for this marker's two spellings).
const EMAIL: (&str, &str, &str) = (
    "{EMAIL}",
    "COALESCE(NULLIF(TRIM(json_extract(p.customer_json, '$.email')), ''), \
     NULLIF(TRIM(json_extract(op.customer_json, '$.email')), ''), \
     NULLIF(TRIM(json_extract(ip.customer_json, '$.email')), ''))",
    "COALESCE(NULLIF(TRIM(p.customer_json::jsonb #>> '{email}'), ''), \
     NULLIF(TRIM(op.customer_json::jsonb #>> '{email}'), ''), \
     NULLIF(TRIM(ip.customer_json::jsonb #>> '{email}'), ''))",
);

/// Where [`EMAIL`] reads from: the document `o`, its payment `p`, for an egreso the sale `op`
/// its refund credits, for a REP the payment `ip` of the API invoice it pays (the same on both
/// backends).
const PAYMENTS: (&str, &str, &str) = ("{PAYMENTS}", PAYMENTS_JOIN, PAYMENTS_JOIN);
const PAYMENTS_JOIN: &str = "JOIN payments p ON p.id = o.payment_id \
     LEFT JOIN refunds r ON r.outbox_id = o.id AND o.kind = 'egreso' \
     LEFT JOIN payments op ON op.provider = r.provider AND op.payment_id = r.payment_ref \
     LEFT JOIN api_pagos ap ON ap.outbox_id = o.id AND o.kind = 'pago' \
     LEFT JOIN api_invoices ai ON ai.id = ap.invoice_id \
     LEFT JOIN outbox io ON io.id = ai.outbox_id \
     LEFT JOIN payments ip ON ip.id = io.payment_id";

/// The message of a fresh stamp ($1 its Message-ID, $2 now, $3 the outbox row), inserted only
/// when the row was stamped by this write and its customer has an address; a second settle of
/// the same stamp (a reclaimed lease) finds the row there and adds nothing. SQLite runs it in
/// the settle's script, after the outbox UPDATE (it sees the row stamped); PostgreSQL as a
/// part of the settle's `WITH`, whose parts all see the snapshot from before the UPDATE, so it
/// asks whether `settled` returned the row.
pub(super) static QUEUE_STAMPED: Dialected = Dialected::new(
    "INSERT INTO deliveries (outbox_id, event, resend, recipient, message_id, state, attempts, \
     run_at, created_at, updated_at) \
     SELECT o.id, 'stamped', 0, {EMAIL}, $1, 'pending', 0, $2, $2, $2 \
     FROM outbox o {PAYMENTS} \
     WHERE o.id = $3 AND {STAMPED} AND {EMAIL} IS NOT NULL ON CONFLICT DO NOTHING",
    &[
        EMAIL,
        PAYMENTS,
        (
            "{STAMPED}",
            "o.state = 'stamped'",
            "o.id IN (SELECT id FROM settled)",
        ),
    ],
);

/// PostgreSQL's batched settle (`settle.rs`): the same for every row `settled` returned whose
/// `v.message_id` is set (`$13` now).
pub(super) static QUEUE_STAMPED_MANY_PG: Dialected = Dialected::new(
    "mailed AS (INSERT INTO deliveries (outbox_id, event, resend, recipient, message_id, state, \
     attempts, run_at, created_at, updated_at) \
     SELECT o.id, 'stamped', 0, {EMAIL}, v.message_id, 'pending', 0, $13, $13, $13 \
     FROM settled JOIN v ON v.id = settled.id JOIN outbox o ON o.id = settled.id {PAYMENTS} \
     WHERE v.message_id IS NOT NULL AND {EMAIL} IS NOT NULL ON CONFLICT DO NOTHING)",
    &[EMAIL, PAYMENTS],
);

/// The message of event $4 of the outbox row $3 ($1 its Message-ID, $2 now), written in the
/// transaction that records the event (a cancellation ending `canceled`, an adopted stamp).
static QUEUE_EVENT: Dialected = Dialected::new(
    "INSERT INTO deliveries (outbox_id, event, resend, recipient, message_id, state, attempts, \
     run_at, created_at, updated_at) \
     SELECT o.id, $4, 0, {EMAIL}, $1, 'pending', 0, $2, $2, $2 \
     FROM outbox o {PAYMENTS} \
     WHERE o.id = $3 AND {EMAIL} IS NOT NULL ON CONFLICT DO NOTHING",
    &[EMAIL, PAYMENTS],
);

/// In `tx`, with the change that causes it: the customer's email of `event` of document
/// `outbox_id`, when email is on (`domain`) and the customer has an address.
pub(super) async fn queue_event_in(
    tx: &mut Tx<'_>,
    outbox_id: i64,
    event: Event,
    domain: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let Some(domain) = domain else {
        return Ok(());
    };
    let uuid: Option<(Option<String>,)> = stmt("SELECT uuid FROM outbox WHERE id = $1")
        .bind(outbox_id)
        .fetch_optional_in(tx, "read a document's UUID")
        .await?;
    let Some(uuid) = uuid.and_then(|u| u.0) else {
        return Ok(());
    };
    stmt(QUEUE_EVENT.text(tx.dialect()))
        .bind(resent_message_id(&uuid, event, 0, domain))
        .bind(now)
        .bind(outbox_id)
        .bind(event.tag())
        .execute_in(tx, "queue the customer's email")
        .await?;
    Ok(())
}

/// The Message-ID of a fresh stamp's message, when email is on (`domain`, of `[email] from`).
pub(super) fn stamped_message_id(uuid: &str, domain: Option<&str>) -> Option<String> {
    domain.map(|d| resent_message_id(uuid, Event::Stamped, 0, d))
}

/// A delivery as the admin lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub event: String,
    pub resend: i32,
    pub recipient: String,
    pub message_id: String,
    pub state: DeliveryState,
    pub attempts: i32,
    pub run_at: DateTime<Utc>,
    pub last_reply: Option<String>,
    pub requested_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
}

/// A delivery the courier claimed, with what it needs to build the message.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedDelivery {
    pub id: i64,
    /// The document's outbox row; `None` for an ARCA voucher's email (`arca_key`).
    pub outbox_id: Option<i64>,
    /// The authorized ARCA voucher it sends (migration 0029).
    pub arca_key: Option<String>,
    pub event: String,
    pub recipient: String,
    pub message_id: String,
    /// Attempts so far, this one included.
    pub attempts: i32,
}

/// How a send ended, for [`Db::settle_delivery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The server took it.
    Sent,
    /// Refused for good (5xx), or it cannot be built.
    Bounced,
    /// Try again at this time.
    Retry(DateTime<Utc>),
    /// Transient failures until the schedule ran out.
    Failed,
}

impl DeliveryOutcome {
    /// The state it leaves the delivery in.
    pub const fn state(self) -> DeliveryState {
        match self {
            Self::Sent => DeliveryState::Sent,
            Self::Bounced => DeliveryState::Bounced,
            Self::Retry(_) => DeliveryState::Retry,
            Self::Failed => DeliveryState::Failed,
        }
    }
}

/// The next due delivery, claimed until `$1` by `$2` (`$3` now).
static CLAIM: Dialected = Dialected::new(
    "UPDATE deliveries SET run_at = $1, lease_owner = $2, attempts = attempts + 1, updated_at = $3 \
     WHERE id = (SELECT id FROM deliveries WHERE state IN ('pending', 'retry') AND run_at <= $3 \
     ORDER BY run_at, id LIMIT 1{LOCK}) \
     RETURNING id, outbox_id, arca_key, event, recipient, message_id, attempts",
    &[Dialect::SKIP_LOCKED],
);

const DELIVERY_COLUMNS: &str = "id, event, resend, recipient, message_id, state, attempts, \
    run_at, last_reply, requested_by, created_at, sent_at";

impl Db {
    /// Claims the next due delivery for `lease` (a claim id is drawn for it).
    pub async fn claim_delivery(
        &self,
        now: DateTime<Utc>,
        lease: chrono::Duration,
        owner: &str,
    ) -> Result<Option<ClaimedDelivery>, StoreError> {
        stmt(CLAIM.text(self.dialect()))
            .bind(now + lease)
            .bind(owner)
            .bind(now)
            .writes()
            .fetch_optional(self, "claim a delivery")
            .await
    }

    /// The stamped XML and UUID of outbox row `outbox_id`, when stamped.
    pub async fn stamped_document(
        &self,
        outbox_id: i64,
    ) -> Result<Option<(String, Vec<u8>)>, StoreError> {
        let row: Option<(Option<String>, Option<Vec<u8>>)> =
            stmt("SELECT uuid, stamped_xml FROM outbox WHERE id = $1")
                .bind(outbox_id)
                .fetch_optional(self, "read a stamped document")
                .await?;
        Ok(row.and_then(|(u, x)| u.zip(x)))
    }

    /// Records how claim `owner`'s send of delivery `id` ended, with the server's reply (or
    /// why it could not be sent). `false` when the claim was lost (its lease ended and another
    /// courier took the row).
    pub async fn settle_delivery(
        &self,
        id: i64,
        owner: &str,
        outcome: DeliveryOutcome,
        reply: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE deliveries SET state = $1, run_at = $2, last_reply = $3, \
            sent_at = $4, lease_owner = NULL, updated_at = $5 WHERE id = $6 AND lease_owner = $7";
        let now = Utc::now();
        let run_at = match outcome {
            DeliveryOutcome::Retry(at) => at,
            _ => now,
        };
        let sent_at = (outcome == DeliveryOutcome::Sent).then_some(now);
        let n = stmt(SQL)
            .bind(outcome.state())
            .bind(run_at)
            .bind(reply)
            .bind(sent_at)
            .bind(now)
            .bind(id)
            .bind(owner)
            .execute(self, "settle a delivery")
            .await?;
        Ok(n == 1)
    }

    /// Every stamped document whose customer has an address, with its stamp's message, if
    /// any: `(uuid, message_id, state)` (the chaos run's check).
    pub async fn stamped_mail_audit(
        &self,
    ) -> Result<Vec<(String, Option<String>, Option<DeliveryState>)>, StoreError> {
        static AUDIT: Dialected = Dialected::new(
            "SELECT o.uuid, d.message_id, d.state FROM outbox o {PAYMENTS} \
             LEFT JOIN deliveries d ON d.outbox_id = o.id AND d.event = 'stamped' \
             AND d.resend = 0 \
             WHERE o.state = 'stamped' AND o.uuid IS NOT NULL AND {EMAIL} IS NOT NULL \
             ORDER BY o.id",
            &[EMAIL, PAYMENTS],
        );
        stmt(AUDIT.text(self.dialect()))
            .fetch_all(self, "list the stamped documents' emails")
            .await
    }

    /// `(state, count)` of every delivery (the `autofactura_deliveries` gauge).
    pub async fn delivery_counts(&self) -> Result<Vec<(DeliveryState, i64)>, StoreError> {
        stmt("SELECT state, COUNT(*) AS n FROM deliveries GROUP BY state ORDER BY 1")
            .fetch_all(self, "count deliveries by state")
            .await
    }

    /// The deliveries of outbox row `outbox_id`, oldest first.
    pub async fn deliveries_of(&self, outbox_id: i64) -> Result<Vec<DeliveryRow>, StoreError> {
        stmt(format!(
            "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE outbox_id = $1 ORDER BY id"
        ))
        .bind(outbox_id)
        .fetch_all(self, "list a document's deliveries")
        .await
    }

    /// An admin's resend of the stamped document `outbox_id`: a new message (its own
    /// Message-ID, `domain` that of `[email] from`) to `to`, or else to the customer's address
    /// (or, when the customer gave none, the last one sent to), audited in the same transaction. `None` when the document is
    /// not stamped or there is no address to send to; else the new row's recipient.
    pub async fn resend_delivery(
        &self,
        outbox_id: i64,
        to: Option<&str>,
        domain: &str,
        actor: &str,
    ) -> Result<Option<String>, StoreError> {
        static KNOWN: Dialected = Dialected::new(
            "SELECT o.uuid, COALESCE({EMAIL}, (SELECT d.recipient FROM deliveries d \
             WHERE d.outbox_id = o.id ORDER BY d.id DESC LIMIT 1)), \
             (SELECT CAST(COALESCE(MAX(d.resend), 0) + 1 AS BIGINT) FROM deliveries d \
             WHERE d.outbox_id = o.id AND d.event = 'stamped') \
             FROM outbox o {PAYMENTS} \
             WHERE o.id = $1 AND o.state = 'stamped' AND o.uuid IS NOT NULL",
            &[EMAIL, PAYMENTS],
        );
        const INSERT: &str = "INSERT INTO deliveries (outbox_id, event, resend, recipient, \
            message_id, state, attempts, run_at, requested_by, created_at, updated_at) \
            VALUES ($1, 'stamped', $2, $3, $4, 'pending', 0, $5, $6, $5, $5)";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let known: Option<(String, Option<String>, i64)> = stmt(KNOWN.text(tx.dialect()))
            .bind(outbox_id)
            .fetch_optional_in(&mut tx, "read a document to resend")
            .await?;
        let Some((uuid, last, resend)) = known else {
            return Ok(None);
        };
        let Some(recipient) = to.map(str::to_owned).or(last) else {
            return Ok(None);
        };
        let resend = i32::try_from(resend).unwrap_or(i32::MAX);
        stmt(INSERT)
            .bind(outbox_id)
            .bind(resend)
            .bind(recipient.as_str())
            .bind(resent_message_id(&uuid, Event::Stamped, resend, domain))
            .bind(now)
            .bind(actor)
            .execute_in(&mut tx, "queue a resend")
            .await?;
        let detail = format!("resend #{resend} to {recipient}");
        audit_in(
            &mut tx,
            actor,
            "resend_email",
            ("outbox", outbox_id),
            &detail,
            now,
        )
        .await?;
        tx.commit("commit a resend").await?;
        Ok(Some(recipient))
    }
}
