//! SQLite's one writer, as this process queues for it: the write lock every write and every
//! transaction holds, the one connection they all write on, the group commit of new sales
//! under it, and the syncs that make writes durable outside it.
//!
//! Writes run on the lock's own connection, so its page cache stays warm: a connection must
//! drop its cache whenever another one has changed the database, which made every write of a
//! pool of writing connections read its pages again. Those made many times a second (new
//! sales, and every write outside a transaction: the worker pool's claims, numbering, seals,
//! settles, logs) run on the caller's thread ([`Slot::lite`], `lite.rs`), without a trip to a
//! connection thread; transactions and the rarer claims run on sqlx's connection
//! ([`Durability`]), which only then reads again what the other one changed. Both commit
//! with `synchronous = NORMAL`, which writes the log without waiting for the disk. A write
//! that must be durable (the appliance's handle: a webhook's sale, an admin's action, an API
//! call) then syncs the log after letting the lock go, and returns once it is on disk, exactly
//! as with `synchronous = FULL`: one sync covers every commit made before it began, and the
//! fsync that was most of a write's hold (about 1 ms a commit on a busy machine) no longer
//! keeps every other writer waiting. The worker pool's writes are not synced (they are redone
//! without harm, `Db::for_workers`).
//!
//! New sales share their commit:
//! - A sale takes the lock and runs its statements in the *open group*: a transaction begun
//!   by the first sale of the group.
//! - If other sales are queued for the lock, it hands the lock on with the group open, and
//!   they run theirs in it, in turn. The last one, seeing no sale queued, commits the group.
//!   Any other writer (a worker, a transaction) that gets the lock while a group is open
//!   commits it first, as it must not begin beside an open transaction.
//! - When sales come faster than one in [`SALE_LINGER`], the group stays open that long for
//!   more even with none queued, and the sale that opened it commits it then: at a few
//!   hundred sales a second each would otherwise commit and sync alone. Slower, a sale finds
//!   the lock free and commits at once.
//! - A sale returns only once its group is committed and synced; a webhook is acknowledged
//!   after that. A sale dropped before then (a client that went away) leaves a task that
//!   takes the lock, which ends the group; a sale that still waits too long takes the lock
//!   itself.
//! - If a sale fails mid-statements, or is dropped mid-statements (a client that went away),
//!   the whole group is rolled back, and each of its sales, told so, records itself alone
//!   through the general transaction: nothing of a rolled-back group is half there.
//! - Committed before it is on disk, a sale can be seen before the sync: a worker that
//!   claimed, numbered and sealed rows waits for the sync ([`WriteLock::durable`]) before it
//!   sends them, so the PAC never stamps a sale, nor a folio, a power loss could take back.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;

use super::lite::Lite;
use sqlx::{Sqlite, SqlitePool};
use tokio::sync::{Mutex, MutexGuard, watch};

/// At most this many sales share one commit, so that none waits long for the others.
const GROUP_MAX: usize = 64;

/// How long a sale that handed the lock on waits for its group's outcome before it takes the
/// lock to commit the group itself: a backstop, as a sale that goes away commits the group
/// from a task of its own ([`Finisher`]).
const HANDOVER_WAIT: Duration = Duration::from_secs(1);

/// How long a group of new sales stays open for more when sales come faster than one in this
/// long: one commit, one sync and one trip to the connection's thread then serve several
/// sales instead of each, at up to this much more time before each one's acknowledgement.
/// Slower, each sale commits alone at once. At 500 sales a second, 8 ms instead of 4 took a
/// commit's sales from 2.3 to 3.6 (BENCHMARKS.md). Not longer: with clients that each wait for
/// their answer before sending again (the ingest bench's 32), every group waits this long, so
/// it caps their rate at 32 per wait; at 12 ms SQLite's ingest peak fell from 2,954 to 2,144
/// a second.
pub(super) const SALE_LINGER: Duration = Duration::from_millis(8);

/// The name the commit of a group of new sales is counted under, whoever holds the lock.
const GROUP_COMMIT: &str = "commit new sales";

