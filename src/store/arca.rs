//! Argentina (ARCA): vouchers by idempotency key, their number sequences, the leases that
//! serialise a sequence across instances, and the WSAA ticket cache (migration 0024).
//!
//! The number is a voucher's identity (ARCA takes no idempotency key), so it is reserved here,
//! committed, and only then sent ([`Db::arca_reserve`]); a sequence's next number is handed out
//! only once its last claim is settled. Nothing here is held across a network call: the
//! lease ([`Db::arca_lock`]) covers the reservation's reads and writes, and a reservation's own
//! `sending_until` says how long its sender may still be talking to ARCA.

use chrono::{DateTime, Duration, Utc};

use super::exec::stmt;
use super::{Db, StoreError};
use crate::domain::ArcaVoucherState;

/// A sequence: (environment, CUIT, punto de venta, voucher type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArcaSeq<'a> {
    pub environment: &'a str,
    pub cuit: i64,
    pub pto_vta: i32,
    pub cbte_tipo: i32,
}

impl ArcaSeq<'_> {
    /// The name of this sequence's lease.
    pub fn lock_name(&self) -> String {
        format!(
            "sequence:{}:{}:{}:{}",
            self.environment, self.cuit, self.pto_vta, self.cbte_tipo
        )
    }
}

/// One voucher row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaVoucherRow {
    pub key: String,
    pub environment: String,
    pub cuit: i64,
    pub pto_vta: i32,
    pub cbte_tipo: i32,
    pub number: i64,
    /// `yyyy-mm-dd`.
    pub cbte_fch: String,
    pub input_hash: String,
    /// The input as JSON (the exact request at `number` and `cbte_fch`).
    pub input: String,
    pub state: ArcaVoucherState,
    pub sending_until: Option<DateTime<Utc>>,
    pub sends: i32,
    pub cae: Option<String>,
    pub cae_due: Option<String>,
    pub recovered: bool,
    pub errors: Option<String>,
    pub observations: Option<String>,
    pub detail: Option<String>,
    /// After this instant no send of it can still reach ARCA (`None`: none in flight).
    pub landing_until: Option<DateTime<Utc>>,
    /// The key that took its number (`superseded`).
    pub superseded_by: Option<String>,
}

/// A sequence's row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaSequenceRow {
    pub last_number: i64,
    pub last_key: Option<String>,
    pub last_date: Option<String>,
}

/// A reservation to make.
#[derive(Debug, Clone)]
pub struct NewReservation<'a> {
    pub key: &'a str,
    pub input_hash: &'a str,
    pub input: &'a str,
    /// Today in Argentina (`yyyy-mm-dd`); the sequence's last date if that is later.
    pub today: &'a str,
    /// Until when the reserving sender may be talking to ARCA.
    pub sending_until: DateTime<Utc>,
    /// Until when its send may still reach ARCA (`sending_until` plus a margin).
    pub landing_until: DateTime<Utc>,
}

/// What [`Db::arca_reserve`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// Numbered and committed: now send it.
    Reserved(ArcaVoucherRow),
    /// The old claim whose number was to be taken over is no longer as it was seen (sent
    /// again, settled, or no longer the sequence's last): look again.
    Moved,
    /// The key has a voucher already (another instance reserved it first).
    Existing(ArcaVoucherRow),
    /// The sequence's last claim is not settled: resolve it first.
    Unsettled(ArcaVoucherRow),
    /// The next number depends on ARCA's last authorized: read it and try again.
    NeedLast,
}

