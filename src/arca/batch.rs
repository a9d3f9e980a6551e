//! Batches: several keys of one sequence numbered in one transaction and sent in one
//! `FECAESolicitar` (`CantReg` = their count), each settled from its own answer. One key is the
//! batch of one ([`Issuer::issue`]); the exactly-once rules of [`super::issue`] hold per key:
//!
//! - Keys seen before are never numbered again: each gets its stored outcome or has its own
//!   number resolved.
//! - Before numbering, every open claim of the sequence is resolved, lowest number first (a
//!   lost batch leaves several); if ARCA cannot tell, nothing is reserved or sent. Claims ARCA
//!   proved empty for good (from its next number up) are superseded together by the new keys,
//!   which take their numbers (the barrier).
//! - A lost answer leaves every voucher of the batch unknown: each is resolved by consulting
//!   its own number. A batch that never reached ARCA (its lowest number empty and ARCA's next)
//!   is sent again as it was, at the same numbers, while its send may still land; what such a
//!   resend leaves unprocessed stays unknown (the original may still land it).
//! - ARCA processes a batch in order and stops at its first refusal: that voucher is settled
//!   as a single one would be; the later ones came back unprocessed, so their numbers are
//!   consulted and, empty, they are settled `superseded` (never sent again under that key) and
//!   their sales go on under their next attempt key ([`Issuer::issue_sales`]), from the
//!   refused number up: no gap, no duplicate.

use chrono::Utc;

use super::issue::{ATTEMPTS, LEASE, ROUNDS, attempt_key, json};
use super::model::{Message, VoucherInput, codes};
use super::wsfe::{Request, Solicit};
use super::{IssueError, Issuer, Lookup, Outcome};
use crate::store::{ArcaVoucherRow, NewReservation, Reserve};

/// One outcome per key, in order; `Err` for a key that cannot be issued as it is.
pub type Outcomes = Vec<Result<Outcome, IssueError>>;

