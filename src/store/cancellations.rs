//! Cancellations: a frozen request per UUID, the worker's claim with a lease, its progress,
//! and the reads of the admin and the API.

use chrono::{DateTime, Utc};

use super::admin::audit_in;
use super::deliveries::queue_event_in;
use super::exec::{Dialect, Dialected, Stmt, spelled_list, stmt};
use super::merchant::queue_merchant_event_in;
use super::outbox::mark_canceled_in;
pub use super::rows::CancellationRow;
use crate::domain::delivery::Event;

/// A cancellation a worker holds the lease of (the claim returns the whole row).
pub type ClaimedCancel = CancellationRow;
use super::{Db, StoreError};
use crate::domain::CancellationState;
use crate::domain::cancellation::CancelOrder;

/// Why a cancellation was not frozen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelConflict {
    /// A request for this UUID exists and is not rejected or failed.
    AlreadyRequested { state: CancellationState },
}

const CANCEL_COLUMNS: &str = "id, outbox_id, uuid, rfc_emisor, rfc_receptor, total, motivo, \
    folio_sustitucion, state, requires_acceptance, attempts, run_at, estatus_cancelacion, sat_estado, \
    acuse_xml, last_error_code, last_error_message, requested_by, created_at, updated_at";

/// `SELECT` of whole cancellation rows where `cond` (constant text, never user input).
fn cancellations_where<'a>(cond: &str) -> Stmt<'a> {
    stmt(format!(
        "SELECT {CANCEL_COLUMNS} FROM cancellations WHERE {cond}"
    ))
}

/// Claims the next due cancellation (to send, or to poll).
static CLAIM_CANCELLATION: Dialected = Dialected::new(
    "UPDATE cancellations SET lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1, \
     updated_at = $3 \
     WHERE id = (SELECT id FROM cancellations \
                 WHERE state IN ('requested', 'retry_scheduled', 'unknown', 'pending_receiver') \
                   AND run_at <= $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $3) \
                   {NOT_PAUSED} ORDER BY run_at, id LIMIT 1{LOCK}) \
     RETURNING {CANCEL_COLUMNS}",
    &[
        Dialect::SKIP_LOCKED,
        ("{CANCEL_COLUMNS}", CANCEL_COLUMNS, CANCEL_COLUMNS),
        (
            super::outbox::NOT_PAUSED.0,
            // The PAC's name is this statement's fourth argument.
            "AND NOT EXISTS (SELECT 1 FROM pac_pauses WHERE pac = $4)",
            "AND NOT EXISTS (SELECT 1 FROM pac_pauses WHERE pac = $4)",
        ),
    ],
);

impl Db {
    /// Claims the next due cancellation (to send, or to poll) for `owner`.
    pub async fn claim_cancellation(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
        pac: &str,
    ) -> Result<Option<ClaimedCancel>, StoreError> {
        stmt(CLAIM_CANCELLATION.text(self.dialect()))
            .bind(owner)
            .bind(lease_until)
            .bind(now)
            .bind(pac)
            .writes()
            .fetch_optional(self, "claim a cancellation")
            .await
    }

    /// Records a cancellation's progress and releases its lease. When it ends `canceled`,
    /// `outbox_id` (its invoice) leaves the stamped list and the merchant event
    /// `invoice.canceled` is queued, in the same transaction: a process killed in between
    /// cannot leave a cancelled CFDI shown as `stamped`. With `mail` (email on: the domain of
    /// `[email] from`) the customer's email about it is queued in that transaction too.
    #[allow(clippy::too_many_arguments)]
    pub async fn settle_cancellation(
        &self,
        id: i64,
        owner: &str,
        state: CancellationState,
        run_at: DateTime<Utc>,
        estatus: Option<&str>,
        sat_estado: Option<&str>,
        acuse: Option<&str>,
        error: Option<(&str, &str)>,
        outbox_id: Option<i64>,
        mail: Option<&str>,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let (code, message) = error.map_or((None, None), |(c, m)| (Some(c), Some(m)));
        let outbox_id = outbox_id.filter(|_| state == CancellationState::Canceled);
        let mut tx = self.begin().await?;
        let n = stmt(
            "UPDATE cancellations SET state = $1, run_at = $2, estatus_cancelacion = COALESCE($3, estatus_cancelacion), \
             sat_estado = COALESCE($4, sat_estado), acuse_xml = COALESCE($5, acuse_xml), last_error_code = $6, \
             last_error_message = $7, lease_owner = NULL, lease_expires_at = NULL, updated_at = $8 \
             WHERE id = $9 AND lease_owner = $10",
        )
        .bind(state)
        .bind(run_at)
        .bind(estatus)
        .bind(sat_estado)
        .bind(acuse)
        .bind(code)
        .bind(message)
        .bind(now)
        .bind(id)
        .bind(owner)
        .execute_in(&mut tx, "record the cancellation's progress")
        .await?;
        if n == 1
            && let Some(oid) = outbox_id
            && mark_canceled_in(&mut tx, oid, now).await?
        {
            queue_merchant_event_in(&mut tx, "invoice.canceled", oid, now).await?;
            queue_event_in(&mut tx, oid, Event::Canceled, mail, now).await?;
        }
        tx.commit("commit the cancellation's progress").await?;
        Ok(n == 1)
    }

