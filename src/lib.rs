//! autofactura: paid sales in, stamped CFDI 4.0 out, exactly once.
//!
//! # Layout
//!
//! - [`cfdi`]: the document engine (model, amounts, XML, cadena original, Sello, verification).
//!   No I/O; everything else stands on it.
//! - [`domain`]: what the appliance means, without I/O: the stamp key, the states of documents
//!   and cancellations, Mexico City time and SAT's business days, the cancellation rules
//!   (motivos, regla 2.7.1.35).
//! - [`pac`]: PAC clients (SW, Finkok, failover) turning every answer into one unambiguous
//!   outcome; the SAT status query.
//! - [`pacsim`]: the sandbox PAC (SW's and Finkok's wire shapes, XSD and SAT checks, dedup,
//!   cancellation, faults, persistent state); in-process for the embedded default or
//!   `autofactura pac-sim`.
//! - [`cli`]: the command line (`main.rs` only calls [`cli::run`]).
//! - [`config`]: settings (defaults → TOML file → `AUTOFACTURA__…` env), validation, redaction.
//! - [`store`]: the database (SQLite or PostgreSQL), a file per aggregate; every SQL statement
//!   and migration.
//! - [`webhooks`]: Stripe and Mercado Pago deliveries: signatures, parsing, the routes.
//! - [`ingest`]: a verified payment → the payment row and the frozen comprobante to stamp.
//! - [`cancel`]: a cancel request (admin or API) → the checked cancellation row.
//! - [`ops`]: the operator commands behind `serve`, `migrate`, `invoices list`, `send-test-webhook`.
//! - [`worker`]: the pool that seals and stamps outbox rows exactly once (leases, retries,
//!   recovery of unknown outcomes, the attempt log) and drives cancellations.
//! - [`api`]: the invoicing API (`/v1`): API keys, idempotency keys that make every retry safe,
//!   the signed webhooks to the merchant and their outbox.
//! - [`admin`]: the dashboard in the browser (`/admin`): lists, detail, retry, cancel,
//!   refreeze, reconciliation (also `autofactura reconcile`); sessions and CSRF.
//! - [`chaos`]: `autofactura chaos`: the whole appliance as processes under faults and
//!   SIGKILL, then the exact count (every payment one UUID, no orphan, no duplicate).
//! - [`startup`]: wiring (database, HTTP listeners, background loops); [`health`]: `/healthz`,
//!   `/readyz`; [`error`]: where errors become HTTP responses; [`telemetry`]: logging;
//!   [`proxy`]: the real client behind `[server] trusted_proxies`.

#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod cancel;
pub mod cfdi;
pub mod chaos;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod health;
pub mod ingest;
pub mod ops;
pub mod pac;
pub mod pacsim;
pub mod proxy;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod webhooks;
pub mod worker;