impl Issuer {
    /// Issues each `(key, input)` exactly once, the new keys numbered together in order and
    /// sent in one request. `Err` when the sequence itself cannot be served (the database, or
    /// ARCA unable to say its next number): nothing was sent then.
    pub async fn issue_many(
        &self,
        items: &[(&str, &VoucherInput)],
    ) -> Result<Outcomes, IssueError> {
        let mut out: Vec<Option<Result<Outcome, IssueError>>> = Vec::new();
        let (today, mut hashes, mut texts) = (Self::today(), Vec::new(), Vec::new());
        for (_, input) in items {
            let mut problems = input.problems(self.tipo);
            problems.extend(input.date_problems(today, today));
            out.push((!problems.is_empty()).then(|| Err(IssueError::Invalid(problems))));
            hashes.push(input.hash());
            texts.push(serde_json::to_string(input).expect("a voucher input serializes"));
        }
        let today_text = today.to_string();
        let mut arca_last = None;
        for _ in 0..ROUNDS {
            let mut fresh = Vec::new();
            for (i, (key, _)) in items.iter().enumerate() {
                if out[i].is_some() {
                    continue;
                }
                match self.db.arca_voucher(key).await? {
                    Some(v) => out[i] = Some(self.known(&v, &hashes[i]).await),
                    None => fresh.push(i),
                }
            }
            if fresh.is_empty() {
                break;
            }
            // Every open claim of the sequence first, lowest number first.
            let mut free = Vec::new();
            let mut wait = None;
            for c in self.db.arca_open_above(self.seq(), 0).await? {
                match self.settle_other(&c).await? {
                    Some(Outcome::Indeterminate {
                        lookup: Lookup::Free,
                        ..
                    }) => free.push(c),
                    Some(blocked) => {
                        wait = Some(blocked);
                        break;
                    }
                    None => {}
                }
            }
            if let Some(blocked) = wait {
                for i in fresh {
                    out[i] = Some(Ok(blocked.clone()));
                }
                break;
            }
            let from = free.first().map_or(0, |f| f.number);
            if !free.iter().zip(from..).all(|(c, n)| c.number == n) {
                continue;
            }
            let name = self.seq().lock_name();
            if !self.db.arca_lock(&name, &self.owner, LEASE).await? {
                break;
            }
            let now = Utc::now();
            let news: Vec<NewReservation<'_>> = fresh
                .iter()
                .map(|&i| NewReservation {
                    key: items[i].0,
                    input_hash: &hashes[i],
                    input: &texts[i],
                    today: &today_text,
                    sending_until: now + self.send_window,
                    landing_until: now + self.landing_window,
                })
                .collect();
            let claimed = self
                .db
                .arca_claim(self.seq(), &news, arca_last, &free)
                .await;
            self.db.arca_unlock(&name, &self.owner).await?;
            match claimed? {
                Ok(vs) => {
                    if let Some(old) = free.first() {
                        tracing::warn!(old = %old.key, new = %vs[0].key, number = old.number,
                            superseded = free.len(), "ARCA numbers proven empty: superseded");
                    }
                    for (i, o) in fresh.into_iter().zip(self.send_many(&vs, true).await) {
                        out[i] = Some(o);
                    }
                    break;
                }
                // Settled (or sent again) by the next round.
                Err(Reserve::Existing(_) | Reserve::Unsettled(_) | Reserve::Moved) => {}
                Err(Reserve::NeedLast) => {
                    arca_last = Some(
                        self.wsfe
                            .last_authorized(self.pto_vta, self.tipo)
                            .await
                            .map_err(IssueError::Unavailable)?,
                    );
                }
                Err(Reserve::Reserved(_)) => unreachable!("a claim's reservations are Ok"),
            }
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or(Ok(Outcome::Busy)))
            .collect())
    }

    /// Issues sales' vouchers (`(key, input)`, the sale's own key first) together, each
    /// going on under its next attempt key while ARCA shows an attempt superseded, unprocessed
    /// or its number free for good, or a human moved it on from a conflict: one voucher per
    /// sale, whatever attempt carries it.
    pub async fn issue_sales(
        &self,
        items: &[(&str, &VoucherInput)],
    ) -> Result<Outcomes, IssueError> {
        let mut attempt = vec![1_u32; items.len()];
        let mut out: Vec<Option<Result<Outcome, IssueError>>> =
            items.iter().map(|_| None).collect();
        for _ in 1..=ATTEMPTS {
            let open: Vec<usize> = (0..items.len()).filter(|&i| out[i].is_none()).collect();
            if open.is_empty() {
                break;
            }
            let keys: Vec<String> = open
                .iter()
                .map(|&i| attempt_key(items[i].0, attempt[i]))
                .collect();
            let batch: Vec<(&str, &VoucherInput)> = open
                .iter()
                .zip(&keys)
                .map(|(&i, k)| (k.as_str(), items[i].1))
                .collect();
            let got = self.issue_many(&batch).await?;
            for ((&i, key), o) in open.iter().zip(&keys).zip(got) {
                let moves_on = match &o {
                    Ok(Outcome::Indeterminate {
                        lookup: Lookup::Free | Lookup::Superseded { .. },
                        ..
                    }) => true,
                    // A human moved the sale on from this conflict (the admin's re-issue).
                    Ok(Outcome::Conflict { .. }) => self
                        .db
                        .arca_voucher(key)
                        .await?
                        .is_some_and(|v| v.superseded_by.is_some()),
                    _ => false,
                };
                if moves_on && attempt[i] < ATTEMPTS {
                    attempt[i] += 1;
                } else {
                    out[i] = Some(o);
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or(Ok(Outcome::Busy)))
            .collect())
    }

    /// Sends `vs` (consecutive numbers this call holds the right to send) in one request and
    /// records each answer. `first`: no earlier send of them can have reached ARCA, so a
    /// voucher refused for its content settles at once.
    pub(super) async fn send_many(&self, vs: &[ArcaVoucherRow], first: bool) -> Outcomes {
        let mut reqs = Vec::with_capacity(vs.len());
        for v in vs {
            match self.request(v) {
                Ok(r) => reqs.push(r),
                Err(e) => {
                    let why = e.to_string();
                    return vs
                        .iter()
                        .map(|w| Err(IssueError::Corrupt(w.key.clone(), why.clone())))
                        .collect();
                }
            }
        }
        let answers = match self.wsfe.solicit_many(&reqs).await {
            Ok(a) => a,
            Err(e) => {
                let mut out = Vec::with_capacity(vs.len());
                for v in vs {
                    out.push(self.unknown(v, &e).await);
                }
                return out;
            }
        };
        let mut refused: Option<i64> = None;
        let mut out = Vec::with_capacity(vs.len());
        for ((v, req), answer) in vs.iter().zip(&reqs).zip(answers) {
            out.push(match (answer, refused) {
                (Solicit::Approved { cae, observations }, _) => {
                    let due = cae.due.to_string();
                    match self
                        .db
                        .arca_authorized(&v.key, &cae.code, &due, &json(&observations), false)
                        .await
                    {
                        Ok(true) => Ok(Outcome::Authorized {
                            number: v.number,
                            cae,
                            recovered: false,
                        }),
                        Ok(false) => self.reread(&v.key).await,
                        Err(e) => Err(e.into()),
                    }
                }
                // A resend's original may still land these: left unknown, each is resolved
                // by its own number later.
                (Solicit::Rejected { .. }, Some(at)) if !first => {
                    let why = format!("not processed: number {at} before it was refused");
                    match self.db.arca_unknown(&v.key, &why).await {
                        Ok(()) => Ok(Outcome::Indeterminate {
                            number: v.number,
                            reason: why,
                            lookup: Lookup::Unanswered,
                        }),
                        Err(e) => Err(e.into()),
                    }
                }
                (Solicit::Rejected { .. }, Some(at)) => self.unprocessed(v, req, at).await,
                (
                    Solicit::Rejected {
                        errors,
                        observations,
                    },
                    None,
                ) => {
                    refused = Some(v.number);
                    self.refused(v, req, first, errors, observations).await
                }
            });
        }
        out
    }

    /// The first voucher of a request ARCA refused. ARCA puts a record's reasons in its
    /// Observaciones and the request's in Errors. A first send refused for its content
    /// settles: no earlier send of it exists. 10016 says the number is used, and a resend's
    /// earlier send may have landed: only the number tells whose voucher is there.
    async fn refused(
        &self,
        v: &ArcaVoucherRow,
        req: &Request,
        first: bool,
        errors: Vec<Message>,
        observations: Vec<Message>,
    ) -> Result<Outcome, IssueError> {
        let reasons: Vec<Message> = errors.into_iter().chain(observations).collect();
        if first && !reasons.iter().any(|e| e.code == codes::NOT_NEXT) {
            return self.rejected(v, &reasons).await;
        }
        match self.wsfe.consult(self.pto_vta, self.tipo, v.number).await {
            Ok(Some(found)) => self.found(v, req, &found).await,
            Ok(None) => self.rejected(v, &reasons).await,
            Err(e) => self.unknown(v, &e).await,
        }
    }

    /// A voucher ARCA left unprocessed because number `at` before it in the same request was
    /// refused: its number is consulted; empty (or unanswered: ARCA's answer already says it
    /// was not processed), it is settled superseded and its sale goes on under its next key.
    async fn unprocessed(
        &self,
        v: &ArcaVoucherRow,
        req: &Request,
        at: i64,
    ) -> Result<Outcome, IssueError> {
        let consulted = match self.wsfe.consult(self.pto_vta, self.tipo, v.number).await {
            Ok(Some(found)) => return self.found(v, req, &found).await,
            Ok(None) => "its number is empty".to_owned(),
            Err(e) => format!("consulting its number: {e}"),
        };
        let reason = format!(
            "ARCA did not process it: number {at} before it in the same request was refused \
             ({consulted}); never sent again, its sale goes on under its next key"
        );
        if !self.db.arca_unprocessed(&v.key, &reason).await? {
            return self.reread(&v.key).await;
        }
        Ok(Outcome::Indeterminate {
            number: v.number,
            reason,
            lookup: Lookup::Superseded { by: String::new() },
        })
    }
}
