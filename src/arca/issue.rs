//! Exactly once with ARCA: one voucher per idempotency key, whatever answer is lost.
//!
//! ARCA takes no idempotency key, so the number is the identity. [`Issuer::issue`]:
//!
//! 1. A key seen before is never numbered again: settled, its outcome is returned with no
//!    call; open (reserved or unknown), its own number is resolved ([`Issuer::resolve`]).
//! 2. A new key waits for its sequence's claims to be settled: open ones (a lost batch leaves
//!    several) are resolved first, lowest number first, whoever's they are; if ARCA cannot
//!    tell, nothing is reserved or sent ([`Outcome::Blocked`]).
//! 3. Under the sequence's lease (database only, never across a call), the next number is
//!    reserved and committed ([`Db::arca_claim`]); only then is `FECAESolicitar` sent, once.
//!    Several new keys of the sequence are numbered together and sent in one request
//!    ([`super::batch`]); one key is the batch of one.
//! 4. A rejection settles it only when the number cannot hold ours: a first send refused for
//!    its content. `10016` (the number is used) and a refused resend consult the number first.
//! 5. A lost answer leaves the voucher `unknown`. Resolving it consults its number first:
//!    found and equal → authorized (recovered, one CAE); found and different → conflict; empty
//!    and still ARCA's next → while an earlier send of it could still land (`landing_until`),
//!    the same stored request is sent again at the same number (ARCA holds one voucher per
//!    number, so a late original and the resend cannot both land).
//! 6. The barrier: empty and next (or behind our own open claims from ARCA's next up, all
//!    empty), and no send of it can land any more → it is never sent again. The next key to claim the sequence takes its number and settles it `superseded`
//!    naming that key, in one transaction ([`Db::arca_claim`]); a repeat of the old key
//!    consults the number once and reports [`Lookup::Superseded`]. [`Issuer::issue_sale`]
//!    then issues the sale under its next attempt key (`{key}#2`, …).

use std::time::Duration as StdDuration;

use chrono::{Duration, NaiveDate, Utc};

use super::model::{Cae, CbteTipo, Environment, Message, VoucherInput};
use super::wsfe::{Found, Request, Wsfe, WsfeError};
use crate::domain::ArcaVoucherState;
use crate::store::{ArcaSeq, ArcaVoucherRow, Db, StoreError};

/// The outcome of one [`Issuer::issue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Authorized {
        number: i64,
        cae: Cae,
        /// Learnt by consulting the number after the answer was lost.
        recovered: bool,
    },
    /// ARCA refused it and did not use the number.
    Rejected { number: i64, errors: Vec<Message> },
    /// ARCA holds another voucher at the number reserved for this key.
    Conflict { number: i64, detail: String },
    /// This key's voucher was sent and its outcome is not known yet; it will be resolved by
    /// consulting its number, never by a new one. `lookup` says what the number showed.
    Indeterminate {
        number: i64,
        reason: String,
        lookup: Lookup,
    },
    /// The sequence waits for `by`'s number to be resolved; nothing was reserved or sent.
    Blocked {
        by: String,
        number: i64,
        reason: String,
    },
    /// Another instance is reserving or sending on this sequence right now: try again soon.
    Busy,
}

/// What consulting an indeterminate key's number showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// ARCA could not tell (down, no answer), or what it showed needs a human: wait.
    Unanswered,
    /// ARCA proved the number empty and next, and no send of this key can land any more: it
    /// is never sent again; the next key to claim the sequence takes the number.
    Free,
    /// Settled: the number went to `by`, and ARCA showed it does not hold this key's voucher.
    /// The sale goes on under a new key.
    Superseded { by: String },
}

/// A call that cannot be made at all; nothing was reserved or sent.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The key was used with another input or on another sequence.
    #[error("ARCA_INPUT_IDEMPOTENCY_MISMATCH: key {0} was used with another input")]
    Mismatch(String),
    /// WSFEv1 would refuse this input: fix it first.
    #[error("the voucher would be refused: {}", .0.iter().map(Message::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<Message>),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("ARCA could not be asked for the next number: {0}")]
    Unavailable(WsfeError),
    #[error("stored voucher {0} cannot be read: {1}")]
    Corrupt(String, String),
}

