//! The integration suite, one test binary (one link instead of one per file). Each module is
//! what a separate `tests/*.rs` file was; run one with `cargo test --test it -- MODULE::`.
//!
//! - `support`: the harness (the real server on 127.0.0.1:0 over SQLite or PostgreSQL, signed
//!   webhooks, the admin session, WebDriver for Chromium, where PostgreSQL comes from).
//! - `cfdi`, `cfdi_props`: the engine against the SAT's XSD, XSLT and an independent verifier.
//! - `webhooks`, `api`, `worker`, `pac`, `admin`, `admin_e2e`: each part through the real server.
//! - `api_payments`: payments of PPD invoices, each its complemento de pago (CFDI tipo P).
//! - `line_items`: Checkout line items from a fake Stripe API, SAT keys per product,
//!   discounts and shipping (issue 18).
//! - `arca`: Argentina (ARCA vouchers exactly once) against the sandbox ARCA, both backends.
//! - `arca_admin`: the admin's ARCA vouchers in a real headless Chromium.
//! - `arca_followups`: chargebacks credited once, a held sale corrected in the admin, the
//!   voucher linked from its sale and emailed once.
//! - `arca_barrier`: a number ARCA proves empty is superseded; the old key never resends.
//! - `arca_sales`: a Mercado Pago sale in ARS → one ARCA voucher with a CAE, end to end.
//! - `arca_wsaa`: the WSAA login and its ticket stored, shared and renewed, both backends.
//! - `folio`: folios numbered at sealing, 1..N per serie under load, redeliveries and SIGKILL.
//! - `cli_e2e`, `secrets_in_logs`: the real binaries as an operator runs them; `otel`, their
//!   traces at a collector (built with the `otel` feature, as `scripts/test` does).
//! - `security`, `internet`, `fuzz_regressions`: what faces the internet (routes, limits,
//!   proxies, listeners, TLS), and the parsers' saved crash inputs.

#[macro_use]
mod support;

mod admin;
mod admin_e2e;
mod admin_rest;
mod admin_ux;
mod admin_ux_e2e;
mod admin_ux_ops;
mod api;
mod api_payments;
mod arca;
mod arca_admin;
mod arca_barrier;
mod arca_batch;
mod arca_buyers;
mod arca_followups;
mod arca_outbox;
mod arca_print;
mod arca_sales;
mod arca_sim_faults;
mod arca_stripe;
mod arca_wsaa;
mod backup_pause;
mod cfdi;
mod cfdi_props;
mod checkout;
mod cli_e2e;
mod currency;
mod currency_props;
mod deliveries;
mod downloads;
mod email;
mod folio;
mod fuzz_regressions;
mod global;
mod global_admin;
mod global_cli;
mod global_currency;
mod internet;
mod layout;
mod line_items;
mod merchant_events;
mod ops_backup;
mod ops_cli;
mod ops_deploy;
mod ops_export;
mod ops_metrics;
#[cfg(feature = "otel")]
mod otel;
mod pac;
mod pdf;
mod portal;
mod portal_e2e;
mod refund_props;
mod refunds;
mod secrets_in_logs;
mod security;
mod webhooks;
mod worker;
