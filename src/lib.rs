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
//! - [`arca`]: Argentina (`[arca]`): the ARCA voucher model, the WSAA login and the WSFEv1
//!   client, the issuer that authorizes each voucher exactly once (the number, reserved in the
//!   database before the call, is its identity; a sequence's new vouchers go together in one
//!   `FECAESolicitar`), and the lane of the worker pool that issues sales in ARS (Mercado
//!   Pago's, Stripe's) to the buyer they name and the notas de crédito of their refunds
//!   (`arca::drain`); the printable voucher with ARCA's QR (`arca::print`).
//! - [`arcasim`]: the sandbox ARCA (WSFEv1's numbering and checks, the PAC sandbox's faults,
//!   a journal that outlives kill -9); in-process for tests or `autofactura arca-sim`.
//! - [`sandbox`]: what a sandbox install seals and samples with besides the sandbox PAC: the
//!   SAT test CSD, the sample requests of `cfdi sample`, the Mercado Pago stand-in.
//! - [`cli`]: the command line (`main.rs` only calls [`cli::run`]).
//! - [`config`]: settings, typed to the last `[pac]` key (`config/default.toml` → TOML file →
//!   `AUTOFACTURA__…` env), validation at load, redaction. Imports none of its consumers.
//! - [`store`]: the database (SQLite or PostgreSQL), a file per aggregate; every SQL statement
//!   and migration.
//! - [`webhooks`]: Stripe and Mercado Pago deliveries: signatures, parsing, the routes.
//! - [`basket`]: what was sold, line by line (Checkout line items, invoice lines, Mercado Pago
//!   items) → Conceptos: SAT keys per product, discounts, shipping. No I/O.
//! - [`ingest`]: a verified payment → the payment row and the frozen comprobante to stamp.
//! - [`refund`]: a refund or lost dispute → the egreso that credits it, cut from the original
//!   document in proportion, to the centavo (no I/O).
//! - [`fx`]: exchange rates (TipoCambio): the provider's, a fixed table or Banxico's SIE API.
//! - [`cancel`]: a cancel request (admin or API) → the checked cancellation row.
//! - [`global`]: the factura global: the sales without RFC of each closed period, frozen with
//!   their members in one transaction (`autofactura global issue` and a loop in `serve`).
//! - [`ops`]: the operator commands behind `serve`, `worker`, `migrate`, `invoices list`,
//!   `send-test-webhook`, `api-key`, `reconcile`, `portal link`.
//! - [`worker`]: the pool that seals and stamps outbox rows exactly once (leases, retries,
//!   recovery of unknown outcomes, the attempt log) and drives cancellations; with `[arca]`
//!   on, it also runs the ARCA lane. Both talk to a [`domain::Authority`].
//! - [`api`]: the invoicing API (`/v1`): API keys, idempotency keys that make every retry safe.
//! - [`notify`]: the signed webhooks to the merchant (outbound) and their delivery from their
//!   outbox; [`webhooks`] is inbound only.
//! - [`deliver`]: the customer's email (message with the XML and the PDF, SMTP sending) and
//!   the courier draining its outbox (rows written with the stamp or the cancellation).
//! - [`pdf`]: the representación impresa (PDF with the SAT QR) of a stamped CFDI, from its
//!   XML alone.
//! - [`portal`]: the public self-invoicing portal (`/facturar`): a customer turns a receipt
//!   into a nominative CFDI instead of the factura global; `autofactura portal link`.
//! - [`admin`]: the dashboard in the browser (`/admin`): lists, detail, retry, cancel,
//!   refreeze, reconciliation (also `autofactura reconcile`); sessions and CSRF.
//! - [`export`]: the accountant's month in one ZIP (stamped XMLs by kind, a CSV, the acuses),
//!   streamed page by page (`autofactura export`, `/admin/export/month`).
//! - [`chaos`]: `autofactura chaos`: the whole appliance as processes under faults and
//!   SIGKILL, then the exact count (every payment one UUID, no orphan, no duplicate); with
//!   `--authority arca`, Mercado Pago ARS sales against the sandbox ARCA (every sale one CAE,
//!   no gap in a sequence).
//! - [`startup`]: wiring (database, the PAC and the in-process sandbox PAC, HTTP listeners,
//!   background loops); only `ops` and tests import it. [`state`]: [`state::AppState`],
//!   what handlers and loops share (they import it, not startup). [`shutdown`]: the one
//!   cancellation token of the process, passed to every server and loop. [`health`]: `/healthz`,
//!   `/readyz`; [`error`]: where errors become HTTP responses; [`telemetry`]: logging;
//!   [`metrics`]: Prometheus metrics (`/metrics`, served by [`health`]);
//!   [`proxy`]: the real client behind `[server] trusted_proxies`; [`limiter`]: attempts per
//!   client address (admin logins, portal look-ups).
//!
//! Every folder's `mod.rs` says what lives there and who may import it. Imports go one way
//! between folders (no circle), and no file passes 800 lines: `tests/it/layout.rs` checks both.

#![forbid(unsafe_code)]

/// What a string newtype `$t(String)` checked by `$t::parse` shares: `as_str`, from `String`
/// through `parse` (so serde's `try_from = "String"` validates), back into `String`, and
/// `Display`. Defined before the modules so every one of them can use it.
macro_rules! string_newtype {
    ($t:ident, $err:ty) => {
        impl $t {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $t {
            type Error = $err;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::parse(&s)
            }
        }

        impl From<$t> for String {
            fn from(v: $t) -> Self {
                v.0
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

pub mod admin;
pub mod api;
pub mod arca;
pub mod arcasim;
pub mod basket;
pub mod cancel;
pub mod cfdi;
pub mod chaos;
pub mod cli;
pub mod config;
pub mod deliver;
pub mod domain;
pub mod error;
pub mod export;
pub mod fx;
pub mod global;
pub mod health;
pub mod ingest;
pub mod limiter;
pub mod metrics;
pub mod notify;
pub mod ops;
pub mod pac;
pub mod pacsim;
pub mod pdf;
pub mod portal;
pub mod proxy;
pub mod refund;
pub mod sandbox;
pub mod shutdown;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod webhooks;
pub mod worker;