/// The issuer of one sequence (environment, CUIT, punto de venta, voucher type).
#[derive(Debug, Clone)]
pub struct Issuer {
    pub(super) db: Db,
    pub(super) wsfe: Wsfe,
    pub(super) environment: Environment,
    pub(super) pto_vta: i32,
    pub(super) tipo: CbteTipo,
    /// Who takes the sequence's lease (one per instance).
    pub(super) owner: String,
    /// How long a sender may be talking to ARCA: the client's timeout plus a margin. Until
    /// then nobody else resends its number.
    pub(super) send_window: Duration,
    /// How long after a send began it may still land at ARCA: `send_window` plus
    /// [`LANDING_MARGIN`] (a request ARCA is still processing after the client gave up).
    pub(super) landing_window: Duration,
}

/// How long a sequence's lease lasts if its holder dies between reading and writing.
pub(super) const LEASE: Duration = Duration::seconds(30);
/// Rounds of "settle the last claim, then reserve" before answering `Busy`.
pub(super) const ROUNDS: usize = 8;
/// How long past its sender's window a send is still assumed able to land at ARCA. ARCA
/// documents no bound for a request its client abandoned; two minutes is this appliance's
/// choice (docs/arca.md, the barrier).
pub const LANDING_MARGIN: Duration = Duration::minutes(2);
/// Attempt keys of one sale [`Issuer::issue_sale`] goes through (`{key}`, `{key}#2`, …).
pub(super) const ATTEMPTS: u32 = 20;

/// A sale's own key and the attempt `key` is: `mercadopago:7#3` → (`mercadopago:7`, 3).
pub fn sale_of(key: &str) -> (&str, u32) {
    match key.rsplit_once('#') {
        Some((sale, n)) => match n.parse() {
            Ok(n) if n > 1 => (sale, n),
            _ => (key, 1),
        },
        None => (key, 1),
    }
}

/// The key of a sale's `attempt` (1 is the sale's own key): `{key}#{attempt}` after the first.
pub fn attempt_key(key: &str, attempt: u32) -> String {
    if attempt <= 1 {
        key.to_owned()
    } else {
        format!("{key}#{attempt}")
    }
}

pub(super) fn json(m: &[Message]) -> String {
    serde_json::to_string(m).expect("messages serialize")
}

impl Issuer {
    /// `timeout` must be the WSFEv1 client's request timeout.
    pub fn new(
        db: Db,
        wsfe: Wsfe,
        environment: Environment,
        pto_vta: i32,
        tipo: CbteTipo,
        timeout: StdDuration,
    ) -> Self {
        let send_window =
            Duration::from_std(timeout).unwrap_or(Duration::minutes(5)) + Duration::seconds(10);
        Self {
            db,
            wsfe,
            environment,
            pto_vta,
            tipo,
            owner: uuid::Uuid::new_v4().to_string(),
            send_window,
            landing_window: send_window + LANDING_MARGIN,
        }
    }

