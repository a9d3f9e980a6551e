//! Reconciliation: what the PAC holds for our keys and our RFC, compared with our records.
//!
//! - Every sealed generation whose outcome may be open (a row `unknown`, or `expired` without a
//!   UUID, and every archived generation) is asked for by key. `failed` rows are left out: the
//!   worker only ever fails a document the PAC definitely did not stamp (an unresolved outcome
//!   stays `unknown`, however long), so there is nothing to find. An `unknown` row past its
//!   asking period is asked here too, on every periodic run, until the PAC answers. A stamp found for the current
//!   generation of a row without a UUID is **adopted** into the row and flagged; a stamp found
//!   for another generation of a row that carries a different UUID is a **duplicate**: two live
//!   UUIDs for one sale.
//! - Where the PAC can list the stamps issued for our RFC (the sandbox PAC), every such stamp is
//!   matched to our keys and UUIDs: unrecorded ones are adopted or listed, extra ones listed as
//!   duplicates. SW and Finkok offer no such listing through our client, so there only the keys
//!   are checked.
//!
//! Findings are written once per `(kind, uuid)`, so running it again adds only what is new.
//! Runs on demand (the admin's button, `autofactura reconcile`) and periodically.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::domain::cancellation::CancelFacts;
use crate::domain::{CancellationState, StampKey};
use crate::pac::{PacClient, Recovery, Stamp};
use crate::pacsim::Sim;
use crate::store::{AdminPacCall, Db, StoreError};

/// What a finding row's `detail` holds (JSON): a sentence for people and, for stamps, the
/// facts a cancellation needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindingDetail {
    pub summary: String,
    #[serde(default)]
    pub facts: Option<CancelFacts>,
}

/// What one run did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Sealed generations asked for by key.
    pub checked: usize,
    /// Stamps the PAC listed for our RFC.
    pub listed: usize,
    /// `(outbox_id, uuid)` adopted into their rows.
    pub adopted: Vec<(i64, String)>,
    /// New duplicate findings: `(outbox_id, extra uuid)`.
    pub duplicates: Vec<(i64, String)>,
    /// New orphan findings that could not be adopted (no matching row, or another generation).
    pub orphans: Vec<String>,
    /// `(outbox_id, reason)` of keys the PAC could not answer for.
    pub unresolved: Vec<(i64, String)>,
}

