//! Cancellation as its own outbox flow.
//!
//! ```text
//! requested ──cancel──▶ (201/202 received) ──▶ pending_receiver ──poll SAT status──▶ canceled
//!     │                      └─ estatus already terminal (sin aceptación) ──────────▶ canceled
//!     ├─ Retryable / 205 right after stamping ──▶ retry_scheduled ──▶ requested again
//!     ├─ Unknown ──▶ unknown ──▶ sent again (the PAC answers 202: already requested)
//!     └─ Rejected (203, no cancelable, …) ──▶ failed
//! pending_receiver ──"Solicitud rechazada"──▶ rejected (the CFDI stays vigente)
//!                  ──"Plazo vencido" / Cancelado──▶ canceled
//! ```

use std::time::{Duration, Instant};

use chrono::Utc;
use tracing::{info, warn};

use super::Worker;
use crate::domain::CancellationState;
use crate::pac::{CancelOutcome, CancelRequest, Motivo, StatusOutcome, StatusQuery};
use crate::store::StoreError;
use crate::store::{Attempt, ClaimedCancel};

/// What one cancellation call or status query puts in the attempt log.
struct Logged<'a> {
    outcome: &'static str,
    code: Option<&'a str>,
    message: Option<&'a str>,
    /// The PAC's HTTP status as the outcome carries it.
    http_status: Option<u16>,
}

impl<'a> Logged<'a> {
    /// A call that ended without the PAC's answer: the reason is the message.
    fn failed(outcome: &'static str, reason: &'a str, http_status: Option<u16>) -> Self {
        Self {
            outcome,
            code: None,
            message: Some(reason),
            http_status,
        }
    }
}

/// `EstatusCancelacion` values that end the flow with the CFDI cancelled.
fn is_cancelled(estatus: &str, estado: Option<&str>) -> bool {
    estado == Some("Cancelado")
        || estatus.starts_with("Cancelado")
        || estatus.eq_ignore_ascii_case("Plazo vencido")
}

impl Worker {
    pub(super) async fn process_cancel(&self, c: ClaimedCancel) -> Result<(), StoreError> {
        if c.state == CancellationState::PendingReceiver {
            return self.poll_cancel(&c).await;
        }
        let Some(motivo) = Motivo::parse(&c.motivo) else {
            return self
                .settle_cancel_error(
                    &c,
                    CancellationState::Failed,
                    None,
                    "MOTIVO",
                    "motivo must be 01 to 04",
                )
                .await;
        };
        let req = CancelRequest {
            rfc_emisor: c.rfc_emisor.clone(),
            uuid: c.uuid.clone(),
            motivo,
            folio_sustitucion: c.folio_sustitucion.clone(),
        };
        let t = Instant::now();
        let out = self.pac.cancel(&req).await;
        let logged = match &out {
            CancelOutcome::Requested {
                code,
                estatus_cancelacion,
                ..
            } => Logged {
                outcome: "requested",
                code: Some(code),
                message: estatus_cancelacion.as_deref(),
                http_status: None,
            },
            CancelOutcome::Rejected { code, message } => Logged {
                outcome: "rejected",
                code: Some(code),
                message: Some(message),
                http_status: None,
            },
            CancelOutcome::Retryable {
                reason,
                http_status,
                ..
            } => Logged::failed("retryable", reason, *http_status),
            CancelOutcome::Unknown {
                reason,
                http_status,
            } => Logged::failed("unknown", reason, *http_status),
        };
        self.log_cancel_attempt(&c, "cancel", logged, t).await?;
        match out {
            CancelOutcome::Requested {
                code,
                acuse,
                estatus_cancelacion,
            } => {
                let estatus = estatus_cancelacion.unwrap_or_default();
                if is_cancelled(&estatus, None) {
                    info!(%code, %estatus, "CFDI cancelled");
                    self.settle_cancel(
                        &c,
                        CancellationState::Canceled,
                        None,
                        Some(&estatus),
                        Some("Cancelado"),
                        Some(&acuse),
                        None,
                    )
                    .await
                } else {
                    info!(%code, "cancellation received by SAT; waiting for the receptor or the deadline");
                    let run_at = Utc::now()
                        + chrono::Duration::from_std(self.cfg.cancel_poll / 10).unwrap_or_default();
                    let est = (!estatus.is_empty())
                        .then_some(estatus.as_str())
                        .or(Some("En proceso"));
                    self.settle_cancel(
                        &c,
                        CancellationState::PendingReceiver,
                        Some(run_at),
                        est,
                        None,
                        Some(&acuse),
                        None,
                    )
                    .await
                }
            }
            // SAT does not know a fresh UUID for a while after stamping: wait and ask again.
            CancelOutcome::Rejected { code, message, .. }
                if code == "205" && c.attempts < self.cfg.retry.max_attempts =>
            {
                let run_at = self.later(c.attempts, Some(Duration::from_secs(30)));
                self.settle_cancel_error(
                    &c,
                    CancellationState::RetryScheduled,
                    Some(run_at),
                    &code,
                    &message,
                )
                .await
            }
            CancelOutcome::Rejected { code, message, .. } => {
                warn!(%code, %message, "cancellation refused");
                self.settle_cancel_error(&c, CancellationState::Failed, None, &code, &message)
                    .await
            }
            CancelOutcome::Retryable {
                reason,
                retry_after,
                ..
            } => {
                if c.attempts >= self.cfg.retry.max_attempts {
                    return self
                        .settle_cancel_error(
                            &c,
                            CancellationState::Failed,
                            None,
                            "EXHAUSTED",
                            &reason,
                        )
                        .await;
                }
                let run_at = self.later(c.attempts, retry_after);
                self.settle_cancel_error(
                    &c,
                    CancellationState::RetryScheduled,
                    Some(run_at),
                    "",
                    &reason,
                )
                .await
            }
            CancelOutcome::Unknown { reason, .. } => {
                let run_at = self.later(1, None);
                self.settle_cancel_error(&c, CancellationState::Unknown, Some(run_at), "", &reason)
                    .await
            }
        }
    }

