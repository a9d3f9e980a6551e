//! The outbox: one row per comprobante, frozen at ingest (its folio, unless explicit, is
//! assigned when a worker seals it: `folios.rs`), and every change of its state — the claim with a lease, sealing, the outcome of a stamping attempt
//! (in `settle.rs`, its second half), the release at shutdown, the end of a cancelled invoice, the
//! superseding of an API invoice, and the admin's retry, refreeze and adoption of a stamp.
//!
//! Statements on one row by id write its state test as `state || ''`: PostgreSQL's statistics,
//! taken while nearly every row is `pending` or `stamped`, make `stamping` look rare, and the
//! planner then walks outbox_state_updated through every row being stamped (and every dead
//! entry left by earlier claims) instead of looking the id up. An expression on the column
//! leaves it the primary key alone.

use std::borrow::Cow;

use chrono::{DateTime, NaiveDateTime, Utc};

use super::StoreError;
use super::admin::audit_in;
use super::deliveries::queue_event_in;
use super::exec::{Dialect, Dialected, Stmt, Tx, column, shift_params, stmt};
use super::merchant::queue_merchant_event_in;
pub use super::rows::ClaimedStamp;
use super::stash::clean;
use super::{Db, ctx};
use crate::cfdi::InvoiceRequest;
use crate::domain::delivery::Event;
use crate::domain::{DocumentKind, DocumentState, StampKey};

/// The code an `unknown` row carries once its asking period is over (the worker asks daily
/// from then on): the admin lists these as unresolved.
pub const UNRESOLVED: &str = "UNRESOLVED";

/// The comprobante to freeze with the payment. Its request's folio is left out (`None`) unless
/// it is explicit: the worker assigns it into the row's `folio` column before sealing.
#[derive(Debug, Clone)]
pub struct OutboxDraft {
    pub kind: DocumentKind,
    pub stamp_key: StampKey,
    pub request: InvoiceRequest,
    /// `pending`, or `needs_attention` when it must not be stamped as it is.
    pub state: DocumentState,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub test_mode: bool,
}

const INSERT_OUTBOX: &str = "INSERT INTO outbox \
    (payment_id, kind, stamp_key, request_json, state, attempts, run_at, last_error_code, last_error_message, \
     test_mode, fecha, serie, folio, created_at, updated_at) \
    VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
    ON CONFLICT (stamp_key) DO NOTHING RETURNING id";

/// The frozen request of `draft` as stored.
pub(super) fn request_json(draft: &OutboxDraft) -> Result<String, StoreError> {
    serde_json::to_string(&draft.request)
        .map_err(|e| StoreError::Other(format!("cannot serialize the invoice request: {e}")))
}

/// [`INSERT_OUTBOX`] with the arguments of `draft`, whose request is `request_json`.
pub(super) fn insert_outbox<'a>(
    payment_row: i64,
    draft: &'a OutboxDraft,
    request_json: &'a str,
    now: DateTime<Utc>,
) -> Stmt<'a> {
    stmt(INSERT_OUTBOX)
        .bind(payment_row)
        .bind(draft.kind)
        .bind(draft.stamp_key.as_str())
        .bind(request_json)
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
}

/// [`insert_outbox`] for the payment inserted earlier in the same script or statement, whose
/// id is not known when the SQL is written: `payment` is the SQL that reads it, and the row is
/// inserted only when `guard` holds (the bound 0 is left unused).
pub(super) fn insert_outbox_of_inserted<'a>(
    payment: &str,
    draft: &'a OutboxDraft,
    request_json: &'a str,
    now: DateTime<Utc>,
    guard: Stmt<'a>,
) -> Stmt<'a> {
    insert_outbox(0, draft, request_json, now)
        .map_text(|t| t.replacen("VALUES ($1,", &format!("VALUES ({payment},"), 1))
        .only_if(guard)
}

