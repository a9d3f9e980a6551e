//! What the appliance means, apart from how it is stored, sent or shown: the stamp key, time as
//! SAT reads it (Mexico City, business days), and the cancellation rules (motivos, RMF regla
//! 2.7.1.35) that the admin, the API and the sandbox PAC all apply.
//!
//! Pure code: no I/O, no database, no HTTP. It may import [`crate::cfdi`] (to read a stamped
//! comprobante) and nothing else of the crate; every other module may import it.
//!
//! - [`stamp_key`]: [`StampKey`], the deterministic key a comprobante is stamped under.
//! - [`states`]: [`DocumentState`], [`CancellationState`], [`DocumentKind`], [`PaymentStatus`]
//!   (and [`LineState`], one of the first or the last), [`RefundStatus`], each with its one
//!   spelling (what the database stores and the admin and the API show).
//! - [`time`]: Mexico City local time and SAT's business days.
//! - [`cancellation`]: motivos, who must accept, and the checked cancel request.
//! - [`period`]: the periods of a factura global (c_Periodicidad, Meses, Año).
//! - [`delivery`]: the customer's email of a document: its event and stable Message-ID.
//! - [`authority`]: [`Authority`], what the worker asks of a PAC or of ARCA, and the four
//!   [`Verdict`]s it acts on.

pub mod authority;
pub mod cancellation;
pub mod delivery;
pub mod period;
pub mod stamp_key;
pub mod states;
pub mod time;

pub use authority::{Authority, Verdict};
pub use stamp_key::{StampKey, StampKeyError};
pub use states::{
    ArcaVoucherState, CancellationState, DeliveryState, DocumentKind, DocumentState, LineState,
    PaymentStatus, RefundStatus,
};
