//! The factura global (`docs/global.md`): the sales whose customer gave no RFC, invoiced
//! together to PUBLICO EN GENERAL once their period closes.
//!
//! - [`plan`]: without I/O, the period of a sale and the comprobante, stamp key and own payment
//!   row of one global.
//! - [`due`]: when `serve`'s loop issues a period (the portal's cutoff, the SAT's 72 hours).
//! - [`issue`]: the closed periods' globals, frozen with their members in one transaction each
//!   (`autofactura global issue`, and `serve`'s loop); sales refunded in full are left out.
//! - [`replace`]: cancelling a global with motivo 01: the replacement first, then the
//!   cancellation once it is stamped.
//!
//! Who may import it: `ops` (the command), `startup` (the loop), `admin` (the pages and the
//! replacement). It calls no PAC: the worker stamps a global like any outbox row.

pub mod due;
pub mod issue;
pub mod plan;
pub mod replace;

pub use due::Timing;
pub use issue::{Issued, LeftOut, Report, Scope, issue, issue_loop};
pub use plan::Planner;
pub use replace::{replace, request_substitution_cancels};
