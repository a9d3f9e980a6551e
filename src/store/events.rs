//! Webhook deliveries (`webhook_events`): recording them, the ingest transaction that turns one
//! into a payment and its frozen comprobante, and the deliveries stored to be fetched later
//! (Mercado Pago notifications; Stripe events whose lines or rate come from the API).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::arca_queue::enqueue_arca_in;
use super::exec::{Dialect, Dialected, Stmt, Tx, stmt};
use super::outbox::{OutboxDraft, enqueue_in_tx, insert_outbox_of_inserted, request_json};
use super::payments::{
    NewPayment, complete_payment_in, insert_payment, insert_payment_in, insert_references_of_event,
    insert_references_of_inserted,
};
pub use super::rows::PendingFetch;
use super::{Db, StoreError};

/// A webhook delivery to record (tests read it back as recorded).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NewEvent {
    pub provider: String,
    pub event_id: String,
    pub event_type: String,
    pub status: String,
    pub reason: Option<String>,
    pub payment_ref: Option<String>,
    pub livemode: Option<bool>,
    pub api_version: Option<String>,
    pub account: Option<String>,
    pub headers_json: String,
    pub raw_body: Vec<u8>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Where the event row of an ingest comes from.
#[derive(Debug, Clone)]
pub enum EventRow {
    /// Insert it in the same transaction (Stripe: everything is in the delivery).
    Insert(Box<NewEvent>),
    /// Already stored as `pending_fetch` (Mercado Pago): take it over by id.
    Stored {
        id: i64,
        payment_ref: String,
        livemode: bool,
        /// `false`: leave it `pending_fetch` in this transaction; the caller finishes it
        /// once what follows the sale is recorded too (the refunds the payment lists), so a
        /// kill in between fetches it again instead of losing them.
        finish: bool,
    },
}

/// What a delivery for a payment already recorded may do to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Nothing: a redelivery or a second event with the same data.
    None,
    /// Its data include the customer's RFC (a Checkout Session's custom fields and tax id,
    /// whichever of the session and its PaymentIntent arrives first): a sale still
    /// `awaiting_global` or `needs_attention` takes them.
    FiscalData,
}

/// What one ingest transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    /// The event was already recorded (or already taken over): nothing written.
    DuplicateEvent,
    /// A new event for a payment already recorded: the event is kept, nothing else.
    DuplicatePayment,
    /// A new event for a payment already recorded that brought the customer's fiscal data
    /// while the sale still waited for them ([`Completion::FiscalData`]): the sale took them,
    /// with its outbox row when it can be invoiced now.
    Completed {
        payment_row: i64,
        outbox_row: Option<i64>,
    },
    /// Payment recorded, with its outbox row when it has a comprobante to stamp (numbered
    /// later, when a worker seals it).
    Recorded {
        payment_row: i64,
        outbox_row: Option<i64>,
    },
}

const INSERT_EVENT: &str = "INSERT INTO webhook_events \
    (provider, event_id, event_type, status, reason, payment_ref, livemode, api_version, account, \
     headers_json, raw_body, attempts, next_attempt_at, received_at, updated_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, $12, $13, $14) \
    ON CONFLICT (provider, event_id) DO NOTHING RETURNING id";

/// Takes a stored notification over for processing; 0 rows = someone else did.
const FINISH_PENDING_EVENT: &str = "UPDATE webhook_events \
    SET status = $1, reason = $2, payment_ref = COALESCE($3, payment_ref), livemode = COALESCE($4, livemode), updated_at = $5 \
    WHERE id = $6 AND status = 'pending_fetch'";

/// Claims due notifications for a fetch by pushing their next attempt past the lease.
static CLAIM_PENDING_FETCH: Dialected = Dialected::new(
    "UPDATE webhook_events \
     SET next_attempt_at = $1, attempts = attempts + 1, updated_at = $2 \
     WHERE id IN (SELECT id FROM webhook_events \
                  WHERE status = 'pending_fetch' AND (next_attempt_at IS NULL OR next_attempt_at <= $3) \
                  ORDER BY id LIMIT $4{LOCK}) \
     RETURNING id, provider, event_id, payment_ref, livemode, attempts",
    &[Dialect::SKIP_LOCKED],
);

const RESCHEDULE_FETCH: &str = "UPDATE webhook_events SET next_attempt_at = $1, reason = $2, updated_at = $3 \
    WHERE id = $4 AND status = 'pending_fetch'";