/// A stored WSAA ticket.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaTicketRow {
    pub token: String,
    pub sign: String,
    pub generated_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A standing WSAA login refusal (`coe.alreadyAuthenticated`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaLoginRefusal {
    pub environment: String,
    pub service: String,
    pub cert_fingerprint: String,
    /// Refusals in a row.
    pub refusals: i32,
    pub refused_at: DateTime<Utc>,
    /// No instance logs in before this.
    pub retry_at: DateTime<Utc>,
}

const REFUSAL_COLUMNS: &str =
    "environment, service, cert_fingerprint, refusals, refused_at, retry_at";

pub(super) const VOUCHER_COLUMNS: &str = "key, environment, cuit, pto_vta, cbte_tipo, number, cbte_fch, \
    input_hash, input, state, sending_until, sends, cae, cae_due, recovered, errors, \
    observations, detail, landing_until, superseded_by";

pub(super) const SEQ_WHERE: &str =
    "environment = $1 AND cuit = $2 AND pto_vta = $3 AND cbte_tipo = $4";

pub(super) fn select_voucher() -> String {
    format!("SELECT {VOUCHER_COLUMNS} FROM arca_vouchers WHERE key = $1")
}

impl Db {
    /// `(state, count)` of every ARCA voucher (the `autofactura_arca_vouchers` gauge).
    pub async fn arca_voucher_counts(&self) -> Result<Vec<(ArcaVoucherState, i64)>, StoreError> {
        stmt("SELECT state, COUNT(*) AS n FROM arca_vouchers GROUP BY state ORDER BY 1")
            .fetch_all(self, "count ARCA vouchers by state")
            .await
    }

    /// The voucher of `key`, if any.
    pub async fn arca_voucher(&self, key: &str) -> Result<Option<ArcaVoucherRow>, StoreError> {
        stmt(select_voucher())
            .bind(key)
            .fetch_optional(self, "read an ARCA voucher")
            .await
    }

    /// A sequence's row, if any number was ever reserved on it.
    pub async fn arca_sequence(
        &self,
        seq: ArcaSeq<'_>,
    ) -> Result<Option<ArcaSequenceRow>, StoreError> {
        stmt(format!(
            "SELECT last_number, last_key, last_date FROM arca_sequences WHERE {SEQ_WHERE}"
        ))
        .bind(seq.environment)
        .bind(seq.cuit)
        .bind(seq.pto_vta)
        .bind(seq.cbte_tipo)
        .fetch_optional(self, "read an ARCA sequence")
        .await
    }

    /// Every voucher of a sequence, by number.
    pub async fn arca_vouchers(&self, seq: ArcaSeq<'_>) -> Result<Vec<ArcaVoucherRow>, StoreError> {
        stmt(format!(
            "SELECT {VOUCHER_COLUMNS} FROM arca_vouchers WHERE {SEQ_WHERE} ORDER BY number, key"
        ))
        .bind(seq.environment)
        .bind(seq.cuit)
        .bind(seq.pto_vta)
        .bind(seq.cbte_tipo)
        .fetch_all(self, "list ARCA vouchers")
        .await
    }

    /// Takes lease `name` for `owner` until `ttl` from now: a free name is inserted, an
    /// expired one taken over. `false` while another owner holds it.
    pub async fn arca_lock(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let taken = stmt(
            "INSERT INTO arca_locks (name, owner, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(owner)
        .bind(now + ttl)
        .execute(self, "take an ARCA lease")
        .await?;
        if taken == 1 {
            return Ok(true);
        }
        let over = stmt(
            "UPDATE arca_locks SET owner = $2, expires_at = $3 WHERE name = $1 AND expires_at < $4",
        )
        .bind(name)
        .bind(owner)
        .bind(now + ttl)
        .bind(now)
        .execute(self, "take over an expired ARCA lease")
        .await?;
        Ok(over == 1)
    }

    /// Releases lease `name` if `owner` still holds it.
    pub async fn arca_unlock(&self, name: &str, owner: &str) -> Result<(), StoreError> {
        stmt("DELETE FROM arca_locks WHERE name = $1 AND owner = $2")
            .bind(name)
            .bind(owner)
            .execute(self, "release an ARCA lease")
            .await?;
        Ok(())
    }

    /// Takes the right to (re)send `key`'s open voucher until `until` (its send may land
    /// until `landing_until`): only when no other sender may still be talking to ARCA about
    /// it. `None` when another one may, or when it was settled (superseded) meanwhile. On disk
    /// when it returns, as a claim of numbers is: a landing window a power loss took back
    /// would let the barrier give the number away while this send may still land.
    pub async fn arca_claim_send(
        &self,
        key: &str,
        until: DateTime<Utc>,
        landing_until: DateTime<Utc>,
    ) -> Result<Option<ArcaVoucherRow>, StoreError> {
        let what = "claim an ARCA send";
        let mut tx = self.begin().await?;
        let claimed = stmt(format!(
            "UPDATE arca_vouchers SET state = 'reserved', sending_until = $2, landing_until = $4, \
             sends = sends + 1, updated_at = $3 WHERE key = $1 \
             AND state IN ('reserved', 'unknown') \
             AND (sending_until IS NULL OR sending_until < $3) RETURNING {VOUCHER_COLUMNS}"
        ))
        .bind(key)
        .bind(until)
        .bind(Utc::now())
        .bind(landing_until)
        .fetch_optional_in(&mut tx, what)
        .await?;
        tx.commit_durable(what).await?;
        Ok(claimed)
    }

    /// Settles an open voucher as authorized. `false` if it was settled already.
    pub async fn arca_authorized(
        &self,
        key: &str,
        cae: &str,
        cae_due: &str,
        observations: &str,
        recovered: bool,
    ) -> Result<bool, StoreError> {
        let n = stmt(
            "UPDATE arca_vouchers SET state = 'authorized', cae = $2, cae_due = $3, \
             observations = $4, recovered = $5, sending_until = NULL, updated_at = $6 \
             WHERE key = $1 AND state IN ('reserved', 'unknown')",
        )
        .bind(key)
        .bind(cae)
        .bind(cae_due)
        .bind(observations)
        .bind(recovered)
        .bind(Utc::now())
        .execute(self, "settle an ARCA voucher as authorized")
        .await?;
        Ok(n == 1)
    }

    /// Settles an open voucher as `state` (rejected or conflict) with its evidence.
    pub async fn arca_settle(
        &self,
        key: &str,
        state: ArcaVoucherState,
        errors: Option<&str>,
        detail: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = stmt(
            "UPDATE arca_vouchers SET state = $2, errors = $3, detail = $4, \
             sending_until = NULL, updated_at = $5 \
             WHERE key = $1 AND state IN ('reserved', 'unknown')",
        )
        .bind(key)
        .bind(state)
        .bind(errors)
        .bind(detail)
        .bind(Utc::now())
        .execute(self, "settle an ARCA voucher")
        .await?;
        Ok(n == 1)
    }

    /// Records that a send of `key` got no answer to trust: its outcome is unknown, and anyone
    /// may now consult its number.
    pub async fn arca_unknown(&self, key: &str, detail: &str) -> Result<(), StoreError> {
        stmt(
            "UPDATE arca_vouchers SET state = 'unknown', sending_until = NULL, detail = $2, \
             updated_at = $3 WHERE key = $1 AND state IN ('reserved', 'unknown')",
        )
        .bind(key)
        .bind(detail)
        .bind(Utc::now())
        .execute(self, "record an unknown ARCA outcome")
        .await?;
        Ok(())
    }

    /// The stored WSAA ticket of (environment, service, certificate), if any.
    pub async fn arca_ticket(
        &self,
        environment: &str,
        service: &str,
        cert_fingerprint: &str,
    ) -> Result<Option<ArcaTicketRow>, StoreError> {
        stmt(
            "SELECT token, sign, generated_at, expires_at FROM arca_tickets \
             WHERE environment = $1 AND service = $2 AND cert_fingerprint = $3",
        )
        .bind(environment)
        .bind(service)
        .bind(cert_fingerprint)
        .fetch_optional(self, "read a WSAA ticket")
        .await
    }

    /// Stores (or replaces) the WSAA ticket of (environment, service, certificate).
    pub async fn arca_save_ticket(
        &self,
        environment: &str,
        service: &str,
        cert_fingerprint: &str,
        ticket: &ArcaTicketRow,
    ) -> Result<(), StoreError> {
        stmt(
            "INSERT INTO arca_tickets (environment, service, cert_fingerprint, token, sign, \
             generated_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (environment, service, cert_fingerprint) DO UPDATE SET \
             token = EXCLUDED.token, sign = EXCLUDED.sign, \
             generated_at = EXCLUDED.generated_at, expires_at = EXCLUDED.expires_at",
        )
        .bind(environment)
        .bind(service)
        .bind(cert_fingerprint)
        .bind(&ticket.token)
        .bind(&ticket.sign)
        .bind(ticket.generated_at)
        .bind(ticket.expires_at)
        .execute(self, "store a WSAA ticket")
        .await?;
        Ok(())
    }

    /// The standing WSAA login refusal of (environment, service, certificate), if any.
    pub async fn arca_login_refusal(
        &self,
        environment: &str,
        service: &str,
        cert_fingerprint: &str,
    ) -> Result<Option<ArcaLoginRefusal>, StoreError> {
        stmt(format!(
            "SELECT {REFUSAL_COLUMNS} FROM arca_login_refusals \
             WHERE environment = $1 AND service = $2 AND cert_fingerprint = $3"
        ))
        .bind(environment)
        .bind(service)
        .bind(cert_fingerprint)
        .fetch_optional(self, "read a WSAA login refusal")
        .await
    }

    /// Every standing WSAA login refusal (the admin's page).
    pub async fn arca_login_refusals(&self) -> Result<Vec<ArcaLoginRefusal>, StoreError> {
        stmt(format!(
            "SELECT {REFUSAL_COLUMNS} FROM arca_login_refusals ORDER BY environment, service"
        ))
        .fetch_all(self, "list WSAA login refusals")
        .await
    }

    /// Records a login refusal: `refusals` in a row, no login before `retry_at`.
    pub async fn arca_save_login_refusal(&self, r: &ArcaLoginRefusal) -> Result<(), StoreError> {
        stmt(
            "INSERT INTO arca_login_refusals (environment, service, cert_fingerprint, refusals, \
             refused_at, retry_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (environment, service, cert_fingerprint) DO UPDATE SET \
             refusals = EXCLUDED.refusals, refused_at = EXCLUDED.refused_at, \
             retry_at = EXCLUDED.retry_at",
        )
        .bind(&r.environment)
        .bind(&r.service)
        .bind(&r.cert_fingerprint)
        .bind(r.refusals)
        .bind(r.refused_at)
        .bind(r.retry_at)
        .execute(self, "record a WSAA login refusal")
        .await?;
        Ok(())
    }

    /// A login succeeded: the refusal is over.
    pub async fn arca_clear_login_refusal(
        &self,
        environment: &str,
        service: &str,
        cert_fingerprint: &str,
    ) -> Result<(), StoreError> {
        stmt(
            "DELETE FROM arca_login_refusals \
             WHERE environment = $1 AND service = $2 AND cert_fingerprint = $3",
        )
        .bind(environment)
        .bind(service)
        .bind(cert_fingerprint)
        .execute(self, "clear a WSAA login refusal")
        .await?;
        Ok(())
    }

    /// A human moves a sale whose voucher is a `conflict` on to its next attempt key: in one
    /// transaction the conflict names `next_key` (`superseded_by`; the conflict itself stays
    /// settled, never resent), the sale (`provider`, `payment_id`) goes back to
    /// `arca_pending` from `needs_attention`, and the action is audited. `false` when the
    /// voucher is not an unreleased conflict.
    pub async fn arca_reissue_conflict(
        &self,
        key: &str,
        next_key: &str,
        (provider, payment_id): (&str, &str),
        actor: &str,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let n = stmt(
            "UPDATE arca_vouchers SET superseded_by = $2, updated_at = $3 \
             WHERE key = $1 AND state = 'conflict' AND superseded_by IS NULL",
        )
        .bind(key)
        .bind(next_key)
        .bind(now)
        .execute_in(&mut tx, "release an ARCA conflict")
        .await?;
        if n != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        let reason = format!("ARCA: {key} was a conflict; re-issued as {next_key} by {actor}");
        let audit = ("arca_reissue", "arca_voucher", key);
        super::arca_followups::back_to_arca_in(
            &mut tx,
            (provider, payment_id),
            &reason,
            None,
            (actor, audit),
            now,
        )
        .await?;
        tx.commit("re-issue an ARCA conflict").await?;
        Ok(true)
    }

    /// A human ends a WSAA login refusal's wait (the next round logs in), audited.
    pub async fn arca_end_login_refusal(
        &self,
        environment: &str,
        cert_fingerprint: &str,
        actor: &str,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let n = stmt(
            "DELETE FROM arca_login_refusals WHERE environment = $1 AND cert_fingerprint = $2",
        )
        .bind(environment)
        .bind(cert_fingerprint)
        .execute_in(&mut tx, "end a WSAA login refusal")
        .await?;
        if n > 0 {
            let target = format!("{environment}:{cert_fingerprint}");
            let detail = "the next round logs in to WSAA without waiting";
            super::admin::admin_action(actor, "arca_login_now", "wsaa", target, Some(detail), now)
                .execute_in(&mut tx, "record an admin action")
                .await?;
        }
        tx.commit("end a WSAA login refusal").await?;
        Ok(n > 0)
    }

    /// ARS sales waiting for their ARCA voucher (`arca_pending`), oldest first.
    pub async fn arca_pending_sales(&self, limit: i64) -> Result<Vec<ArcaSaleRow>, StoreError> {
        stmt(
            "SELECT id, provider, payment_id, amount, customer_json FROM payments \
             WHERE status = 'arca_pending' ORDER BY id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self, "list sales waiting for ARCA")
        .await
    }

    /// The status and reason of a sale (`arca_pending`, `arca_authorized`, …).
    pub async fn arca_payment_status(
        &self,
        provider: &str,
        payment_id: &str,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        stmt("SELECT status, reason FROM payments WHERE provider = $1 AND payment_id = $2")
            .bind(provider)
            .bind(payment_id)
            .fetch_optional(self, "read a sale's status")
            .await
    }

    /// The newest vouchers, those still open (reserved, unknown) and conflicts first: the
    /// admin's list.
    pub async fn arca_recent_vouchers(
        &self,
        limit: i64,
    ) -> Result<Vec<ArcaVoucherRow>, StoreError> {
        stmt(format!(
            "SELECT {VOUCHER_COLUMNS} FROM arca_vouchers ORDER BY \
             CASE state WHEN 'unknown' THEN 0 WHEN 'reserved' THEN 1 WHEN 'conflict' THEN 2 \
             ELSE 3 END, cbte_tipo, number DESC LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(self, "list recent ARCA vouchers")
        .await
    }
}

/// An ARS sale waiting for its voucher.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaSaleRow {
    /// The payment's row.
    pub id: i64,
    pub provider: String,
    pub payment_id: String,
    /// Decimal text in pesos.
    pub amount: String,
    /// The buyer's data (`crate::ingest::CustomerData`: its `identification`).
    pub customer_json: String,
}
