//! Fault injection: what the sandbox does wrong, on purpose, reproducibly.
//!
//! A spec is a comma-separated list of `name[=value][:param=value]…`, e.g.
//!
//! ```text
//! seed=7,latency=20ms..200ms,status500=0.1,status503=0.05,status429=0.05:retry_after=2,
//! reset=0.02,lose_response=0.2:mode=drop,lose_late=2m,outage=10s..20s,recover_outage=5s..60s,
//! recover_unavailable=0.5,status_unavailable=1,slow_cancel=3s,ingest=16m,token_ttl=30s,
//! customid_window=72h,empty_307=0.5,stamped_lag=4s..8s
//! ```
//!
//! | item | effect |
//! |---|---|
//! | `seed=N` | seeds the random draws (same seed, same sequence of faults) |
//! | `latency=D` or `D1..D2` | every PAC answer leaves D (uniform in D1..D2) after its request arrived; the sandbox's own work is done within D |
//! | `status500=P`, `status503=P` | stamp/cancel fail with that status **before** processing |
//! | `status429=P[:retry_after=S]` | 429 with `Retry-After: S` (default 1) before processing |
//! | `reset=P` | the connection is dropped before processing |
//! | `lose_response=P[:mode=drop\|hang][:hang=D]` | the stamp **is committed**, then the connection is dropped (`drop`) or the answer held for D (`hang`, default 120s) so the client times out |
//! | `lose_late=D` | the answer of every stamp committed less than D before its Fecha's 72-hour window closes is lost (dropped): answers lost at the window's edge |
//! | `malformed=P` | the stamp is committed, then the answer is broken JSON |
//! | `outage=A..B` | between A and B after start every PAC endpoint answers 503 (repeatable) |
//! | `recover_outage=A..B` | between A and B after start the sandbox cannot answer for stamps it issued: every way of asking (below) answers 503, while new documents are stamped (repeatable) |
//! | `recover_unavailable=P` | asking for a stamp answers 503: recover by UUID (SW's datawarehouse, Finkok's `get_xml`), Finkok's `stamped`, and a resend of a document or `customid` already stamped (SW's way to recover, answered `307`/`CFDI3307` otherwise) |
//! | `status_unavailable=P` | the SAT status service answers 503 |
//! | `slow_cancel=D` | cancellation answers take D |
//! | `ingest=D` | a new UUID is unknown to cancel and status for D (real SAT: minutes) |
//! | `token_ttl=D` | lifetime of auth tokens (default 2h) |
//! | `customid_window=D` | how long a `customid` is remembered (default 72h) |
//! | `unregistered_rfc=RFC` | that receptor RFC is not in SAT's registry: stamps for it are rejected with `CFDI40143` (repeatable) |
//! | `empty_307=P` | Finkok: a repeated `stamp` answers `307` with empty `xml` and `UUID` |
//! | `stamped_lag=D` or `D1..D2` | Finkok: a stamp is invisible to `stamped` (`603`) for D after it was issued (each stamp draws its own lag from the range, stably) |
//!
//! Durations: `250ms`, `2s`, `5m`, `2h`, `3d`, or plain seconds. Probabilities: 0 to 1.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoseMode {
    Drop,
    Hang(Duration),
}

/// A parsed fault spec.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    pub seed: u64,
    pub latency: (Duration, Duration),
    pub status500: f64,
    pub status503: f64,
    pub status429: f64,
    pub retry_after: u64,
    pub reset: f64,
    pub lose_response: f64,
    pub lose_mode: LoseMode,
    /// Answers of stamps this close to their window's end are lost.
    pub lose_late: Duration,
    pub malformed: f64,
    pub outages: Vec<(Duration, Duration)>,
    /// Windows in which nothing already stamped can be asked for.
    pub recover_outages: Vec<(Duration, Duration)>,
    pub recover_unavailable: f64,
    pub status_unavailable: f64,
    pub slow_cancel: Duration,
    pub ingest: Duration,
    pub token_ttl: Duration,
    pub customid_window: Duration,
    /// Receptor RFCs treated as absent from SAT's registry (the data a PAC checks and we cannot).
    pub unregistered_rfcs: Vec<String>,
    pub empty_307: f64,
    pub stamped_lag: (Duration, Duration),
    /// The spec as written.
    pub text: String,
}

impl Default for FaultSpec {
    fn default() -> Self {
        Self {
            seed: 0,
            latency: (Duration::ZERO, Duration::ZERO),
            status500: 0.0,
            status503: 0.0,
            status429: 0.0,
            retry_after: 1,
            reset: 0.0,
            lose_response: 0.0,
            lose_mode: LoseMode::Drop,
            lose_late: Duration::ZERO,
            malformed: 0.0,
            outages: Vec::new(),
            recover_outages: Vec::new(),
            recover_unavailable: 0.0,
            status_unavailable: 0.0,
            slow_cancel: Duration::ZERO,
            ingest: Duration::ZERO,
            token_ttl: Duration::from_secs(2 * 3600),
            customid_window: Duration::from_secs(72 * 3600),
            unregistered_rfcs: Vec::new(),
            empty_307: 0.0,
            stamped_lag: (Duration::ZERO, Duration::ZERO),
            text: String::new(),
        }
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.text.is_empty() {
            "none"
        } else {
            &self.text
        })
    }
}

