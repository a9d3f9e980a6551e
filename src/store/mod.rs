//! Storage: every SQL statement, and every SQLite/PostgreSQL difference, lives in this folder.
//! It is split by aggregate (the tables one kind of thing owns), not by caller:
//!
//! - `connect.rs`: opening the database: connecting, the workers' second handle, migrations,
//!   throwaway PostgreSQL databases for tests and benchmarks.
//! - `exec.rs`: the only file that runs SQL on either backend: running a
//!   statement (written once with `$n` placeholders) on either pool or in a transaction,
//!   SQLite's write lock / `BEGIN IMMEDIATE` and its one-call scripts, and [`exec::Dialected`]
//!   statements whose text differs between the backends only at a marked clause. A backend
//!   branch appears only where the SQL really differs, each with its reason: SKIP LOCKED in
//!   claims, JSON extraction, and the worker's batched sealing and settles (arrays on
//!   PostgreSQL, one script on SQLite). It also maps the domain's states
//!   ([`crate::domain::DocumentState`], …) to and from their one stored spelling. Beside
//!   it, `exec_sale.rs` runs a new sale's statements on SQLite: alone in one trip, or in the
//!   write lock's open group of new sales.
//! - `writer.rs`: SQLite's one writer: the write lock every write queues on, the one write
//!   connection it keeps, and the group commit that lets new sales share one fsync.
//! - `stash.rs`: connections kept between statements, out of their pool (sqlx checks a
//!   connection given back to its pool with one more round trip).
//! - `rows.rs`: the `#[derive(sqlx::FromRow)]` structs statements read into.
//! - `events.rs`: webhook deliveries and the ingest transaction.
//! - `payments.rs`: payments.
//! - `folios.rs`: the folio sequences: a claimed batch numbered before it is sealed, and an
//!   explicit folio kept out of the numbering's way.
//! - `outbox.rs`: the frozen comprobante (`enqueue_in_tx`, shared by ingest and the API) and
//!   every change of an outbox row's state; `settle.rs` is its second half, the outcome of a
//!   stamping attempt (one, or a batch), apart only so that neither passes 800 lines.
//! - `globals.rs`: the factura global: sales awaiting it and their recorded refunds, the
//!   transaction that freezes a global with its members, and the lists of globals and of every
//!   document (`invoices list`).
//! - `refunds.rs`: refunds, each recorded once by its id with what it became (an egreso
//!   frozen in the same transaction, a wait for the original, a reduced global share).
//! - `portal.rs`: the self-invoicing portal: a sale by what the customer holds, the customer's
//!   submission (the sale taken, its ingreso frozen, in one transaction), the links' key.
//! - `pagos.rs`: payments of PPD API invoices, each recorded with its parcialidad, its saldo
//!   and its frozen REP (CFDI tipo P) in one transaction serialised per invoice.
//! - `cancellations.rs`: cancellation requests, the worker's claim and their progress.
//! - `deliveries.rs`: the customer's emails: the row a stamp queues (in `settle.rs`'s write),
//!   the courier's claim and settle, the admin's list and resend.
//! - `attempts.rs`: the PAC attempt log and the worker heartbeats.
//! - `api.rs`: API keys, idempotency keys and API invoices.
//! - `merchant.rs`: the merchant's events (signed webhooks) of every document, queued with
//!   the state change that causes them.
//! - `arca.rs`: Argentina (ARCA): vouchers by idempotency key, their number sequences and
//!   reservations, the leases that serialise a sequence across instances, the WSAA tickets.
//! - `arca_claim.rs`: claiming ARCA numbers: one key or a batch of one sequence in one
//!   transaction, and the barrier taking over numbers proven empty.
//! - `arca_queue.rs`: the outbox's ARCA rows: an ARS sale's voucher frozen with its payment,
//!   the ARCA lane's list of those due, and their states.
//! - `arca_refunds.rs`: the refunds of ARS sales waiting for their nota de crédito.
//! - `arca_followups.rs`: a held or refused ARS sale corrected by a human (its buyer and the
//!   attempt it is issued again under), and the email of an authorized voucher.
//! - `admin.rs`: the admin's password, sessions, audit log and reconciliation findings.
//! - `backup.rs`: the online copy of the SQLite database (`autofactura backup`).
//! - `export.rs`: the month's stamped documents and acuses, a page at a time (the
//!   accountant's export).
//! - `limit.rs`: the rows of one delivery written bare, the ingest benchmark's ceiling.
//! - `views.rs`: read-only views of the admin pages and reconciliation that join several
//!   aggregates (documents = payment + outbox row, lists, dashboard figures); apart because
//!   they belong to no one aggregate and change nothing.
//!
//! Who may import it: anything outside `store/` uses [`Db`] and the types re-exported here
//! (and `store::api`'s, for the invoicing API). Files in this folder name each other freely,
//! and import outside it only plain data types (`config`, `cfdi`, `domain`) and the metrics
//! counters (`crate::metrics`, a leaf: every PAC call the attempt log records is counted
//! there, once). Transactions never span a network call: callers fetch
//! first, then hand complete values to one short transaction here.

