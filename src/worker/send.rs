//! The PAC stage of a prepared row: recovery by key when it may have been sent, the stamp call
//! under a lease keepalive, the attempt log, and the outcome turned into a settle.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tracing::{Instrument, info, info_span, warn};

use super::Worker;
use super::prepare::Prepared;
use super::settle::Answered;
use crate::cfdi::{self, InvoiceRequest};
use crate::domain::{Authority, DocumentState, StampKey, Verdict};
use crate::pac::{self, AttemptLog, Recovery, Route, StampOutcome, Stamper};
use crate::store::{Attempt, Settle};
use crate::store::{Db, StoreError};

use crate::store::UNRESOLVED;

/// How long an unresolved outcome is asked for after its window closed: the window's end is
/// the last moment a send could have stamped it, so this is at least as long after its last
/// send.
const ASK_AFTER_WINDOW: chrono::TimeDelta = chrono::TimeDelta::hours(72);

/// Past that, how often it is still asked for (until the PAC answers or an admin acts).
const ASK_DAILY: chrono::TimeDelta = chrono::TimeDelta::hours(24);

impl Worker {
    /// The PAC stage of one prepared row: recovery when it may have been sent, the stamp call,
    /// the outcome stored.
    /// `answered` is told once the PAC calls are over; it lives until the send ends, so a send
    /// that stores no outcome lets its slot go on only then.
    pub(super) async fn send(
        &self,
        p: Prepared,
        slot: usize,
        mut answered: Answered,
    ) -> Result<(), StoreError> {
        self.unsent_rows().remove(&p.id);
        // Every line about the document carries these; the UUID is recorded once stamped.
        let span = info_span!(
            "invoice",
            outbox_id = p.id,
            payment_id = %p.payment_id,
            stamp_key = %p.key,
            uuid = tracing::field::Empty,
            slot
        );
        crate::telemetry::in_document_trace(&span, p.key.as_str());
        // A row that waited long for its slot (the previous call was slow) gets its lease back
        // to full length before the call, so no other worker takes it meanwhile.
        if p.claimed_at.elapsed() > self.cfg.lease / 3 {
            let until = Utc::now() + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
            if !self.db.extend_stamp_lease(p.id, &self.id, until).await? {
                warn!(parent: &span, "lease lost while the row waited for its slot; another worker has it");
                return Ok(());
            }
        }
        self.in_flight.start();
        let r = self.send_prepared(&p, &mut answered).instrument(span).await;
        self.in_flight.end();
        r
    }

    pub(super) fn later(&self, attempts: i32, retry_after: Option<Duration>) -> DateTime<Utc> {
        Utc::now()
            + chrono::Duration::from_std(self.cfg.retry.delay(attempts, retry_after))
                .unwrap_or_default()
    }