/// Parses `250ms`, `2s`, `5m`, `2h`, `3d` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (ms, s, m, h, d)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is not a duration"))
}

fn parse_range(s: &str) -> Result<(Duration, Duration), String> {
    match s.split_once("..") {
        Some((a, b)) => {
            let (a, b) = (parse_duration(a)?, parse_duration(b)?);
            if a > b {
                return Err(format!("`{s}`: the range is reversed"));
            }
            Ok((a, b))
        }
        None => {
            let d = parse_duration(s)?;
            Ok((d, d))
        }
    }
}

fn parse_p(name: &str, v: &str) -> Result<f64, String> {
    let p: f64 = v
        .parse()
        .map_err(|_| format!("{name}: `{v}` is not a probability"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{name}: {p} is not between 0 and 1"))
    }
}

impl FaultSpec {
    pub fn parse(spec: &str) -> Result<FaultSpec, String> {
        let mut f = FaultSpec {
            text: spec.trim().to_owned(),
            ..FaultSpec::default()
        };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let mut parts = item.split(':');
            let head = parts.next().unwrap_or_default();
            let (name, value) = head.split_once('=').unwrap_or((head, ""));
            let params: Vec<(&str, &str)> = parts
                .map(|p| p.split_once('=').unwrap_or((p, "")))
                .collect();
            let param = |k: &str| params.iter().find(|(pk, _)| *pk == k).map(|(_, v)| *v);
            if let Some((k, _)) = params.iter().find(|(k, _)| {
                !matches!(
                    (name, *k),
                    ("status429", "retry_after") | ("lose_response", "mode" | "hang")
                )
            }) {
                return Err(format!("{name}: unknown parameter `{k}`"));
            }
            match name {
                "seed" => {
                    f.seed = value
                        .parse()
                        .map_err(|_| format!("seed: `{value}` is not a number"))?
                }
                "latency" => f.latency = parse_range(value)?,
                "status500" => f.status500 = parse_p(name, value)?,
                "status503" => f.status503 = parse_p(name, value)?,
                "status429" => {
                    f.status429 = parse_p(name, value)?;
                    if let Some(r) = param("retry_after") {
                        f.retry_after = r
                            .parse()
                            .map_err(|_| format!("retry_after: `{r}` is not seconds"))?;
                    }
                }
                "reset" => f.reset = parse_p(name, value)?,
                "lose_response" => {
                    f.lose_response = parse_p(name, value)?;
                    let hang = param("hang")
                        .map(parse_duration)
                        .transpose()?
                        .unwrap_or(Duration::from_secs(120));
                    f.lose_mode = match param("mode") {
                        None | Some("drop") => LoseMode::Drop,
                        Some("hang") => LoseMode::Hang(hang),
                        Some(m) => {
                            return Err(format!("lose_response: unknown mode `{m}` (drop, hang)"));
                        }
                    };
                }
                "lose_late" => f.lose_late = parse_duration(value)?,
                "malformed" => f.malformed = parse_p(name, value)?,
                "outage" => f.outages.push(parse_range(value)?),
                "recover_outage" => f.recover_outages.push(parse_range(value)?),
                "recover_unavailable" => f.recover_unavailable = parse_p(name, value)?,
                "status_unavailable" => f.status_unavailable = parse_p(name, value)?,
                "slow_cancel" => f.slow_cancel = parse_duration(value)?,
                "ingest" => f.ingest = parse_duration(value)?,
                "token_ttl" => f.token_ttl = parse_duration(value)?,
                "customid_window" => f.customid_window = parse_duration(value)?,
                "unregistered_rfc" => f.unregistered_rfcs.push(value.trim().to_uppercase()),
                "empty_307" => f.empty_307 = parse_p(name, value)?,
                "stamped_lag" => f.stamped_lag = parse_range(value)?,
                _ => return Err(format!("unknown fault `{name}`")),
            }
        }
        Ok(f)
    }
}

/// What to do before processing a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    Proceed,
    Status(u16, Option<u64>),
    Reset,
}

/// What to do with the answer of a committed stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Answer,
    Lose(LoseMode),
    Malformed,
}

/// The live faults: the spec plus its seeded random source.
#[derive(Debug)]
pub struct Faults {
    spec: FaultSpec,
    rng: Mutex<StdRng>,
    started: Instant,
}

impl Faults {
    pub fn new(spec: FaultSpec) -> Self {
        let rng = StdRng::seed_from_u64(spec.seed);
        Self {
            spec,
            rng: Mutex::new(rng),
            started: Instant::now(),
        }
    }

    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    fn draw(&self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rng.random_bool(p.min(1.0))
    }

    /// Whether an outage window is open now.
    pub fn in_outage(&self) -> bool {
        Self::open(&self.spec.outages, self.started.elapsed())
    }

