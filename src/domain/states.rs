//! The states a document and a cancellation go through, and the kinds of document, as types.
//! Each has ONE spelling, [`as_str`](DocumentState::as_str), which is what the database stores
//! and what the admin and the API show; the store reads and binds them through it (its
//! `sqlx` impls are in `store/exec.rs`), and nothing else spells them.

use std::fmt;
use std::str::FromStr;

/// A stored text that names no value of the type it was read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a {what}")]
pub struct UnknownText {
    pub what: &'static str,
    pub text: String,
}

/// An enum spelled as text: its values, each with its one spelling, plus `FromStr` and
/// `Display` through that spelling.
macro_rules! spelled {
    ($(#[$m:meta])* $name:ident ($what:literal) { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),*];

            /// The one spelling: stored in the database, shown by the admin and the API.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
        }

        impl FromStr for $name {
            type Err = UnknownText;
            fn from_str(s: &str) -> Result<Self, UnknownText> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| UnknownText {
                    what: $what,
                    text: s.to_owned(),
                })
            }
        }

        shown_as_text!($name);
    };
}

/// `Display` and `Serialize` of a type through its `as_str`.
macro_rules! shown_as_text {
    ($name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

spelled! {
    /// The state of an outbox row: README's table of invoice states.
    DocumentState ("document state") {
        /// Frozen, waiting for a worker.
        Pending = "pending",
        /// A worker holds its lease and is talking to the PAC.
        Stamping = "stamping",
        /// The PAC did not process it; tried again later.
        RetryScheduled = "retry_scheduled",
        /// The PAC may have stamped it: asked by key before anything is sent again. Never final.
        Unknown = "unknown",
        Stamped = "stamped",
        /// The PAC definitely did not stamp it (rejected, or definite retries ran out).
        Failed = "failed",
        /// Past SAT's 72-hour window, and the PAC confirmed it holds no stamp.
        Expired = "expired",
        /// An API invoice (or a payment's REP) that ended without a stamp and whose
        /// idempotency key or folio (or parcialidad) was taken again.
        Superseded = "superseded",
        /// It could not become a request to stamp as it is.
        NeedsAttention = "needs_attention",
        /// Cancelled at SAT.
        Canceled = "canceled",
        /// An ARS sale's voucher, frozen, waiting for the worker pool's ARCA lane (which
        /// numbers it when it reserves it: ARCA's numbers cannot be frozen ahead).
        ArcaPending = "arca_pending",
        /// ARCA authorized it: it has its number and CAE.
        Authorized = "arca_authorized",
        /// The ARCA lane held it or ARCA refused it: a human corrects it on `/admin/arca`.
        ArcaHeld = "arca_held",
    }
}

impl DocumentState {
    /// States that ended without a stamp, for sure: the PAC rejected it or confirmed it holds
    /// no stamp of it (the worker keeps any outcome it could not confirm `unknown`). Only these
    /// release the idempotency key of an API invoice, and an explicitly requested folio with
    /// it; a key whose invoice was stamped, or may have been, is never released.
    pub const RELEASED: &'static [DocumentState] = &[Self::Failed, Self::Expired, Self::Superseded];

    /// Whether it ended without a stamp for sure (see [`DocumentState::RELEASED`]).
    pub fn released(self) -> bool {
        Self::RELEASED.contains(&self)
    }

    /// States a worker claims from (due ones).
    pub fn claimable(self) -> bool {
        matches!(self, Self::Pending | Self::RetryScheduled | Self::Unknown)
    }

    /// Whether nothing more happens to it by itself or by a retry: stamped, cancelled, or
    /// replaced. Every other state still has a SAT window that matters.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Stamped | Self::Canceled | Self::Superseded | Self::Authorized
        )
    }

    /// Whether it is an ARCA voucher's state (Argentina): no SAT window, no PAC.
    pub const fn is_arca(self) -> bool {
        matches!(self, Self::ArcaPending | Self::Authorized | Self::ArcaHeld)
    }

    /// How a person reads it: the one label the admin's tiles, tabs, badges and detail pages
    /// use (the stored spelling stays [`DocumentState::as_str`]).
    pub const fn label(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Stamping => "Stamping",
            Self::RetryScheduled => "Retry scheduled",
            Self::Unknown => "Outcome unknown",
            Self::Stamped => "Stamped",
            // Not only PAC rejections: exhausted retries and unsealable data end here too.
            Self::Failed => "Failed",
            Self::Expired => "Expired (72 h window)",
            Self::Superseded => "Superseded",
            Self::NeedsAttention => "Needs attention",
            Self::Canceled => "Cancelled",
            Self::ArcaPending => "Waiting for its ARCA voucher",
            Self::Authorized => "ARCA voucher authorized",
            Self::ArcaHeld => "ARCA voucher held for a human",
        }
    }
}

