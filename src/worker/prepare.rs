//! Claim ahead and seal ahead: due rows are claimed in a batch (by one slot at a time, for
//! itself and the others, mostly while its current call runs), each frozen request read, numbered (the batch's
//! rows without a folio get their serie's next ones, committed first) and sealed once, and the
//! sealed bytes stored before any PAC call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use chrono::Utc;
use tracing::{Instrument, debug, info_span, warn};

use super::Worker;
use super::pool::Found;
use super::settle::Answered;
use crate::cfdi::{self, InvoiceRequest};
use crate::domain::{DocumentState, StampKey};
use crate::store::ClaimedStamp;
use crate::store::StoreError;

/// What a claim found.
pub(super) enum Next {
    /// A stamp to send.
    Ready(Box<Prepared>),
    /// Something was done without a stamp call (a cancellation, a row failed before sending).
    Worked,
    /// Nothing was due.
    Idle,
}

/// Tells a notify's waiters when dropped (after the ready queue has been filled, or not).
struct NotifyOnDrop<'a>(&'a tokio::sync::Notify);

impl Drop for NotifyOnDrop<'_> {
    fn drop(&mut self) {
        self.0.notify_waiters();
    }
}

/// A look the pool makes now and then rather than at every claim: when (Unix ms) the next one
/// is due, and how long after one the next comes.
#[derive(Debug)]
pub(super) struct Look {
    next: AtomicI64,
    every_ms: i64,
}

impl Look {
    /// Due at once, then once per `period` at most.
    pub(super) fn every(period: std::time::Duration) -> Self {
        Self {
            next: AtomicI64::new(0),
            every_ms: i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1),
        }
    }

    /// Whether this one looks, and if so, the next one a period later.
    fn due(&self, now_ms: i64) -> bool {
        let due = self.next.load(Ordering::Relaxed) <= now_ms;
        if due {
            self.next
                .store(now_ms.saturating_add(self.every_ms), Ordering::Relaxed);
        }
        due
    }

    /// The next one looks, whenever it comes.
    fn soon(&self) {
        self.next.store(0, Ordering::Relaxed);
    }
}

/// How long a claim ahead waits for sales to gather once the pool has caught up with them.
/// Each claim is four writes (the claim, the numbering, the sealed bytes, the outcomes) and a
/// sync, and on SQLite each commits the sales grouped before it: at 25 ms instead of 10 the
/// appliance spent 0.1 ms less CPU per stamp with sales arriving 2 ms apart, and at 50 ms with
/// claims of up to 16 rows instead of 8, about 0.1 ms less again at 500 sales a second; claims
/// of up to 32 took off about 0.06 ms more (BENCHMARKS.md). A sale waits at most that much
/// longer for its stamp.
pub(super) const CLAIM_LINGER: std::time::Duration = std::time::Duration::from_millis(50);

/// A claimed row, sealed, ready for its PAC call.
pub(super) struct Prepared {
    pub(super) id: i64,
    /// `pending`, `retry_scheduled`, `unknown` or `stamping` (see [`ClaimedStamp`]).
    pub(super) claimed_from: DocumentState,
    /// Including this claim.
    pub(super) attempts: i32,
    pub(super) key: StampKey,
    /// Serie-folio, for the logs.
    pub(super) folio: String,
    /// The frozen request, with the row's folio.
    pub(super) req: InvoiceRequest,
    /// The stored sealed bytes: what every attempt sends.
    pub(super) sealed: Vec<u8>,
    pub(super) claimed_at: Instant,
    /// The provider's payment id, for the logs.
    pub(super) payment_id: String,
}

/// Half the cores, at least one (see [`Worker::sealing`]).
pub(super) fn sealing_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