    pub(super) fn seq(&self) -> ArcaSeq<'_> {
        ArcaSeq {
            environment: self.environment.as_str(),
            cuit: self.wsfe.cuit(),
            pto_vta: self.pto_vta,
            cbte_tipo: self.tipo.code(),
        }
    }

    /// Today in Argentina (UTC−3, no daylight saving).
    pub(super) fn today() -> NaiveDate {
        (Utc::now() - Duration::hours(3)).date_naive()
    }

    /// Issues `input`'s voucher under `key`, exactly once (see the module's comment): the
    /// batch of one ([`Issuer::issue_many`]).
    pub async fn issue(&self, key: &str, input: &VoucherInput) -> Result<Outcome, IssueError> {
        self.issue_many(&[(key, input)]).await?.remove(0)
    }

    /// Issues a sale's voucher under `key`, then, while ARCA shows an attempt superseded or
    /// its number free for good ([`Lookup`]), or a human moved the sale on from a conflict,
    /// under the sale's next attempt key ([`attempt_key`]): one voucher per sale, whatever
    /// attempt carries it. The batch of one ([`Issuer::issue_sales`]).
    pub async fn issue_sale(&self, key: &str, input: &VoucherInput) -> Result<Outcome, IssueError> {
        self.issue_sales(&[(key, input)]).await?.remove(0)
    }

    /// A key with a voucher already: the same input gets its outcome (resolving it if open).
    pub(super) async fn known(
        &self,
        v: &ArcaVoucherRow,
        hash: &str,
    ) -> Result<Outcome, IssueError> {
        let s = self.seq();
        if v.input_hash != hash
            || v.environment != s.environment
            || v.cuit != s.cuit
            || v.pto_vta != s.pto_vta
            || v.cbte_tipo != s.cbte_tipo
        {
            return Err(IssueError::Mismatch(v.key.clone()));
        }
        self.resolve(v).await
    }

    /// The last claim of the sequence belongs to another key and is open: resolve it. `None`
    /// when it is settled now; [`Lookup::Free`] when its number may be taken; the outcome
    /// that blocks this key otherwise.
    pub(super) async fn settle_other(
        &self,
        last: &ArcaVoucherRow,
    ) -> Result<Option<Outcome>, IssueError> {
        Ok(match self.resolve(last).await? {
            free @ Outcome::Indeterminate {
                lookup: Lookup::Free,
                ..
            } => Some(free),
            Outcome::Indeterminate { number, reason, .. } => Some(Outcome::Blocked {
                by: last.key.clone(),
                number,
                reason,
            }),
            Outcome::Busy => Some(Outcome::Busy),
            _ => None,
        })
    }

    /// The outcome of voucher `v`, asking ARCA when it is open: its number is consulted before
    /// anything else, and resent (the same request) only when ARCA proves it empty and next.
    pub async fn resolve(&self, v: &ArcaVoucherRow) -> Result<Outcome, IssueError> {
        let req = self.request(v)?;
        match v.state {
            ArcaVoucherState::Authorized => return Ok(authorized(v)),
            ArcaVoucherState::Rejected => {
                return Ok(Outcome::Rejected {
                    number: v.number,
                    errors: serde_json::from_str(v.errors.as_deref().unwrap_or("[]"))
                        .unwrap_or_default(),
                });
            }
            ArcaVoucherState::Conflict => {
                return Ok(Outcome::Conflict {
                    number: v.number,
                    detail: v.detail.clone().unwrap_or_default(),
                });
            }
            ArcaVoucherState::Superseded => return self.superseded(v, &req).await,
            ArcaVoucherState::Reserved | ArcaVoucherState::Unknown => {}
        }
        if v.sending_until.is_some_and(|t| t > Utc::now()) {
            // Its sender may still be talking to ARCA: asking now could race its answer.
            return Ok(Outcome::Busy);
        }
        let indeterminate = |e: WsfeError| Outcome::Indeterminate {
            number: v.number,
            reason: e.to_string(),
            lookup: Lookup::Unanswered,
        };
        match self.wsfe.consult(self.pto_vta, self.tipo, v.number).await {
            Err(e) => Ok(indeterminate(e)),
            Ok(Some(found)) => self.found(v, &req, &found).await,
            Ok(None) => match self.wsfe.last_authorized(self.pto_vta, self.tipo).await {
                Err(e) => Ok(indeterminate(e)),
                Ok(last) => self.empty(v, last).await,
            },
        }
    }

    /// `v`'s number is empty and ARCA's last authorized is `last`. Next (`last + 1`): the
    /// same request is sent again while an earlier send may still land, else the number is
    /// free for good. Further up, behind our own open claims from `last + 1` (a batch whose
    /// answer was lost): it waits for them while any of them may still be sent or land, else
    /// the whole run is free for good (the barrier takes it at once). Anything else is for a
    /// human.
    async fn empty(&self, v: &ArcaVoucherRow, last: i64) -> Result<Outcome, IssueError> {
        let open = self.db.arca_open_above(self.seq(), last).await?;
        let run: Vec<&ArcaVoucherRow> = open.iter().take_while(|c| c.number <= v.number).collect();
        let ours = run.iter().zip(last + 1..).all(|(c, n)| c.number == n)
            && run.last().is_some_and(|c| c.key == v.key);
        if !ours {
            return Ok(Outcome::Indeterminate {
                number: v.number,
                reason: format!(
                    "number {} is empty but ARCA's last authorized is {last}: a human must \
                     look at the sequence",
                    v.number
                ),
                lookup: Lookup::Unanswered,
            });
        }
        let free = Outcome::Indeterminate {
            number: v.number,
            reason: format!(
                "number {} is empty and {} at ARCA, and no send of it can land any more: it is \
                 never sent again, the next key takes the number",
                v.number,
                if run.len() == 1 {
                    "next"
                } else {
                    "behind our own empty claims"
                }
            ),
            lookup: Lookup::Free,
        };
        if run.len() > 1 {
            let now = Utc::now();
            let busy =
                |c: &&ArcaVoucherRow| c.sending_until.is_some_and(|t| t > now) || self.may_land(c);
            if run.iter().any(busy) {
                return Ok(Outcome::Indeterminate {
                    number: v.number,
                    reason: format!(
                        "number {} waits for number {} ({}) to be settled first",
                        v.number,
                        last + 1,
                        run[0].key
                    ),
                    lookup: Lookup::Unanswered,
                });
            }
            return Ok(free);
        }
        if !self.may_land(v) {
            return Ok(free);
        }
        // The same stored requests again at the same numbers: `v` and the open claims right
        // after it that may still land too (the rest of a batch that never reached ARCA), as
        // far as each can be claimed.
        let now = Utc::now();
        let (until, landing) = (now + self.send_window, now + self.landing_window);
        let Some(v) = self.db.arca_claim_send(&v.key, until, landing).await? else {
            return Ok(Outcome::Busy);
        };
        let from = v.number;
        let mut resend = vec![v];
        for c in open.iter().filter(|c| c.number > from) {
            if c.number != resend[resend.len() - 1].number + 1 || !self.may_land(c) {
                break;
            }
            match self.db.arca_claim_send(&c.key, until, landing).await? {
                Some(c) => resend.push(c),
                None => break,
            }
        }
        self.send_many(&resend, false).await.remove(0)
    }

    /// Whether a send of `v` may still reach ARCA.
    pub(super) fn may_land(&self, v: &ArcaVoucherRow) -> bool {
        v.landing_until.is_some_and(|t| t > Utc::now())
    }

    /// A repeat of a superseded key: never sent again. Its number is consulted once, so that
    /// the sale goes on under a new key only when ARCA shows this attempt's voucher is not
    /// there (its number holds the superseding key's voucher, or another one, or nothing).
    async fn superseded(&self, v: &ArcaVoucherRow, req: &Request) -> Result<Outcome, IssueError> {
        let by = v.superseded_by.clone().unwrap_or_default();
        let unanswered = |reason: String| Outcome::Indeterminate {
            number: v.number,
            reason,
            lookup: Lookup::Unanswered,
        };
        let found = match self.wsfe.consult(self.pto_vta, self.tipo, v.number).await {
            Err(e) => return Ok(unanswered(format!("superseded by {by}; consulting: {e}"))),
            Ok(found) => found,
        };
        let mine = found.as_ref().is_some_and(|f| f.matches(req));
        // The same sale under its next key sends equal fields: what is found may be its.
        let successors = match self.db.arca_voucher(&by).await? {
            Some(s) if s.number == v.number => {
                let theirs = self.request(&s)?;
                found.as_ref().is_some_and(|f| f.matches(&theirs))
            }
            _ => false,
        };
        if mine && !successors {
            // A send of this attempt landed after all: its sale must not be issued again.
            return Ok(unanswered(format!(
                "superseded by {by}, yet ARCA holds this key's voucher at number {}: a human \
                 must look at the sequence",
                v.number
            )));
        }
        Ok(Outcome::Indeterminate {
            number: v.number,
            reason: format!("superseded by {by}"),
            lookup: Lookup::Superseded { by },
        })
    }

    /// ARCA holds a voucher at `v`'s number: ours if it is what we sent.
    pub(super) async fn found(
        &self,
        v: &ArcaVoucherRow,
        req: &Request,
        found: &Found,
    ) -> Result<Outcome, IssueError> {
        if found.matches(req) {
            let due = found.cae.due.to_string();
            if !self
                .db
                .arca_authorized(&v.key, &found.cae.code, &due, "[]", true)
                .await?
            {
                return self.reread(&v.key).await;
            }
            return Ok(Outcome::Authorized {
                number: v.number,
                cae: found.cae.clone(),
                recovered: true,
            });
        }
        let detail = format!(
            "ARCA holds another voucher at number {}: DocTipo {} DocNro {} CbteFch {} ImpTotal {} \
             CAE {}",
            v.number,
            found.doc_tipo,
            found.doc_nro,
            found.cbte_fch,
            found.imp_total,
            found.cae.code
        );
        self.db
            .arca_settle(&v.key, ArcaVoucherState::Conflict, None, Some(&detail))
            .await?;
        self.reread(&v.key).await
    }

    /// Settles `v` as rejected; if another instance settled it first, its outcome instead.
    pub(super) async fn rejected(
        &self,
        v: &ArcaVoucherRow,
        errors: &[Message],
    ) -> Result<Outcome, IssueError> {
        self.db
            .arca_settle(
                &v.key,
                ArcaVoucherState::Rejected,
                Some(&json(errors)),
                None,
            )
            .await?;
        self.reread(&v.key).await
    }

    pub(super) async fn unknown(
        &self,
        v: &ArcaVoucherRow,
        e: &WsfeError,
    ) -> Result<Outcome, IssueError> {
        tracing::warn!(key = %v.key, number = v.number, error = %e, "ARCA outcome unknown");
        self.db.arca_unknown(&v.key, &e.to_string()).await?;
        Ok(Outcome::Indeterminate {
            number: v.number,
            reason: e.to_string(),
            lookup: Lookup::Unanswered,
        })
    }

    /// The outcome as stored now (another instance settled it first).
    pub(super) async fn reread(&self, key: &str) -> Result<Outcome, IssueError> {
        let v = self
            .db
            .arca_voucher(key)
            .await?
            .ok_or_else(|| IssueError::Corrupt(key.to_owned(), "vanished".into()))?;
        if v.state.is_open() {
            return Ok(Outcome::Indeterminate {
                number: v.number,
                reason: v.detail.unwrap_or_default(),
                lookup: Lookup::Unanswered,
            });
        }
        Box::pin(self.resolve(&v)).await
    }

    /// The exact request stored for `v`.
    pub(super) fn request(&self, v: &ArcaVoucherRow) -> Result<Request, IssueError> {
        let corrupt = |e: String| IssueError::Corrupt(v.key.clone(), e);
        Ok(Request {
            pto_vta: v.pto_vta,
            cbte_tipo: CbteTipo::from_code(v.cbte_tipo)
                .ok_or_else(|| corrupt(format!("CbteTipo {}", v.cbte_tipo)))?,
            number: v.number,
            cbte_fch: v.cbte_fch.parse().map_err(|e| corrupt(format!("{e}")))?,
            input: serde_json::from_str(&v.input).map_err(|e| corrupt(e.to_string()))?,
        })
    }
}

pub(super) fn authorized(v: &ArcaVoucherRow) -> Outcome {
    Outcome::Authorized {
        number: v.number,
        cae: Cae {
            code: v.cae.clone().unwrap_or_default(),
            due: v
                .cae_due
                .as_deref()
                .and_then(|d| d.parse().ok())
                .unwrap_or_default(),
        },
        recovered: v.recovered,
    }
}