spelled! {
    /// The state of a cancellation request.
    CancellationState ("cancellation state") {
        /// Frozen, due to be sent.
        Requested = "requested",
        Sending = "sending",
        RetryScheduled = "retry_scheduled",
        /// The PAC may have received it: asked again before anything else.
        Unknown = "unknown",
        /// The receptor must accept; SAT is polled.
        PendingReceiver = "pending_receiver",
        Canceled = "canceled",
        /// SAT or the receptor refused it.
        Rejected = "rejected",
        Failed = "failed",
    }
}

impl CancellationState {
    /// States that are still moving.
    pub const IN_PROCESS: &'static [CancellationState] = &[
        Self::Requested,
        Self::Sending,
        Self::RetryScheduled,
        Self::Unknown,
        Self::PendingReceiver,
    ];

    /// Whether a new request for the same UUID may take the row over.
    pub fn may_ask_again(self) -> bool {
        matches!(self, Self::Rejected | Self::Failed)
    }

    /// How a person reads it. A request that needs no acceptance may still wait in
    /// `pending_receiver` while SAT processes it: that is waiting for SAT, not the receptor.
    pub const fn label(self, requires_acceptance: bool) -> &'static str {
        match self {
            Self::Requested => "Cancel requested",
            Self::Sending => "Sending cancellation",
            Self::RetryScheduled => "Cancel retry scheduled",
            Self::Unknown => "Cancel outcome unknown",
            Self::PendingReceiver if requires_acceptance => "Waiting for the receptor",
            Self::PendingReceiver => "Waiting for SAT",
            Self::Canceled => "Cancelled",
            Self::Rejected => "Cancellation rejected",
            Self::Failed => "Cancellation failed",
        }
    }
}

spelled! {
    /// The status of a payment (a sale) apart from its documents: what became of it at ingest
    /// and after. A payment with a document is shown by its document's state instead.
    PaymentStatus ("payment status") {
        /// Frozen into a document (an ingreso, or an ARS sale's voucher) in the outbox.
        InvoicePending = "invoice_pending",
        /// Without the customer's fiscal data: the factura global of its period takes it,
        /// unless the customer invoices it at the portal first.
        AwaitingGlobal = "awaiting_global",
        /// Invoiced in a stamped factura global.
        InGlobal = "in_global",
        /// Refunded in full before it was invoiced: nothing to invoice.
        Refunded = "refunded",
        /// It could not become a request to stamp as it is (fiscal data, currency, mode).
        NeedsAttention = "needs_attention",
        /// An ARS sale waiting for its ARCA voucher (Argentina).
        ArcaPending = "arca_pending",
        /// An ARS sale whose voucher ARCA authorized (a refund's nota de crédito, too: its
        /// own payment row).
        ArcaAuthorized = "arca_authorized",
        /// A refund's nota de crédito that the ARCA lane held or ARCA refused.
        ArcaHeld = "arca_held",
    }
}

impl PaymentStatus {
    /// Whether it is an ARS sale's (or its nota's) status: its voucher is ARCA's.
    pub const fn is_arca(self) -> bool {
        matches!(
            self,
            Self::ArcaPending | Self::ArcaAuthorized | Self::ArcaHeld
        )
    }

    /// How a person reads it (see [`DocumentState::label`]).
    pub const fn label(self) -> &'static str {
        match self {
            Self::InvoicePending => "Invoice pending",
            Self::AwaitingGlobal => "Awaiting factura global",
            Self::InGlobal => "In a factura global",
            Self::Refunded => "Refunded (not invoiced)",
            Self::NeedsAttention => DocumentState::NeedsAttention.label(),
            Self::ArcaPending => DocumentState::ArcaPending.label(),
            Self::ArcaAuthorized => DocumentState::Authorized.label(),
            Self::ArcaHeld => DocumentState::ArcaHeld.label(),
        }
    }
}