/// In `tx`, for the payment `payment_row` (webhook ingest and the API alike): the outbox row
/// with the frozen comprobante, its folio `explicit` or none yet (no sequence is touched here:
/// see `folios.rs`). Returns the row, `None` when its stamp key exists.
pub(super) async fn enqueue_in_tx(
    tx: &mut Tx<'_>,
    payment_row: i64,
    draft: &mut OutboxDraft,
    explicit: Option<String>,
    now: DateTime<Utc>,
) -> Result<Option<i64>, StoreError> {
    draft.request.folio.clone_from(&explicit);
    let request_json = request_json(draft)?;
    let row: Option<(i64,)> = insert_outbox(payment_row, draft, &request_json, now)
        .fetch_optional_in(tx, "insert the outbox row")
        .await?;
    Ok(row.map(|r| r.0))
}

/// In `tx`: a stamped invoice whose cancellation SAT confirmed leaves the stamped list;
/// `true` when it did (it was `stamped`).
pub(super) async fn mark_canceled_in(
    tx: &mut Tx<'_>,
    outbox_id: i64,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let n = stmt(
        "UPDATE outbox SET state = 'canceled', updated_at = $1 WHERE id = $2 AND state = 'stamped'",
    )
    .bind(now)
    .bind(outbox_id)
    .execute_in(tx, "mark the invoice cancelled")
    .await?;
    Ok(n == 1)
}

/// In `tx`: the outbox row of API invoice `invoice_id`, which ended without a stamp, becomes
/// `superseded` because its idempotency key is used again; `false` when it is not (any more)
/// in a released state.
pub(super) async fn supersede_invoice_in(
    tx: &mut Tx<'_>,
    invoice_id: i64,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    const SQL: &str = "UPDATE outbox SET state = 'superseded', updated_at = $1, \
        last_error_message = COALESCE(last_error_message, '') || ' (superseded: its idempotency key was used again)' \
        WHERE id = (SELECT outbox_id FROM api_invoices WHERE id = $2) AND state IN ('failed', 'expired', 'superseded')";
    let n = stmt(SQL)
        .bind(now)
        .bind(invoice_id)
        .execute_in(tx, "supersede a failed invoice")
        .await?;
    Ok(n == 1)
}

/// In `tx`: the REPs (kind `pago`) that ended without a stamp, of payments of API invoice
/// `invoice_id` or recorded under emisor `rfc`'s idempotency key `key`, become `superseded`, as
/// the next payment takes their parcialidad or their key (so no one retries them any more).
pub(super) async fn supersede_refused_pagos_in(
    tx: &mut Tx<'_>,
    invoice_id: i64,
    rfc: &str,
    key: Option<&str>,
    now: DateTime<Utc>,
) -> Result<u64, StoreError> {
    const SQL: &str = "UPDATE outbox SET state = 'superseded', updated_at = $1, \
        last_error_message = COALESCE(last_error_message, '') || ' (superseded: a later payment took its place)' \
        WHERE state IN ('failed', 'expired') AND id IN (SELECT outbox_id FROM api_pagos \
        WHERE invoice_id = $2 OR (rfc_emisor = $3 AND idem_key = $4))";
    stmt(SQL)
        .bind(now)
        .bind(invoice_id)
        .bind(rfc)
        .bind(key)
        .execute_in(tx, "supersede refused REPs")
        .await
}

/// In `tx`: API invoices that ended without a stamp under `serie`/`folio` become `superseded`,
/// as the folio is explicitly asked for again.
pub(super) async fn supersede_folio_in(
    tx: &mut Tx<'_>,
    serie: &str,
    folio: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    const SQL: &str = "UPDATE outbox SET state = 'superseded', updated_at = $1 WHERE serie = $2 \
        AND folio = $3 AND state IN ('failed', 'expired') AND id IN (SELECT outbox_id FROM api_invoices)";
    stmt(SQL)
        .bind(now)
        .bind(serie)
        .bind(folio)
        .execute_in(tx, "release a folio")
        .await?;
    Ok(())
}

/// SQLite is told which partial index to walk (migration 0004); PostgreSQL finds it.
const INDEXED_BY: &[(&str, &str, &str)] = &[
    ("{EXPIRED_INDEX}", " INDEXED BY outbox_lease_expired", ""),
    ("{DUE_INDEX}", " INDEXED BY outbox_due", ""),
    Dialect::SKIP_LOCKED,
    (NOT_PAUSED.0, NOT_PAUSED.1, NOT_PAUSED.1),
];