mod admin;
pub mod api;
mod arca;
mod arca_claim;
mod arca_followups;
mod arca_queue;
mod arca_refunds;
mod attempts;
mod backup;
mod cancellations;
mod connect;
mod deliveries;
mod events;
mod exec;
mod export;
mod folios;
mod globals;
mod limit;
mod lite;
mod merchant;
mod outbox;
mod pagos;
mod payments;
mod portal;
mod refunds;
mod rows;
mod settle;
mod stash;
mod views;
mod writer;

pub use admin::{ActionRow, AdminSession, FindingRow};
pub use arca::{
    ArcaLoginRefusal, ArcaSaleRow, ArcaSeq, ArcaSequenceRow, ArcaTicketRow, ArcaVoucherRow,
    NewReservation, Reserve,
};
pub use arca_followups::{ArcaCorrection, ArcaHeldSale};
pub use arca_queue::{ArcaDraft, ArcaOrderRow, ArcaUnfrozenSale};
pub use arca_refunds::ArcaRefundRow;
pub use attempts::{AdminPacCall, Attempt, AttemptRow, WorkerRow};
pub use cancellations::{CancelConflict, CancellationRow, ClaimedCancel};
pub use connect::{
    connect, create_postgres_database, drop_postgres_database, postgres_url_with_database,
};
pub use deliveries::{ClaimedDelivery, DeliveryOutcome, DeliveryRow};
pub use events::{Completion, EventRow, IngestOutcome, NewEvent, PendingFetch};
pub use export::{ExportAcuse, ExportDoc};
pub use globals::{
    DocumentListing, Frozen, GLOBAL_PROVIDER, GlobalIdentity, GlobalRow, NewGlobal,
    PendingSubstitution, RecordedEvent, Sale,
};
pub use outbox::{ClaimedStamp, OutboxDraft, UNRESOLVED};
pub use pagos::{NewPago, PagoOutcome, PagoPlan, PagoRow, Paid};
pub use payments::{InvoiceRow, NewPayment, PaymentRow, normalize_reference};
pub use portal::{GlobalRef, PortalSubmission, Submitted};
pub use refunds::{
    CancelingRefund, Credited, NewRefund, RefundDecision, RefundListing, RefundOutcome, RefundSale,
    SaleRow as RefundedSale,
};
pub use settle::{Settle, StampedOutcome};
pub use views::{DocFull, DocRow, HistoryRow, ListFilter, ListSort, ListView, SealedGeneration};

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationSource, MigrationType};
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