impl Worker {
    /// The next row to send: a prepared one from the queue, else (on this slot's turn) a batch
    /// claimed and prepared, its first row kept here and the rest queued for the other slots;
    /// with no stamp due, and unless `stamps_only`, a cancellation, processed at once.
    pub(super) async fn next(&self, slot: usize, stamps_only: bool) -> Result<Next, StoreError> {
        let turn = match self.row_or_turn().await {
            Found::Row(p) => return Ok(Next::Ready(p)),
            Found::Turn(t) => Some(t),
            Found::Nothing => None,
        };
        if let Some(mut t) = turn {
            if self.claims.caught_up()
                && let Some(last) = t.last()
            {
                // Sales arrive one by one: claiming at once would take one or two rows per
                // claim, numbering, sealing batch and write. A short wait lets several gather
                // for one of each. A backlog never waits here.
                tokio::time::sleep_until((last + CLAIM_LINGER).into()).await;
            }
            t.begin();
            let now = Utc::now();
            let lease_until = now + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
            // Dead workers' rows are looked for about once a second, not at every claim: a
            // lease lasts far longer, and each look is one more write on the busy path.
            let expired_first = self.next_expired_look.due(now.timestamp_millis());
            let claimed = self
                .db
                .claim_stamps(
                    &self.id,
                    lease_until,
                    now,
                    expired_first,
                    self.batch,
                    &self.pac_label,
                )
                .await;
            let asked = usize::try_from(self.batch).unwrap_or(0);
            let found = claimed.as_ref().map_or(0, Vec::len);
            // The next claim may begin while this batch is numbered and sealed.
            t.ended(found, asked, &self.ready_notify);
            let claimed = claimed?;
            if !claimed.is_empty() {
                if claimed
                    .iter()
                    .any(|c| c.claimed_from == DocumentState::Stamping)
                {
                    // Where one died, more may have: look again at the next claim.
                    self.next_expired_look.soon();
                }
                let span = info_span!("claim", rows = claimed.len(), slot);
                let prepared = self.prepare(claimed).instrument(span).await;
                // Whether or not it came to rows, the slots waiting for this batch look again.
                let _notify = NotifyOnDrop(&self.ready_notify);
                let mut prepared = prepared?;
                if !prepared.is_empty() {
                    // Nothing of the batch goes to the PAC before its claim, folios and sealed
                    // bytes are on disk.
                    self.db.durable_before_sending().await?;
                }
                // Rows settled while preparing were never to be sent; the rest are, from now.
                self.unsent_rows()
                    .extend(prepared.iter().map(|p| (p.id, p.claimed_from)));
                if prepared.is_empty() {
                    return Ok(Next::Worked);
                }
                let first = prepared.remove(0);
                // The rest wait for whichever slot asks next.
                self.ready_rows().extend(prepared);
                return Ok(Next::Ready(Box::new(first)));
            }
        }
        // Idle slots poll one after another; a cancellation is looked for about twice per idle
        // poll by the pool as a whole, not at each slot's poll (one write each on SQLite: with
        // 32 slots, 70 a second with nothing to do).
        let now = Utc::now();
        if stamps_only || !self.next_cancel_look.due(now.timestamp_millis()) {
            return Ok(Next::Idle);
        }
        let lease_until = now + chrono::Duration::from_std(self.cfg.lease).unwrap_or_default();
        if let Some(c) = self
            .db
            .claim_cancellation(&self.id, lease_until, now, &self.pac_label)
            .await?
        {
            // Where one was due, more may be.
            self.next_cancel_look.soon();
            self.in_flight.start();
            let span = info_span!("cancellation", id = c.id, uuid = %c.uuid, slot);
            let r = self.process_cancel(c).instrument(span).await;
            self.in_flight.end();
            r?;
            return Ok(Next::Worked);
        }
        Ok(Next::Idle)
    }