/// Nothing is claimed for a PAC an operator paused (`$5`, the PAC's name; migration 0011):
/// checked in the claim itself, so a claim that starts after the pause committed takes nothing.
pub(super) const NOT_PAUSED: (&str, &str) = (
    "{NOT_PAUSED}",
    "AND NOT EXISTS (SELECT 1 FROM pac_pauses WHERE pac = $5)",
);

/// Claims up to `$4` rows through a partial index in claim order, so a claim costs the same
/// however many stamped rows the outbox holds. `claimed_from = state` keeps the state it was
/// claimed from (SET reads the old values). First kind: rows whose worker died (their lease
/// expired while `stamping`).
static CLAIM_EXPIRED: Dialected = Dialected::new(
    "UPDATE outbox SET claimed_from = state, state = 'stamping', lease_owner = $1, \
     lease_expires_at = $2, attempts = attempts + 1, updated_at = $3 \
     WHERE id IN (SELECT id FROM outbox{EXPIRED_INDEX} WHERE state = 'stamping' \
     AND lease_expires_at <= $3 {NOT_PAUSED} ORDER BY lease_expires_at, id LIMIT $4{LOCK}) \
     RETURNING id, claimed_from, stamp_key, request_json, sealed_xml, attempts, test_mode, pac_route, \
     COALESCE(serie, '') AS serie, folio, \
     (SELECT p.payment_id FROM payments p WHERE p.id = outbox.payment_id) AS payment_ref",
    INDEXED_BY,
);
/// Second kind: rows due now.
static CLAIM_DUE: Dialected = Dialected::new(
    "UPDATE outbox SET claimed_from = state, state = 'stamping', lease_owner = $1, \
     lease_expires_at = $2, attempts = attempts + 1, updated_at = $3 \
     WHERE id IN (SELECT id FROM outbox{DUE_INDEX} WHERE state IN ('pending', 'retry_scheduled', \
     'unknown') AND run_at <= $3 {NOT_PAUSED} ORDER BY run_at, id LIMIT $4{LOCK}) \
     RETURNING id, claimed_from, stamp_key, request_json, sealed_xml, attempts, test_mode, pac_route, \
     COALESCE(serie, '') AS serie, folio, \
     (SELECT p.payment_id FROM payments p WHERE p.id = outbox.payment_id) AS payment_ref",
    INDEXED_BY,
);

/// Stores a row's sealed bytes ($1) at $2, once: only while it has none (row $3).
const SAVE_SEALED: &str =
    "UPDATE outbox SET sealed_xml = $1, sealed_at = $2 WHERE id = $3 AND sealed_xml IS NULL";

impl Db {
    /// Claims up to `limit` due outbox rows for `owner` until `lease_until`, oldest first:
    /// first, when `expired_first`, rows whose worker died (so a backlog never starves them),
    /// else the oldest due ones. Nothing while `pac` (the PAC `owner` stamps with) is paused.
    #[allow(clippy::too_many_arguments)]
    pub async fn claim_stamps(
        &self,
        owner: &str,
        lease_until: DateTime<Utc>,
        now: DateTime<Utc>,
        expired_first: bool,
        limit: i64,
        pac: &str,
    ) -> Result<Vec<ClaimedStamp>, StoreError> {
        let order: &[&'static Dialected] = if expired_first {
            &[&CLAIM_EXPIRED, &CLAIM_DUE]
        } else {
            &[&CLAIM_DUE]
        };
        for claim in order {
            let text = claim.text(self.dialect());
            // SQLite (the bundled 3.51) reads a `LIMIT` parameter's value when it plans, so it
            // prepares the statement again at every run once the parameter is bound anew: 1.6 %
            // of `serve`'s CPU at 90 claims a second. The batch is fixed per worker, so a
            // literal keeps one prepared statement; `$4` is then left unused.
            let text = match self {
                Db::Sqlite { .. } => {
                    Cow::Owned(text.replacen("LIMIT $4", &format!("LIMIT {limit}"), 1))
                }
                Db::Postgres(..) => Cow::Borrowed(text),
            };
            let mut claimed: Vec<ClaimedStamp> = stmt(text)
                .bind(owner)
                .bind(lease_until)
                .bind(now)
                .bind(limit)
                .bind(pac)
                .fetch_all_written(self, "claim outbox rows")
                .await?;
            if !claimed.is_empty() {
                // RETURNING follows no order; rows are sent oldest first (ids grow with time).
                claimed.sort_by_key(|c| c.id);
                return Ok(claimed);
            }
        }
        Ok(Vec::new())
    }

