//! The database's own ceiling for the rows one paid webhook writes, for the ingest benchmark:
//! the event, the payment and the outbox row with its frozen comprobante, each with the
//! store's own statement (same tables, sizes and indexes), in one transaction taken the way
//! every store transaction is, and nothing else: no folio, no duplicate handling, no outcome.
//! The benchmark reports accepted webhooks per second as a share of this.

use chrono::Utc;

use super::events::{NewEvent, insert_event};
use super::outbox::{OutboxDraft, insert_outbox, request_json};
use super::payments::{NewPayment, insert_payment_in};
use super::{Db, StoreError};

impl Db {
    /// Inserts the three rows of one delivery; the ids must be new.
    pub async fn insert_delivery_rows(
        &self,
        event: &NewEvent,
        payment: &NewPayment,
        draft: &OutboxDraft,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let request_json = request_json(draft)?;
        let mut tx = self.begin().await?;
        insert_event(event, now)
            .execute_in(&mut tx, "insert the webhook event")
            .await?;
        let payment_row = insert_payment_in(&mut tx, payment, now)
            .await?
            .ok_or_else(|| StoreError::Other("the payment id was not new".into()))?;
        insert_outbox(payment_row, draft, &request_json, now)
            .execute_in(&mut tx, "insert the outbox row")
            .await?;
        tx.commit("commit the delivery's rows").await
    }
}