/// The process's write lock, and the group of sales it may hold open. How long each writer
/// waited for it and held it are metrics (`autofactura_sqlite_write_lock_*`): when the waits
/// grow while the holds stay short, the appliance is at the single writer's limit, and
/// PostgreSQL is the way past it.
#[derive(Debug, Clone, Default)]
pub struct WriteLock(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    lock: Mutex<Slot>,
    /// New sales queued for the lock.
    queued_sales: AtomicUsize,
    /// When the last new sale came, and the mean time between the last ones (a moving
    /// average): whether a group that waits for more will get any ([`SALE_LINGER`]).
    arrivals: std::sync::Mutex<Arrivals>,
    /// Groups of new sales opened so far: the number of the next one.
    groups: AtomicU64,
    /// The one write connection and its syncs outside the lock; without it (a database in
    /// memory, tests of the group alone) writes run on the caller's pool, as it syncs.
    durability: Option<Durability>,
}

/// The process's one write connection, whose `COMMIT` does not wait for the disk, and the log
/// syncs made after the lock is let go: the fsync that was most of a group's hold (about 1 ms a
/// commit on a busy machine) no longer keeps every other writer waiting.
#[derive(Debug)]
pub struct Durability {
    /// One connection to the database with `synchronous = NORMAL`, for every write.
    pool: SqlitePool,
    /// The write-ahead log, whose sync makes its commits durable.
    wal: PathBuf,
    /// Commits to be made durable so far; the sync that begins after a commit covers it.
    committed: AtomicU64,
    /// How many of them are known to be on disk.
    synced: watch::Sender<u64>,
    /// One sync at a time, which covers every commit made before it began.
    syncing: Mutex<()>,
}

impl Durability {
    /// Writes run on `pool` (one connection, `synchronous = NORMAL`) and are made durable by
    /// syncing the write-ahead log of `database` (its file name with `-wal` added).
    pub fn new(pool: SqlitePool, database: &Path) -> Self {
        let mut wal = database.as_os_str().to_owned();
        wal.push("-wal");
        Durability {
            pool,
            wal: PathBuf::from(wal),
            committed: AtomicU64::new(0),
            synced: watch::Sender::new(0),
            syncing: Mutex::new(()),
        }
    }
}

/// How often the log is copied into the database beside the writers, as the write connection
/// never does it on commit.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Copies the log into the database as far as no reader needs it (`PASSIVE`); whether it ran.
async fn checkpoint(reads: &SqlitePool) -> bool {
    match sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
        .execute(reads)
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "SQLite WAL checkpoint failed; the next one retries");
            false
        }
    }
}

/// Syncs the write-ahead log at `wal` to the disk. Opened anew each time: the log is removed
/// and created again when every connection closes, and a descriptor kept open would sync the
/// removed one. None there means the last connection to close copied it into the database and
/// synced that first.
fn sync_log(wal: &Path) -> std::io::Result<()> {
    match std::fs::File::open(wal) {
        Ok(f) => f.sync_data(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// When new sales come ([`Inner::arrivals`]).
#[derive(Debug, Default)]
struct Arrivals {
    last: Option<Instant>,
    /// The moving average of the time between two sales; none before the second.
    gap: Option<Duration>,
    /// How long a group waits, when not [`SALE_LINGER`] (tests, to be free of timer jitter).
    linger: Option<Duration>,
}

/// What the write lock guards: the write connection between writes, and what is open on it.
#[derive(Debug, Default)]
pub(super) struct Slot {
    /// The one write connection ([`Durability`]), kept here between writes rather than
    /// returned to its pool: sqlx checks a connection given back to its pool with a trip to the
    /// connection's thread, one more for every write.
    idle: Option<PoolConnection<Sqlite>>,
    /// The write connection run on the caller's thread (`lite.rs`), for the writes made many
    /// times a second; transactions run on `idle`'s.
    lite: Option<Lite>,
    open: Option<OpenGroup>,
}

/// The transaction a group of new sales shares, not committed yet; or, marked running, the
/// connection of a script that begins and ends its own ([`WriteGuard::script_conn`]).
#[derive(Debug)]
pub(super) struct OpenGroup {
    /// None: the group is open on the caller's-thread connection ([`Slot::lite`]).
    conn: Option<PoolConnection<Sqlite>>,
    sales: usize,
    /// Which group this is (each one opened has the next number).
    number: u64,
    /// Until when the group waits for more sales before it commits, if it does.
    until: Option<Instant>,
    /// A sale's statements are running, or were when it was dropped (a client that went
    /// away): found so by the next holder of the lock, the group is rolled back.
    running: bool,
    outcome: watch::Sender<Option<Outcome>>,
}

impl OpenGroup {
    /// A group, or a script, running on `conn` (none: on the caller's-thread connection).
    fn new(conn: Option<PoolConnection<Sqlite>>) -> Self {
        OpenGroup {
            conn,
            sales: 0,
            number: 0,
            until: None,
            running: true,
            outcome: watch::Sender::new(None),
        }
    }
}

/// How a group ended: committed and on disk, or why not.
pub(super) type Outcome = Result<(), GroupFailed>;

/// Why a group's sales are not known to be on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GroupFailed {
    /// Rolled back, or never committed: nothing of it was written, so each sale may be
    /// recorded alone.
    NotWritten(String),
    /// Committed, but the sync of the log failed: written, yet not known to be on disk. Not
    /// to be acknowledged; a redelivery finds the sale recorded.
    NotSynced(String),
}

impl std::fmt::Display for GroupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupFailed::NotWritten(e) => write!(f, "not written: {e}"),
            GroupFailed::NotSynced(e) => write!(f, "written but not synced to the disk: {e}"),
        }
    }
}

