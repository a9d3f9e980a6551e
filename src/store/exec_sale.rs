//! A new sale's statements on SQLite: committed alone in one trip when no other sale is near,
//! else run in the write lock's open group of new sales (`writer.rs`).

use super::{Arg, FromLite, Mode, Out, Record, Stmt, ctx, decode, rows_of, run_script};
use crate::store::writer::{Finisher, GroupFailed, WriteGuard};
use crate::store::{Db, StoreError};
use sqlx::AssertSqlSafe;

impl Stmt<'_> {
    /// SQLite: runs the statements of one new sale (a script without `BEGIN` or `COMMIT`)
    /// in the write lock's open group, which commits several sales at once (see
    /// `writer.rs`), and returns their rows once the group is committed.
    /// `None`: the group was rolled back or did not commit, so nothing of the sale was
    /// written; the caller records it alone.
    pub(in crate::store) async fn sqlite_grouped_rows<T: Record + FromLite>(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<Option<Vec<T>>, StoreError> {
        let Db::Sqlite {
            pool, write_lock, ..
        } = db
        else {
            return Err(StoreError::Other(format!(
                "cannot {what}: a group commit runs on SQLite only"
            )));
        };
        let linger = write_lock.sale_coming();
        let finisher = Finisher::arm(write_lock);
        let (rows, mut outcome, opened) = {
            let mut w = write_lock.lock_to_join().await;
            if w.alone() && linger.is_none() {
                finisher.disarm();
                return sale_alone(w, pool, self, what).await.map(Some);
            }
            let mut member = match w.group(pool, linger).await {
                Ok(m) => m,
                Err(e) => {
                    finisher.disarm();
                    return Err(ctx(what)(e));
                }
            };
            let opened = member.opened_lingering();
            let text = member.script(&self.text);
            let args = &self.args;
            let ran = match member.conn() {
                Some(conn) => {
                    run_on!(&mut **conn, &*text, args, Mode::All, Sqlite).and_then(rows_of)
                }
                None => match member.lite() {
                    Some(lite) => lite.run(&text, args).and_then(decode),
                    None => Err(sqlx::Error::PoolClosed),
                },
            };
            match ran {
                Ok(rows) => {
                    let outcome = member.joined();
                    // The last sale queued commits the group, one fsync for all of them,
                    // unless the group waits for more: its first sale commits it then.
                    if !write_lock.sales_queued() && !w.lingering() {
                        w.end_group().await;
                    }
                    (rows, outcome, opened)
                }
                Err(e) => {
                    // The group is torn: rolled back, its other sales recorded alone.
                    w.end_group().await;
                    finisher.disarm();
                    return Err(ctx(what)(e));
                }
            }
        };
        if let Some((until, number)) = opened {
            write_lock.commit_at(until, number, &mut outcome).await;
        }
        let ended = write_lock.outcome(outcome).await;
        finisher.disarm();
        match ended {
            Ok(()) => Ok(Some(rows)),
            Err(GroupFailed::NotWritten(e)) => {
                tracing::warn!(error = %e, "a group of new sales did not commit; each is recorded alone");
                Ok(None)
            }
            // Written, so not to be recorded again, but not known to be on disk: not to be
            // acknowledged either. The sender's redelivery finds it recorded.
            Err(e @ GroupFailed::NotSynced(_)) => Err(StoreError::Other(format!(
                "cannot {what}: the sale was {e}; check the disk"
            ))),
        }
    }
}

/// A new sale that found no group open and no other sale queued: its statements and its
/// commit in one trip to the connection's thread (a group takes two: `BEGIN` with its first
/// sale's statements, then `COMMIT`), then the sync of the log outside the lock, as for a
/// group. Sales that queue meanwhile form a group of their own. On failure nothing of it is
/// written.
async fn sale_alone<T: Record + FromLite>(
    w: WriteGuard<'_>,
    pool: &sqlx::SqlitePool,
    sale: Stmt<'_>,
    what: &'static str,
) -> Result<Vec<T>, StoreError> {
    let text = format!("BEGIN IMMEDIATE;\n{};\nCOMMIT", sale.text);
    let rows = run_script(w, pool, &text, &sale.args, true, what).await?;
    crate::metrics::sqlite_sales_per_commit(1);
    Ok(rows)
}
