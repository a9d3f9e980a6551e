//! Refuses a Mercado Pago delivery whose signed manifest (`data.id`, `x-request-id`, `ts`) was
//! already received: someone who captured one delivery cannot play it again within the
//! timestamp tolerance, when its age alone does not refuse it.
//!
//! In memory and bounded: a restart, or another instance on the same database, forgets the
//! window. That is acceptable because a replay that gets past it is harmless: the body is
//! deduplicated by its notification id, and even with an edited body (the body is not signed)
//! the payment it points to is read from Mercado Pago and deduplicated by payment id, so no
//! second invoice can come of it; the cost is one stored event and one payment fetch.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Manifests remembered at most; the oldest give way first.
pub const MAX_REMEMBERED: usize = 100_000;
/// How long a manifest is remembered when the age of `ts` is not checked (tolerance 0).
pub const WINDOW_WITHOUT_TOLERANCE: i64 = 3600;

#[derive(Debug)]
pub struct ReplayWindow {
    /// Seconds past a manifest's `ts` during which it is remembered.
    window: i64,
    max: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Manifest → the sequence number of the claim that holds it.
    seen: HashMap<String, u64>,
    /// Claims in order: (forget after, sequence, manifest).
    order: VecDeque<(i64, u64, String)>,
    next: u64,
}

/// A manifest being processed. Dropped without [`Claim::keep`] (the delivery was not
/// stored), it is forgotten, so the sender's retry is not taken for a replay.
#[derive(Debug)]
pub struct Claim<'a> {
    window: &'a ReplayWindow,
    key: String,
    seq: u64,
    kept: bool,
}

impl Claim<'_> {
    /// The delivery was stored (or answered): from now on the same manifest is a replay.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let mut st = self.window.lock();
            if st.seen.get(&self.key) == Some(&self.seq) {
                st.seen.remove(&self.key);
            }
        }
    }
}

impl ReplayWindow {
    /// Remembers manifests for `tolerance_seconds` past their `ts` (the age beyond which the
    /// signature check refuses them anyway), or an hour when the age is not checked.
    pub fn new(tolerance_seconds: i64) -> Self {
        Self::with_capacity(tolerance_seconds, MAX_REMEMBERED)
    }

    pub fn with_capacity(tolerance_seconds: i64, max: usize) -> Self {
        let window = if tolerance_seconds > 0 {
            tolerance_seconds
        } else {
            WINDOW_WITHOUT_TOLERANCE
        };
        Self {
            window,
            max: max.max(1),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims the manifest `key` signed at `ts` (seconds); `None` when it was already
    /// received (and stored) or is being processed right now.
    pub fn claim(&self, key: String, ts: i64, now: i64) -> Option<Claim<'_>> {
        let mut st = self.lock();
        while let Some((forget_after, seq, k)) = st.order.front() {
            if *forget_after > now && st.order.len() < self.max {
                break;
            }
            let (seq, k) = (*seq, k.clone());
            st.order.pop_front();
            if st.seen.get(&k) == Some(&seq) {
                st.seen.remove(&k);
            }
        }
        if st.seen.contains_key(&key) {
            return None;
        }
        let seq = st.next;
        st.next += 1;
        st.seen.insert(key.clone(), seq);
        // A future `ts` is remembered from now, so the window is never shorter than `window`.
        let forget_after = ts.max(now).saturating_add(self.window);
        st.order.push_back((forget_after, seq, key.clone()));
        Some(Claim {
            window: self,
            key,
            seq,
            kept: false,
        })
    }

    /// Manifests remembered now.
    pub fn len(&self) -> usize {
        self.lock().seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    // By full path: circles.py reads `super` here as webhooks/mod.rs, an edge that is not there.
    use crate::webhooks::replay::*;

    #[test]
    fn a_kept_manifest_is_refused_until_it_leaves_the_window() {
        let w = ReplayWindow::new(600);
        let c = w.claim("m1".into(), 1000, 1000).expect("first");
        assert!(w.claim("m1".into(), 1000, 1001).is_none(), "in flight");
        c.keep();
        assert!(w.claim("m1".into(), 1000, 1500).is_none(), "replayed");
        assert!(w.claim("m2".into(), 1000, 1500).is_some());
        // Past ts + tolerance it is forgotten (the age check refuses it by then).
        assert!(w.claim("m1".into(), 1000, 1601).is_some());
    }

    #[test]
    fn a_manifest_not_stored_can_come_again() {
        let w = ReplayWindow::new(600);
        drop(w.claim("m1".into(), 1000, 1000).expect("first"));
        let again = w.claim("m1".into(), 1000, 1010).expect("the retry");
        again.keep();
        assert!(w.claim("m1".into(), 1000, 1020).is_none());
    }

    #[test]
    fn memory_is_bounded() {
        let w = ReplayWindow::with_capacity(600, 50);
        for i in 0..1000 {
            w.claim(format!("m{i}"), 1000, 1000).expect("new").keep();
            assert!(w.len() <= 50);
        }
        assert!(w.claim("m999".into(), 1000, 1000).is_none(), "recent kept");
    }
}