/// [`INSERT_EVENT`] with the event's fourteen arguments.
pub(super) fn insert_event(ev: &NewEvent, now: DateTime<Utc>) -> Stmt<'_> {
    stmt(INSERT_EVENT)
        .bind(&ev.provider)
        .bind(&ev.event_id)
        .bind(&ev.event_type)
        .bind(&ev.status)
        .bind(&ev.reason)
        .bind(&ev.payment_ref)
        .bind(ev.livemode)
        .bind(&ev.api_version)
        .bind(&ev.account)
        .bind(&ev.headers_json)
        .bind(&ev.raw_body)
        .bind(ev.next_attempt_at)
        .bind(now)
        .bind(now)
}

/// The ingest transaction's body: `DuplicateEvent` means nothing may be kept.
async fn ingest_in_tx(
    tx: &mut Tx<'_>,
    event: &EventRow,
    payment: &NewPayment,
    draft: Option<OutboxDraft>,
    completion: Completion,
    now: DateTime<Utc>,
) -> Result<IngestOutcome, StoreError> {
    match event {
        EventRow::Insert(ev) => {
            let row: Option<(i64,)> = insert_event(ev, now)
                .fetch_optional_in(tx, "insert the webhook event")
                .await?;
            if row.is_none() {
                return Ok(IngestOutcome::DuplicateEvent);
            }
        }
        EventRow::Stored { finish: false, .. } => {}
        EventRow::Stored {
            id,
            payment_ref,
            livemode,
            finish: true,
        } => {
            let done = stmt(FINISH_PENDING_EVENT)
                .bind("processed")
                .bind(Option::<String>::None)
                .bind(Some(payment_ref.as_str()))
                .bind(Some(*livemode))
                .bind(now)
                .bind(*id)
                .execute_in(tx, "take over the stored notification")
                .await?;
            if done == 0 {
                return Ok(IngestOutcome::DuplicateEvent);
            }
        }
    }
    let Some(payment_row) = insert_payment_in(tx, payment, now).await? else {
        // An ARS sale's buyer is corrected by a human (`/admin/arca`), never completed by a
        // later delivery: its voucher was frozen with it.
        if completion == Completion::None || payment.arca.is_some() {
            return Ok(IngestOutcome::DuplicatePayment);
        }
        let Some(payment_row) = complete_payment_in(tx, payment, now).await? else {
            return Ok(IngestOutcome::DuplicatePayment);
        };
        let outbox_row = match draft {
            Some(mut d) => enqueue_in_tx(tx, payment_row, &mut d, None, now).await?,
            None => None,
        };
        return Ok(IngestOutcome::Completed {
            payment_row,
            outbox_row,
        });
    };
    let Some(mut draft) = draft else {
        return Ok(IngestOutcome::Recorded {
            payment_row,
            outbox_row: enqueue_arca(tx, payment_row, payment, now).await?,
        });
    };
    let outbox_row = enqueue_in_tx(tx, payment_row, &mut draft, None, now).await?;
    Ok(IngestOutcome::Recorded {
        payment_row,
        outbox_row,
    })
}

/// In `tx`: the frozen ARCA voucher of `payment` (an ARS sale), if it carries one.
async fn enqueue_arca(
    tx: &mut Tx<'_>,
    payment_row: i64,
    payment: &NewPayment,
    now: DateTime<Utc>,
) -> Result<Option<i64>, StoreError> {
    match &payment.arca {
        Some(a) => enqueue_arca_in(tx, payment_row, a, payment.livemode, now).await,
        None => Ok(None),
    }
}

impl Db {
    /// Records a delivery on its own (ignored, malformed, refund, pending fetch). `None` when
    /// the same (provider, event id) was already recorded.
    pub async fn record_event(&self, ev: &NewEvent) -> Result<Option<i64>, StoreError> {
        let row: Option<(i64,)> = insert_event(ev, Utc::now())
            .writes()
            .fetch_optional(self, "insert the webhook event")
            .await?;
        Ok(row.map(|r| r.0))
    }

    /// The id and status of a recorded event.
    pub async fn event_status(
        &self,
        provider: &str,
        event_id: &str,
    ) -> Result<Option<(i64, String)>, StoreError> {
        stmt("SELECT id, status FROM webhook_events WHERE provider = $1 AND event_id = $2")
            .bind(provider)
            .bind(event_id)
            .fetch_optional(self, "read a webhook event")
            .await
    }

