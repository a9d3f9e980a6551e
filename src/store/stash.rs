//! Connections kept out of their sqlx pool between statements. sqlx checks every connection
//! given back to its pool with a ping: a round trip to PostgreSQL, or to a SQLite connection's
//! thread, one more for every statement. A statement takes a connection from the stash (or
//! from the pool when the stash is empty) and puts it back when it ends cleanly.
//!
//! The stash keeps at most half the pool, so whatever acquires from the pool directly (a
//! transaction, a migration) always finds connections there. A connection left in the stash
//! longer than [`STALE_AFTER`] goes back to the pool instead of being used, where it is checked
//! before its next use (the server may have dropped it meanwhile).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};

/// How long a connection may wait in the stash and still be used without a check.
const STALE_AFTER: Duration = Duration::from_secs(10);

/// Connections waiting for the next statement, each with when it was put there; `None` once
/// the stash is closed.
type Idle<DB> = Option<Vec<(PoolConnection<DB>, Instant)>>;

/// Connections of one pool between statements.
#[derive(Debug)]
pub struct Stash<DB: Database> {
    /// `None` once closed: every connection then goes back to the pool.
    idle: Mutex<Idle<DB>>,
    /// At most this many are kept.
    keep: usize,
}

impl<DB: Database> Stash<DB> {
    /// A stash for a pool of at most `pool_max` connections.
    pub fn for_pool(pool_max: u32) -> Self {
        Self {
            idle: Mutex::new(Some(Vec::new())),
            keep: usize::try_from(pool_max / 2).unwrap_or(0),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle<DB>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection used last, else one of `pool`.
    pub async fn take(&self, pool: &Pool<DB>) -> Result<PoolConnection<DB>, sqlx::Error> {
        loop {
            let Some((conn, since)) = self.idle().as_mut().and_then(Vec::pop) else {
                return pool.acquire().await;
            };
            if since.elapsed() < STALE_AFTER {
                return Ok(conn);
            }
            // Back to the pool, which checks it; the ones below it waited longer.
            let stale: Vec<_> = self.idle().as_mut().map(std::mem::take).unwrap_or_default();
            drop(conn);
            drop(stale);
        }
    }

    /// Keeps `conn` for the next statement if what ran on it ended cleanly (`ok`: it answered,
    /// even with an error of the statement's own); otherwise it goes back to the pool, whose
    /// check closes a broken one.
    pub fn put(&self, conn: PoolConnection<DB>, ok: bool) {
        if !ok {
            return;
        }
        let mut idle = self.idle();
        if let Some(idle) = idle.as_mut()
            && idle.len() < self.keep
        {
            idle.push((conn, Instant::now()));
        }
    }

    /// Gives every kept connection back to the pool, and every one after (before the pool is
    /// closed, which waits for them).
    pub fn close(&self) {
        let all = self.idle().take();
        drop(all);
    }
}

/// Whether a statement's outcome leaves its connection fit for the next one: it ran, or the
/// database refused it (its own error, answered over a working connection).
pub fn clean<T>(ran: &Result<T, sqlx::Error>) -> bool {
    matches!(ran, Ok(_) | Err(sqlx::Error::Database(_)))
}
