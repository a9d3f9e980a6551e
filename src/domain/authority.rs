//! The authority: whoever turns a document into a fiscal one. A PAC stamps a CFDI (Mexico,
//! [`crate::pac::Stamper`]); ARCA authorizes a voucher (Argentina, [`crate::arca::Issuer`]).
//!
//! Exactly once rests on the same three things with both: the document and its key are fixed
//! before the first call and every call sends them unchanged; an answer that may have been
//! lost is *asked for* before anything is sent again (the PAC by the stamp key, before the
//! worker's next send; ARCA by the key's reserved number, inside [`crate::arca::Issuer`]'s
//! `issue`); and the worker acts on one of four verdicts, whatever the authority's own words
//! were ([`Verdict`]).

use std::future::Future;
use std::time::Duration;

/// What one call to the authority means for the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Issued: stamped (UUID) or authorized (CAE). `recovered`: the authority had issued it
    /// before, for this key (an earlier send whose answer was lost, a repeat).
    Issued { document: T, recovered: bool },
    /// Refused for what it says: the authority did not issue it and will not for this content.
    /// A human corrects the data; nothing is sent again as it is.
    Rejected { code: String, message: String },
    /// Nothing was issued: the same document may be sent again, after `after` when the
    /// authority said when.
    Retryable {
        reason: String,
        after: Option<Duration>,
    },
    /// It may have been issued: the authority is asked before anything is sent again, and it is
    /// never sent with other content or under another key.
    Unknown { reason: String },
}

/// One fiscal authority, as the worker drives it.
///
/// The answer stays in the authority's own type (`Answer`) so that its attempt log keeps every
/// detail; the worker decides from [`Authority::verdict`] alone.
pub trait Authority {
    /// What is sent: the sealed CFDI's bytes, ARCA's voucher input.
    type Document: ?Sized + Sync;
    /// What it is sent under, the same on every call: the stamp key, ARCA's idempotency key.
    type Key: ?Sized + Sync;
    /// The issued document as a verdict shows it, borrowed from the answer: a stamp with its
    /// UUID; a voucher's number with its CAE.
    type Issued<'a>;
    /// The authority's answer to a send, as it came.
    type Answer: Send;

    /// Sends `document` under `key`, once.
    fn issue(
        &self,
        key: &Self::Key,
        document: &Self::Document,
    ) -> impl Future<Output = Self::Answer> + Send;

    fn verdict(answer: &Self::Answer) -> Verdict<Self::Issued<'_>>;
}