/// Migrations per backend: same versions and names, embedded so the binary needs no files.
pub const SQLITE_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "worker_admin",
        include_str!("../../migrations/sqlite/0002_worker_admin.sql"),
    ),
    (
        3,
        "admin",
        include_str!("../../migrations/sqlite/0003_admin.sql"),
    ),
    (
        4,
        "claim_indexes",
        include_str!("../../migrations/sqlite/0004_claim_indexes.sql"),
    ),
    (
        5,
        "api",
        include_str!("../../migrations/sqlite/0005_api.sql"),
    ),
    (
        6,
        "outbox_writes",
        include_str!("../../migrations/sqlite/0006_outbox_writes.sql"),
    ),
    (
        7,
        "unknown_outcomes",
        include_str!("../../migrations/sqlite/0007_unknown_outcomes.sql"),
    ),
    (
        9,
        "factura_global",
        include_str!("../../migrations/sqlite/0009_factura_global.sql"),
    ),
    (
        10,
        "portal",
        include_str!("../../migrations/sqlite/0010_portal.sql"),
    ),
    (
        11,
        "admin_search",
        include_str!("../../migrations/sqlite/0011_admin_search.sql"),
    ),
    (
        12,
        "line_items",
        include_str!("../../migrations/sqlite/0012_line_items.sql"),
    ),
    (
        14,
        "refunds_egreso",
        include_str!("../../migrations/sqlite/0014_refunds_egreso.sql"),
    ),
    (
        17,
        "global_rest",
        include_str!("../../migrations/sqlite/0017_global_rest.sql"),
    ),
    (
        21,
        "form_submissions",
        include_str!("../../migrations/sqlite/0021_form_submissions.sql"),
    ),
    (
        22,
        "deliveries",
        include_str!("../../migrations/sqlite/0022_deliveries.sql"),
    ),
    (
        23,
        "pagos",
        include_str!("../../migrations/sqlite/0023_pagos.sql"),
    ),
    (
        24,
        "arca",
        include_str!("../../migrations/sqlite/0024_arca.sql"),
    ),
    (
        25,
        "merchant_events",
        include_str!("../../migrations/sqlite/0025_merchant_events.sql"),
    ),
    (
        27,
        "arca_barrier",
        include_str!("../../migrations/sqlite/0027_arca_barrier.sql"),
    ),
    (
        29,
        "arca_followups",
        include_str!("../../migrations/sqlite/0029_arca_followups.sql"),
    ),
];
pub const POSTGRES_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "worker_admin",
        include_str!("../../migrations/postgres/0002_worker_admin.sql"),
    ),
    (
        3,
        "admin",
        include_str!("../../migrations/postgres/0003_admin.sql"),
    ),
    (
        4,
        "claim_indexes",
        include_str!("../../migrations/postgres/0004_claim_indexes.sql"),
    ),
    (
        5,
        "api",
        include_str!("../../migrations/postgres/0005_api.sql"),
    ),
    (
        6,
        "outbox_writes",
        include_str!("../../migrations/postgres/0006_outbox_writes.sql"),
    ),
    (
        7,
        "unknown_outcomes",
        include_str!("../../migrations/postgres/0007_unknown_outcomes.sql"),
    ),
    (
        9,
        "factura_global",
        include_str!("../../migrations/postgres/0009_factura_global.sql"),
    ),
    (
        10,
        "portal",
        include_str!("../../migrations/postgres/0010_portal.sql"),
    ),
    (
        11,
        "admin_search",
        include_str!("../../migrations/postgres/0011_admin_search.sql"),
    ),
    (
        12,
        "line_items",
        include_str!("../../migrations/postgres/0012_line_items.sql"),
    ),
    (
        14,
        "refunds_egreso",
        include_str!("../../migrations/postgres/0014_refunds_egreso.sql"),
    ),
    (
        17,
        "global_rest",
        include_str!("../../migrations/postgres/0017_global_rest.sql"),
    ),
    (
        21,
        "form_submissions",
        include_str!("../../migrations/postgres/0021_form_submissions.sql"),
    ),
    (
        22,
        "deliveries",
        include_str!("../../migrations/postgres/0022_deliveries.sql"),
    ),
    (
        23,
        "pagos",
        include_str!("../../migrations/postgres/0023_pagos.sql"),
    ),
    (
        24,
        "arca",
        include_str!("../../migrations/postgres/0024_arca.sql"),
    ),
    (
        25,
        "merchant_events",
        include_str!("../../migrations/postgres/0025_merchant_events.sql"),
    ),
    (
        27,
        "arca_barrier",
        include_str!("../../migrations/postgres/0027_arca_barrier.sql"),
    ),
    (
        29,
        "arca_followups",
        include_str!("../../migrations/postgres/0029_arca_followups.sql"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or answered with an error; retrying later is safe.
    #[error("database error while trying to {what}: {source}")]
    Database {
        what: &'static str,
        source: sqlx::Error,
    },
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Other(String),
}

fn ctx(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database { what, source }
}

/// The database: SQLite (embedded default) or PostgreSQL (several instances, one database).
#[derive(Debug, Clone)]
pub enum Db {
    /// SQLite allows one writer at a time; `write_lock` queues this process's writers in
    /// order instead of letting them poll the busy handler, and writes on its one connection
    /// (reads use `pool`). `durable`: a write returns once it is on disk (the appliance's
    /// handle), or once committed (the worker pool's, whose writes are redone without harm).
    Sqlite {
        pool: SqlitePool,
        write_lock: writer::WriteLock,
        durable: bool,
        /// The read connections kept between statements ([`stash::Stash`]).
        reads: std::sync::Arc<stash::Stash<sqlx::Sqlite>>,
    },
    /// The connections its statements keep between them ([`stash::Stash`]).
    Postgres(PgPool, std::sync::Arc<stash::Stash<sqlx::Postgres>>),
}

/// The embedded migrations of one backend, as a sqlx source.
#[derive(Debug)]
struct Embedded(&'static [(i64, &'static str, &'static str)]);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Vec<Migration>, sqlx::error::BoxDynError>>
                + Send
                + 's,
        >,
    > {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|(v, name, text)| {
                    Migration::new(
                        *v,
                        Cow::Borrowed(*name),
                        MigrationType::Simple,
                        sqlx::SqlSafeStr::into_sql_str(*text),
                        false,
                    )
                })
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_have_the_same_migration_versions_and_names() {
        let names = |m: &[(i64, &str, &str)]| {
            m.iter()
                .map(|(v, n, _)| (*v, n.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(SQLITE_MIGRATIONS), names(POSTGRES_MIGRATIONS));
        let files = |dir: &str| {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .expect("migrations dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let sqlite = files(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite"));
        assert_eq!(
            sqlite,
            files(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
        );
        assert_eq!(
            sqlite.len(),
            SQLITE_MIGRATIONS.len(),
            "every migration file is embedded"
        );
    }
}