    /// In one transaction: the event (or the takeover of a stored one), the payment and, when
    /// `draft` is given, the outbox row with the frozen comprobante. Every insert is `ON
    /// CONFLICT DO NOTHING`, so a redelivery writes nothing. No folio is taken here (no row
    /// every webhook of a serie would wait on): the worker numbers the row when it seals it.
    /// `completion`: what the delivery may do to the payment when it is already recorded.
    pub async fn ingest(
        &self,
        event: &EventRow,
        payment: &NewPayment,
        draft: Option<OutboxDraft>,
        completion: Completion,
    ) -> Result<IngestOutcome, StoreError> {
        let now = Utc::now();
        let mut draft = draft;
        if let Some(d) = &mut draft {
            // A webhook's comprobante is numbered when a worker seals it.
            d.request.folio = None;
        }
        if let (Db::Sqlite { .. }, EventRow::Insert(ev), None) = (self, event, &payment.arca)
            && let Some(out) = self
                .record_new_sale(ev, payment, draft.as_ref(), now)
                .await?
        {
            return Ok(out);
        }
        if let (Db::Postgres(..), EventRow::Insert(ev), None) = (self, event, &payment.arca)
            && let Some(out) = self
                .record_new_sale_pg(ev, payment, draft.as_ref(), now)
                .await?
        {
            return Ok(out);
        }
        let mut tx = self.begin().await?;
        let out = ingest_in_tx(&mut tx, event, payment, draft, completion, now).await?;
        if out == IngestOutcome::DuplicateEvent {
            tx.rollback().await?;
        } else {
            tx.commit("commit the ingest transaction").await?;
        }
        Ok(out)
    }

    /// SQLite: a sale whose payment is not recorded yet — its event, payment, outbox row and
    /// references — as one script, so the write lock is held for one trip to the connection's
    /// thread instead of one per statement (the lock every webhook and every worker write
    /// takes turns on), committed with the sales that arrived meanwhile: one fsync for the
    /// group (`writer.rs`). A group that did not commit leaves the sale to the general
    /// transaction, as a redelivery would. Each insert runs only when the one before it
    /// inserted its row, and the event only when the payment is not recorded: `None` means
    /// the script wrote nothing (a redelivery, or a later event of a recorded payment),
    /// which the general transaction then handles as before.
    async fn record_new_sale(
        &self,
        ev: &NewEvent,
        p: &NewPayment,
        draft: Option<&OutboxDraft>,
        now: DateTime<Utc>,
    ) -> Result<Option<IngestOutcome>, StoreError> {
        const UNRECORDED: &str =
            "NOT EXISTS (SELECT 1 FROM payments WHERE provider = $1 AND payment_id = $2)";
        const INSERTED: &str = "changes() = 1";
        // Only the script's last insert returns its row: each row is a message of its own from
        // SQLite's thread, and a wake-up of the sale's.
        let quiet = |t: &str| t.replacen(" RETURNING id", "", 1);
        let request = draft
            .map(|d| request_json(d).map(|json| (d, json)))
            .transpose()?;
        let payment = match request {
            Some(_) => insert_payment(p, now).map_text(quiet),
            None => insert_payment(p, now),
        };
        let mut q = insert_event(ev, now)
            .map_text(quiet)
            .only_if(stmt(UNRECORDED).bind(&p.provider).bind(&p.payment_id))
            .then(payment.only_if(stmt(INSERTED)));
        if let Some((d, json)) = &request {
            // The payment is the row the statement before inserted.
            let outbox =
                insert_outbox_of_inserted("last_insert_rowid()", d, json, now, stmt(INSERTED))
                    .map_text(|t| t.replacen(" RETURNING id", " RETURNING payment_id, id", 1));
            q = q.then(outbox);
        }
        if let Some(refs) = insert_references_of_event(p) {
            q = q.then(refs);
        }
        let what = "record a new sale";
        // With a comprobante: its row and its payment's, or nothing written; without: the
        // payment's, or nothing. (The stamp key derives from the payment, which the script
        // inserts only when it is not recorded, so its outbox row cannot conflict.)
        let rows: Option<Vec<(i64, Option<i64>)>> = if request.is_some() {
            q.sqlite_grouped_rows::<(i64, i64)>(self, what)
                .await?
                .map(|rows| rows.into_iter().map(|(p, o)| (p, Some(o))).collect())
        } else {
            q.sqlite_grouped_rows::<(i64,)>(self, what)
                .await?
                .map(|rows| rows.into_iter().map(|(p,)| (p, None)).collect())
        };
        match rows.as_deref() {
            None | Some([]) => Ok(None),
            Some(&[(payment_row, outbox_row)]) => Ok(Some(IngestOutcome::Recorded {
                payment_row,
                outbox_row,
            })),
            Some(more) => Err(StoreError::Other(format!(
                "recording a new sale returned {} rows, not 0 or 1",
                more.len()
            ))),
        }
    }