/// The write lock, held until dropped.
pub(super) struct WriteGuard<'l> {
    lock: &'l WriteLock,
    guard: MutexGuard<'l, Slot>,
    since: Instant,
    /// What the holder writes, as the store names it: the label its hold is counted under.
    pub(super) write: &'static str,
    /// Time spent committing a group of others' sales, counted under that name instead.
    others: Duration,
}

/// Counts a new sale queued for the lock while it waits (also when it is dropped waiting).
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl WriteLock {
    /// A lock whose writes all run on `durability`'s connection, durable ones synced after the
    /// lock is let go.
    ///
    /// Checkpoints the log every second through `reads` while the lock lives: first beside
    /// the writers (`PASSIVE`: without waiting for or blocking them), then, holding the lock,
    /// the few frames committed meanwhile. The log is then copied in full with no commit in
    /// between, so the next write starts it over from its beginning. Under steady writes a
    /// checkpoint beside the writers alone never catches up with them, and the log grew for
    /// as long as they came (a gigabyte in half a minute at a few hundred sales a second),
    /// every commit extending the file, whose size each sync then wrote too.
    ///
    /// With `lite`, new sales and the writes made outside a transaction run on it, on the
    /// caller's thread (`lite.rs`).
    pub(super) fn deferring_sync(
        durability: Durability,
        reads: SqlitePool,
        lite: Option<Lite>,
    ) -> Self {
        let lock = WriteLock(Arc::new(Inner {
            lock: Mutex::new(Slot {
                lite,
                ..Slot::default()
            }),
            durability: Some(durability),
            ..Inner::default()
        }));
        let alive = Arc::downgrade(&lock.0);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if reads.is_closed() {
                    return;
                }
                let Some(lock) = alive.upgrade().map(WriteLock) else {
                    return;
                };
                if checkpoint(&reads).await {
                    let _w = lock.lock_for("checkpoint the log").await;
                    checkpoint(&reads).await;
                }
            }
        });
        lock
    }

    /// What every write runs on: the lock's one connection, else `pool` (the caller's).
    pub(super) fn write_pool<'a>(&'a self, pool: &'a SqlitePool) -> &'a SqlitePool {
        self.0.durability.as_ref().map_or(pool, |d| &d.pool)
    }

    /// Counts a commit just made on the write connection, to be made durable: its ticket for
    /// [`WriteLock::sync_through`]. Called while the lock is held, so that a claim made after
    /// it waits for its sync too ([`WriteLock::durable`]).
    pub(super) fn committed(&self) -> u64 {
        self.0
            .durability
            .as_ref()
            .map_or(0, |d| d.committed.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Commits counted to be made durable, and how many of them are on disk.
    #[cfg(test)]
    pub(super) fn sync_counts(&self) -> (u64, u64) {
        self.0.durability.as_ref().map_or((0, 0), |d| {
            (d.committed.load(Ordering::SeqCst), *d.synced.borrow())
        })
    }

    /// Closes the write connection, if the lock has its own: any open group is committed, and
    /// the connection kept between writes goes back to its pool first.
    pub(super) async fn close(&self) {
        if let Some(d) = &self.0.durability {
            let mut w = self.lock().await;
            drop(w.guard.idle.take());
            drop(w.guard.lite.take());
            drop(w);
            d.pool.close().await;
        }
    }

    /// The lock for a writer that only ends the open group, if any.
    pub(super) async fn lock(&self) -> WriteGuard<'_> {
        self.lock_for("end a group of new sales").await
    }

    /// The lock for the write the store calls `write`: an open group is committed first.
    pub(super) async fn lock_for(&self, write: &'static str) -> WriteGuard<'_> {
        let mut w = self.queue(write).await;
        w.end_group().await;
        w
    }

    /// The lock for a new sale: the open group is kept to join, unless it is full.
    pub(super) async fn lock_to_join(&self) -> WriteGuard<'_> {
        self.0.queued_sales.fetch_add(1, Ordering::SeqCst);
        let queued = Queued(&self.0.queued_sales);
        let mut w = self.queue("record a new sale").await;
        drop(queued);
        if w.guard
            .open
            .as_ref()
            .is_some_and(|g| g.sales >= GROUP_MAX || g.running)
        {
            w.end_group().await;
        }
        w
    }

    /// Counts a new sale coming: how long its group is to stay open for more, if it is to
    /// ([`SALE_LINGER`]). Only with the lock's own connection, whose syncs follow commits.
    pub(super) fn sale_coming(&self) -> Option<Duration> {
        self.0.durability.as_ref()?;
        let now = Instant::now();
        let mut a = self
            .0
            .arrivals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(last) = a.last {
            // A pause counts as no more than a second, so the average follows a new burst
            // within a few sales.
            let gap = (now - last).min(Duration::from_secs(1));
            a.gap = Some(a.gap.map_or(gap, |g| (g * 7 + gap) / 8));
        }
        a.last = Some(now);
        let linger = a.linger.unwrap_or(SALE_LINGER);
        a.gap.filter(|g| *g < linger).map(|_| linger)
    }

    /// Once `until` has passed, commits group `number` if it is still open (unless its
    /// outcome came first): the sale that opened a group waiting for more does this.
    pub(super) async fn commit_at(
        &self,
        until: Instant,
        number: u64,
        outcome: &mut watch::Receiver<Option<Outcome>>,
    ) {
        let ended = outcome.wait_for(Option::is_some);
        if tokio::time::timeout_at(until.into(), ended).await.is_ok() {
            return;
        }
        let mut w = self.queue("end a group of new sales").await;
        if w.guard.open.as_ref().is_some_and(|g| g.number == number) {
            w.end_group().await;
        }
    }

    /// Whether new sales are queued for the lock: a sale that holds it hands the open group
    /// on to them instead of committing it.
    pub(super) fn sales_queued(&self) -> bool {
        self.0.queued_sales.load(Ordering::SeqCst) > 0
    }

    /// Waits for the outcome of the group `outcome` watches, committing it if nobody did in
    /// time.
    pub(super) async fn outcome(&self, mut outcome: watch::Receiver<Option<Outcome>>) -> Outcome {
        let waited = tokio::time::timeout(HANDOVER_WAIT, outcome.wait_for(Option::is_some))
            .await
            .is_ok_and(|r| r.is_ok());
        if !waited {
            // Whoever should have committed went away: the next holder of the lock commits,
            // which is this sale now if no one else. The outcome then follows the sync.
            drop(self.lock().await);
            let _ = outcome.wait_for(Option::is_some).await;
        }
        outcome.borrow().clone().unwrap_or_else(|| {
            Err(GroupFailed::NotWritten(
                "the group ended without an outcome".to_owned(),
            ))
        })
    }

    /// Waits until every write committed so far, the worker pool's unsynced ones too, is on
    /// disk: a worker calls it for a batch claimed, numbered and sealed, before sending it.
    /// The ticket taken here is past every commit made before, so a sync that begins after it
    /// covers them all.
    pub(super) async fn durable(&self) -> Result<(), String> {
        match &self.0.durability {
            Some(_) => self.sync_through(self.committed()).await,
            None => Ok(()),
        }
    }

    /// Returns once the first `ticket` commits to be made durable are on disk, syncing the log
    /// if no sync that began after them has ended yet.
    pub(super) async fn sync_through(&self, ticket: u64) -> Result<(), String> {
        let Some(d) = &self.0.durability else {
            return Ok(());
        };
        loop {
            if *d.synced.borrow() >= ticket {
                return Ok(());
            }
            let _one = d.syncing.lock().await;
            if *d.synced.borrow() >= ticket {
                return Ok(());
            }
            // Read before the sync begins: every commit counted here has written its frames.
            let upto = d.committed.load(Ordering::SeqCst);
            let wal = d.wal.clone();
            let t = Instant::now();
            tokio::task::spawn_blocking(move || sync_log(&wal))
                .await
                .map_err(|e| format!("the sync of the write-ahead log did not finish: {e}"))?
                .map_err(|e| format!("cannot sync {}: {e}", d.wal.display()))?;
            crate::metrics::sqlite_log_sync(t.elapsed());
            d.synced.send_modify(|s| *s = (*s).max(upto));
        }
    }

    async fn queue(&self, write: &'static str) -> WriteGuard<'_> {
        let asked = Instant::now();
        let guard = self.0.lock.lock().await;
        let since = Instant::now();
        crate::metrics::sqlite_write_lock_wait(since - asked);
        WriteGuard {
            lock: self,
            guard,
            since,
            write,
            others: Duration::ZERO,
        }
    }
}

impl<'l> WriteGuard<'l> {
    /// The lock this guard holds.
    pub(super) fn lock(&self) -> &'l WriteLock {
        self.lock
    }

    /// Whether a new sale holding the lock is alone: no group is open and no other sale is
    /// queued, so it may commit in the same trip as its statements instead of opening a group
    /// (when the lock has its own write connection, whose commits are synced outside it).
    pub(super) fn alone(&self) -> bool {
        self.guard.open.is_none() && !self.lock.sales_queued() && self.lock.0.durability.is_some()
    }

    /// Whether the open group waits for more sales: its time to wait has not passed and it
    /// is not full. The sale that opened it commits it then ([`WriteLock::commit_at`]).
    pub(super) fn lingering(&self) -> bool {
        self.guard.open.as_ref().is_some_and(|g| {
            g.sales < GROUP_MAX && g.until.is_some_and(|until| Instant::now() < until)
        })
    }

    /// The open group, beginning one on a connection of `pool` if none is open, which waits
    /// `linger` for more sales when given. The group is rolled back when it ends unless the
    /// returned [`Member`] is [`Member::joined`].
    pub(super) async fn group(
        &mut self,
        pool: &SqlitePool,
        linger: Option<Duration>,
    ) -> Result<Member<'_>, sqlx::Error> {
        if self.guard.open.is_none() {
            // Kept before its `BEGIN` runs (with the first sale's statements), marked
            // running: if this sale is dropped while it runs, the next holder of the lock
            // rolls the connection back rather than leaving a transaction open on it in the
            // pool.
            let number = self.lock.0.groups.fetch_add(1, Ordering::Relaxed);
            let g = match self.guard.lite {
                Some(_) => self.guard.open.insert(OpenGroup::new(None)),
                None => self.hold(pool).await?,
            };
            g.number = number;
            g.until = linger.map(|l| Instant::now() + l);
        }
        let Slot { lite, open, .. } = &mut *self.guard;
        let group = open.as_mut().expect("a group is open");
        group.running = true;
        let lite = lite.as_mut().filter(|_| group.conn.is_none());
        Ok(Member { group, lite })
    }

    /// A connection for a script that begins and ends its own transaction. It stays in the
    /// lock's slot, marked running, until [`WriteGuard::script_ended`]: a script dropped
    /// midway (a caller that went away) is rolled back by the next holder of the lock, before
    /// any other write, instead of leaving a transaction open on a pooled connection.
    pub(super) async fn script_conn(
        &mut self,
        pool: &SqlitePool,
    ) -> Result<&mut PoolConnection<Sqlite>, sqlx::Error> {
        self.end_group().await;
        let g = self.hold(pool).await?;
        Ok(g.conn.as_mut().expect("held on a pooled connection"))
    }

    /// The write connection run on the caller's thread, if the lock has one (`lite.rs`),
    /// once any open group is ended.
    pub(super) async fn lite(&mut self) -> Option<&mut Lite> {
        self.end_group().await;
        self.guard.lite.as_mut()
    }

    /// The connection of the script or transaction under way ([`WriteGuard::script_conn`]).
    pub(super) fn running_conn(&mut self) -> Option<&mut PoolConnection<Sqlite>> {
        self.guard.open.as_mut().and_then(|g| g.conn.as_mut())
    }

    /// The write connection, kept in the lock's empty slot, marked running: whatever it
    /// begins is rolled back by the next holder of the lock unless it is let go cleanly.
    async fn hold(&mut self, pool: &SqlitePool) -> Result<&mut OpenGroup, sqlx::Error> {
        let conn = self.conn(pool).await?;
        Ok(self.guard.open.insert(OpenGroup::new(Some(conn))))
    }

    /// The write connection for a statement of its own: the one kept between writes, else
    /// one of the lock's pool (of `pool` when the lock has none). Give it back with
    /// [`WriteGuard::park`].
    pub(super) async fn conn(
        &mut self,
        pool: &SqlitePool,
    ) -> Result<PoolConnection<Sqlite>, sqlx::Error> {
        match self.guard.idle.take() {
            Some(c) => Ok(c),
            None => self.lock.write_pool(pool).acquire().await,
        }
    }

    /// Keeps the write connection for the next write, once what ran on it ended cleanly
    /// (`ok`): no transaction open, nothing wrong with the connection. Otherwise, and when the
    /// lock has no connection of its own, it goes back to its pool, whose check on release
    /// closes a broken one.
    pub(super) fn park(&mut self, conn: PoolConnection<Sqlite>, ok: bool) {
        if ok && self.lock.0.durability.is_some() {
            self.guard.idle = Some(conn);
        }
    }

    /// The script ran to its end (its `COMMIT`, or a `ROLLBACK` after its failure): its
    /// connection is kept for the next write.
    pub(super) fn script_ended(&mut self) {
        if let Some(conn) = self.guard.open.take().and_then(|g| g.conn) {
            self.park(conn, true);
        }
    }

    /// Commits the open group, if any (rolls it back if a sale's statements did not finish),
    /// and tells its sales the outcome.
    pub(super) async fn end_group(&mut self) {
        let Some(g) = self.guard.open.take() else {
            return;
        };
        let sales = g.sales > 0;
        let t = Instant::now();
        if g.conn.is_some() {
            // In a task of its own: a holder dropped mid-commit must not leave the group's
            // sales without their outcome, nor a transaction open on the connection.
            if let Ok(Some(conn)) = tokio::spawn(end(g, self.lock.clone())).await {
                self.park(conn, true);
            }
        } else {
            // On the caller's thread: nothing here waits, so no drop can interrupt it.
            let lite = self.guard.lite.as_mut();
            let ended = match (lite, g.running) {
                (_, true) => Err("a sale of its group was interrupted".to_owned()),
                (None, false) => Err("the write connection is closed".to_owned()),
                (Some(lite), false) => lite.end("COMMIT").map_err(|e| e.to_string()),
            };
            if ended.is_err()
                && let Some(lite) = self.guard.lite.as_mut()
            {
                lite.roll_back_open();
            }
            announce(g, ended, self.lock.clone());
        }
        if sales {
            let took = t.elapsed();
            crate::metrics::sqlite_write_lock_hold(GROUP_COMMIT, took);
            self.others += took;
        }
    }
}

