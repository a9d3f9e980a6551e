//! Rows as the statements read them: `#[derive(sqlx::FromRow)]` structs, read the same way from
//! either backend by [`super::exec`]. Column names and types match the SELECT lists.

use chrono::{DateTime, NaiveDateTime, Utc};

use super::payments::NewPayment;
use crate::domain::{CancellationState, DocumentKind, DocumentState, LineState};

/// A live admin session.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AdminSession {
    pub csrf_token: String,
    pub actor: String,
    pub expires_at: DateTime<Utc>,
}

/// One row of a `workers` heartbeat table.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WorkerRow {
    pub id: String,
    pub hostname: String,
    pub pid: i64,
    pub concurrency: i32,
    pub in_flight: i32,
    pub started_at: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
}

/// One PAC call of the append-only log.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptRow {
    pub id: i64,
    pub outbox_id: Option<i64>,
    pub cancellation_id: Option<i64>,
    pub operation: String,
    pub pac: String,
    pub outcome: String,
    pub http_status: Option<i32>,
    pub code: Option<String>,
    pub message: Option<String>,
    pub latency_ms: i64,
    pub uuid: Option<String>,
    pub worker: Option<String>,
    pub at: DateTime<Utc>,
}

/// A payment with (at most) one of its documents: one line of an admin list.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DocRow {
    pub payment_row: i64,
    pub provider: String,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    pub outbox_id: Option<i64>,
    pub kind: Option<String>,
    pub state: LineState,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub uuid: Option<String>,
    pub attempts: i32,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub run_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub flag: Option<String>,
    pub request_json: Option<String>,
    /// The document's Fecha (Mexico City), which starts its SAT window.
    pub fecha: Option<NaiveDateTime>,
}

/// The payment of a detail page: the payment as it was recorded, with its row id and when.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PaymentRow {
    pub id: i64,
    #[sqlx(flatten)]
    pub payment: NewPayment,
    pub created_at: DateTime<Utc>,
}

/// Everything stored about one document (outbox row).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DocFull {
    pub id: i64,
    pub payment_id: i64,
    pub kind: DocumentKind,
    pub stamp_key: String,
    pub request_json: String,
    pub sealed_xml: Option<Vec<u8>>,
    pub state: DocumentState,
    pub attempts: i32,
    pub run_at: DateTime<Utc>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub uuid: Option<String>,
    pub stamped_xml: Option<Vec<u8>>,
    pub test_mode: bool,
    pub fecha: NaiveDateTime,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub pac_route: Option<String>,
    pub generation: i32,
    pub sealed_at: Option<DateTime<Utc>>,
    pub stamped_at: Option<DateTime<Utc>>,
    pub fecha_timbrado: Option<String>,
    pub flag: Option<String>,
    /// The payment's provider and id (for stamp keys of new generations).
    pub provider: String,
    pub provider_payment_id: String,
}

/// An earlier generation of a refrozen document.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HistoryRow {
    pub outbox_id: i64,
    pub generation: i32,
    pub stamp_key: String,
    pub request_json: String,
    pub sealed_xml: Option<Vec<u8>>,
    pub reason: String,
    pub actor: String,
    pub at: DateTime<Utc>,
}

/// A frozen cancellation request and its progress.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CancellationRow {
    pub id: i64,
    pub outbox_id: Option<i64>,
    pub uuid: String,
    pub rfc_emisor: String,
    pub rfc_receptor: String,
    pub total: String,
    pub motivo: String,
    pub folio_sustitucion: Option<String>,
    pub state: CancellationState,
    pub requires_acceptance: bool,
    pub attempts: i32,
    pub run_at: DateTime<Utc>,
    pub estatus_cancelacion: Option<String>,
    pub sat_estado: Option<String>,
    pub acuse_xml: Option<String>,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What reconciliation found.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FindingRow {
    pub id: i64,
    pub kind: String,
    pub outbox_id: Option<i64>,
    pub uuid: String,
    pub stamp_key: Option<String>,
    pub detail: String,
    pub status: String,
    pub found_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
}