    /// PostgreSQL: a sale whose payment and event are not recorded yet — its payment, event,
    /// outbox row and references — as one statement: one round trip and one commit instead of
    /// seven trips (`BEGIN`, five inserts, `COMMIT`). The payment is inserted only when the
    /// event is not recorded, and the rest only when the payment was inserted: `None` means the
    /// statement wrote nothing (a redelivery, a later event of a recorded payment, or a
    /// concurrent delivery of the same payment that committed first), which the general
    /// transaction then handles as before.
    async fn record_new_sale_pg(
        &self,
        ev: &NewEvent,
        p: &NewPayment,
        draft: Option<&OutboxDraft>,
        now: DateTime<Utc>,
    ) -> Result<Option<IngestOutcome>, StoreError> {
        const UNSEEN: &str =
            "NOT EXISTS (SELECT 1 FROM webhook_events WHERE provider = $1 AND event_id = $2)";
        const PAID: &str = "EXISTS (SELECT 1 FROM pay)";
        let request = draft
            .map(|d| request_json(d).map(|json| (d, json)))
            .transpose()?;
        let mut q = insert_payment(p, now)
            .only_if(stmt(UNSEEN).bind(&ev.provider).bind(&ev.event_id))
            .into_with("pay")
            .and_with("ev", insert_event(ev, now).only_if(stmt(PAID)));
        if let Some((d, json)) = &request {
            let outbox =
                insert_outbox_of_inserted("(SELECT id FROM pay)", d, json, now, stmt(PAID));
            q = q.and_with("ob", outbox);
        } else {
            q = q.and_with("ob", stmt("SELECT NULL::bigint AS id"));
        }
        if let Some(refs) = insert_references_of_inserted(p) {
            q = q.and_with("refs", refs);
        }
        let (payment_row, outbox_row): (Option<i64>, Option<i64>) = q
            .then_select("SELECT (SELECT id FROM pay), (SELECT id FROM ob)")
            .fetch_one(self, "record a new sale")
            .await?;
        Ok(payment_row.map(|payment_row| IngestOutcome::Recorded {
            payment_row,
            outbox_row,
        }))
    }

    /// The raw body of a stored delivery (a Stripe event waiting for the API is re-read from
    /// it, exactly as it was signed).
    pub async fn event_body(&self, id: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let row: Option<(Vec<u8>,)> = stmt("SELECT raw_body FROM webhook_events WHERE id = $1")
            .bind(id)
            .fetch_optional(self, "read a stored webhook body")
            .await?;
        Ok(row.map(|r| r.0))
    }

    /// Marks a stored notification as handled without a payment (not approved, not a
    /// payment, …), or once the refunds its payment lists are recorded after the sale.
    /// `false` when it was not pending any more.
    pub async fn finish_pending_event(
        &self,
        id: i64,
        status: &str,
        reason: Option<&str>,
        payment_ref: Option<&str>,
        livemode: Option<bool>,
    ) -> Result<bool, StoreError> {
        let done = stmt(FINISH_PENDING_EVENT)
            .bind(status)
            .bind(reason)
            .bind(payment_ref)
            .bind(livemode)
            .bind(Utc::now())
            .bind(id)
            .execute(self, "update a stored notification")
            .await?;
        Ok(done == 1)
    }

    /// Claims up to `limit` stored notifications due for a fetch; each is hidden from other
    /// claimers for `lease`, after which it is due again if the claimer died.
    pub async fn claim_pending_fetches(
        &self,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<PendingFetch>, StoreError> {
        let now = Utc::now();
        let until =
            now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(60));
        stmt(CLAIM_PENDING_FETCH.text(self.dialect()))
            .bind(until)
            .bind(now)
            .bind(now)
            .bind(limit)
            .writes()
            .fetch_all(self, "claim stored notifications")
            .await
    }

    /// Schedules the next fetch of a stored notification and notes why the last one failed.
    pub async fn reschedule_fetch(
        &self,
        id: i64,
        at: DateTime<Utc>,
        reason: &str,
    ) -> Result<(), StoreError> {
        stmt(RESCHEDULE_FETCH)
            .bind(at)
            .bind(reason)
            .bind(Utc::now())
            .bind(id)
            .execute(self, "reschedule a stored notification")
            .await?;
        Ok(())
    }

    /// Stored webhook deliveries per status (`pending_fetch` ones still wait for their payment).
    pub async fn webhook_event_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        stmt("SELECT status AS state, COUNT(*) AS n FROM webhook_events GROUP BY status ORDER BY status")
            .fetch_all(self, "count webhook events")
            .await
    }
}