/// Commits `g` (rolls it back if a sale's statements did not finish) and tells its sales,
/// once it is on disk: when its log is synced outside the lock, from a task of its own, which
/// this does not wait for. The connection, to keep if it is known to be left clean.
async fn end(mut g: OpenGroup, lock: WriteLock) -> Option<PoolConnection<Sqlite>> {
    let mut conn = g.conn.take()?;
    let ended = if g.running {
        Err("a sale of its group was interrupted".to_owned())
    } else {
        sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    // Nothing of the group may stay half there, nor a transaction open on a pooled
    // connection (a `ROLLBACK` with none open fails harmlessly, and the connection then
    // goes back to its pool).
    let clean = ended.is_ok() || sqlx::query("ROLLBACK").execute(&mut *conn).await.is_ok();
    announce(g, ended, lock);
    clean.then_some(conn)
}

/// Tells the sales of group `g` how it `ended`: at once when it failed, else once it is on
/// disk, from a task that syncs the log (which this does not wait for).
fn announce(g: OpenGroup, ended: Result<(), String>, lock: WriteLock) {
    if ended.is_ok() {
        crate::metrics::sqlite_sales_per_commit(g.sales);
    }
    let OpenGroup { sales, outcome, .. } = g;
    match (ended, &lock.0.durability) {
        (Ok(()), Some(_)) if sales > 0 => {
            let ticket = lock.committed();
            tokio::spawn(async move {
                let synced = lock.sync_through(ticket).await;
                outcome.send_replace(Some(synced.map_err(GroupFailed::NotSynced)));
            });
        }
        (ended, _) => {
            outcome.send_replace(Some(ended.map_err(GroupFailed::NotWritten)));
        }
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        let held = self.since.elapsed().saturating_sub(self.others);
        crate::metrics::sqlite_write_lock_hold(self.write, held);
        if self.guard.open.as_ref().is_some_and(|g| g.running) {
            // A script or transaction left midway (a failed statement's `?`, a caller that
            // went away): rolled back now, by a task that takes the lock, not when the next
            // write comes; until then it would keep other processes from writing.
            drop(Finisher::arm(self.lock));
        }
    }
}

/// Armed while a sale is under way: if the sale is dropped (a client that went away) before
/// it has its outcome, a task takes the lock, which ends any open group, so that no group
/// waits for a writer that may not come.
pub(super) struct Finisher(Option<WriteLock>);

impl Finisher {
    pub(super) fn arm(lock: &WriteLock) -> Self {
        Finisher(Some(lock.clone()))
    }

    pub(super) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Finisher {
    fn drop(&mut self) {
        if let (Some(lock), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(async move { drop(lock.lock().await) });
        }
    }
}

/// A sale running its statements in the open group.
pub(super) struct Member<'g> {
    group: &'g mut OpenGroup,
    /// The caller's-thread connection the group is open on, if it is.
    lite: Option<&'g mut Lite>,
}

impl Member<'_> {
    /// The pooled connection the group is open on, unless it is open on [`Member::lite`].
    pub(super) fn conn(&mut self) -> Option<&mut PoolConnection<Sqlite>> {
        self.group.conn.as_mut()
    }

    /// The caller's-thread connection the group is open on, if it is.
    pub(super) fn lite(&mut self) -> Option<&mut Lite> {
        self.lite.as_deref_mut()
    }

    /// When this sale opened a group that waits for more: until when, and the group's
    /// number, for [`WriteLock::commit_at`].
    pub(super) fn opened_lingering(&self) -> Option<(Instant, u64)> {
        (self.group.sales == 0)
            .then_some(self.group.until)
            .flatten()
            .map(|until| (until, self.group.number))
    }

    /// The script to run for a sale of statements `sale`: the group's first sale begins
    /// the group's transaction in the same trip (`BEGIN IMMEDIATE` first, one trip fewer per
    /// group); once a sale has joined, it has begun.
    pub(super) fn script<'t>(&self, sale: &'t str) -> Cow<'t, str> {
        if self.group.sales > 0 {
            Cow::Borrowed(sale)
        } else {
            Cow::Owned(format!("BEGIN IMMEDIATE;\n{sale}"))
        }
    }

    /// The sale's statements ran: the group may commit them. Its outcome, to wait for.
    pub(super) fn joined(self) -> watch::Receiver<Option<Outcome>> {
        self.group.running = false;
        self.group.sales += 1;
        self.group.outcome.subscribe()
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
