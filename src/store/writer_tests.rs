//! Tests of the write lock: groups of new sales, scripts and transactions dropped midway, the
//! write connection kept between writes, and syncs of the log outside the lock.

use super::*;
use sqlx::AssertSqlSafe;

async fn pool(dir: &tempfile::TempDir) -> SqlitePool {
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let pool = SqlitePool::connect(&url).await.expect("open");
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&pool)
        .await
        .expect("wal");
    sqlx::query("CREATE TABLE t (x INTEGER NOT NULL)")
        .execute(&pool)
        .await
        .expect("table");
    pool
}

/// A sale of `value` run in the open group: its outcome when it joined, `None` when its
/// statement failed (the group is then rolled back).
async fn sale(
    lock: &WriteLock,
    pool: &SqlitePool,
    value: Option<i64>,
) -> Option<watch::Receiver<Option<Outcome>>> {
    let mut w = lock.lock_to_join().await;
    let mut m = w.group(pool, None).await.expect("group");
    let text = m.script("INSERT INTO t (x) VALUES ($1)");
    let ran = sqlx::query(AssertSqlSafe(&*text))
        .bind(value)
        .execute(&mut **m.conn().expect("a pooled connection"))
        .await;
    if ran.is_ok() {
        return Some(m.joined());
    }
    w.end_group().await;
    None
}

async fn rows(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM t")
        .fetch_one(pool)
        .await
        .expect("count")
}

#[tokio::test]
async fn sales_share_one_commit_made_by_the_next_writer() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = WriteLock::default();
    let a = sale(&lock, &pool, Some(1)).await.expect("joined");
    let b = sale(&lock, &pool, Some(2)).await.expect("joined");
    assert!(
        a.borrow().clone().is_none() && b.borrow().clone().is_none(),
        "not committed yet"
    );
    assert_eq!(rows(&pool).await, 0, "others see nothing before the commit");
    drop(lock.lock().await);
    assert_eq!(
        (a.borrow().clone(), b.borrow().clone()),
        (Some(Ok(())), Some(Ok(())))
    );
    assert_eq!(rows(&pool).await, 2);
    // The next sale opens a group of its own.
    let c = sale(&lock, &pool, Some(3)).await.expect("joined");
    assert!(c.borrow().clone().is_none());
    drop(lock.lock().await);
    assert_eq!(c.borrow().clone(), Some(Ok(())));
    assert_eq!(rows(&pool).await, 3);
}

#[tokio::test]
async fn a_failed_sale_rolls_its_whole_group_back() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = WriteLock::default();
    let a = sale(&lock, &pool, Some(1)).await.expect("joined");
    assert!(sale(&lock, &pool, None).await.is_none(), "NOT NULL fails");
    assert!(
        matches!(a.borrow().clone(), Some(Err(_))),
        "told it was not written"
    );
    drop(lock.lock().await);
    assert_eq!(rows(&pool).await, 0, "nothing of the group is there");
    // The connection came back without a transaction open: the next group works.
    let b = sale(&lock, &pool, Some(2)).await.expect("joined");
    drop(lock.lock().await);
    assert_eq!(b.borrow().clone(), Some(Ok(())));
    assert_eq!(rows(&pool).await, 1);
}

#[tokio::test]
async fn a_sale_dropped_mid_statements_rolls_its_group_back() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = WriteLock::default();
    let a = sale(&lock, &pool, Some(1)).await.expect("joined");
    {
        // A sale whose statements ran but which was dropped before it joined: half there.
        let mut w = lock.lock_to_join().await;
        let mut m = w.group(&pool, None).await.expect("group");
        sqlx::query("INSERT INTO t (x) VALUES (2)")
            .execute(&mut **m.conn().expect("a pooled connection"))
            .await
            .expect("insert");
    }
    let b = sale(&lock, &pool, Some(3)).await.expect("joined");
    assert!(
        matches!(a.borrow().clone(), Some(Err(_))),
        "{:?}",
        a.borrow().clone()
    );
    drop(lock.lock().await);
    assert_eq!(b.borrow().clone(), Some(Ok(())), "a group of its own");
    let kept: Vec<i64> = sqlx::query_scalar("SELECT x FROM t")
        .fetch_all(&pool)
        .await
        .expect("rows");
    assert_eq!(kept, vec![3]);
}

#[tokio::test]
async fn a_script_dropped_midway_is_rolled_back_by_the_next_writer() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = WriteLock::default();
    {
        // A script whose caller went away after its first statements: no `COMMIT` ran.
        let mut w = lock.lock().await;
        let conn = w.script_conn(&pool).await.expect("conn");
        sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO t (x) VALUES (1);")
            .execute(&mut **conn)
            .await
            .expect("half a script");
    }
    {
        let mut w = lock.lock().await;
        let conn = w.script_conn(&pool).await.expect("conn");
        sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO t (x) VALUES (2); COMMIT;")
            .execute(&mut **conn)
            .await
            .expect("a whole script, on a connection with no transaction left open");
        w.script_ended();
    }
    let kept: Vec<i64> = sqlx::query_scalar("SELECT x FROM t")
        .fetch_all(&pool)
        .await
        .expect("rows");
    assert_eq!(kept, vec![2]);
    // Every connection of the pool is free of a transaction: a write on each succeeds.
    for _ in 0..pool.size() {
        let mut c = pool.acquire().await.expect("conn");
        sqlx::raw_sql("BEGIN IMMEDIATE; COMMIT;")
            .execute(&mut *c)
            .await
            .expect("no transaction open");
    }
}