    /// Returns once every write committed so far is on disk: a worker calls it for a claimed
    /// batch, numbered and sealed, before its first PAC call. On SQLite a new sale is seen
    /// once committed, before its log is synced, and the worker pool's own writes are not
    /// synced; a power loss must take back neither a sale nor a numbering the PAC stamped (a
    /// row numbered anew would be sealed to other bytes, a second CFDI). One sync covers the
    /// batch's claim, numbering and sealed bytes, and the sales it holds (`writer.rs`).
    /// PostgreSQL's numbering commits synchronously of itself (`folios.rs`).
    pub async fn durable_before_sending(&self) -> Result<(), StoreError> {
        match self {
            Db::Sqlite { write_lock, .. } => write_lock.durable().await.map_err(|e| {
                StoreError::Other(format!(
                    "cannot send the claimed rows: their writes are not on disk ({e}); check the disk"
                ))
            }),
            Db::Postgres(..) => Ok(()),
        }
    }

    /// Extends the lease while the PAC call runs; `false` when the lease was lost.
    pub async fn extend_stamp_lease(
        &self,
        id: i64,
        owner: &str,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let n = stmt("UPDATE outbox SET lease_expires_at = $1 WHERE id = $2 AND lease_owner = $3 AND state || '' = 'stamping'")
            .bind(until)
            .bind(id)
            .bind(owner)
            .execute(self, "extend an outbox lease")
            .await?;
        Ok(n == 1)
    }

    /// The PAC confirmed that a row it may have had holds no stamp: its attempt count starts
    /// over at this claim (only tries since the last definite answer count towards giving
    /// up). `false` when the lease was lost.
    pub async fn restart_attempts(&self, id: i64, owner: &str) -> Result<bool, StoreError> {
        let n = stmt("UPDATE outbox SET attempts = 1 WHERE id = $1 AND lease_owner = $2 AND state || '' = 'stamping'")
            .bind(id)
            .bind(owner)
            .execute(self, "restart the attempt count")
            .await?;
        Ok(n == 1)
    }

    /// Stores the sealed bytes, once: if another worker sealed first, its bytes stay (sealing
    /// is deterministic, so they are the same). Returns the bytes now in the row.
    pub async fn save_sealed(&self, id: i64, xml: &[u8]) -> Result<Vec<u8>, StoreError> {
        let now = Utc::now();
        let written = stmt(SAVE_SEALED)
            .bind(xml)
            .bind(now)
            .bind(id)
            .execute(self, "store the sealed comprobante")
            .await?;
        if written == 1 {
            return Ok(xml.to_vec());
        }
        let sql = "SELECT sealed_xml FROM outbox WHERE id = $1";
        let got: Option<Option<Vec<u8>>> = stmt(sql)
            .bind(id)
            .fetch_optional(self, "read the sealed comprobante")
            .await?
            .map(|(g,)| g);
        got.flatten().ok_or_else(|| {
            StoreError::Other(format!(
                "outbox row {id} has no sealed comprobante after sealing"
            ))
        })
    }