    /// The second half: the PAC calls and the outcome, following the state machine in [`super`].
    async fn send_prepared(&self, p: &Prepared, answered: &mut Answered) -> Result<(), StoreError> {
        let Prepared {
            id,
            claimed_from,
            key,
            folio,
            req,
            sealed,
            ..
        } = p;
        let id = *id;
        let expired = self.past_window(req);
        let maybe_sent = matches!(
            claimed_from,
            DocumentState::Unknown | DocumentState::Stamping
        );
        let mut attempts = p.attempts;
        if maybe_sent {
            let t = Instant::now();
            let log = DbRouteLog {
                db: &self.db,
                backup_pause: self.backup_label.as_deref(),
            };
            let r = self.pac.recover_logged(sealed, key, &log).await;
            self.log_recovery(id, &r, t).await?;
            match r {
                Recovery::Found(stamp) => {
                    return self.stamped(p, &stamp, true, None, answered).await;
                }
                Recovery::NotFound if expired => {
                    return self
                        .fail(id, DocumentState::Expired, "WINDOW", &format!("Fecha {} is past the 72-hour window and the PAC confirms it was never stamped; refreeze it from the admin", req.fecha), answered)
                        .await;
                }
                Recovery::NotFound => {
                    // The outcome is definite now: the tries that count towards giving up start
                    // over, so a long unresolved spell never turns into an early dead letter.
                    if !self.db.restart_attempts(id, &self.id).await? {
                        warn!("lease lost after the recovery; another worker has the row");
                        return Ok(());
                    }
                    attempts = 1;
                    info!(%folio, "PAC confirms no stamp yet; sending the same bytes again")
                }
                Recovery::Unresolved { reason, .. } => {
                    return self.still_unknown(p, attempts, &reason, answered).await;
                }
            }
        } else if expired {
            return self.expire_unsent(id, req, answered).await;
        }

        let (route, outcome, latency) = self.stamp_with_keepalive(id, sealed, key).await?;
        let attempt = self.stamp_attempt(id, route, &outcome.1, latency);
        let a = Some(&attempt);
        match Stamper::verdict(&outcome) {
            Verdict::Issued {
                document,
                recovered,
            } => self.stamped(p, document, recovered, a, answered).await,
            // The PAC's window check: the frozen Fecha is too old to stamp.
            Verdict::Rejected { code, message } if code == "401" => {
                self.fail_logged(id, DocumentState::Expired, &code, &message, a, answered)
                    .await
            }
            Verdict::Rejected { code, message } => {
                self.fail_logged(id, DocumentState::Failed, &code, &message, a, answered)
                    .await
            }
            Verdict::Retryable { reason, after } => {
                if attempts >= self.cfg.retry.max_attempts {
                    let msg = format!("{attempts} attempts, last: {reason}");
                    return self
                        .fail_logged(id, DocumentState::Failed, "EXHAUSTED", &msg, a, answered)
                        .await;
                }
                let run_at = self.later(attempts, after);
                info!(%folio, %reason, %run_at, "PAC did not process it; retry scheduled");
                let state = DocumentState::RetryScheduled;
                self.again_at(id, state, run_at, &reason, a, answered).await
            }
            Verdict::Unknown { reason } => {
                // Ask again soon, recovering first. (A send happens within the window, so the
                // asking period of [`Worker::still_unknown`] has not begun.)
                let run_at = self.later(1, None);
                warn!(%folio, %reason, "outcome unknown; the next attempt recovers by key before anything else");
                let state = DocumentState::Unknown;
                self.again_at(id, state, run_at, &reason, a, answered).await
            }
        }
    }