spelled! {
    /// What a refund became (decided by `refund::Planner` when it is recorded, and again
    /// while it waits).
    RefundStatus ("refund status") {
        /// Its sale has no stamped invoice yet (or its cancellation could not be had): it is
        /// decided again once there is one.
        AwaitingOriginal = "awaiting_original",
        /// Credited by an egreso (a CFDI de egreso), frozen in the outbox.
        Egreso = "egreso",
        /// Its sale waits for the factura global, which carries that much less.
        GlobalReduced = "global_reduced",
        /// It cannot be credited as it is (over-refunded, another currency): a human reads why.
        NeedsAttention = "needs_attention",
        /// A full refund under the cancel policy: its ingreso is being cancelled.
        Canceling = "canceling",
        /// Its ingreso was cancelled at SAT.
        Canceled = "canceled",
        /// An ARS sale's refund: its nota de crédito waits for ARCA.
        ArcaPending = "arca_pending",
        /// ARCA authorized its nota de crédito.
        ArcaCredited = "arca_credited",
    }
}

impl RefundStatus {
    /// Statuses whose amount counts as credited against the sale (or soon will).
    pub const CREDITED: &'static [RefundStatus] = &[
        Self::Egreso,
        Self::GlobalReduced,
        Self::Canceling,
        Self::Canceled,
        Self::ArcaPending,
        Self::ArcaCredited,
    ];

    /// Whether its amount counts as credited (see [`RefundStatus::CREDITED`]).
    pub fn credited(self) -> bool {
        Self::CREDITED.contains(&self)
    }

    /// How a person reads it.
    pub const fn label(self) -> &'static str {
        match self {
            Self::AwaitingOriginal => "Waiting for the sale's invoice",
            Self::Egreso => "Credited by an egreso",
            Self::GlobalReduced => "Taken off the factura global",
            Self::NeedsAttention => "Needs attention",
            Self::Canceling => "Cancelling the sale's invoice",
            Self::Canceled => "Sale's invoice cancelled",
            Self::ArcaPending => "Waiting for its ARCA nota de crédito",
            Self::ArcaCredited => "ARCA nota de crédito authorized",
        }
    }
}

spelled! {
    /// The state of one customer email (a `deliveries` row), as the courier leaves it.
    DeliveryState ("delivery state") {
        /// Queued, not tried yet.
        Pending = "pending",
        /// A transient failure: tried again at its `run_at`.
        Retry = "retry",
        /// The mail server took it.
        Sent = "sent",
        /// Refused for good (5xx), or the message could not be built.
        Bounced = "bounced",
        /// Transient failures until the schedule ran out.
        Failed = "failed",
    }
}

impl DeliveryState {
    /// Whether the courier still has it to send (the claim's `state IN ('pending', 'retry')`,
    /// which the partial index `deliveries_due` spells too).
    pub const fn is_due(self) -> bool {
        matches!(self, Self::Pending | Self::Retry)
    }
}

spelled! {
    /// The state of an ARCA voucher's row (Argentina): its number's story, apart from the
    /// sale's document state.
    ArcaVoucherState ("ARCA voucher state") {
        /// Numbered; a send may be in flight until `sending_until`.
        Reserved = "reserved",
        /// Sent, and no answer to trust came back: only consulting the number settles it.
        Unknown = "unknown",
        Authorized = "authorized",
        /// ARCA refused it; the number was not used.
        Rejected = "rejected",
        /// ARCA holds another voucher at the number: for a human.
        Conflict = "conflict",
        /// ARCA proved the number empty and this attempt could no longer land, so the number
        /// went to `superseded_by`; never sent again (the barrier).
        Superseded = "superseded",
    }
}

impl ArcaVoucherState {
    /// Not settled: reserved or unknown (the store's `state IN ('reserved', 'unknown')`).
    pub const fn is_open(self) -> bool {
        matches!(self, Self::Reserved | Self::Unknown)
    }
}

/// What one line of the admin's lists (a payment with at most one document) is in: its
/// document's state or, for a payment without one, the payment's status. Stored nowhere; read
/// from `COALESCE(o.state, p.status)`, where the spellings the two share mean the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineState {
    Document(DocumentState),
    Payment(PaymentStatus),
}

impl LineState {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Document(s) => s.as_str(),
            Self::Payment(s) => s.as_str(),
        }
    }

    pub const fn label(self) -> &'static str {
        match self {
            Self::Document(s) => s.label(),
            Self::Payment(s) => s.label(),
        }
    }

    /// Whether it is an ARCA voucher's (Argentina): no SAT window, no PAC.
    pub const fn is_arca(self) -> bool {
        match self {
            Self::Document(s) => s.is_arca(),
            Self::Payment(s) => s.is_arca(),
        }
    }

    /// The document's state, if it has a document.
    pub const fn document(self) -> Option<DocumentState> {
        match self {
            Self::Document(s) => Some(s),
            Self::Payment(_) => None,
        }
    }

    /// Whether it needs a human to fix its data (`needs_attention`: a spelling both sides
    /// share, so the document's; see [`LineState::from`]).
    pub fn needs_attention(self) -> bool {
        self == DocumentState::NeedsAttention
    }
}