    /// Stores the sealed bytes of several rows in one write, each only if the row has none yet
    /// (as [`Db::save_sealed`]). Returns the ids written; for any other, another worker sealed
    /// first and [`Db::save_sealed`] reads the bytes that stay.
    pub async fn save_sealed_many(&self, rows: &[(i64, &[u8])]) -> Result<Vec<i64>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let now = Utc::now();
        let what = "store the sealed comprobantes";
        match self {
            // One script, as settles are (SQLite has no arrays).
            Db::Sqlite { .. } => {
                let mut sql = String::from("BEGIN IMMEDIATE;\n");
                for i in 0..rows.len() {
                    sql.push_str(&shift_params(SAVE_SEALED, i * 3));
                    sql.push_str(" RETURNING id;\n");
                }
                sql.push_str("COMMIT;");
                rows.iter()
                    .fold(stmt(sql), |q, (id, xml)| q.bind(*xml).bind(now).bind(*id))
                    .sqlite_script_ids(self, what)
                    .await
            }
            // One statement over arrays, whatever the number of rows.
            Db::Postgres(pool, stash) => {
                let mut conn = stash.take(pool).await.map_err(ctx(what))?;
                let saved = sqlx::query_scalar(
                    "UPDATE outbox o SET sealed_xml = v.xml, sealed_at = $3 \
                     FROM unnest($1::bigint[], $2::bytea[]) AS v(id, xml) \
                     WHERE o.id = v.id AND o.sealed_xml IS NULL RETURNING o.id",
                )
                .bind(column(rows, |r| r.0))
                .bind(column(rows, |r| r.1))
                .bind(now)
                .fetch_all(&mut *conn)
                .await;
                stash.put(conn, clean(&saved));
                saved.map_err(ctx(what))
            }
        }
    }

    /// Records where a document is about to be sent (failover), before sending it.
    pub async fn add_pac_route(&self, stamp_key: &str, route: &str) -> Result<(), StoreError> {
        stmt(
            "UPDATE outbox SET pac_route = CASE WHEN pac_route IS NULL OR pac_route = '' THEN $1 \
               WHEN (',' || pac_route || ',') LIKE ('%,' || $1 || ',%') THEN pac_route \
               ELSE pac_route || ',' || $1 END WHERE stamp_key = $2",
        )
        .bind(route)
        .bind(stamp_key)
        .execute(self, "record the PAC route")
        .await?;
        Ok(())
    }

    /// The PACs a key was ever sent to.
    pub async fn pac_routes(&self, stamp_key: &str) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT pac_route FROM outbox WHERE stamp_key = $1";
        let got: Option<Option<String>> = stmt(sql)
            .bind(stamp_key)
            .fetch_optional(self, "read the PAC route")
            .await?
            .map(|(g,)| g);
        Ok(got
            .flatten()
            .map(|s| {
                s.split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default())
    }

    /// On shutdown: rows whose PAC call did not finish become `unknown` (the call may have
    /// reached the PAC), to be recovered first by whichever worker takes them next.
    pub async fn release_stamp_leases(&self, owner: &str) -> Result<u64, StoreError> {
        let now = Utc::now();
        stmt("UPDATE outbox SET state = 'unknown', run_at = $1, lease_owner = NULL, lease_expires_at = NULL, \
             last_error_message = 'released at shutdown while a PAC call was in flight', updated_at = $1 \
             WHERE lease_owner = $2 AND state = 'stamping'")
            .bind(now)
            .bind(owner)
            .execute(self, "release leases")
            .await
    }

    /// Gives back a row this worker claimed but never sent (shutdown while it waited for its
    /// slot): it returns to `from`, the state it was claimed from, due at once and with the
    /// claim's attempt undone; a row taken from an expired lease returns as `unknown`, since its
    /// earlier worker may have sent it. `false` when the lease was no longer this worker's.
    pub async fn release_unsent_stamp(
        &self,
        id: i64,
        owner: &str,
        from: DocumentState,
    ) -> Result<bool, StoreError> {
        let state = if from.claimable() {
            from
        } else {
            DocumentState::Unknown
        };
        let n = stmt(
            "UPDATE outbox SET state = $1, attempts = attempts - 1, lease_owner = NULL, \
             lease_expires_at = NULL, updated_at = $2 \
             WHERE id = $3 AND lease_owner = $4 AND state || '' = 'stamping'",
        )
        .bind(state)
        .bind(Utc::now())
        .bind(id)
        .bind(owner)
        .execute(self, "release an unsent row")
        .await?;
        Ok(n == 1)
    }

    /// Outbox rows per state.
    pub async fn outbox_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let sql = "SELECT state, COUNT(*) AS n FROM outbox GROUP BY state ORDER BY state";
        stmt(sql).fetch_all(self, "count outbox rows").await
    }

    /// How many outbox rows are in `state` (how far a drain or a chaos run has come).
    pub async fn outbox_count(&self, state: DocumentState) -> Result<i64, StoreError> {
        let (n,): (i64,) = stmt("SELECT COUNT(*) FROM outbox WHERE state = $1")
            .bind(state)
            .fetch_one(self, "count outbox rows")
            .await?;
        Ok(n)
    }

    /// When the most recent stamp was recorded (benchmarks time a drain by it).
    pub async fn last_stamped_at(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let sql = "SELECT MAX(stamped_at) AS t FROM outbox";
        let got: Option<Option<DateTime<Utc>>> = stmt(sql)
            .fetch_optional(self, "read the last stamp time")
            .await?
            .map(|(g,)| g);
        Ok(got.flatten())
    }

    /// The stamped XML of an outbox row, for the SAT status query of its cancellation.
    pub async fn stamped_xml_of(&self, outbox_id: i64) -> Result<Option<Vec<u8>>, StoreError> {
        let sql = "SELECT stamped_xml FROM outbox WHERE id = $1";
        let got: Option<Option<Vec<u8>>> = stmt(sql)
            .bind(outbox_id)
            .fetch_optional(self, "read the stamped XML")
            .await?
            .map(|(g,)| g);
        Ok(got.flatten())
    }

    /// Sends a document back to the worker, due now, the frozen bytes and key untouched:
    /// - `failed`: attempts reset (the attempt log keeps the history), state `pending`, or
    ///   `unknown` when the last PAC call about it went unanswered, so that the worker asks the
    ///   PAC before anything is sent again (every send after an unknown outcome asks first);
    /// - `unknown` (an outcome the PAC has not confirmed, e.g. past its asking period): asked
    ///   for now.
    ///
    /// Returns what was done (for the audit and the notice); `None` when the row is in neither
    /// state (any more).
    pub async fn retry_document(
        &self,
        outbox_id: i64,
        actor: &str,
    ) -> Result<Option<&'static str>, StoreError> {
        const FAILED: &str = "UPDATE outbox SET state = CASE WHEN (SELECT a.outcome FROM pac_attempts a \
            WHERE a.outbox_id = outbox.id AND a.operation IN ('stamp', 'recover') ORDER BY a.id DESC LIMIT 1) \
            IN ('unknown', 'unresolved') THEN 'unknown' ELSE 'pending' END, run_at = $1, attempts = 0, \
            lease_owner = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $3 AND state = 'failed' \
            RETURNING state";
        const UNKNOWN: &str = "UPDATE outbox SET run_at = $1, updated_at = $2 WHERE id = $3 AND state = 'unknown' RETURNING state";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let mut done = None;
            for (sql, from) in [(FAILED, "failed"), (UNKNOWN, "unknown")] {
                let to: Option<(String,)> = stmt(sql)
                    .bind(now)
                    .bind(now)
                    .bind(outbox_id)
                    .fetch_optional_in(&mut tx, "retry a document")
                    .await?;
                done = match (from, to.as_ref().map(|t| t.0.as_str())) {
                    (_, None) => continue,
                    ("failed", Some("pending")) => {
                        Some("failed → pending, same frozen bytes and key")
                    }
                    ("failed", Some(_)) => Some(
                        "failed → unknown: its last PAC call went unanswered, so the PAC is asked before anything is sent; same frozen bytes and key",
                    ),
                    _ => Some("unknown: the PAC is asked now whether it stamped the document"),
                };
                break;
            }
            if let Some(detail) = done {
                audit_in(&mut tx, actor, "retry", ("outbox", outbox_id), detail, now).await?;
            }
            Ok::<_, StoreError>(done)
        };
        tx.commit("commit a retry").await?;
        out
    }

    /// Starts a new generation of an `expired` or `failed` document: the current one goes to
    /// `outbox_history`, the row gets the new request and key, no sealed bytes, state `pending`.
    /// `false` when the row changed meanwhile (other state or generation).
    #[allow(clippy::too_many_arguments)]
    pub async fn refreeze(
        &self,
        outbox_id: i64,
        expected_generation: i32,
        new_request_json: &str,
        new_key: &str,
        new_fecha: NaiveDateTime,
        reason: &str,
        actor: &str,
    ) -> Result<bool, StoreError> {
        const ARCHIVE: &str = "INSERT INTO outbox_history (outbox_id, generation, stamp_key, request_json, \
            sealed_xml, reason, actor, at) SELECT id, generation, stamp_key, request_json, sealed_xml, $1, $2, $3 \
            FROM outbox WHERE id = $4 AND generation = $5 AND state IN ('expired', 'failed') AND uuid IS NULL";
        const RENEW: &str = "UPDATE outbox SET request_json = $1, stamp_key = $2, generation = generation + 1, \
            sealed_xml = NULL, sealed_at = NULL, state = 'pending', attempts = 0, run_at = $3, fecha = $4, \
            lease_owner = NULL, lease_expires_at = NULL, last_error_code = NULL, last_error_message = NULL, \
            pac_route = NULL, updated_at = $5 \
            WHERE id = $6 AND generation = $7 AND state IN ('expired', 'failed') AND uuid IS NULL";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let archived = stmt(ARCHIVE)
                .bind(reason)
                .bind(actor)
                .bind(now)
                .bind(outbox_id)
                .bind(expected_generation)
                .execute_in(&mut tx, "archive a generation")
                .await?;
            if archived != 1 {
                return Ok(false);
            }
            stmt(RENEW)
                .bind(new_request_json)
                .bind(new_key)
                .bind(now)
                .bind(new_fecha)
                .bind(now)
                .bind(outbox_id)
                .bind(expected_generation)
                .execute_in(&mut tx, "refreeze a document")
                .await?;
            let detail = format!(
                "generation {expected_generation} archived, generation {} frozen with Fecha \
                 {new_fecha} and key {new_key}: {reason}",
                expected_generation + 1
            );
            audit_in(
                &mut tx,
                actor,
                "refreeze",
                ("outbox", outbox_id),
                &detail,
                now,
            )
            .await?;
            Ok::<bool, StoreError>(true)
        };
        tx.commit("commit a refreeze").await?;
        out
    }

    /// Records a stamp the PAC holds for a document we never recorded it on, and flags the row
    /// for a human. `false` when the row already has a UUID. With `mail` (email on: the domain
    /// of `[email] from`) the customer's email is queued with it, as for any stamp.
    #[allow(clippy::too_many_arguments)]
    pub async fn adopt_stamp(
        &self,
        outbox_id: i64,
        uuid: &str,
        stamped_xml: &[u8],
        fecha_timbrado: &str,
        flag: &str,
        actor: &str,
        mail: Option<&str>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "UPDATE outbox SET uuid = $1, stamped_xml = $2, fecha_timbrado = $3, state = 'stamped', \
            stamped_at = $4, flag = $5, lease_owner = NULL, lease_expires_at = NULL, updated_at = $6 \
            WHERE id = $7 AND uuid IS NULL";
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let out = {
            let done = stmt(SQL)
                .bind(uuid.to_uppercase())
                .bind(stamped_xml)
                .bind(fecha_timbrado)
                .bind(now)
                .bind(flag)
                .bind(now)
                .bind(outbox_id)
                .execute_in(&mut tx, "adopt a stamp")
                .await?;
            if done == 1 {
                let detail = format!("UUID {uuid}: {flag}");
                audit_in(
                    &mut tx,
                    actor,
                    "adopt_stamp",
                    ("outbox", outbox_id),
                    &detail,
                    now,
                )
                .await?;
                // The merchant hears of the adopted stamp like of any other.
                queue_merchant_event_in(&mut tx, "invoice.stamped", outbox_id, now).await?;
                queue_event_in(&mut tx, outbox_id, Event::Stamped, mail, now).await?;
            }
            Ok::<bool, StoreError>(done == 1)
        };
        tx.commit("commit an adopted stamp").await?;
        out
    }
}
