//! What the accountant's monthly export reads ([`crate::export`]): the stamped documents of a
//! month and their cancellation acuses, a page at a time (keyset by id), so a month of any size
//! is read in flat memory.

use chrono::NaiveDateTime;

use super::exec::stmt;
use super::{Db, StoreError};

/// A stamped document of the month, with its exact stamped XML.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExportDoc {
    pub id: i64,
    pub kind: String,
    pub state: String,
    pub uuid: String,
    pub stamped_xml: Vec<u8>,
}

/// A cancellation acuse of a document of the month.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExportAcuse {
    pub id: i64,
    pub uuid: String,
    pub acuse_xml: String,
}

/// The documents a month's export holds: stamped, with a Fecha in `[$1, $2)`. One text for the
/// pages and their count, which sizes the ZIP's directory, so the two cannot drift apart.
macro_rules! stamped_in_month {
    () => {
        "uuid IS NOT NULL AND stamped_xml IS NOT NULL AND fecha >= $1 AND fecha < $2"
    };
}

impl Db {
    /// Up to `limit` stamped documents whose Fecha (Mexico City) is in `[from, to)`, after
    /// outbox id `after`, in id order.
    pub async fn export_documents(
        &self,
        from: NaiveDateTime,
        to: NaiveDateTime,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ExportDoc>, StoreError> {
        stmt(concat!(
            "SELECT id, kind, state, uuid, stamped_xml FROM outbox WHERE ",
            stamped_in_month!(),
            " AND id > $3 ORDER BY id LIMIT $4"
        ))
        .bind(from)
        .bind(to)
        .bind(after)
        .bind(limit)
        .fetch_all(self, "read the month's stamped documents")
        .await
    }

    /// How many stamped documents [`Db::export_documents`] will give for `[from, to)`: the
    /// export sizes its ZIP's directory once instead of doubling it as it goes.
    pub async fn count_export_documents(
        &self,
        from: NaiveDateTime,
        to: NaiveDateTime,
    ) -> Result<i64, StoreError> {
        let (n,): (i64,) = stmt(concat!(
            "SELECT COUNT(*) FROM outbox WHERE ",
            stamped_in_month!()
        ))
        .bind(from)
        .bind(to)
        .fetch_one(self, "count the month's stamped documents")
        .await?;
        Ok(n)
    }

    /// Up to `limit` cancellation acuses of documents whose Fecha is in `[from, to)`, after
    /// cancellation id `after`, in id order.
    pub async fn export_acuses(
        &self,
        from: NaiveDateTime,
        to: NaiveDateTime,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ExportAcuse>, StoreError> {
        stmt(
            "SELECT c.id, c.uuid, c.acuse_xml FROM cancellations c \
             JOIN outbox o ON o.id = c.outbox_id \
             WHERE c.acuse_xml IS NOT NULL AND o.fecha >= $1 AND o.fecha < $2 AND c.id > $3 \
             ORDER BY c.id LIMIT $4",
        )
        .bind(from)
        .bind(to)
        .bind(after)
        .bind(limit)
        .fetch_all(self, "read the month's cancellation acuses")
        .await
    }
}