#[tokio::test]
async fn a_sale_whose_group_nobody_commits_commits_it_itself() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = WriteLock::default();
    assert!(!lock.sales_queued());
    // Handed on to a sale that never came: the outcome is waited for, then made.
    let a = sale(&lock, &pool, Some(1)).await.expect("joined");
    assert_eq!(lock.outcome(a).await, Ok(()));
    assert_eq!(rows(&pool).await, 1);
}

#[tokio::test]
async fn a_sale_that_goes_away_leaves_its_group_committed() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = WriteLock::default();
    let mut a = sale(&lock, &pool, Some(1)).await.expect("joined");
    // The sale is dropped before its outcome: its finisher ends the group from a task.
    drop(Finisher::arm(&lock));
    let ended = tokio::time::timeout(Duration::from_millis(500), a.wait_for(Option::is_some))
        .await
        .expect("ended well before the hand-over wait")
        .expect("an outcome")
        .clone();
    assert_eq!(ended, Some(Ok(())));
    assert_eq!(rows(&pool).await, 1);
}

/// A lock that writes on a connection of its own with `synchronous = NORMAL` and syncs the
/// log at `wal_of` (the database's file name, `-wal` added); as the appliance's, that
/// connection leaves the checkpoints to the lock.
async fn deferring(dir: &tempfile::TempDir, wal_of: &Path) -> WriteLock {
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("t.db"))
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .pragma("wal_autocheckpoint", "0");
    let normal = SqlitePool::connect_with(opts).await.expect("open");
    WriteLock::deferring_sync(Durability::new(normal.clone(), wal_of), normal, None)
}

fn counts(lock: &WriteLock) -> (u64, u64) {
    assert!(lock.0.durability.is_some(), "deferring");
    lock.sync_counts()
}

#[tokio::test]
async fn a_group_is_told_its_outcome_once_its_log_is_synced() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = deferring(&dir, &dir.path().join("t.db")).await;
    let a = sale(&lock, &pool, Some(1)).await.expect("joined");
    let b = sale(&lock, &pool, Some(2)).await.expect("joined");
    drop(lock.lock().await);
    assert_eq!(counts(&lock).0, 1, "one commit for the group");
    assert_eq!(lock.outcome(a).await, Ok(()));
    assert_eq!(lock.outcome(b).await, Ok(()));
    assert_eq!(
        counts(&lock),
        (1, 1),
        "told only once the sync covered the commit"
    );
    assert_eq!(rows(&pool).await, 2);
    // A batch about to be sent syncs once more, as the worker pool's own commits (its claim,
    // its numbering) take no ticket and must be on disk too.
    assert_eq!(lock.durable().await, Ok(()));
    assert_eq!(counts(&lock), (2, 2));
}

#[tokio::test]
async fn a_batch_to_send_waits_until_every_committed_group_is_synced() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = deferring(&dir, &dir.path().join("t.db")).await;
    let mut seen = Vec::new();
    for x in 1..=3 {
        seen.push(sale(&lock, &pool, Some(x)).await.expect("joined"));
        drop(lock.lock().await);
    }
    assert_eq!(counts(&lock).0, 3);
    lock.durable().await.expect("synced");
    assert_eq!(
        counts(&lock),
        (4, 4),
        "it returned with every commit on disk, and its own ticket's"
    );
    for s in seen {
        assert_eq!(lock.outcome(s).await, Ok(()));
    }
}

#[tokio::test]
async fn the_write_connection_is_kept_between_writes_and_left_clean() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    // As the appliance opens it: one write connection, the checkpoints through the reads' pool.
    let writes = sqlx::pool::PoolOptions::<Sqlite>::new()
        .max_connections(1)
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(dir.path().join("t.db"))
                .synchronous(sqlx::sqlite::SqliteSynchronous::Normal),
        )
        .await
        .expect("open");
    let lock = WriteLock::deferring_sync(
        Durability::new(writes.clone(), &dir.path().join("t.db")),
        pool.clone(),
        None,
    );
    {
        // A transaction whose caller went away before its `COMMIT`.
        let mut w = lock.lock().await;
        let conn = w.script_conn(&pool).await.expect("conn");
        sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO t (x) VALUES (1);")
            .execute(&mut **conn)
            .await
            .expect("half a transaction");
    }
    for x in [2, 3] {
        // A statement of its own, on the connection kept by the lock.
        let mut w = lock.lock_for("insert").await;
        let mut conn = w.conn(&pool).await.expect("conn");
        sqlx::query("INSERT INTO t (x) VALUES ($1)")
            .bind(x)
            .execute(&mut *conn)
            .await
            .expect("no transaction left open");
        w.park(conn, true);
    }
    assert_eq!(
        (writes.size(), writes.num_idle()),
        (1, 0),
        "one connection, kept by the lock rather than its pool"
    );
    let kept: Vec<i64> = sqlx::query_scalar("SELECT x FROM t ORDER BY x")
        .fetch_all(&pool)
        .await
        .expect("rows");
    assert_eq!(kept, vec![2, 3], "the dropped transaction was rolled back");
    // Closing gives it back to its pool, which closes it.
    lock.close().await;
    assert!(writes.is_closed());
    assert_eq!(writes.size(), 0);
}