/// One recorded admin action.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ActionRow {
    pub id: i64,
    pub actor: String,
    pub action: String,
    pub target_kind: String,
    pub target_id: String,
    pub detail: Option<String>,
    pub at: DateTime<Utc>,
}

/// A sealed document the PAC may hold a stamp of, for reconciliation.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SealedGeneration {
    pub outbox_id: i64,
    pub generation: i32,
    pub stamp_key: String,
    pub sealed_xml: Vec<u8>,
    /// The generation the row carries now.
    pub current_generation: i32,
    /// The UUID recorded on the row (of its current generation), if any.
    pub recorded_uuid: Option<String>,
    pub state: DocumentState,
}

/// A live API key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApiKeyRow {
    pub id: i64,
    pub name: String,
    pub rfc_emisor: String,
}

/// A key as `api-key list` shows it: never the key, only its first characters.
#[derive(Debug, Clone, serde::Serialize, sqlx::FromRow)]
pub struct ApiKeyListing {
    pub id: i64,
    pub name: String,
    pub prefix: String,
    pub rfc_emisor: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What is stored under an idempotency key, with the state of its invoice's outbox row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IdemRecord {
    pub request_hash: String,
    /// `in_progress` or `completed`.
    pub state: String,
    pub invoice_id: i64,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub outbox_state: DocumentState,
    pub outbox_code: Option<String>,
}

/// An API invoice with its comprobante's progress.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApiInvoiceRow {
    pub id: i64,
    pub public_id: String,
    pub rfc_emisor: String,
    pub outbox_id: i64,
    pub idempotency_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub state: DocumentState,
    pub uuid: Option<String>,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub request_json: String,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub stamped_at: Option<DateTime<Utc>>,
    pub stamped_xml: Option<Vec<u8>>,
    /// The latest cancellation's state, if one was requested.
    pub cancellation: Option<CancellationState>,
}

/// A merchant webhook claimed for delivery.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedWebhook {
    pub id: i64,
    /// The document (outbox row) the event is about.
    pub outbox_id: i64,
    pub event_type: String,
    pub payload: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Including this claim.
    pub attempts: i32,
}

/// An outbox row a worker holds the lease of, as the claim returns it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedStamp {
    pub id: i64,
    /// The state it was claimed from (set by the claim itself): `pending`, `retry_scheduled`,
    /// `unknown`, or `stamping` (a lease that expired: its PAC call may have been sent).
    pub claimed_from: DocumentState,
    pub stamp_key: String,
    pub request_json: String,
    pub sealed_xml: Option<Vec<u8>>,
    /// Including this claim.
    pub attempts: i32,
    pub test_mode: bool,
    /// PACs the document was ever sent to (failover), comma-separated.
    pub pac_route: Option<String>,
    /// `""` for none: the key of its folio sequence.
    pub serie: String,
    /// `None` until assigned ([`super::Db::assign_folios`]); then the folio the row is sealed
    /// with, whatever its frozen request says.
    pub folio: Option<String>,
    /// The provider's payment id (`pi_…`, Mercado Pago's number; a global's own reference),
    /// for the logs.
    pub payment_ref: Option<String>,
}

/// A stored notification whose payment must still be fetched.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingFetch {
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub payment_ref: Option<String>,
    pub livemode: Option<bool>,
    pub attempts: i32,
}

/// One line of `invoices list`.
#[derive(Debug, Clone, Default, serde::Serialize, sqlx::FromRow)]
pub struct InvoiceRow {
    pub provider: String,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    pub status: LineState,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub uuid: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub stamp_key: Option<String>,
    #[serde(skip)]
    pub request_json: Option<String>,
    /// The receptor's RFC in the frozen request; none for a factura global or no invoice yet.
    pub receptor_rfc: Option<String>,
}
