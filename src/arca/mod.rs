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
//! - [`wsaa`]: the first pieces of WSAA: the access ticket request, its CMS signature, reading
//!   `loginCms`'s answer (the call, the cache and its refresh remain).
//!
//! Who may import it: the sandbox ([`crate::arcasim`], for the model and the envelopes), the
//! CLI and tests. It imports the store (its SQL lives in `store/arca.rs`) and the XML reader
//! of [`crate::cfdi::dom`]. Not wired into the worker yet: the WSAA call, routing by currency and
//! batching remain (docs/arca.md).

pub mod issue;
pub mod model;
pub mod wsaa;
pub mod wsfe;

pub use issue::{IssueError, Issuer, Outcome};
pub use model::{AlicIva, Alicuota, Cae, CbteTipo, Concepto, DocTipo, Environment, VoucherInput};
pub use wsfe::{Auth, Wsfe, WsfeError};