    /// The first half of stamping, for a batch of claimed rows: reads each frozen request,
    /// numbers the rows without a folio (one statement per serie, committed), seals the ones not
    /// sealed yet (on the blocking pool, in one task), then stores all the sealed bytes in one
    /// write before any of them is sent; the stored bytes are what every attempt sends. Rows
    /// that cannot be sent are settled here, without a PAC call (and without a folio).
    async fn prepare(&self, claimed: Vec<ClaimedStamp>) -> Result<Vec<Prepared>, StoreError> {
        let claimed_at = Instant::now();
        let mut checked = Vec::with_capacity(claimed.len());
        let mut to_number = Vec::new();
        for c in claimed {
            let id = c.id;
            let mut req: InvoiceRequest = match serde_json::from_str(&c.request_json) {
                Ok(r) => r,
                Err(e) => {
                    let msg = format!("the frozen request cannot be read: {e}");
                    self.fail_unsent(id, "FROZEN", &msg).await?;
                    continue;
                }
            };
            let Ok(key) = StampKey::parse(&c.stamp_key) else {
                let msg = format!("stamp key `{}` is malformed", c.stamp_key);
                self.fail_unsent(id, "FROZEN", &msg).await?;
                continue;
            };
            if c.test_mode && self.pac_is_production {
                let msg = "a test-mode payment is never sent to a production PAC";
                self.fail_unsent(id, "TEST_MODE", msg).await?;
                continue;
            }
            // The row's folio is the one it is sealed with (its request has none unless the
            // folio was explicit).
            if c.folio.is_some() {
                req.folio = c.folio;
            } else if c.sealed_xml.is_none() {
                // Never sealed, so never sent: past its window it expires without taking a
                // folio (a refreeze numbers it then).
                if self.past_window(&req) {
                    self.expire_unsent(id, &req, &mut Answered::nobody())
                        .await?;
                    continue;
                }
                to_number.push((id, c.serie));
            }
            checked.push(Prepared {
                id,
                claimed_from: c.claimed_from,
                attempts: c.attempts,
                key,
                folio: String::new(),
                req,
                sealed: c.sealed_xml.unwrap_or_default(),
                claimed_at,
                payment_id: c.payment_ref.unwrap_or_default(),
            });
        }
        if !to_number.is_empty() {
            let numbered: HashMap<i64, String> = self
                .db
                .assign_folios(&self.id, &to_number)
                .await?
                .into_iter()
                .collect();
            checked.retain_mut(|p| {
                if !to_number.iter().any(|(id, _)| *id == p.id) {
                    return true;
                }
                let Some(folio) = numbered.get(&p.id) else {
                    warn!(
                        outbox_id = p.id,
                        "another worker took the row over before it was numbered; left to it"
                    );
                    return false;
                };
                p.req.folio = Some(folio.clone());
                true
            });
        }
        for p in &mut checked {
            p.folio = format!(
                "{}-{}",
                p.req.serie.as_deref().unwrap_or(""),
                p.req.folio.as_deref().unwrap_or("")
            );
        }
        // Seal once: only rows that were never sealed.
        let to_seal: Vec<InvoiceRequest> = checked
            .iter()
            .filter(|p| p.sealed.is_empty())
            .map(|p| p.req.clone())
            .collect();
        if to_seal.is_empty() {
            return Ok(checked);
        }
        let mut seals = self.seal_off_thread(to_seal).await.into_iter();
        let mut ready = Vec::with_capacity(checked.len());
        let mut fresh = Vec::new();
        for mut p in checked {
            if !p.sealed.is_empty() {
                ready.push(p);
                continue;
            }
            match seals.next() {
                Some(Ok(s)) => {
                    // A step on the way: "invoice stamped", or the failure, is the line at
                    // info that says what became of the document.
                    debug!(outbox_id = p.id, payment_id = %p.payment_id, stamp_key = %p.key, folio = %p.folio, total = %s.total, "comprobante sealed");
                    p.sealed = s.xml;
                    fresh.push(p);
                }
                Some(Err(e)) => {
                    let msg = format!("cannot seal the frozen comprobante: {e}");
                    self.fail_unsent(p.id, "SEAL", &msg).await?;
                }
                None => {
                    let msg = "cannot seal the frozen comprobante: the sealing task ended early";
                    self.fail_unsent(p.id, "SEAL", msg).await?;
                }
            }
        }
        let rows: Vec<(i64, &[u8])> = fresh.iter().map(|p| (p.id, p.sealed.as_slice())).collect();
        let written = self.db.save_sealed_many(&rows).await?;
        for mut p in fresh {
            if !written.contains(&p.id) {
                // Another worker sealed it first: its bytes (the same, sealing is
                // deterministic) are the ones to send.
                p.sealed = self.db.save_sealed(p.id, &p.sealed).await?;
            }
            ready.push(p);
        }
        Ok(ready)
    }

    /// Fails a row before its PAC call: no slot waits for its answer.
    async fn fail_unsent(&self, id: i64, code: &str, message: &str) -> Result<(), StoreError> {
        self.fail(
            id,
            DocumentState::Failed,
            code,
            message,
            &mut Answered::nobody(),
        )
        .await
    }

    /// Seals on the blocking pool: an RSA signature is CPU work, and the async threads keep
    /// serving the other slots' I/O meanwhile. At most [`Worker::sealing`] batches at once. One
    /// result per request, in order.
    async fn seal_off_thread(
        &self,
        reqs: Vec<InvoiceRequest>,
    ) -> Vec<Result<cfdi::Sealed, cfdi::CfdiError>> {
        let csd = self.csd.clone();
        // Never closed, so this waits for a permit and holds it until the batch is sealed.
        let _permit = self.sealing.acquire().await;
        tokio::task::spawn_blocking(move || reqs.iter().map(|r| cfdi::seal(r, &csd)).collect())
            .await
            .unwrap_or_else(|e| {
                vec![Err(cfdi::CfdiError::Csd(format!(
                    "sealing task failed: {e}"
                )))]
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Look;
    use std::time::Duration;

    #[test]
    fn a_look_is_due_once_a_period_and_at_once_after_soon() {
        let look = Look::every(Duration::from_millis(250));
        assert!(look.due(1_000), "the first look is due at once");
        assert!(!look.due(1_001));
        assert!(!look.due(1_249), "not again within the period");
        assert!(look.due(1_250));
        assert!(!look.due(1_300));
        look.soon();
        assert!(look.due(1_301), "soon: the next one looks");
        let always = Look::every(Duration::ZERO);
        assert!(
            always.due(5) && always.due(6),
            "a zero period: every millisecond"
        );
    }
}
