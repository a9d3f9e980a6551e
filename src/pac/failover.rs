//! Failover between a primary and a backup PAC without ever stamping one sale twice.
//!
//! The rule: the backup gets a document only when the primary *definitely* did not stamp it:
//! the primary answered `Retryable`, or a recover at the primary says `NotFound`. After an
//! `Unknown` the document stays with the PAC that may hold it until a recover resolves it.
//! Every send is recorded before it leaves ([`AttemptLog::before_send`]), so after a crash the
//! history still says which PACs may hold a stamp; the same frozen bytes and the same key go to
//! whichever PAC is used.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{
    CancelOutcome, CancelRequest, PacClient, Recovery, Stamp, StampOutcome, StatusOutcome,
    StatusQuery,
};
use crate::domain::StampKey;

/// Which of the two PACs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    Primary,
    Backup,
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The durable history of sends per key. The worker implements it over its database; the
/// failover client keeps an in-memory one for callers that have none.
pub trait AttemptLog: Send + Sync {
    /// The PACs this key was ever sent to (in any attempt, finished or not).
    fn sent_to<'a>(&'a self, key: &'a StampKey) -> BoxFuture<'a, Result<Vec<Route>, String>>;
    /// Records, durably, that `key` is about to be sent to `route`.
    fn before_send<'a>(
        &'a self,
        key: &'a StampKey,
        route: Route,
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Whether an operator paused the backup PAC: while paused nothing is sent to it, nor
    /// asked of it, as if there were no backup. Never paused unless the log says so.
    fn backup_paused(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }
}

/// Why a document waits while the backup PAC is paused.
pub const BACKUP_PAUSED: &str =
    "the backup PAC is paused by an operator: nothing is sent to it until it is resumed";

/// An [`AttemptLog`] in memory (lost with the process).
#[derive(Debug, Default)]
pub struct MemoryLog {
    sent: Mutex<HashMap<String, Vec<Route>>>,
}

impl AttemptLog for MemoryLog {
    fn sent_to<'a>(&'a self, key: &'a StampKey) -> BoxFuture<'a, Result<Vec<Route>, String>> {
        let routes = self
            .sent
            .lock()
            .map(|m| m.get(key.as_str()).cloned().unwrap_or_default())
            .map_err(|e| e.to_string());
        Box::pin(async move { routes })
    }
    fn before_send<'a>(
        &'a self,
        key: &'a StampKey,
        route: Route,
    ) -> BoxFuture<'a, Result<(), String>> {
        let r = self
            .sent
            .lock()
            .map(|mut m| {
                let v = m.entry(key.as_str().to_owned()).or_default();
                if !v.contains(&route) {
                    v.push(route);
                }
            })
            .map_err(|e| e.to_string());
        Box::pin(async move { r })
    }
}

/// A log that forgets; only for tests and one-shot calls.
pub struct NoLog;

impl AttemptLog for NoLog {
    fn sent_to<'a>(&'a self, _: &'a StampKey) -> BoxFuture<'a, Result<Vec<Route>, String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn before_send<'a>(&'a self, _: &'a StampKey, _: Route) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// A primary and a backup PAC.
pub struct Failover {
    primary: PacClient,
    backup: PacClient,
    memory: MemoryLog,
}

fn found(stamp: Stamp, xml: &[u8]) -> StampOutcome {
    let same_content = stamp.belongs_to(xml);
    StampOutcome::AlreadyStamped {
        stamp,
        same_content,
    }
}

impl Failover {
    pub fn new(primary: PacClient, backup: PacClient) -> Self {
        Self {
            primary,
            backup,
            memory: MemoryLog::default(),
        }
    }

    fn pac(&self, r: Route) -> &PacClient {
        match r {
            Route::Primary => &self.primary,
            Route::Backup => &self.backup,
        }
    }

    /// Stamps with the process-local history (use [`Failover::stamp_logged`] from a worker
    /// that keeps the history durably).
    pub async fn stamp(&self, xml: &[u8], key: &StampKey, _: &NoLog) -> (Route, StampOutcome) {
        self.stamp_logged(xml, key, &self.memory).await
    }

    /// Stamps following the failover rule; says which PAC the outcome came from.
    pub async fn stamp_logged(
        &self,
        xml: &[u8],
        key: &StampKey,
        log: &dyn AttemptLog,
    ) -> (Route, StampOutcome) {
        let sent = match log.sent_to(key).await {
            Ok(s) => s,
            Err(e) => {
                return (
                    Route::Primary,
                    StampOutcome::retryable(format!("attempt log: {e}"), None),
                );
            }
        };
        let backup_paused = match log.backup_paused().await {
            Ok(p) => p,
            Err(e) => {
                return (
                    Route::Primary,
                    StampOutcome::retryable(format!("attempt log: {e}"), None),
                );
            }
        };
        if sent.contains(&Route::Backup) {
            if backup_paused {
                // Nothing was sent now: the same as the PAC not processing it.
                return (Route::Backup, StampOutcome::retryable(BACKUP_PAUSED, None));
            }
            // The primary was definitely out when the backup got it: stay with the backup.
            return self.resume(Route::Backup, xml, key, log).await;
        }
        let primary_said;
        if sent.contains(&Route::Primary) {
            match Box::pin(self.primary.recover_by_key(xml, key)).await {
                Recovery::Found(s) => return (Route::Primary, found(s, xml)),
                Recovery::NotFound => {
                    primary_said = "recover at the primary found nothing".to_owned()
                }
                Recovery::Unresolved {
                    reason,
                    http_status,
                } => {
                    let reason = format!("an earlier send to the primary is unresolved: {reason}");
                    return (Route::Primary, StampOutcome::unknown(reason, http_status));
                }
            }
        } else {
            if let Err(e) = log.before_send(key, Route::Primary).await {
                return (
                    Route::Primary,
                    StampOutcome::retryable(format!("attempt log: {e}"), None),
                );
            }
            match Box::pin(self.primary.stamp(xml, key)).await {
                StampOutcome::Retryable { reason, .. } => primary_said = reason,
                StampOutcome::Unknown {
                    reason,
                    http_status,
                } => match Box::pin(self.primary.recover_by_key(xml, key)).await {
                    Recovery::Found(s) => return (Route::Primary, found(s, xml)),
                    Recovery::NotFound => primary_said = format!("{reason}; recover found nothing"),
                    Recovery::Unresolved {
                        reason: r,
                        http_status: recover_status,
                    } => {
                        // The first status in the combined text, as the log always read it.
                        let reason = format!("{reason}; recover: {r}");
                        let status = http_status.or(recover_status);
                        return (Route::Primary, StampOutcome::unknown(reason, status));
                    }
                },
                other => return (Route::Primary, other),
            }
        }
        if backup_paused {
            let reason = format!("{primary_said}; {BACKUP_PAUSED}");
            return (Route::Primary, StampOutcome::retryable(reason, None));
        }
        tracing::warn!(key = %key, primary = %primary_said, "the primary PAC did not stamp; failing over to the backup");
        if let Err(e) = log.before_send(key, Route::Backup).await {
            let out = StampOutcome::retryable(format!("attempt log: {e}"), None);
            return (Route::Backup, out);
        }
        (Route::Backup, Box::pin(self.backup.stamp(xml, key)).await)
    }