    async fn poll_cancel(&self, c: &ClaimedCancel) -> Result<(), StoreError> {
        let query = match c.outbox_id {
            Some(oid) => match self.db.stamped_xml_of(oid).await? {
                Some(xml) => StatusQuery::from_stamped_xml(&xml).ok(),
                None => None,
            },
            None => None,
        };
        let query = query.unwrap_or_else(|| StatusQuery {
            uuid: c.uuid.clone(),
            rfc_emisor: c.rfc_emisor.clone(),
            rfc_receptor: c.rfc_receptor.clone(),
            total: c.total.clone(),
            sello_tail: String::new(),
        });
        let t = Instant::now();
        let out = self.pac.sat_status(&query).await;
        let next_poll = |n: i32| {
            // Poll often at first, then settle at the configured interval.
            let d = (self.cfg.cancel_poll / 10)
                .saturating_mul(u32::try_from(n.clamp(1, 10)).unwrap_or(10));
            Utc::now() + chrono::Duration::from_std(d.min(self.cfg.cancel_poll)).unwrap_or_default()
        };
        match out {
            StatusOutcome::Found(s) => {
                let logged = Logged {
                    outcome: "found",
                    code: Some(&s.codigo_estatus),
                    message: Some(&s.estatus_cancelacion),
                    http_status: None,
                };
                self.log_cancel_attempt(c, "cancel_status", logged, t)
                    .await?;
                let (state, run_at) = if is_cancelled(&s.estatus_cancelacion, Some(&s.estado)) {
                    info!(estatus = %s.estatus_cancelacion, "CFDI cancelled");
                    (CancellationState::Canceled, None)
                } else if s
                    .estatus_cancelacion
                    .eq_ignore_ascii_case("Solicitud rechazada")
                {
                    warn!("the receptor rejected the cancellation; the CFDI stays vigente");
                    (CancellationState::Rejected, None)
                } else {
                    (
                        CancellationState::PendingReceiver,
                        Some(next_poll(c.attempts)),
                    )
                };
                let (estatus, estado) = (
                    Some(s.estatus_cancelacion.as_str()),
                    Some(s.estado.as_str()),
                );
                self.settle_cancel(c, state, run_at, estatus, estado, None, None)
                    .await
            }
            StatusOutcome::NotFound { codigo_estatus } => {
                let logged = Logged {
                    outcome: "not_found",
                    code: Some(&codigo_estatus),
                    message: None,
                    http_status: None,
                };
                self.log_cancel_attempt(c, "cancel_status", logged, t)
                    .await?;
                self.settle_cancel_error(
                    c,
                    CancellationState::PendingReceiver,
                    Some(next_poll(c.attempts)),
                    "",
                    &codigo_estatus,
                )
                .await
            }
            StatusOutcome::Unavailable {
                reason,
                http_status,
            } => {
                let logged = Logged::failed("unavailable", &reason, http_status);
                self.log_cancel_attempt(c, "cancel_status", logged, t)
                    .await?;
                let run_at = self.later(c.attempts.min(6), None);
                self.settle_cancel_error(
                    c,
                    CancellationState::PendingReceiver,
                    Some(run_at),
                    "",
                    &reason,
                )
                .await
            }
        }
    }

    /// Settles a cancellation that ends this round with an error code and message only.
    async fn settle_cancel_error(
        &self,
        c: &ClaimedCancel,
        state: CancellationState,
        run_at: Option<chrono::DateTime<Utc>>,
        code: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        self.settle_cancel(c, state, run_at, None, None, None, Some((code, message)))
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn settle_cancel(
        &self,
        c: &ClaimedCancel,
        state: CancellationState,
        run_at: Option<chrono::DateTime<Utc>>,
        estatus: Option<&str>,
        sat_estado: Option<&str>,
        acuse: Option<&str>,
        error: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let run_at = run_at.unwrap_or_else(Utc::now);
        let error = error.map(|(code, m)| (if code.is_empty() { "-" } else { code }, m));
        if !self
            .db
            .settle_cancellation(
                c.id,
                &self.id,
                state,
                run_at,
                estatus,
                sat_estado,
                acuse,
                error,
                c.outbox_id,
                self.mail_domain.as_deref(),
            )
            .await?
        {
            warn!("cancellation lease lost before settling");
        }
        Ok(())
    }

    async fn log_cancel_attempt(
        &self,
        c: &ClaimedCancel,
        operation: &str,
        logged: Logged<'_>,
        t: Instant,
    ) -> Result<(), StoreError> {
        let Logged {
            outcome,
            code,
            message,
            http_status,
        } = logged;
        self.db
            .log_attempt(&Attempt {
                outbox_id: c.outbox_id,
                cancellation_id: Some(c.id),
                operation,
                pac: &self.pac_label,
                outcome,
                http_status: http_status.map(i32::from),
                code,
                message,
                latency_ms: i64::try_from(t.elapsed().as_millis()).unwrap_or(i64::MAX),
                uuid: Some(&c.uuid),
                worker: &self.id,
            })
            .await
    }
}