    /// Settles row `id` in `state` (`retry_scheduled` or `unknown`), due again at `run_at`, with
    /// the call that led here.
    async fn again_at(
        &self,
        id: i64,
        state: DocumentState,
        run_at: DateTime<Utc>,
        reason: &str,
        a: Option<&Attempt<'_>>,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        let later = Settle::Later {
            state,
            run_at,
            code: None,
            message: reason,
        };
        self.settle_logged(id, later, a, answered).await
    }

    /// A document never sent whose window closed: `expired`, for the admin to refreeze.
    pub(super) async fn expire_unsent(
        &self,
        id: i64,
        req: &InvoiceRequest,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        let msg = format!(
            "Fecha {} is past the 72-hour window; it was never sent to the PAC; refreeze it from the admin",
            req.fecha
        );
        self.fail(id, DocumentState::Expired, "WINDOW", &msg, answered)
            .await
    }

    pub(super) fn past_window(&self, req: &InvoiceRequest) -> bool {
        let Some(end) = self.window_end(req) else {
            return false;
        };
        Utc::now() >= end - chrono::Duration::from_std(self.cfg.window_margin).unwrap_or_default()
    }

    /// When the SAT window of the frozen Fecha closes: no PAC stamps the document after it.
    fn window_end(&self, req: &InvoiceRequest) -> Option<DateTime<Utc>> {
        // Fecha is local time at the place of issue (its huso_horario in c_CodigoPostal).
        let fecha = crate::domain::time::from_local_at(req.fecha, &req.emisor.lugar_expedicion)?;
        Some(fecha + chrono::Duration::from_std(self.cfg.window).unwrap_or_default())
    }

    /// A recovery the PAC could not answer. The PAC may hold a stamp, so the row stays
    /// `unknown` whatever the window or the attempts (a terminal state would free its API key
    /// and stop anyone from asking): asked again with backoff, at most an hour apart, until
    /// [`ASK_AFTER_WINDOW`] after its window closed; after that once a day ([`ASK_DAILY`]),
    /// marked [`UNRESOLVED`] so the admin lists it until the PAC answers.
    async fn still_unknown(
        &self,
        p: &Prepared,
        attempts: i32,
        reason: &str,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        let (id, folio, req) = (p.id, &p.folio, &p.req);
        let now = Utc::now();
        let asking_ends = self.window_end(req).map(|end| end + ASK_AFTER_WINDOW);
        let (run_at, code, message) = match asking_ends {
            Some(ends) if now >= ends => {
                let message = format!(
                    "the PAC never confirmed whether it stamped this document: its window closed {} (Mexico City) and it was asked for 72 hours more; now asked once a day. Ask the PAC by the stamp key; nothing is sent again until it answers. Last answer: {reason}",
                    crate::pacsim::clock::to_local(ends - ASK_AFTER_WINDOW)
                );
                warn!(%folio, %reason, "outcome still unknown past its asking period; asked daily, listed as unresolved for the admin");
                (now + ASK_DAILY, Some(UNRESOLVED), message)
            }
            _ => {
                let delay = self.cfg.retry.delay_unknown(attempts);
                info!(%folio, %reason, ?delay, "outcome still unknown; will ask the PAC again");
                let run_at = now + chrono::Duration::from_std(delay).unwrap_or_default();
                (run_at, None, reason.to_owned())
            }
        };
        self.settle(
            id,
            Settle::Later {
                state: DocumentState::Unknown,
                run_at,
                code,
                message: &message,
            },
            answered,
        )
        .await
    }

    /// Sends the sealed bytes, extending the lease while the call runs.
    async fn stamp_with_keepalive(
        &self,
        id: i64,
        sealed: &[u8],
        key: &StampKey,
    ) -> Result<(&'static str, <Stamper<'_> as Authority>::Answer, Duration), StoreError> {
        let t = Instant::now();
        let log = DbRouteLog {
            db: &self.db,
            backup_pause: self.backup_label.as_deref(),
        };
        let pac = Stamper {
            client: &self.pac,
            log: &log,
        };
        let call = pac.issue(key, sealed);
        tokio::pin!(call);
        let mut tick = tokio::time::interval(self.cfg.lease / 3);
        tick.tick().await;
        let out = loop {
            tokio::select! {
                out = &mut call => break out,
                _ = tick.tick() => {
                    let until = Utc::now() + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
                    if !self.db.extend_stamp_lease(id, &self.id, until).await.unwrap_or(false) {
                        warn!("lease could not be extended during the PAC call");
                    }
                }
            }
        };
        Ok((out.0.map_or("", route_label), out, t.elapsed()))
    }

    async fn stamped(
        &self,
        p: &Prepared,
        stamp: &pac::Stamp,
        recovered: bool,
        attempt: Option<&Attempt<'_>>,
        answered: &mut Answered,
    ) -> Result<(), StoreError> {
        let (id, folio, sealed) = (p.id, &p.folio, &p.sealed);
        let flag = (!stamp.belongs_to(sealed)).then_some("stamp_of_other_bytes");
        let tfd_xml = String::from_utf8_lossy(&cfdi::xml::tfd_to_xml(&stamp.tfd)).into_owned();
        tracing::Span::current().record("uuid", stamp.uuid.as_str());
        info!(%folio, uuid = %stamp.uuid, recovered, "invoice stamped");
        crate::metrics::stamped(kind_label(&p.req));
        self.settle_logged(
            id,
            Settle::Stamped {
                uuid: &stamp.uuid,
                tfd_xml: &tfd_xml,
                stamped_xml: &stamp.xml,
                fecha_timbrado: &stamp.tfd.fecha_timbrado,
                flag,
            },
            attempt,
            answered,
        )
        .await
    }

    fn label<'a>(&'a self, route: &'a str) -> &'a str {
        if route.is_empty() {
            &self.pac_label
        } else {
            route
        }
    }

    fn stamp_attempt<'a>(
        &'a self,
        id: i64,
        route: &'a str,
        out: &'a StampOutcome,
        latency: Duration,
    ) -> Attempt<'a> {
        let (outcome, code, message, uuid, status) = match out {
            StampOutcome::Stamped(s) => ("stamped", None, None, Some(s.uuid.as_str()), Some(200)),
            StampOutcome::AlreadyStamped {
                stamp,
                same_content,
            } => (
                if *same_content {
                    "already_stamped"
                } else {
                    "key_reused"
                },
                Some(if *same_content { "307" } else { "CFDI3307" }),
                None,
                Some(stamp.uuid.as_str()),
                None,
            ),
            StampOutcome::Rejected { code, message } => (
                "rejected",
                Some(code.as_str()),
                Some(message.as_str()),
                None,
                None,
            ),
            StampOutcome::Retryable {
                reason,
                http_status,
                ..
            } => (
                "retryable",
                None,
                Some(reason.as_str()),
                None,
                http_status.map(i32::from),
            ),
            StampOutcome::Unknown {
                reason,
                http_status,
            } => (
                "unknown",
                None,
                Some(reason.as_str()),
                None,
                http_status.map(i32::from),
            ),
        };
        Attempt {
            outbox_id: Some(id),
            cancellation_id: None,
            operation: "stamp",
            pac: self.label(route),
            outcome,
            http_status: status,
            code,
            message,
            latency_ms: i64::try_from(latency.as_millis()).unwrap_or(i64::MAX),
            uuid,
            worker: &self.id,
        }
    }

    async fn log_recovery(&self, id: i64, r: &Recovery, t: Instant) -> Result<(), StoreError> {
        let (outcome, message, uuid, status) = match r {
            Recovery::Found(s) => ("found", None, Some(s.uuid.as_str()), None),
            Recovery::NotFound => ("not_found", None, None, None),
            Recovery::Unresolved {
                reason,
                http_status,
            } => ("unresolved", Some(reason.as_str()), None, *http_status),
        };
        self.db
            .log_attempt(&Attempt {
                outbox_id: Some(id),
                cancellation_id: None,
                operation: "recover",
                pac: &self.pac_label,
                outcome,
                http_status: status.map(i32::from),
                code: None,
                message,
                latency_ms: i64::try_from(t.elapsed().as_millis()).unwrap_or(i64::MAX),
                uuid,
                worker: &self.id,
            })
            .await
    }
}