    /// Continues with the one PAC that may hold the document: recover first, stamp only on a
    /// definite `NotFound`.
    async fn resume(
        &self,
        r: Route,
        xml: &[u8],
        key: &StampKey,
        log: &dyn AttemptLog,
    ) -> (Route, StampOutcome) {
        match Box::pin(self.pac(r).recover_by_key(xml, key)).await {
            Recovery::Found(s) => (r, found(s, xml)),
            Recovery::NotFound => {
                if let Err(e) = log.before_send(key, r).await {
                    return (
                        r,
                        StampOutcome::retryable(format!("attempt log: {e}"), None),
                    );
                }
                (r, Box::pin(self.pac(r).stamp(xml, key)).await)
            }
            Recovery::Unresolved {
                reason,
                http_status,
            } => (r, StampOutcome::unknown(reason, http_status)),
        }
    }

    /// Recovers at the PACs `log` names for the key, or at the primary when it names none
    /// (a send is recorded before it leaves, so an empty history means nothing reached the
    /// backup; the document may predate the failover, when the primary was the only PAC).
    pub async fn recover_logged(
        &self,
        xml: &[u8],
        key: &StampKey,
        log: &dyn AttemptLog,
    ) -> Recovery {
        match log.sent_to(key).await {
            Ok(routes) if routes.is_empty() => {
                self.recover_by_key(xml, key, &[Route::Primary]).await
            }
            // The backup may hold it and cannot be asked now: not known, so never resent.
            Ok(routes)
                if routes.contains(&Route::Backup) && log.backup_paused().await != Ok(false) =>
            {
                Recovery::unresolved(BACKUP_PAUSED, None)
            }
            Ok(routes) => self.recover_by_key(xml, key, &routes).await,
            Err(e) => Recovery::unresolved(format!("attempt log: {e}"), None),
        }
    }

    /// Recovers at the PACs in `sent_to` and those this process sent the key to, the backup
    /// first (it is only ever used once the primary definitely had nothing). `NotFound` only
    /// when every one says so.
    pub async fn recover_by_key(&self, xml: &[u8], key: &StampKey, sent_to: &[Route]) -> Recovery {
        let mut sent = self.memory.sent_to(key).await.unwrap_or_default();
        sent.extend(sent_to.iter().copied());
        let mut unresolved = None;
        for r in [Route::Backup, Route::Primary] {
            if !sent.contains(&r) {
                continue;
            }
            match Box::pin(self.pac(r).recover_by_key(xml, key)).await {
                Recovery::Found(s) => return Recovery::Found(s),
                Recovery::NotFound => {}
                u @ Recovery::Unresolved { .. } => unresolved = Some(u),
            }
        }
        unresolved.unwrap_or(Recovery::NotFound)
    }

    pub async fn recover_by_uuid(&self, uuid: &str, rfc_emisor: &str) -> Recovery {
        match Box::pin(self.primary.recover_by_uuid(uuid, rfc_emisor)).await {
            Recovery::Found(s) => Recovery::Found(s),
            first => match (
                Box::pin(self.backup.recover_by_uuid(uuid, rfc_emisor)).await,
                first,
            ) {
                (Recovery::Found(s), _) => Recovery::Found(s),
                (Recovery::NotFound, Recovery::NotFound) => Recovery::NotFound,
                (u @ Recovery::Unresolved { .. }, _) | (_, u @ Recovery::Unresolved { .. }) => u,
                (Recovery::NotFound, Recovery::Found(s)) => Recovery::Found(s),
            },
        }
    }

    /// Cancellation is a SAT request any PAC can file; the backup is asked only when the
    /// primary refused before doing anything.
    pub async fn cancel(&self, req: &CancelRequest) -> CancelOutcome {
        match Box::pin(self.primary.cancel(req)).await {
            CancelOutcome::Retryable { .. } => Box::pin(self.backup.cancel(req)).await,
            other => other,
        }
    }

    pub async fn sat_status(&self, q: &StatusQuery) -> StatusOutcome {
        match Box::pin(self.primary.sat_status(q)).await {
            StatusOutcome::Unavailable { .. } => Box::pin(self.backup.sat_status(q)).await,
            other => other,
        }
    }
}
