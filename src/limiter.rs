//! Attempts per client address within a sliding window, in this process: the admin's login
//! limiter and the portal's look-up limiter. An attempt is counted when it starts, before the
//! work it guards, so parallel attempts cannot all slip through. Memory is bounded: expired
//! attempts are dropped on every call (oldest first, from one time-ordered queue), and at most
//! [`MAX_CLIENTS`] clients are tracked, the one whose oldest attempt is oldest giving way first.
//!
//! Clients are counted by [`crate::proxy::limiter_key`] (an IPv6 /64 is one client); callers
//! pass the real client ([`crate::proxy::TrustedProxies::client`]), not a proxy's address.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Clients tracked at once by a limiter.
pub const MAX_CLIENTS: usize = 10_000;

/// `max` attempts per client within `window`.
#[derive(Debug)]
pub struct RateLimiter {
    max: usize,
    window: Duration,
    inner: Mutex<LimiterState>,
}

#[derive(Debug, Default)]
struct LimiterState {
    /// Per client (its [`crate::proxy::limiter_key`]): the sequence numbers and times of its
    /// attempts still in the window, oldest first.
    clients: HashMap<IpAddr, VecDeque<(u64, Instant)>>,
    /// Every counted attempt in order: (sequence, client, time).
    queue: VecDeque<(u64, IpAddr, Instant)>,
    next: u64,
}

impl LimiterState {
    /// Drops what left the window; then, while over `max_clients` clients (or that many
    /// clients' worth of attempts), the client with the oldest attempt.
    fn prune(&mut self, now: Instant, window: Duration, per_client: usize, max_clients: usize) {
        while let Some(&(seq, ip, at)) = self.queue.front() {
            let expired = now.duration_since(at) >= window;
            let over = self.clients.len() > max_clients
                || self.queue.len() > max_clients.saturating_mul(per_client);
            if !expired && !over {
                break;
            }
            self.queue.pop_front();
            let Some(list) = self.clients.get_mut(&ip) else {
                continue;
            };
            // Entries of a client cleared since (forgotten, evicted) match nothing.
            if list.front().is_some_and(|(s, _)| *s == seq) {
                if expired {
                    list.pop_front();
                } else {
                    list.clear();
                }
                if list.is_empty() {
                    self.clients.remove(&ip);
                }
            }
        }
    }
}

impl RateLimiter {
    pub fn new(max: usize, window: Duration) -> Self {
        RateLimiter {
            max: max.max(1),
            window,
            inner: Mutex::new(LimiterState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LimiterState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait(&self, list: &VecDeque<(u64, Instant)>, now: Instant) -> Option<Duration> {
        (list.len() >= self.max).then(|| {
            list.front().map_or(self.window, |(_, first)| {
                self.window.saturating_sub(now.duration_since(*first))
            })
        })
    }

    /// `Some(wait)` when `ip` has used up its attempts (nothing is counted).
    pub fn blocked(&self, ip: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let mut st = self.state();
        st.prune(now, self.window, self.max, MAX_CLIENTS);
        st.clients
            .get(&crate::proxy::limiter_key(ip))
            .and_then(|list| self.wait(list, now))
    }

    /// Counts an attempt by `ip`, or refuses it with the wait when its attempts are used up.
    pub fn attempt(&self, ip: IpAddr) -> Result<(), Duration> {
        self.attempt_bounded(ip, MAX_CLIENTS)
    }

    fn attempt_bounded(&self, ip: IpAddr, max_clients: usize) -> Result<(), Duration> {
        let key = crate::proxy::limiter_key(ip);
        let now = Instant::now();
        let mut st = self.state();
        st.prune(now, self.window, self.max, max_clients);
        if let Some(wait) = st.clients.get(&key).and_then(|list| self.wait(list, now)) {
            return Err(wait);
        }
        let seq = st.next;
        st.next += 1;
        st.clients.entry(key).or_default().push_back((seq, now));
        st.queue.push_back((seq, key, now));
        // A new client may have made one too many.
        st.prune(now, self.window, self.max, max_clients);
        Ok(())
    }

    /// Clears the attempts of `ip` (a successful login).
    pub fn forget(&self, ip: IpAddr) {
        self.state().clients.remove(&crate::proxy::limiter_key(ip));
    }

    /// Clients tracked now (for tests and diagnostics).
    pub fn tracked(&self) -> usize {
        self.state().clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 5;
    const WINDOW: Duration = Duration::from_secs(15 * 60);

    #[test]
    fn attempts_are_counted_before_the_work_they_guard() {
        let l = RateLimiter::new(MAX, WINDOW);
        let ip = IpAddr::from([10, 0, 0, 1]);
        for _ in 0..MAX {
            assert!(l.blocked(ip).is_none());
            assert!(l.attempt(ip).is_ok());
        }
        // The next attempt is refused before any work is done.
        assert!(l.blocked(ip).is_some());
        assert!(l.attempt(ip).is_err());
        assert!(l.blocked(IpAddr::from([10, 0, 0, 2])).is_none());
        l.forget(ip);
        assert!(l.blocked(ip).is_none());
    }

    #[test]
    fn a_limiter_never_tracks_more_than_its_bound() {
        let l = RateLimiter::new(MAX, WINDOW);
        for i in 0..500u32 {
            assert!(
                l.attempt_bounded(IpAddr::from(i.to_be_bytes()), 100)
                    .is_ok()
            );
            assert!(l.tracked() <= 100, "{} clients tracked", l.tracked());
        }
        assert!(l.state().queue.len() <= 100 * MAX);
        // The newest clients are the ones kept, with their counts.
        let last = IpAddr::from(499u32.to_be_bytes());
        for _ in 1..MAX {
            assert!(l.attempt_bounded(last, 100).is_ok());
        }
        assert!(l.attempt_bounded(last, 100).is_err());
        // A client forgotten and coming back is counted afresh, not by its old entries still
        // in the queue.
        let again = IpAddr::from(498u32.to_be_bytes());
        l.forget(again);
        for _ in 0..MAX {
            assert!(l.attempt_bounded(again, 100).is_ok());
        }
        assert!(l.attempt_bounded(again, 100).is_err());
        // One IPv6 /64 is one client.
        let a: IpAddr = "2001:db8:0:1::1".parse().expect("v6");
        let b: IpAddr = "2001:db8:0:1::2".parse().expect("v6");
        for _ in 0..MAX {
            assert!(l.attempt(a).is_ok());
        }
        assert!(l.attempt(b).is_err());
    }

    #[test]
    fn expired_attempts_are_dropped_on_every_call() {
        let mut st = LimiterState::default();
        let long_ago = Instant::now()
            .checked_sub(WINDOW + Duration::from_secs(1))
            .expect("an instant 15 minutes back");
        for i in 0..50u32 {
            let ip = IpAddr::from(i.to_be_bytes());
            st.clients
                .entry(ip)
                .or_default()
                .push_back((u64::from(i), long_ago));
            st.queue.push_back((u64::from(i), ip, long_ago));
        }
        st.next = 50;
        let l = RateLimiter {
            max: MAX,
            window: WINDOW,
            inner: Mutex::new(st),
        };
        assert!(l.blocked(IpAddr::from([192, 0, 2, 1])).is_none());
        assert_eq!(l.tracked(), 0);
        assert!(l.state().queue.is_empty());
    }
}