/// A document frozen and waiting: where every sale's line starts.
impl Default for LineState {
    fn default() -> Self {
        Self::Document(DocumentState::Pending)
    }
}

impl PartialEq<DocumentState> for LineState {
    fn eq(&self, other: &DocumentState) -> bool {
        *self == Self::Document(*other)
    }
}

impl PartialEq<PaymentStatus> for LineState {
    fn eq(&self, other: &PaymentStatus) -> bool {
        *self == Self::from(*other)
    }
}

impl From<DocumentState> for LineState {
    fn from(s: DocumentState) -> Self {
        Self::Document(s)
    }
}

impl From<PaymentStatus> for LineState {
    /// A spelling both share is the document's, as when it is read ([`FromStr`]): one value
    /// per spelling, so a status read and one named compare equal.
    fn from(s: PaymentStatus) -> Self {
        s.as_str()
            .parse::<DocumentState>()
            .map_or(Self::Payment(s), Self::Document)
    }
}

impl FromStr for LineState {
    type Err = UnknownText;
    fn from_str(s: &str) -> Result<Self, UnknownText> {
        // A spelling both share is the document's: it means the same on either side.
        s.parse()
            .map(Self::Document)
            .or_else(|_| s.parse().map(Self::Payment))
            .map_err(|_| UnknownText {
                what: "document state or payment status",
                text: s.to_owned(),
            })
    }
}

shown_as_text!(LineState);

spelled! {
    /// What kind of comprobante an outbox row holds.
    DocumentKind ("document kind") {
        /// One sale's invoice (webhook payment or API request).
        Ingreso = "ingreso",
        /// A factura global: the sales of one period without the customer's RFC.
        Global = "global",
        /// A credit note (CFDI de egreso): one refund of a sale, related to its ingreso (or to
        /// the factura global that covered it) by TipoRelacion 01.
        Egreso = "egreso",
        /// A complemento de pago (CFDI tipo P, Pagos 2.0): one payment of a PPD invoice.
        Pago = "pago",
        /// Not a CFDI: an ARS sale's electronic voucher at ARCA (Argentina), frozen as an
        /// `arca::Order` (its type and input; the number and CbteFch come at reservation).
        Arca = "arca",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_reads_back_as_its_value() {
        for s in DocumentState::ALL {
            assert_eq!(s.as_str().parse::<DocumentState>(), Ok(*s));
        }
        for s in CancellationState::ALL {
            assert_eq!(s.as_str().parse::<CancellationState>(), Ok(*s));
        }
        for s in PaymentStatus::ALL {
            assert_eq!(s.as_str().parse::<PaymentStatus>(), Ok(*s));
            // A payment's status reads as a list line the same, by either side's name.
            let line: LineState = s.as_str().parse().expect("a line state");
            assert_eq!((line.as_str(), line.label()), (s.as_str(), s.label()));
        }
        assert_eq!(
            "awaiting_global".parse::<LineState>(),
            Ok(LineState::Payment(PaymentStatus::AwaitingGlobal))
        );
        assert!("recorded".parse::<LineState>().is_err());
        // Read or named, a shared spelling is one value: an ARS sale read back `arca_authorized`
        // is the payment status of that name.
        for s in PaymentStatus::ALL {
            let read: LineState = s.as_str().parse().expect("a line state");
            assert_eq!(read, LineState::from(*s));
            assert!(read == *s, "{s}");
        }
        for s in RefundStatus::ALL {
            assert_eq!(s.as_str().parse::<RefundStatus>(), Ok(*s));
        }
        assert_eq!("ingreso".parse::<DocumentKind>(), Ok(DocumentKind::Ingreso));
        assert_eq!("global".parse::<DocumentKind>(), Ok(DocumentKind::Global));
        assert!("STAMPED".parse::<DocumentState>().is_err());
        // One label per value, none shared: a badge never means two states.
        let labels: std::collections::HashSet<_> =
            DocumentState::ALL.iter().map(|s| s.label()).collect();
        assert_eq!(labels.len(), DocumentState::ALL.len());
        assert_eq!(
            CancellationState::PendingReceiver.label(false),
            "Waiting for SAT"
        );
        assert_eq!(
            serde_json::to_string(&DocumentState::RetryScheduled).ok(),
            Some("\"retry_scheduled\"".to_owned())
        );
    }
}
