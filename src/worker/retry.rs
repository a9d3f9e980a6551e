//! When to try again: exponential backoff with jitter, capped, honouring Retry-After.

use std::time::Duration;

/// The retry schedule, from `[worker]`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Delay before the second attempt; doubles each attempt after.
    pub base: Duration,
    /// No delay grows past this.
    pub cap: Duration,
    /// After this many attempts a retryable failure becomes `failed` (a dead letter). Only
    /// definite answers end a row: an unknown outcome is asked for however many attempts it
    /// takes (and the count starts over once the PAC confirms nothing was stamped).
    pub max_attempts: i32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(2),
            cap: Duration::from_secs(600),
            max_attempts: 10,
        }
    }
}

/// The longest Retry-After we accept from a PAC; a larger one is clamped (an hour of silence is
/// already an outage the dashboard should show).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The longest wait between two questions about an unknown outcome, whatever `cap` says: the
/// PAC may hold a stamp the caller is waiting for.
pub const MAX_UNKNOWN_DELAY: Duration = Duration::from_secs(3600);

impl RetryPolicy {
    /// The delay after `attempts` attempts (1 = the first failed). Full exponential growth,
    /// then a random factor in [0.5, 1) so that many rows failing together do not retry
    /// together; a PAC's Retry-After is a floor.
    pub fn delay(&self, attempts: i32, retry_after: Option<Duration>) -> Duration {
        let exp = u32::try_from(attempts.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
        let raw = self
            .base
            .saturating_mul(2u32.saturating_pow(exp))
            .min(self.cap);
        let jittered = raw.mul_f64(rand::random_range(0.5..1.0));
        match retry_after {
            Some(ra) => jittered.max(ra.min(MAX_RETRY_AFTER)),
            None => jittered,
        }
    }

    /// The delay before asking again about an outcome still unknown after `attempts`: the same
    /// growth, never more than [`MAX_UNKNOWN_DELAY`].
    pub fn delay_unknown(&self, attempts: i32) -> Duration {
        self.delay(attempts, None).min(MAX_UNKNOWN_DELAY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_with_jitter_and_a_cap() {
        let p = RetryPolicy::default();
        for attempts in 1..=20 {
            let d = p.delay(attempts, None);
            let full = (p.base * 2u32.pow(u32::try_from(attempts - 1).expect("small"))).min(p.cap);
            assert!(
                d <= full && d >= full / 2,
                "attempt {attempts}: {d:?} vs {full:?}"
            );
        }
        assert!(p.delay(30, None) <= p.cap);
    }

    #[test]
    fn an_unknown_outcome_is_asked_for_at_least_hourly_whatever_the_cap() {
        let p = RetryPolicy {
            cap: Duration::from_secs(86_400),
            ..RetryPolicy::default()
        };
        for attempts in [1, 12, 13, 40, 10_000] {
            assert!(p.delay_unknown(attempts) <= MAX_UNKNOWN_DELAY, "{attempts}");
        }
        assert!(
            p.delay(20, None) > MAX_UNKNOWN_DELAY,
            "the cap itself is larger"
        );
        assert!(p.delay_unknown(1) <= Duration::from_secs(2));
    }

    #[test]
    fn retry_after_is_a_floor_but_clamped() {
        let p = RetryPolicy::default();
        assert!(p.delay(1, Some(Duration::from_secs(30))) >= Duration::from_secs(30));
        assert!(p.delay(1, Some(Duration::from_secs(86_400))) <= MAX_RETRY_AFTER);
    }
}
