//! A cancel request → the cancellation row, the one path for the admin's form and the API (as
//! [`crate::ingest`] is for payments): the request checked by the domain rules
//! ([`crate::domain::cancellation`]), the replacement and the live relations looked up, the
//! request recorded. A worker sends it to the PAC later; nothing here calls the PAC.

use chrono::Utc;

use crate::domain::cancellation::{self, CancelFacts, CancelOrder, Refused};
use crate::domain::{CancellationState, DocumentState};
use crate::store::{CancelConflict, Db, StoreError};

/// Why a cancellation was not recorded; each caller words it for its own reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The motivo or FolioSustitucion does not fit the document.
    Request(Refused),
    /// SAT answers `No cancelable` while these live documents relate to it.
    Related(Vec<String>),
    /// A request for this UUID exists and is not rejected or failed (its state).
    AlreadyRequested(CancellationState),
}

/// Checks the request (motivo and FolioSustitucion as sent) against the stamped document
/// `doc` of outbox row `outbox_id` and records it for `actor`.
pub async fn request(
    db: &Db,
    outbox_id: i64,
    doc: &CancelFacts,
    motivo: &str,
    folio_sustitucion: Option<&str>,
    actor: &str,
) -> Result<Result<(), Refusal>, StoreError> {
    let stamped_xml = async |uuid: String| {
        Ok::<_, StoreError>(
            db.document_by_uuid(&uuid)
                .await?
                .filter(|r| r.state == DocumentState::Stamped)
                .and_then(|r| r.stamped_xml),
        )
    };
    let order =
        match cancellation::check_request(doc, motivo, folio_sustitucion, Utc::now(), stamped_xml)
            .await?
        {
            Ok(o) => o,
            Err(e) => return Ok(Err(Refusal::Request(e))),
        };
    let related = db
        .documents_relating_to(&doc.uuid, order.folio_sustitucion.as_deref())
        .await?;
    if !related.is_empty() {
        return Ok(Err(Refusal::Related(related)));
    }
    Ok(record(db, outbox_id, order, actor)
        .await?
        .map_err(|CancelConflict::AlreadyRequested { state }| Refusal::AlreadyRequested(state)))
}

/// Records an already checked cancellation of outbox row `outbox_id`.
pub async fn record(
    db: &Db,
    outbox_id: i64,
    order: CancelOrder,
    actor: &str,
) -> Result<Result<(), CancelConflict>, StoreError> {
    let recorded = db.request_cancellation(outbox_id, &order, actor).await?;
    Ok(recorded.map(|_| ()))
}
