//! Argentina (ARCA): what follows a sale's voucher (migration 0029).
//!
//! - A held or rejected ARS sale corrected by a human ([`Db::arca_correct_sale`]): the buyer to
//!   name, and the attempt it is issued again under (`{provider}:{payment_id}#{attempt}`),
//!   past every key the sale ever used, so a settled key is never sent other input.
//! - The customer's email of an authorized voucher ([`Db::arca_sale_settled_mailed`], and a
//!   nota de crédito's, [`Db::arca_refund_settled_mailed`]): a delivery row naming the
//!   voucher's key, written in the transaction that settles the sale (or refund), under a
//!   Message-ID derived from the voucher, so it is queued once whatever repeats.

use chrono::Utc;

use super::arca_queue::{back_to_arca_row_in, settle_arca_in};
use super::exec::{Tx, stmt};
use super::{Db, StoreError};
use crate::domain::delivery::arca_message_id;
use crate::domain::{DocumentState, PaymentStatus, RefundStatus};

/// A human's correction of a sale's buyer.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaCorrection {
    /// `CUIT`, `CUIL`, `DNI`, or empty (no identification).
    pub doc_kind: String,
    pub doc_number: String,
    /// A [`crate::config::Receptor`]'s name.
    pub condicion_iva: String,
    /// The attempt the sale is issued under (2 or more).
    pub attempt: i32,
}

/// An ARS sale the ARCA loop held or ARCA refused (`needs_attention`, its reason `ARCA: …`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaHeldSale {
    pub id: i64,
    pub provider: String,
    pub payment_id: String,
    /// Decimal text in pesos.
    pub amount: String,
    pub reason: Option<String>,
}

/// An ARS sale the ARCA loop held or ARCA refused: what a human may correct.
const HELD: &str = "status = 'needs_attention' AND currency = 'ARS' AND reason LIKE 'ARCA:%'";