impl Report {
    pub fn summary(&self) -> String {
        format!(
            "{} sealed generations checked by key, {} PAC stamps listed for our RFC; {} adopted, {} new duplicates, {} new unmatched stamps, {} unresolved",
            self.checked,
            self.listed,
            self.adopted.len(),
            self.duplicates.len(),
            self.orphans.len(),
            self.unresolved.len()
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn detail(summary: String, stamp: &Stamp) -> String {
    serde_json::to_string(&FindingDetail {
        summary,
        facts: CancelFacts::from_stamped(&stamp.xml),
    })
    .unwrap_or_default()
}

/// Whether we hold a finished cancellation of `uuid` (a cancelled UUID is not live).
async fn cancelled(db: &Db, uuid: &str) -> Result<bool, StoreError> {
    Ok(db
        .cancellation_by_uuid(uuid)
        .await?
        .is_some_and(|c| c.state == CancellationState::Canceled))
}

/// Asks the PAC by key whether `sealed` (of outbox row `outbox_id`) was stamped, and records
/// the call as `by`'s in the attempt log: the admin's own PAC calls (reconciliation, refreeze).
pub async fn recover(
    db: &Db,
    pac: &PacClient,
    outbox_id: i64,
    sealed: &[u8],
    key: &StampKey,
    by: &str,
) -> Result<Recovery, StoreError> {
    let started = std::time::Instant::now();
    let recovery = pac
        .recover_logged(
            sealed,
            key,
            &crate::worker::DbRouteLog {
                db,
                backup_pause: None,
            },
        )
        .await;
    let (outcome, message, uuid) = match &recovery {
        Recovery::Found(s) => ("found", None, Some(s.uuid.as_str())),
        Recovery::NotFound => ("not_found", None, None),
        Recovery::Unresolved { reason, .. } => ("unresolved", Some(reason.as_str()), None),
    };
    db.log_admin_pac_call(&AdminPacCall {
        outbox_id: Some(outbox_id),
        operation: "recover",
        pac: "primary",
        outcome,
        code: None,
        message,
        latency_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
        uuid,
        by,
    })
    .await?;
    Ok(recovery)
}

/// Compares a stamp the PAC holds for one of our keys with the row the key belongs to.
async fn settle(
    db: &Db,
    report: &mut Report,
    outbox_id: i64,
    key_generation: i32,
    stamp: &Stamp,
    actor: &str,
    mail: Option<&str>,
) -> Result<(), StoreError> {
    let Some(row) = db.document(outbox_id).await? else {
        return Ok(());
    };
    match &row.uuid {
        Some(u) if u.eq_ignore_ascii_case(&stamp.uuid) => {}
        Some(kept) => {
            if !cancelled(db, &stamp.uuid).await? {
                let summary = format!(
                    "two live UUIDs for payment {} {}: {kept} is recorded (the customer's), {} was stamped for generation {key_generation} and never recorded",
                    row.provider, row.provider_payment_id, stamp.uuid
                );
                if db
                    .record_finding(
                        "duplicate",
                        Some(outbox_id),
                        &stamp.uuid,
                        None,
                        &detail(summary, stamp),
                    )
                    .await?
                {
                    report.duplicates.push((outbox_id, stamp.uuid.clone()));
                }
            }
        }
        None if key_generation == row.generation => {
            let flag = format!(
                "adopted by reconciliation: the PAC held stamp {} that was never recorded",
                stamp.uuid
            );
            if db
                .adopt_stamp(
                    outbox_id,
                    &stamp.uuid,
                    &stamp.xml,
                    &stamp.tfd.fecha_timbrado,
                    &flag,
                    actor,
                    mail,
                )
                .await?
            {
                db.record_finding(
                    "orphan",
                    Some(outbox_id),
                    &stamp.uuid,
                    Some(&row.stamp_key),
                    &detail(flag, stamp),
                )
                .await?;
                report.adopted.push((outbox_id, stamp.uuid.clone()));
            }
        }
        None => {
            // An archived generation was stamped while the row moved on: a human decides.
            let summary = format!(
                "generation {key_generation} of payment {} {} was stamped as {}, but the row now carries generation {} ({})",
                row.provider, row.provider_payment_id, stamp.uuid, row.generation, row.state
            );
            if db
                .record_finding(
                    "orphan",
                    Some(outbox_id),
                    &stamp.uuid,
                    None,
                    &detail(summary, stamp),
                )
                .await?
            {
                report.orphans.push(stamp.uuid.clone());
            }
        }
    }
    Ok(())
}

/// One reconciliation run (one at a time per process: `lock`). With `mail` (email on: the
/// domain of `[email] from`) an adopted stamp queues the customer's email.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    db: &Db,
    pac: &PacClient,
    sandbox: Option<&Sim>,
    lock: &tokio::sync::Mutex<()>,
    emisor_rfc: &str,
    actor: &str,
    mail: Option<&str>,
) -> Result<Report, ReconcileError> {
    let _one = lock.lock().await;
    let mut report = Report::default();

    // 1. Every sealed generation with an open outcome, by key (no transaction held).
    for g in db.sealed_generations_to_reconcile().await? {
        let Ok(key) = StampKey::parse(&g.stamp_key) else {
            report
                .unresolved
                .push((g.outbox_id, format!("unreadable stamp key {}", g.stamp_key)));
            continue;
        };
        report.checked += 1;
        // Only at the PACs the key was sent to (an archived generation's key names no row
        // any more, so the primary): asking a PAC that never had it resends it there.
        let recovery = recover(db, pac, g.outbox_id, &g.sealed_xml, &key, actor).await?;
        match recovery {
            Recovery::Found(stamp) => {
                settle(
                    db,
                    &mut report,
                    g.outbox_id,
                    g.generation,
                    &stamp,
                    actor,
                    mail,
                )
                .await?;
            }
            Recovery::NotFound => {}
            Recovery::Unresolved { reason, .. } => report.unresolved.push((g.outbox_id, reason)),
        }
    }

    // 2. Where the PAC lists what it stamped for us, match every stamp.
    if let Some(sim) = sandbox {
        let keys: HashMap<String, (i64, i32)> = db
            .all_stamp_keys()
            .await?
            .into_iter()
            .map(|(k, id, generation, _)| (k, (id, generation)))
            .collect();
        for rec in sim.stamps() {
            if !rec.rfc_emisor.eq_ignore_ascii_case(emisor_rfc) {
                continue;
            }
            report.listed += 1;
            let Ok(stamp) = Stamp::from_xml(rec.xml.clone().into_bytes()) else {
                continue;
            };
            match rec.customid.as_deref().and_then(|c| keys.get(c)) {
                Some(&(outbox_id, generation)) => {
                    settle(db, &mut report, outbox_id, generation, &stamp, actor, mail).await?;
                }
                None => {
                    if db.document_by_uuid(&stamp.uuid).await?.is_none()
                        && !cancelled(db, &stamp.uuid).await?
                    {
                        let summary = format!(
                            "stamp {} for our RFC {} (key {}) matches no record: issued outside this appliance or before it existed",
                            stamp.uuid,
                            rec.rfc_emisor,
                            rec.customid.as_deref().unwrap_or("none")
                        );
                        if db
                            .record_finding(
                                "orphan",
                                None,
                                &stamp.uuid,
                                rec.customid.as_deref(),
                                &detail(summary, &stamp),
                            )
                            .await?
                        {
                            report.orphans.push(stamp.uuid.clone());
                        }
                    }
                }
            }
        }
    }

    db.record_admin_action(
        actor,
        "reconcile",
        "reconciliation",
        "run",
        Some(&report.summary()),
    )
    .await?;
    Ok(report)
}

/// Runs reconciliation every `interval` until `token` is cancelled (a run in progress is
/// dropped: the next one starts over).
pub async fn periodic(
    db: Db,
    admin: actix_web::web::Data<super::Admin>,
    interval: std::time::Duration,
    token: tokio_util::sync::CancellationToken,
) {
    let round = || async {
        tokio::time::sleep(interval).await;
        match run(
            &db,
            &admin.pac,
            admin.sandbox.as_deref(),
            &admin.reconcile_lock,
            &admin.emisor_rfc,
            "reconcile (periodic)",
            admin.mail_domain.as_deref(),
        )
        .await
        {
            Ok(r) => tracing::info!(summary = %r.summary(), "reconciliation"),
            Err(e) => tracing::warn!(error = %e, "reconciliation did not finish"),
        }
    };
    while token.run_until_cancelled(round()).await.is_some() {}
}