    fn open(windows: &[(Duration, Duration)], t: Duration) -> bool {
        windows.iter().any(|(a, b)| *a <= t && t < *b)
    }

    pub fn latency(&self) -> Duration {
        let (a, b) = self.spec.latency;
        if a == b {
            return a;
        }
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Duration::try_from_secs_f64(rng.random_range(a.as_secs_f64()..b.as_secs_f64())).unwrap_or(a)
    }

    /// Failures before processing (stamp and cancel).
    pub fn before(&self) -> Before {
        let s = &self.spec;
        if self.draw(s.reset) {
            Before::Reset
        } else if self.draw(s.status500) {
            Before::Status(500, None)
        } else if self.draw(s.status503) {
            Before::Status(503, None)
        } else if self.draw(s.status429) {
            Before::Status(429, Some(s.retry_after))
        } else {
            Before::Proceed
        }
    }

    /// What happens to the answer of a stamp that was committed `window_left` before its
    /// Fecha's window closes.
    pub fn after_stamp(&self, window_left: Option<chrono::TimeDelta>) -> After {
        let late = window_left
            .zip(chrono::TimeDelta::from_std(self.spec.lose_late).ok())
            .is_some_and(|(left, limit)| left < limit);
        if late {
            After::Lose(LoseMode::Drop)
        } else if self.draw(self.spec.lose_response) {
            After::Lose(self.spec.lose_mode)
        } else if self.draw(self.spec.malformed) {
            After::Malformed
        } else {
            After::Answer
        }
    }

    /// Whether this question about an earlier stamp goes unanswered (503): a recover outage is
    /// open, or `recover_unavailable` draws.
    pub fn recover_unavailable(&self) -> bool {
        Self::open(&self.spec.recover_outages, self.started.elapsed())
            || self.draw(self.spec.recover_unavailable)
    }

    pub fn status_unavailable(&self) -> bool {
        self.draw(self.spec.status_unavailable)
    }

    /// Finkok: whether this repeated `stamp` answers `307` without the previous stamp.
    pub fn empty_307(&self) -> bool {
        self.draw(self.spec.empty_307)
    }

    /// Finkok: how long the stamp `uuid` stays invisible to `stamped`. Drawn from the
    /// `stamped_lag` range by the UUID itself, so every lookup of one stamp sees the same lag.
    pub fn stamped_lag(&self, uuid: &str) -> Duration {
        let (a, b) = self.spec.stamped_lag;
        if a == b {
            return a;
        }
        let h = uuid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, c| {
            (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
        });
        // FNV-1a of the UUID, as a fraction of the range.
        let frac = (h % 10_000) as f64 / 10_000.0;
        a + (b - a).mul_f64(frac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_reads_as_documented() {
        let f = FaultSpec::parse(
            "seed=7,latency=50ms,lose_response=0.2,status500=0.1,status429=0.05:retry_after=2,outage=10s..20s,ingest=16m",
        )
        .unwrap();
        assert_eq!(f.seed, 7);
        assert_eq!(
            f.latency,
            (Duration::from_millis(50), Duration::from_millis(50))
        );
        assert_eq!(f.retry_after, 2);
        assert_eq!(
            f.outages,
            vec![(Duration::from_secs(10), Duration::from_secs(20))]
        );
        assert_eq!(f.ingest, Duration::from_secs(960));
        let lag = Faults::new(FaultSpec::parse("stamped_lag=4s..8s,empty_307=1").unwrap());
        let d = lag.stamped_lag("6F1C0B6E-0000-4000-8000-000000000001");
        assert!(
            d >= Duration::from_secs(4) && d <= Duration::from_secs(8),
            "{d:?}"
        );
        assert_eq!(d, lag.stamped_lag("6F1C0B6E-0000-4000-8000-000000000001"));
        assert!(lag.empty_307());
        let f = FaultSpec::parse("recover_outage=0s..1h,lose_late=2m").unwrap();
        assert_eq!(f.lose_late, Duration::from_secs(120));
        let live = Faults::new(f);
        assert!(live.recover_unavailable(), "inside the recover outage");
        assert!(!live.in_outage(), "stamping itself is up");
        assert_eq!(
            live.after_stamp(Some(chrono::TimeDelta::seconds(30))),
            After::Lose(LoseMode::Drop)
        );
        assert_eq!(
            live.after_stamp(Some(chrono::TimeDelta::hours(71))),
            After::Answer
        );
        assert!(FaultSpec::parse("status500=2").is_err());
        assert!(FaultSpec::parse("nonsense=1").is_err());
        assert!(FaultSpec::parse("status500=0.1:retry_after=2").is_err());
        assert!(matches!(
            FaultSpec::parse("lose_response=1:mode=hang:hang=5s").unwrap().lose_mode,
            LoseMode::Hang(d) if d == Duration::from_secs(5)
        ));
    }

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let spec = FaultSpec::parse("seed=42,status500=0.3,status503=0.3").unwrap();
        let run = || {
            let f = Faults::new(spec.clone());
            (0..50).map(|_| f.before()).collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.contains(&Before::Proceed) && a.contains(&Before::Status(500, None)));
    }
}