/// The attempt of a sale's key (`sale`, `sale#n`, `sale#n#m` after the barrier): `n`, 1 for
/// the sale's own key.
fn attempt_of(sale: &str, key: &str) -> i32 {
    key.strip_prefix(sale)
        .and_then(|rest| rest.strip_prefix('#'))
        .and_then(|rest| rest.split('#').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// In `tx`: the sale's email address, blank as none.
async fn email_in(tx: &mut Tx<'_>, payment_row: i64) -> Result<Option<String>, StoreError> {
    let row: Option<(String,)> = stmt("SELECT customer_json FROM payments WHERE id = $1")
        .bind(payment_row)
        .fetch_optional_in(tx, "read the buyer's address")
        .await?;
    Ok(row
        .and_then(|(j,)| serde_json::from_str::<serde_json::Value>(&j).ok())
        .and_then(|v| v.get("email")?.as_str().map(|e| e.trim().to_owned()))
        .filter(|e| !e.is_empty()))
}

/// In `tx`: held sale `provider:payment_id` back to `arca_pending` with `reason`, its outbox
/// row too (under a new key and order when `refrozen`), and `actor`'s action (name, target
/// kind, target) audited with it.
pub(super) async fn back_to_arca_in(
    tx: &mut Tx<'_>,
    (provider, payment_id): (&str, &str),
    reason: &str,
    refrozen: Option<(&str, &str)>,
    (actor, (action, kind, target)): (&str, (&str, &str, &str)),
    now: chrono::DateTime<Utc>,
) -> Result<(), StoreError> {
    stmt(
        "UPDATE payments SET status = 'arca_pending', reason = $1, updated_at = $2 \
         WHERE provider = $3 AND payment_id = $4 AND status = 'needs_attention'",
    )
    .bind(reason)
    .bind(now)
    .bind(provider)
    .bind(payment_id)
    .execute_in(tx, "send an ARS sale back to ARCA")
    .await?;
    back_to_arca_row_in(tx, (provider, payment_id), refrozen, now).await?;
    super::admin::admin_action(actor, action, kind, target, Some(reason), now)
        .execute_in(tx, "record an admin action")
        .await?;
    Ok(())
}

impl Db {
    /// The correction of sale `provider:payment_id`, if a human made one.
    pub async fn arca_correction(
        &self,
        provider: &str,
        payment_id: &str,
    ) -> Result<Option<ArcaCorrection>, StoreError> {
        stmt(
            "SELECT doc_kind, doc_number, condicion_iva, attempt FROM arca_corrections \
             WHERE provider = $1 AND payment_id = $2",
        )
        .bind(provider)
        .bind(payment_id)
        .fetch_optional(self, "read an ARCA correction")
        .await
    }

    /// ARS sales held by the ARCA loop or refused by ARCA, newest first: what a human corrects.
    pub async fn arca_held_sales(&self, limit: i64) -> Result<Vec<ArcaHeldSale>, StoreError> {
        stmt(format!(
            "SELECT id, provider, payment_id, amount, reason FROM payments WHERE {HELD} \
             ORDER BY id DESC LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(self, "list the ARS sales held for ARCA")
        .await
    }

    /// Sale `provider:payment_id` if it is held or refused (see [`Db::arca_held_sales`]).
    pub async fn arca_held_sale(
        &self,
        provider: &str,
        payment_id: &str,
    ) -> Result<Option<ArcaHeldSale>, StoreError> {
        stmt(format!(
            "SELECT id, provider, payment_id, amount, reason FROM payments WHERE {HELD} \
             AND provider = $1 AND payment_id = $2"
        ))
        .bind(provider)
        .bind(payment_id)
        .fetch_optional(self, "read a held ARS sale")
        .await
    }

    /// A human corrects held or refused sale `provider:payment_id` (still `needs_attention`
    /// with an ARCA reason): in one transaction the buyer `c` is stored with the sale's next
    /// attempt (past every key of the sale and every earlier correction), the sale goes back
    /// to `arca_pending` with `order` (the voucher for that buyer, JSON) frozen in its outbox
    /// row under the attempt's key, and the action is audited. The new attempt's key; `None` when the
    /// sale is not waiting for a human.
    pub async fn arca_correct_sale(
        &self,
        (provider, payment_id): (&str, &str),
        (c, order): (&ArcaCorrection, &str),
        actor: &str,
    ) -> Result<Option<String>, StoreError> {
        let now = Utc::now();
        let sale = format!("{provider}:{payment_id}");
        let mut tx = self.begin().await?;
        // Taken first: the row the ARCA loop settles.
        let held = stmt(format!(
            "UPDATE payments SET updated_at = $1 WHERE provider = $2 AND payment_id = $3 \
             AND {HELD}"
        ))
        .bind(now)
        .bind(provider)
        .bind(payment_id)
        .execute_in(&mut tx, "take a held ARS sale")
        .await?;
        if held != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let keys: Vec<(String,)> =
            stmt("SELECT key FROM arca_vouchers WHERE key = $1 OR key LIKE $2")
                .bind(&sale)
                .bind(format!("{sale}#%"))
                .fetch_all_in(&mut tx, "read the sale's ARCA keys")
                .await?;
        let before: Option<(i32,)> =
            stmt("SELECT attempt FROM arca_corrections WHERE provider = $1 AND payment_id = $2")
                .bind(provider)
                .bind(payment_id)
                .fetch_optional_in(&mut tx, "read the sale's last correction")
                .await?;
        let attempt = keys
            .iter()
            .map(|(k,)| attempt_of(&sale, k))
            .chain(before.map(|b| b.0))
            .fold(1, i32::max)
            + 1;
        stmt(
            "INSERT INTO arca_corrections (provider, payment_id, doc_kind, doc_number, \
             condicion_iva, attempt, actor, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) \
             ON CONFLICT (provider, payment_id) DO UPDATE SET doc_kind = EXCLUDED.doc_kind, \
             doc_number = EXCLUDED.doc_number, condicion_iva = EXCLUDED.condicion_iva, \
             attempt = EXCLUDED.attempt, actor = EXCLUDED.actor, updated_at = EXCLUDED.updated_at",
        )
        .bind(provider)
        .bind(payment_id)
        .bind(&c.doc_kind)
        .bind(&c.doc_number)
        .bind(&c.condicion_iva)
        .bind(attempt)
        .bind(actor)
        .bind(now)
        .execute_in(&mut tx, "record an ARCA correction")
        .await?;
        let key = format!("{sale}#{attempt}");
        let buyer = match c.doc_kind.as_str() {
            "" => "no identification".to_owned(),
            kind => format!("{kind} {}", c.doc_number),
        };
        let reason = format!(
            "ARCA: buyer corrected by {actor} ({buyer}, {}): issued again as {key}",
            c.condicion_iva
        );
        let audit = ("arca_correct", "payment", sale.as_str());
        back_to_arca_in(
            &mut tx,
            (provider, payment_id),
            &reason,
            Some((&key, order)),
            (actor, audit),
            now,
        )
        .await?;
        tx.commit("correct an ARS sale").await?;
        Ok(Some(key))
    }

    /// Settles an ARS sale still `arca_pending` (a late repeat moves nothing):
    /// `arca_authorized` with its voucher, or `needs_attention` and why. In the same
    /// transaction, when the sale moved to
    /// `arca_authorized`, email is on (`domain`, of `[email] from`) and the buyer gave an
    /// address, the email of its authorized voucher, under a Message-ID derived from the
    /// voucher ([`arca_message_id`]): a repeat of the settle moves nothing and queues nothing.
    pub async fn arca_sale_settled_mailed(
        &self,
        payment_row: i64,
        (status, reason): (PaymentStatus, &str),
        domain: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let authorized = status == PaymentStatus::ArcaAuthorized;
        let mut tx = self.begin().await?;
        let n = settle_in(
            &mut tx,
            "payments",
            payment_row,
            (status.as_str(), reason),
            now,
        )
        .await?;
        let row = match authorized {
            true => DocumentState::Authorized,
            false => DocumentState::ArcaHeld,
        };
        settle_arca_in(&mut tx, payment_row, row, reason, now).await?;
        if let Some(domain) = domain.filter(|_| n == 1 && authorized) {
            let (provider, payment_id): (String, String) =
                stmt("SELECT provider, payment_id FROM payments WHERE id = $1")
                    .bind(payment_row)
                    .fetch_one_in(&mut tx, "read the settled sale")
                    .await?;
            let sale = format!("{provider}:{payment_id}");
            let keys = (sale.as_str(), format!("{sale}#%"));
            queue_voucher_in(&mut tx, payment_row, keys, domain, now).await?;
        }
        tx.commit("settle an ARS sale").await?;
        Ok(())
    }

    /// Settles a refund still `arca_pending`: `arca_credited` with its nota de crédito, or
    /// `needs_attention` and why; once its nota was frozen (`nota`: the nota's own payment
    /// row), that row and its outbox row with it (`arca_authorized`, or `arca_held`). In the
    /// same transaction, as for a sale, the buyer's email of the nota de crédito when the
    /// refund moved to `arca_credited`.
    pub async fn arca_refund_settled_mailed(
        &self,
        (refund_row, nota): (i64, Option<i64>),
        (status, reason): (RefundStatus, &str),
        domain: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let credited = status == RefundStatus::ArcaCredited;
        let mut tx = self.begin().await?;
        let n = settle_in(
            &mut tx,
            "refunds",
            refund_row,
            (status.as_str(), reason),
            now,
        )
        .await?;
        if let Some(nota_row) = nota {
            // The nota's own payment row reads as its voucher does.
            let (state, status) = match credited {
                true => (DocumentState::Authorized, PaymentStatus::ArcaAuthorized),
                false => (DocumentState::ArcaHeld, PaymentStatus::ArcaHeld),
            };
            settle_in(
                &mut tx,
                "payments",
                nota_row,
                (status.as_str(), reason),
                now,
            )
            .await?;
            settle_arca_in(&mut tx, nota_row, state, reason, now).await?;
        }
        if let Some(domain) = domain.filter(|_| n == 1 && credited) {
            let (sale_row, provider, refund_id): (i64, String, String) = stmt(
                "SELECT p.id, r.provider, r.refund_id FROM refunds r JOIN payments p \
                 ON p.provider = r.provider AND p.payment_id = r.payment_ref WHERE r.id = $1",
            )
            .bind(refund_row)
            .fetch_one_in(&mut tx, "read the credited refund")
            .await?;
            let key = format!("refund:{provider}:{refund_id}");
            let keys = (key.as_str(), format!("{key}#%"));
            queue_voucher_in(&mut tx, sale_row, keys, domain, now).await?;
        }
        tx.commit("settle a refund's nota de crédito").await?;
        Ok(())
    }
}

/// In `tx`: row `id` of `table` (`payments`, `refunds`) settled `status` with `reason` when
/// it is still `arca_pending` (a late repeat moves nothing); how many rows moved.
async fn settle_in(
    tx: &mut Tx<'_>,
    table: &str,
    id: i64,
    (status, reason): (&str, &str),
    now: chrono::DateTime<Utc>,
) -> Result<u64, StoreError> {
    stmt(format!(
        "UPDATE {table} SET status = $1, reason = $2, updated_at = $3 \
         WHERE id = $4 AND status = 'arca_pending'"
    ))
    .bind(status)
    .bind(reason)
    .bind(now)
    .bind(id)
    .execute_in(tx, "settle an ARCA sale or nota")
    .await
}

/// In `tx`: the email of the authorized voucher under key `keys.0` (or an attempt of it,
/// `keys.1`), to the address of sale `payment_row` if it gave one, once per voucher.
async fn queue_voucher_in(
    tx: &mut Tx<'_>,
    payment_row: i64,
    keys: (&str, String),
    domain: &str,
    now: chrono::DateTime<Utc>,
) -> Result<(), StoreError> {
    let Some(to) = email_in(tx, payment_row).await? else {
        return Ok(());
    };
    let voucher: Option<super::ArcaVoucherRow> = stmt(format!(
        "SELECT {} FROM arca_vouchers WHERE (key = $1 OR key LIKE $2) \
         AND state = 'authorized' ORDER BY key LIMIT 1",
        super::arca::VOUCHER_COLUMNS
    ))
    .bind(keys.0)
    .bind(keys.1)
    .fetch_optional_in(tx, "read the authorized voucher")
    .await?;
    let Some(v) = voucher else {
        return Ok(());
    };
    stmt(
        "INSERT INTO deliveries (outbox_id, arca_key, event, resend, recipient, message_id, \
         state, attempts, run_at, created_at, updated_at) \
         VALUES (NULL, $1, 'stamped', 0, $2, $3, 'pending', 0, $4, $4, $4) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&v.key)
    .bind(&to)
    .bind(arca_message_id(
        v.cuit,
        v.pto_vta,
        v.cbte_tipo,
        v.number,
        domain,
    ))
    .bind(now)
    .execute_in(tx, "queue the voucher's email")
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_attempt_of_a_key_is_its_first_number() {
        let s = "mercadopago:7";
        assert_eq!(super::attempt_of(s, s), 1);
        assert_eq!(super::attempt_of(s, "mercadopago:7#3"), 3);
        assert_eq!(super::attempt_of(s, "mercadopago:7#3#2"), 3);
    }
}
