//! The database's own ceiling for the rows one paid webhook writes, for the ingest benchmark:
//! the event, the payment and the outbox row with its frozen comprobante, each with the
//! store's own statement (same tables, sizes and indexes), in one transaction taken the way
//! every store transaction is, and nothing else: no folio, no duplicate handling, no outcome.
//! The benchmark reports accepted webhooks per second as a share of this.

use chrono::Utc;

use super::events::{NewEvent, insert_event};
use super::exec::stmt;
use super::outbox::{INSERT_OUTBOX, OutboxDraft};
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
        let request_json = serde_json::to_string(&draft.request)
            .map_err(|e| StoreError::Other(format!("cannot serialize the invoice request: {e}")))?;
        let mut tx = self.begin().await?;
        insert_event(event, now)
            .execute_in(&mut tx, "insert the webhook event")
            .await?;
        let payment_row = insert_payment_in(&mut tx, payment, now)
            .await?
            .ok_or_else(|| StoreError::Other("the payment id was not new".into()))?;
        stmt(INSERT_OUTBOX)
            .bind(payment_row)
            .bind(draft.kind)
            .bind(draft.stamp_key.as_str())
            .bind(&request_json)
            .bind(draft.state)
            .bind(now)
            .bind(&draft.error_code)
            .bind(&draft.error_message)
            .bind(draft.test_mode)
            .bind(draft.request.fecha)
            .bind(draft.request.serie.as_deref())
            .bind(draft.request.folio.as_deref())
            .bind(now)
            .bind(now)
            .execute_in(&mut tx, "insert the outbox row")
            .await?;
        tx.commit("commit the delivery's rows").await
    }
}
