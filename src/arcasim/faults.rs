//! The sandbox ARCA's faults: ARCA's own switches and the PAC sandbox's timed and random
//! faults ([`crate::pacsim::faults`], same syntax), applied to WSFEv1 (WSAA is another service
//! and keeps answering). A spec is comma-separated, e.g.
//!
//! ```text
//! seed=7,latency=20ms..300ms,status500=0.05,status503=0.05,reset=0.02,lose_response=0.1,
//! outage=20s..30s,recover_outage=40s..45s
//! ```
//!
//! | item | effect |
//! |---|---|
//! | `seed=N` | seeds the random draws (same seed, same sequence of faults) |
//! | `latency=D` or `D1..D2` | every WSFEv1 answer leaves D (uniform in D1..D2) after its request arrived |
//! | `status500=P`, `status503=P` | a WSFEv1 call fails with that status **before** anything is done |
//! | `reset=P` | the connection is dropped before anything is done |
//! | `lose_response=P[:mode=drop\|hang][:hang=D]` | a `FECAESolicitar` that authorized something **is written down**, then its connection dropped (`drop`) or its answer held for D (`hang`, default 120s) |
//! | `malformed=P` | the same, answered with broken XML |
//! | `outage=A..B` | between A and B after the spec was set every WSFEv1 call answers 503 (repeatable) |
//! | `recover_outage=A..B` | between A and B, `FECompConsultar` and `FECompUltimoAutorizado` answer 503 while `FECAESolicitar` works: an unknown outcome cannot be resolved (repeatable) |
//! | `recover_unavailable=P` | the same, at random |
//! | `lose_next=N` | the next N `FECAESolicitar` that authorize something lose their answer |
//! | `hang_next=N` | the next N hold their answer two minutes |
//! | `refuse_next=N` | the next N are refused (10015) as ARCA refuses a buyer its registry does not know |
//! | `down=true\|false` | every WSFEv1 call answers 503 until `down=false` |
//! | `strict_auth=true\|false` | WSFEv1 needs a ticket WSAA handed out |
//! | `ticket_seconds=N` | WSAA tickets live N seconds (ARCA: 12 h) |
//! | `ptos_venta=N+M+…` | what `FEParamGetPtosVenta` lists (1 to 20 by default) |
//! | `reg_x_req=N` | what `FECompTotXRequest` answers, the most vouchers per `FECAESolicitar` (250 by default) |
//!
//! Set at start (`arca-sim --faults`) or at runtime (`PUT /_sim/faults`, read back with
//! `GET`). ARCA's switches change only those named; a spec with any timed or random item
//! replaces them all (windows count from then); `none` clears both (not `strict_auth`,
//! `ticket_seconds`, `ptos_venta` nor `reg_x_req`). The sandbox's clock starts again at a restart, so a
//! restarted sandbox is given the windows still ahead.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{ArcaSim, take};
use crate::pacsim::faults::{After, Before, FaultSpec, Faults, LoseMode};

/// The PAC sandbox's items that mean something to WSFEv1.
const TIMED: &[&str] = &[
    "seed",
    "latency",
    "status500",
    "status503",
    "reset",
    "lose_response",
    "malformed",
    "outage",
    "recover_outage",
    "recover_unavailable",
];

/// What a fault makes of a WSFEv1 call before it is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Proceed,
    /// Answer with this HTTP status, doing nothing.
    Status(u16),
    /// Drop the connection, doing nothing.
    Reset,
}

/// What becomes of the answer of a `FECAESolicitar` that authorized something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Answer,
    Drop,
    Hold(Duration),
    Malformed,
}

/// No timed or random fault.
pub(super) fn no_faults() -> Arc<Faults> {
    Arc::new(Faults::new(FaultSpec::default()))
}

