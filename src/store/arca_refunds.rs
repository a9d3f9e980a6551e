//! Argentina (ARCA): the refunds of ARS sales, each to become one nota de crédito. A refund
//! of a sale ARCA invoices is recorded `arca_pending` (`refunds.rs`, decided by
//! `crate::refund`) and waits there until its sale's voucher is authorized; the ARCA lane
//! (`crate::arca::drain`) then freezes its nota in the outbox (`arca_queue.rs`), issues it
//! and settles the refund `arca_credited` (or `needs_attention`).

use super::exec::stmt;
use super::{Db, StoreError};
use crate::domain::RefundStatus;

/// A refund whose nota de crédito can be issued: its sale's voucher is authorized.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ArcaRefundRow {
    /// The refund's row.
    pub id: i64,
    pub provider: String,
    pub refund_id: String,
    /// The sale's payment id at the provider.
    pub payment_ref: String,
    /// Decimal text in pesos.
    pub amount: String,
}

/// Statuses of a refund whose amount a nota de crédito credits (or will).
pub const ARCA_CREDITING: &str = "('arca_pending', 'arca_credited')";

impl Db {
    /// The authorized voucher of sale `provider:payment_ref`, under its key or a later
    /// attempt's (`key#2`, … after a superseded or re-issued attempt): what its notas credit.
    pub async fn arca_sale_voucher(
        &self,
        provider: &str,
        payment_ref: &str,
    ) -> Result<Option<super::ArcaVoucherRow>, StoreError> {
        let key = format!("{provider}:{payment_ref}");
        stmt(format!(
            "SELECT {} FROM arca_vouchers WHERE (key = $1 OR key LIKE $2) \
             AND state = 'authorized' ORDER BY key LIMIT 1",
            super::arca::VOUCHER_COLUMNS
        ))
        .bind(&key)
        .bind(format!("{key}#%"))
        .fetch_optional(self, "read the voucher of a refunded sale")
        .await
    }

    /// Decimal text of what the refunds of the same sale recorded before refund `refund_row`
    /// credit (or will): the base of its nota's proportions.
    pub async fn arca_credited_before(&self, r: &ArcaRefundRow) -> Result<Vec<String>, StoreError> {
        let rows: Vec<(String,)> = stmt(format!(
            "SELECT amount FROM refunds WHERE provider = $1 AND payment_ref = $2 \
             AND status IN {ARCA_CREDITING} AND id < $3 ORDER BY id"
        ))
        .bind(&r.provider)
        .bind(&r.payment_ref)
        .bind(r.id)
        .fetch_all(self, "read the sale's earlier notas de crédito")
        .await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    }

    /// A refund's status and reason, by its provider's id.
    pub async fn refund_status(
        &self,
        provider: &str,
        refund_id: &str,
    ) -> Result<Option<(RefundStatus, Option<String>)>, StoreError> {
        stmt("SELECT status, reason FROM refunds WHERE provider = $1 AND refund_id = $2")
            .bind(provider)
            .bind(refund_id)
            .fetch_optional(self, "read a refund's status")
            .await
    }
}
