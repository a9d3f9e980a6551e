//! Argentina: ARCA (ex AFIP) electronic vouchers through WSFEv1, exactly once
//! (docs/arca.md, issue 21).
//!
//! - [`model`]: the voucher without I/O (types A/B/C, DocTipo, amounts in pesos, IVA per
//!   alícuota, the CAE) and the checks WSFEv1 applies, shared with the sandbox.
//! - [`wsfe`]: the SOAP client (`FECompUltimoAutorizado`, `FECAESolicitar`,
//!   `FECompConsultar`), every answer one unambiguous value; `Errors` and `Observaciones`
//!   with their codes.
//! - [`issue`]: the exactly-once rule: the number is the identity, reserved in the database
//!   before the call; a lost answer is resolved by consulting that number, never by a new one.
//! - [`batch`]: several keys of one sequence numbered in one transaction and sent in one
//!   `FECAESolicitar` (`CantReg` > 1), each settled from its own answer; one key is the batch
//!   of one.
//! - [`wsaa`]: WSAA: the access ticket request, its CMS signature, the `loginCms` call, and the
//!   ticket cached in the database, shared by instances and renewed before it expires.
//! - [`buyer`]: who a sale's voucher names (CUIT, CUIL, DNI or nobody, and the IVA
//!   condition), from Mercado Pago's `payer.identification`; no I/O.
//! - [`print`]: what an authorized voucher prints (RG 1415) and ARCA's QR (RG 4892); the
//!   layout is [`crate::pdf::voucher`]'s.
//! - [`order`]: what an ARS sale's voucher is frozen as in the outbox at ingest (its type and
//!   input; the number and date come at reservation); no I/O.
//! - [`drain`]: the worker pool's ARCA lane issuing the ARS sales ingest froze in the outbox
//!   (Mercado Pago or Stripe in ARS with `[arca]` on), and the notas de crédito of their
//!   refunds.
//!
//! Who may import it: the sandbox ([`crate::arcasim`], for the model and the envelopes),
//! ingest (to freeze an order), the admin (to freeze a corrected one), startup, the CLI and
//! tests; the settings ([`crate::config`]) use the model's leaf types. It
//! imports the store (its SQL lives in `store/arca.rs`), `[arca]`'s settings, the PDF pages
//! ([`crate::pdf::voucher`]) and the XML reader of [`crate::cfdi::dom`].

mod authority;
pub mod batch;
pub mod buyer;
pub mod drain;
pub mod issue;
pub mod model;
pub mod order;
pub mod print;
pub mod wsaa;
pub mod wsfe;

pub use issue::{IssueError, Issuer, Lookup, Outcome};
pub use model::{AlicIva, Alicuota, Cae, CbteTipo, Concepto, DocTipo, Environment, VoucherInput};
pub use wsfe::{Auth, Wsfe, WsfeError};