/// The kind a stamp is counted under: `global`, `ingreso`, `egreso` or `pago`.
fn kind_label(req: &crate::cfdi::InvoiceRequest) -> &'static str {
    match (&req.informacion_global, req.tipo) {
        (Some(_), _) => "global",
        (None, crate::cfdi::TipoComprobante::Ingreso) => "ingreso",
        (None, crate::cfdi::TipoComprobante::Egreso) => "egreso",
        (None, crate::cfdi::TipoComprobante::Pago) => "pago",
    }
}

fn route_label(r: Route) -> &'static str {
    match r {
        Route::Primary => "primary",
        Route::Backup => "backup",
    }
}

/// The failover client's durable memory of where each key was sent: `outbox.pac_route`. The
/// worker's sends record into it, and every recovery (the worker's, reconciliation's, a
/// refreeze's) asks only the PACs it names.
pub struct DbRouteLog<'a> {
    pub db: &'a Db,
    /// The name the backup PAC is paused under; `None`: never treated as paused (an
    /// operator's own reconciliation asks it whatever the pause).
    pub backup_pause: Option<&'a str>,
}

impl AttemptLog for DbRouteLog<'_> {
    fn sent_to<'a>(
        &'a self,
        key: &'a StampKey,
    ) -> pac::failover::BoxFuture<'a, Result<Vec<Route>, String>> {
        Box::pin(async move {
            let routes = self
                .db
                .pac_routes(key.as_str())
                .await
                .map_err(|e| e.to_string())?;
            Ok(routes
                .iter()
                .filter_map(|r| match r.as_str() {
                    "primary" => Some(Route::Primary),
                    "backup" => Some(Route::Backup),
                    _ => None,
                })
                .collect())
        })
    }

    fn before_send<'a>(
        &'a self,
        key: &'a StampKey,
        route: Route,
    ) -> pac::failover::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.db
                .add_pac_route(key.as_str(), route_label(route))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn backup_paused(&self) -> pac::failover::BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            let Some(name) = self.backup_pause else {
                return Ok(false);
            };
            self.db
                .pac_pause(name)
                .await
                .map(|p| p.is_some())
                .map_err(|e| e.to_string())
        })
    }
}