#[tokio::test]
async fn a_group_whose_log_cannot_be_synced_is_written_but_not_acknowledged() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    // The log's path lies under a file, so it cannot be opened to sync.
    let not_a_dir = dir.path().join("plain");
    std::fs::write(&not_a_dir, b"x").expect("file");
    let lock = deferring(&dir, &not_a_dir.join("t.db")).await;
    let a = sale(&lock, &pool, Some(1)).await.expect("joined");
    drop(lock.lock().await);
    let told = lock.outcome(a).await;
    assert!(matches!(told, Err(GroupFailed::NotSynced(_))), "{told:?}");
    assert_eq!(rows(&pool).await, 1, "written: not to be recorded again");
    assert!(lock.durable().await.is_err(), "and no batch is sent");
}

/// Sales coming faster than one in the linger wait for each other and share commits; after
/// a pause, a sale commits alone at once again. (A linger of 60 ms here, sales 10 ms apart, so
/// that a loaded machine's timers cannot make the test fail; the appliance's is 4 ms.)
#[tokio::test]
async fn sales_coming_close_together_share_commits_and_a_lone_one_does_not_wait() {
    use crate::store::{Db, exec::stmt};
    let dir = tempfile::tempdir().expect("dir");
    let db = crate::store::connect(&crate::config::DatabaseSettings {
        url: crate::config::SecretString::new(format!(
            "sqlite://{}",
            dir.path().join("t.db").display()
        )),
        max_connections: 4,
    })
    .await
    .expect("open");
    let Db::Sqlite {
        pool, write_lock, ..
    } = &db
    else {
        unreachable!("a SQLite URL")
    };
    write_lock.0.arrivals.lock().expect("arrivals").linger = Some(Duration::from_millis(60));
    sqlx::query("CREATE TABLE t (x INTEGER NOT NULL)")
        .execute(pool)
        .await
        .expect("table");
    let sale = |x: i64| {
        let db = db.clone();
        tokio::spawn(async move {
            stmt("INSERT INTO t (x) VALUES ($1) RETURNING rowid")
                .bind(x)
                .sqlite_grouped_rows::<(i64,)>(&db, "record a test sale")
                .await
        })
    };
    let before = counts(write_lock).0;
    let mut sales = Vec::new();
    for x in 0..20 {
        sales.push(sale(x));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for s in sales {
        let ids = s.await.expect("task").expect("recorded");
        assert_eq!(
            ids.map(|v| v.len()),
            Some(1),
            "each sale recorded, in a group"
        );
    }
    assert_eq!(rows(pool).await, 20);
    let commits = counts(write_lock).0 - before;
    assert!(
        commits <= 10,
        "20 sales 10 ms apart took {commits} commits; they should share them"
    );
    // After a pause the average gap is long again: the next sale opens no group.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let groups = write_lock.0.groups.load(Ordering::SeqCst);
    let ids = sale(20).await.expect("task").expect("recorded");
    assert_eq!(ids.map(|v| v.len()), Some(1));
    assert_eq!(
        write_lock.0.groups.load(Ordering::SeqCst),
        groups,
        "a sale after a pause commits alone, without waiting for others"
    );
    db.close().await;
}

/// The checkpoint sequence number in a write-ahead log's header: how many times the log
/// started over from its beginning.
fn log_restarts(wal: &Path) -> u32 {
    let header = std::fs::read(wal)
        .map(|b| b[..32].to_vec())
        .unwrap_or_default();
    header
        .get(12..16)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

#[tokio::test]
async fn under_steady_writes_the_log_starts_over_rather_than_growing() {
    let dir = tempfile::tempdir().expect("dir");
    let pool = pool(&dir).await;
    let lock = deferring(&dir, &dir.path().join("t.db")).await;
    let wal = dir.path().join("t.db-wal");
    let until = Instant::now() + Duration::from_millis(3500);
    while Instant::now() < until {
        // One write after another, as under a steady stream of sales: a checkpoint beside
        // them alone never finds the log copied in full.
        let mut w = lock.lock_for("insert").await;
        let mut conn = w.conn(&pool).await.expect("conn");
        sqlx::query("INSERT INTO t (x) VALUES (1)")
            .execute(&mut *conn)
            .await
            .expect("insert");
        w.park(conn, true);
    }
    assert!(
        log_restarts(&wal) >= 2,
        "the log started over {} time(s) in 3.5 s of writes with a checkpoint every second",
        log_restarts(&wal)
    );
}