    /// Freezes a cancellation request for the worker (state `requested`, due now). A UUID whose
    /// earlier request ended `rejected` or `failed` is asked again on the same row.
    pub async fn request_cancellation(
        &self,
        outbox_id: i64,
        c: &CancelOrder,
        actor: &str,
    ) -> Result<Result<i64, CancelConflict>, StoreError> {
        const EXISTING: &str = "SELECT id, state FROM cancellations WHERE UPPER(uuid) = $1";
        const INSERT: &str = "INSERT INTO cancellations (outbox_id, uuid, rfc_emisor, rfc_receptor, total, \
            motivo, folio_sustitucion, state, requires_acceptance, attempts, run_at, requested_by, created_at, updated_at) \
            VALUES ($6, $7, $8, $9, $10, $1, $2, 'requested', $3, 0, $4, $5, $11, $11) RETURNING id";
        const AGAIN: &str = "UPDATE cancellations SET motivo = $1, folio_sustitucion = $2, state = 'requested', \
            requires_acceptance = $3, attempts = 0, run_at = $4, lease_owner = NULL, lease_expires_at = NULL, \
            last_error_code = NULL, last_error_message = NULL, requested_by = $5, updated_at = $6 \
            WHERE id = $7 AND state IN ('rejected', 'failed')";
        // Both statements take the request as $1–$5 (motivo, folio, acceptance, due, by).
        let now = Utc::now();
        let uuid = c.uuid.to_uppercase();
        let request = |sql: &'static str| {
            stmt(sql)
                .bind(c.motivo.code())
                .bind(&c.folio_sustitucion)
                .bind(c.requires_acceptance)
                .bind(now)
                .bind(actor)
        };
        let mut tx = self.begin().await?;
        let out = {
            let existing: Option<(i64, CancellationState)> = stmt(EXISTING)
                .bind(&uuid)
                .fetch_optional_in(&mut tx, "look for an earlier cancellation")
                .await?;
            let id = match existing {
                Some((id, state)) if state.may_ask_again() => {
                    request(AGAIN)
                        .bind(now)
                        .bind(id)
                        .execute_in(&mut tx, "request a cancellation again")
                        .await?;
                    id
                }
                Some((_, state)) => {
                    return Ok(Err(CancelConflict::AlreadyRequested { state }));
                }
                None => {
                    let (id,): (i64,) = request(INSERT)
                        .bind(outbox_id)
                        .bind(&uuid)
                        .bind(&c.rfc_emisor)
                        .bind(&c.rfc_receptor)
                        .bind(&c.total)
                        .bind(now)
                        .fetch_one_in(&mut tx, "freeze a cancellation")
                        .await?;
                    id
                }
            };
            let detail = format!(
                "UUID {uuid}, motivo {}{}, {}",
                c.motivo.code(),
                c.folio_sustitucion
                    .as_deref()
                    .map(|f| format!(", sustituido por {f}"))
                    .unwrap_or_default(),
                if c.requires_acceptance {
                    "the receptor must accept"
                } else {
                    "no acceptance needed"
                }
            );
            audit_in(
                &mut tx,
                actor,
                "cancel",
                ("outbox", outbox_id),
                &detail,
                now,
            )
            .await?;
            Ok::<_, StoreError>(Ok(id))
        };
        tx.commit("commit a cancellation request").await?;
        out
    }

    pub async fn cancellations_of(
        &self,
        outbox_id: i64,
    ) -> Result<Vec<CancellationRow>, StoreError> {
        cancellations_where("outbox_id = $1 ORDER BY id")
            .bind(outbox_id)
            .fetch_all::<CancellationRow>(self, "read cancellations")
            .await
    }

    pub async fn cancellation_by_uuid(
        &self,
        uuid: &str,
    ) -> Result<Option<CancellationRow>, StoreError> {
        cancellations_where("UPPER(uuid) = $1")
            .bind(uuid.to_uppercase())
            .fetch_optional::<CancellationRow>(self, "read a cancellation")
            .await
    }

    pub async fn cancellation(&self, id: i64) -> Result<Option<CancellationRow>, StoreError> {
        cancellations_where("id = $1")
            .bind(id)
            .fetch_optional::<CancellationRow>(self, "read a cancellation")
            .await
    }

    /// Cancellations, newest first; `in_process` keeps the ones still moving.
    pub async fn list_cancellations(
        &self,
        in_process: bool,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<CancellationRow>, StoreError> {
        let cond = if in_process {
            // What the Cancellations page lists (and its tab counts) unless asked for all.
            let states = CancellationState::IN_PROCESS.iter().map(|s| s.as_str());
            format!("state IN {}", spelled_list(states))
        } else {
            "1 = 1".to_owned()
        };
        cancellations_where(&format!(
            "{cond} ORDER BY updated_at DESC, id DESC LIMIT $1 OFFSET $2"
        ))
        .bind(limit)
        .bind(offset)
        .fetch_all::<CancellationRow>(self, "list cancellations")
        .await
    }

    /// The cancellations waiting for the receptor's answer, the oldest request first.
    pub async fn waiting_for_receptor(&self) -> Result<Vec<CancellationRow>, StoreError> {
        cancellations_where("state = 'pending_receiver' ORDER BY created_at, id")
            .fetch_all::<CancellationRow>(self, "list the cancellations waiting for the receptor")
            .await
    }

    /// `(state, requires_acceptance, count)` of cancellations (the two make their label).
    pub async fn cancellation_counts(
        &self,
    ) -> Result<Vec<(CancellationState, bool, i64)>, StoreError> {
        const SQL: &str = "SELECT state, requires_acceptance, COUNT(*) AS n FROM cancellations \
            GROUP BY state, requires_acceptance ORDER BY state, requires_acceptance";
        stmt(SQL)
            .fetch_all::<(CancellationState, bool, i64)>(self, "count cancellations")
            .await
    }
}
