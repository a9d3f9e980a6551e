//! The sandbox's clock: wall time plus an offset tests move forward (72 h windows, token
//! expiry, ingestion delay, the receptor's acceptance deadline). Mexico City time and SAT's
//! business days come from [`crate::domain::time`].

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Duration, Utc};

// The Mexico City time and business days live in `domain`; the sandbox reads them from here too.
pub use crate::domain::time::{
    add_business_days, end_of_next_business_day, from_local, to_local, to_local_at,
};

/// Wall time shifted by a persisted offset; only ever moves forward.
#[derive(Debug, Default)]
pub struct SimClock {
    offset_secs: AtomicI64,
}

impl SimClock {
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + Duration::seconds(self.offset_secs.load(Ordering::SeqCst))
    }

    pub fn advance(&self, secs: i64) {
        self.offset_secs.fetch_add(secs.max(0), Ordering::SeqCst);
    }

    pub fn offset(&self) -> i64 {
        self.offset_secs.load(Ordering::SeqCst)
    }
}