impl ArcaSim {
    /// Applies a fault spec (see the module's table).
    pub fn set_faults(&self, spec: &str) -> Result<(), String> {
        let spec = spec.trim();
        if spec.is_empty() || spec == "none" {
            self.lose_next.store(0, Ordering::SeqCst);
            self.hang_next.store(0, Ordering::SeqCst);
            self.refuse_next.store(0, Ordering::SeqCst);
            self.down.store(false, Ordering::SeqCst);
            *self.timed.write().unwrap_or_else(|p| p.into_inner()) = no_faults();
            return Ok(());
        }
        let mut timed = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            let bad = || format!("{name}={value}");
            match name {
                "lose_next" => self
                    .lose_next
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                "down" => self
                    .down
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                "refuse_next" => self
                    .refuse_next
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                "hang_next" => self
                    .hang_next
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                "ptos_venta" => {
                    let points = value
                        .split('+')
                        .map(|n| n.parse().map_err(|_| bad()))
                        .collect::<Result<Vec<i32>, _>>()?;
                    *self.ptos_venta.lock().unwrap_or_else(|p| p.into_inner()) = points;
                }
                "strict_auth" => self
                    .strict_auth
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                "ticket_seconds" => self
                    .ticket_seconds
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                "reg_x_req" => self
                    .max_records
                    .store(value.parse().map_err(|_| bad())?, Ordering::SeqCst),
                _ if TIMED.contains(&name.split(':').next().unwrap_or(name)) => timed.push(part),
                _ => return Err(format!("unknown fault {part:?}")),
            }
        }
        if !timed.is_empty() {
            let spec = FaultSpec::parse(&timed.join(","))?;
            *self.timed.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Faults::new(spec));
        }
        Ok(())
    }

    /// The faults in force, as a spec (`GET /_sim/faults`).
    pub fn fault_text(&self) -> String {
        let mut items = Vec::new();
        let n = |a: &std::sync::atomic::AtomicU32| a.load(Ordering::SeqCst);
        if n(&self.lose_next) > 0 {
            items.push(format!("lose_next={}", n(&self.lose_next)));
        }
        if n(&self.refuse_next) > 0 {
            items.push(format!("refuse_next={}", n(&self.refuse_next)));
        }
        if n(&self.hang_next) > 0 {
            items.push(format!("hang_next={}", n(&self.hang_next)));
        }
        if self.down.load(Ordering::SeqCst) {
            items.push("down=true".into());
        }
        if self.strict_auth.load(Ordering::SeqCst) {
            items.push("strict_auth=true".into());
        }
        let timed = self.faults().spec().text.clone();
        if !timed.is_empty() {
            items.push(timed);
        }
        if items.is_empty() {
            "none".into()
        } else {
            items.join(",")
        }
    }

    /// The timed and random faults in force (each call of the server reads them once, so a
    /// change while it is handled does not split its answer).
    pub fn faults(&self) -> Arc<Faults> {
        self.timed.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Before any WSFEv1 call: down, an outage window, or a 5xx or reset drawn.
    pub fn gate(&self, f: &Faults) -> Gate {
        let g = if self.down.load(Ordering::SeqCst) || f.in_outage() {
            Gate::Status(503)
        } else {
            match f.before() {
                Before::Proceed => Gate::Proceed,
                Before::Reset => Gate::Reset,
                Before::Status(code, _) => Gate::Status(code),
            }
        };
        self.count(g != Gate::Proceed);
        g
    }

    /// Whether a question about vouchers already issued (`FECompConsultar`,
    /// `FECompUltimoAutorizado`) goes unanswered (503).
    pub fn recover_unavailable(&self, f: &Faults) -> bool {
        self.count(f.recover_unavailable())
    }

    /// The fate of the answer of a `FECAESolicitar` that authorized something (written down
    /// already): `lose_next` and `hang_next` first, then the random draws.
    pub fn fate(&self, f: &Faults) -> Fate {
        let fate = if take(&self.lose_next) {
            Fate::Drop
        } else if take(&self.hang_next) {
            Fate::Hold(Duration::from_secs(120))
        } else {
            match f.after_stamp(None) {
                After::Answer => Fate::Answer,
                After::Lose(LoseMode::Drop) => Fate::Drop,
                After::Lose(LoseMode::Hang(d)) => Fate::Hold(d),
                After::Malformed => Fate::Malformed,
            }
        };
        self.count(fate != Fate::Answer);
        fate
    }

    fn count(&self, injected: bool) -> bool {
        if injected {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        injected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_mixes_arca_switches_and_the_pac_sandbox_faults() {
        let dir = tempfile::tempdir().unwrap();
        let sim = ArcaSim::open(&dir.path().join("s.jsonl")).unwrap();
        sim.set_faults("strict_auth=true,lose_next=1").unwrap();
        sim.set_faults("seed=3,status500=1,lose_response=1:mode=hang:hang=5s")
            .unwrap();
        assert_eq!(
            sim.fault_text(),
            "lose_next=1,strict_auth=true,seed=3,status500=1,lose_response=1:mode=hang:hang=5s"
        );
        let f = sim.faults();
        assert_eq!(sim.gate(&f), Gate::Status(500));
        assert_eq!(sim.fate(&f), Fate::Drop, "lose_next first");
        assert_eq!(sim.fate(&f), Fate::Hold(Duration::from_secs(5)));
        assert_eq!(sim.injected.load(Ordering::SeqCst), 3);
        sim.set_faults("outage=0s..1h,recover_outage=0s..1h")
            .unwrap();
        let f = sim.faults();
        assert_eq!(sim.gate(&f), Gate::Status(503));
        assert!(sim.recover_unavailable(&f));
        assert_eq!(sim.fate(&f), Fate::Answer, "the window replaced the draws");
        sim.set_faults("none").unwrap();
        assert_eq!(sim.fault_text(), "strict_auth=true");
        assert_eq!(sim.gate(&sim.faults()), Gate::Proceed);
        assert!(sim.set_faults("lose_late=2m").is_err(), "a PAC-only fault");
        assert!(sim.set_faults("status500=2").is_err());
        assert!(sim.set_faults("lose_next=x").is_err());
    }
}
