//! The one place that knows the backend: a statement is written once with `$n` placeholders
//! (sqlx reads `$n` on SQLite too, as the n-th argument) and run here on either pool or inside
//! a [`Tx`]. SQLite allows one writer at a time, so every write and every transaction first
//! queues on the process's write lock, and a transaction starts with `BEGIN IMMEDIATE` (two
//! writers never deadlock upgrading from a read). A SQLite write outside a transaction runs
//! on the write connection run on the caller's thread (`lite.rs`), when the lock has one.
//!
//! Arguments are carried as [`Arg`], which keeps the Rust type of each value, so PostgreSQL sees
//! the same parameter types as when they were bound directly (a `NULL` text stays text).

use std::borrow::Cow;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, FromRow, Postgres, Sqlite, Transaction};

use std::sync::OnceLock;

use super::lite::{FromLite, decode};
use super::writer::WriteGuard;
use super::{Db, StoreError, ctx};
use crate::domain::{
    ArcaVoucherState, CancellationState, DeliveryState, DocumentKind, DocumentState, LineState,
    PaymentStatus, RefundStatus,
};

/// Which SQL a statement needs where the backends really differ (the callers' only branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// ` FOR UPDATE SKIP LOCKED` on PostgreSQL, so that several instances claim different
    /// rows; SQLite has one writer at a time and no such clause.
    pub(super) const SKIP_LOCKED: Marker = ("{LOCK}", "", " FOR UPDATE SKIP LOCKED");
}

/// A marker in a statement's text and what it becomes on SQLite and on PostgreSQL.
pub(super) type Marker = (&'static str, &'static str, &'static str);

/// A statement written once whose text differs between the backends only at its markers
/// (a clause or an expression each backend spells its own way; a marker may also splice in a
/// shared column list, the same on both). Its text per backend is built on first use and kept
/// for the life of the process, so a claim costs no more than a constant statement.
pub(super) struct Dialected {
    template: &'static str,
    markers: &'static [Marker],
    sqlite: OnceLock<String>,
    postgres: OnceLock<String>,
}

impl Dialected {
    pub(super) const fn new(template: &'static str, markers: &'static [Marker]) -> Self {
        Dialected {
            template,
            markers,
            sqlite: OnceLock::new(),
            postgres: OnceLock::new(),
        }
    }

    /// The text for `d`.
    pub(super) fn text(&'static self, d: Dialect) -> &'static str {
        let cell = match d {
            Dialect::Sqlite => &self.sqlite,
            Dialect::Postgres => &self.postgres,
        };
        cell.get_or_init(|| {
            self.markers
                .iter()
                .fold(self.template.to_owned(), |text, (marker, sqlite, pg)| {
                    text.replace(
                        marker,
                        match d {
                            Dialect::Sqlite => sqlite,
                            Dialect::Postgres => pg,
                        },
                    )
                })
        })
    }
}

/// `sql` with every `$n` placeholder renumbered `$n+by`, so several statements can share one
/// argument list.
pub(super) fn shift_params(sql: &str, by: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(sql.len() + 16);
    // Copied in runs between placeholders: this runs for every statement of every sale.
    let mut copied = 0;
    for (at, _) in sql.match_indices('$') {
        let digits = sql[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
        let number = &sql[at + 1..at + 1 + digits];
        if let Ok(n) = number.parse::<usize>() {
            out.push_str(&sql[copied..=at]);
            let _ = write!(out, "{}", n + by);
            copied = at + 1 + digits;
        }
    }
    out.push_str(&sql[copied..]);
    out
}

/// One field of every row, in order: a PostgreSQL array argument for `unnest` (a batch of rows
/// as one statement whose text is the same for any number of them).
pub(super) fn column<'a, R, T>(rows: &'a [R], f: impl Fn(&'a R) -> T) -> Vec<T> {
    rows.iter().map(f).collect()
}

/// One bound value, typed as it was given.
#[derive(Debug, Clone)]
pub(super) enum Arg<'a> {
    Str(Option<Cow<'a, str>>),
    I64(Option<i64>),
    I32(Option<i32>),
    Bool(Option<bool>),
    Time(Option<DateTime<Utc>>),
    Naive(Option<NaiveDateTime>),
    Bytes(Option<Cow<'a, [u8]>>),
}

macro_rules! arg_from {
    ($variant:ident: $($t:ty => $f:expr),* $(,)?) => {
        $(impl<'a> From<$t> for Arg<'a> {
            fn from(v: $t) -> Self {
                Arg::$variant(($f)(v))
            }
        })*
    };
}
arg_from!(Str:
    &'a str => |v| Some(Cow::Borrowed(v)),
    &'a String => |v: &'a String| Some(Cow::Borrowed(v.as_str())),
    String => |v| Some(Cow::Owned(v)),
    Option<&'a str> => |v: Option<&'a str>| v.map(Cow::Borrowed),
    Option<String> => |v: Option<String>| v.map(Cow::Owned),
    &'a Option<String> => |v: &'a Option<String>| v.as_deref().map(Cow::Borrowed),
);
arg_from!(I64: i64 => Some, Option<i64> => |v| v);
arg_from!(I32: i32 => Some, Option<i32> => |v| v);
arg_from!(Bool: bool => Some, Option<bool> => |v| v);
arg_from!(Time: DateTime<Utc> => Some, Option<DateTime<Utc>> => |v| v);
arg_from!(Naive: NaiveDateTime => Some, Option<NaiveDateTime> => |v| v);
arg_from!(Bytes:
    &'a [u8] => |v| Some(Cow::Borrowed(v)),
    &'a Vec<u8> => |v: &'a Vec<u8>| Some(Cow::Borrowed(v.as_slice())),
    Option<&'a [u8]> => |v: Option<&'a [u8]>| v.map(Cow::Borrowed),
);

/// The domain's states are stored as their one spelling: bound as it, and read back through
/// it (a text no value spells is a decode error naming the text).
macro_rules! stored_as_text {
    ($($t:ty),*) => {$(
        impl<'a> From<$t> for Arg<'a> {
            fn from(v: $t) -> Self {
                Arg::Str(Some(Cow::Borrowed(v.as_str())))
            }
        }
        impl sqlx::Type<Sqlite> for $t {
            fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
                <&str as sqlx::Type<Sqlite>>::type_info()
            }
            fn compatible(ty: &sqlx::sqlite::SqliteTypeInfo) -> bool {
                <&str as sqlx::Type<Sqlite>>::compatible(ty)
            }
        }
        impl sqlx::Type<Postgres> for $t {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<Postgres>>::compatible(ty)
            }
        }
        impl<'r> sqlx::Decode<'r, Sqlite> for $t {
            fn decode(v: sqlx::sqlite::SqliteValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&str as sqlx::Decode<'r, Sqlite>>::decode(v)?.parse()?)
            }
        }
        impl<'r> sqlx::Decode<'r, Postgres> for $t {
            fn decode(v: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&str as sqlx::Decode<'r, Postgres>>::decode(v)?.parse()?)
            }
        }
    )*};
}
stored_as_text!(
    DocumentState,
    CancellationState,
    DeliveryState,
    ArcaVoucherState,
    DocumentKind,
    PaymentStatus,
    LineState,
    RefundStatus
);

/// A row type readable from both backends: a `#[derive(sqlx::FromRow)]` struct or a tuple.
pub(super) trait Record:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> Record for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

/// How a statement's result is read.
#[derive(Clone, Copy)]
enum Mode {
    Execute,
    All,
    Optional,
    One,
}

/// A statement's result, as its backend returned it.
enum Out {
    Affected(u64),
    Sqlite(Vec<SqliteRow>),
    Postgres(Vec<PgRow>),
}

/// Runs `$text` with `$args` on `$ex` (a pool or a connection of one backend) in `$mode`.
macro_rules! run_on {
    ($ex:expr, $text:expr, $args:expr, $mode:expr, $rows:ident) => {{
        let mut q = sqlx::query(AssertSqlSafe($text));
        for a in $args {
            q = match a {
                Arg::Str(v) => q.bind(v.as_deref()),
                Arg::I64(v) => q.bind(*v),
                Arg::I32(v) => q.bind(*v),
                Arg::Bool(v) => q.bind(*v),
                Arg::Time(v) => q.bind(*v),
                Arg::Naive(v) => q.bind(*v),
                Arg::Bytes(v) => q.bind(v.as_deref()),
            };
        }
        match $mode {
            Mode::Execute => q
                .execute($ex)
                .await
                .map(|r| Out::Affected(r.rows_affected())),
            Mode::All => q.fetch_all($ex).await.map(Out::$rows),
            Mode::Optional => q
                .fetch_optional($ex)
                .await
                .map(|r| Out::$rows(r.into_iter().collect())),
            Mode::One => q.fetch_one($ex).await.map(|r| Out::$rows(vec![r])),
        }
    }};
}

/// A statement and its arguments, not yet run.
#[must_use]
pub(super) struct Stmt<'a> {
    text: Cow<'static, str>,
    args: Vec<Arg<'a>>,
    /// A write that returns rows (`… RETURNING`): on a pool, SQLite queues it on the write lock.
    writes: bool,
}

/// A statement written once for both backends.
/// Stored spellings as an SQL list, `('a', 'b')`: for states named in a statement's text.
/// The spellings are the domain's constants, never input.
pub(super) fn spelled_list(spellings: impl IntoIterator<Item = &'static str>) -> String {
    let quoted: Vec<String> = spellings.into_iter().map(|s| format!("'{s}'")).collect();
    format!("({})", quoted.join(", "))
}

pub(super) fn stmt<'a>(text: impl Into<Cow<'static, str>>) -> Stmt<'a> {
    Stmt {
        text: text.into(),
        args: Vec::new(),
        writes: false,
    }
}

/// Where a statement runs.
enum Target<'t, 'l> {
    /// A pool (SQLite: a write queues on the write lock).
    Pool(&'t Db),
    Tx(&'t mut Tx<'l>),
}

impl<'a> Stmt<'a> {
    pub(super) fn bind(mut self, v: impl Into<Arg<'a>>) -> Self {
        self.args.push(v.into());
        self
    }

    /// A SQLite script ([`Stmt::sqlite_script_ids`]): this statement, then `next`, whose `$n`
    /// are renumbered after this one's arguments, so the script has one argument list.
    pub(super) fn then(mut self, next: Stmt<'a>) -> Self {
        let text = shift_params(&next.text, self.args.len());
        self.text = Cow::Owned(format!("{};\n{text}", self.text));
        self.args.extend(next.args);
        self
    }

    /// In a SQLite script, this `INSERT … VALUES (…) ON CONFLICT …` inserts its row only when
    /// `guard` holds (`INSERT … SELECT … WHERE guard ON CONFLICT …`): e.g. `changes() = 1`,
    /// the statement before inserted its row. `guard`'s arguments are numbered from `$1`.
    pub(super) fn only_if(mut self, guard: Stmt<'a>) -> Self {
        let (head, rest) = self
            .text
            .split_once(" VALUES (")
            .expect("only_if guards an INSERT … VALUES");
        let (values, tail) = rest
            .rsplit_once(") ON CONFLICT")
            .expect("only_if guards an INSERT … ON CONFLICT");
        let g = shift_params(&guard.text, self.args.len());
        self.text = Cow::Owned(format!(
            "{head} SELECT {values} WHERE {g} ON CONFLICT{tail}"
        ));
        self.args.extend(guard.args);
        self
    }

    /// PostgreSQL: `WITH name AS (this statement)`, to which [`Stmt::and_with`] adds more and
    /// [`Stmt::then_select`] ends: several writes in one statement, so in one round trip and
    /// one transaction.
    pub(super) fn into_with(mut self, name: &str) -> Self {
        self.text = Cow::Owned(format!("WITH {name} AS ({})", self.text));
        self
    }

    /// One more `name AS (next)` after [`Stmt::into_with`], its `$n` renumbered after this one's.
    pub(super) fn and_with(mut self, name: &str, next: Stmt<'a>) -> Self {
        let text = shift_params(&next.text, self.args.len());
        self.text = Cow::Owned(format!("{}, {name} AS ({text})", self.text));
        self.args.extend(next.args);
        self
    }

    /// The `SELECT` that ends a [`Stmt::into_with`] (without arguments of its own).
    pub(super) fn then_select(mut self, select: &str) -> Self {
        self.text = Cow::Owned(format!("{} {select}", self.text));
        self
    }

    /// The same arguments under the text `f` makes of this one.
    pub(super) fn map_text(mut self, f: impl FnOnce(&str) -> String) -> Self {
        self.text = Cow::Owned(f(&self.text));
        self
    }

    /// Marks a write that returns rows (`… RETURNING`), read with the `fetch_*` methods: on
    /// SQLite it queues on the write lock like [`Stmt::execute`].
    pub(super) fn writes(mut self) -> Self {
        self.writes = true;
        self
    }

    /// Reads every row (no write lock unless [`Stmt::writes`]).
    pub(super) async fn fetch_all<T: Record>(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        self.rows(Target::Pool(db), Mode::All, what).await
    }

    /// Runs a write that returns rows (`… RETURNING`) and reads them: on SQLite on the write
    /// connection run on the caller's thread when there is one (`lite.rs`), for a write made
    /// many times a second.
    pub(super) async fn fetch_all_written<T: Record + FromLite>(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        if let Db::Sqlite {
            write_lock,
            durable,
            ..
        } = db
        {
            let mut w = write_lock.lock_for(what).await;
            if let Some(lite) = w.lite().await {
                let ran = lite.run_whole(&self.text, &self.args).and_then(decode);
                release(w, *durable && ran.is_ok(), what).await?;
                return ran.map_err(ctx(what));
            }
        }
        self.writes().fetch_all(db, what).await
    }

    /// Reads at most one row (no write lock unless [`Stmt::writes`]).
    pub(super) async fn fetch_optional<T: Record>(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<Option<T>, StoreError> {
        self.optional(Target::Pool(db), what).await
    }

    /// Reads exactly one row (no write lock unless [`Stmt::writes`]).
    pub(super) async fn fetch_one<T: Record>(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<T, StoreError> {
        self.one(Target::Pool(db), what).await
    }

    /// Runs a write; the number of rows it affected.
    pub(super) async fn execute(self, db: &Db, what: &'static str) -> Result<u64, StoreError> {
        self.affected(Target::Pool(db), what).await
    }

    /// Runs it inside `tx`; the number of rows affected.
    pub(super) async fn execute_in(
        self,
        tx: &mut Tx<'_>,
        what: &'static str,
    ) -> Result<u64, StoreError> {
        self.affected(Target::Tx(tx), what).await
    }

    /// Reads at most one row inside `tx`.
    pub(super) async fn fetch_optional_in<T: Record>(
        self,
        tx: &mut Tx<'_>,
        what: &'static str,
    ) -> Result<Option<T>, StoreError> {
        self.optional(Target::Tx(tx), what).await
    }

    /// Reads every row inside `tx`.
    pub(super) async fn fetch_all_in<T: Record>(
        self,
        tx: &mut Tx<'_>,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        self.rows(Target::Tx(tx), Mode::All, what).await
    }

    /// Reads exactly one row inside `tx`.
    pub(super) async fn fetch_one_in<T: Record>(
        self,
        tx: &mut Tx<'_>,
        what: &'static str,
    ) -> Result<T, StoreError> {
        self.one(Target::Tx(tx), what).await
    }

    async fn affected(self, target: Target<'_, '_>, what: &'static str) -> Result<u64, StoreError> {
        match self.run(target, Mode::Execute, what).await? {
            Out::Affected(n) => Ok(n),
            _ => Ok(0),
        }
    }

    /// At most one row.
    async fn optional<T: Record>(
        self,
        target: Target<'_, '_>,
        what: &'static str,
    ) -> Result<Option<T>, StoreError> {
        Ok(self
            .rows(target, Mode::Optional, what)
            .await?
            .into_iter()
            .next())
    }

    /// Exactly one row; none is an error that names `what`.
    async fn one<T: Record>(
        self,
        target: Target<'_, '_>,
        what: &'static str,
    ) -> Result<T, StoreError> {
        self.rows(target, Mode::One, what)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| ctx(what)(sqlx::Error::RowNotFound))
    }

    async fn rows<T: Record>(
        self,
        target: Target<'_, '_>,
        mode: Mode,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        match self.run(target, mode, what).await? {
            Out::Sqlite(rows) => rows.iter().map(T::from_row).collect::<Result<_, _>>(),
            Out::Postgres(rows) => rows.iter().map(T::from_row).collect::<Result<_, _>>(),
            Out::Affected(_) => Ok(Vec::new()),
        }
        .map_err(ctx(what))
    }

    /// Runs the statement on its backend.
    async fn run(
        self,
        target: Target<'_, '_>,
        mode: Mode,
        what: &'static str,
    ) -> Result<Out, StoreError> {
        let write = self.writes || matches!(mode, Mode::Execute);
        let text = self.text;
        let args = &self.args;
        match target {
            Target::Pool(Db::Sqlite {
                pool,
                write_lock,
                durable,
                ..
            }) if write => {
                let mut w = write_lock.lock_for(what).await;
                if let (Mode::Execute, Some(lite)) = (mode, w.lite().await) {
                    let ran = lite.run_whole(&text, args);
                    release(w, *durable && ran.is_ok(), what).await?;
                    return ran.map(|r| Out::Affected(r.affected)).map_err(ctx(what));
                }
                let mut conn = w.conn(pool).await.map_err(ctx(what))?;
                let ran = run_on!(&mut *conn, text, args, mode, Sqlite);
                w.park(conn, super::stash::clean(&ran));
                release(w, *durable && ran.is_ok(), what).await?;
                ran
            }
            Target::Pool(Db::Sqlite { pool, reads, .. }) => {
                let mut conn = reads.take(pool).await.map_err(ctx(what))?;
                let ran = run_on!(&mut *conn, text, args, mode, Sqlite);
                reads.put(conn, super::stash::clean(&ran));
                ran
            }
            Target::Pool(Db::Postgres(pool, stash)) => {
                let mut conn = stash.take(pool).await.map_err(ctx(what))?;
                let ran = run_on!(&mut *conn, text, args, mode, Postgres);
                stash.put(conn, super::stash::clean(&ran));
                ran
            }
            Target::Tx(Tx::Sqlite { w, .. }) => match w.running_conn() {
                Some(conn) => run_on!(&mut **conn, text, args, mode, Sqlite),
                None => Err(sqlx::Error::PoolClosed),
            },
            Target::Tx(Tx::Postgres(tx)) => run_on!(&mut **tx, text, args, mode, Postgres),
        }
        .map_err(ctx(what))
    }
}

/// The rows a script returns, in order.
fn rows_of<T: Record>(out: Out) -> Result<Vec<T>, sqlx::Error> {
    match out {
        Out::Sqlite(rows) => rows.iter().map(T::from_row).collect(),
        _ => Ok(Vec::new()),
    }
}

impl Stmt<'_> {
    /// SQLite: runs a script — statements from `BEGIN IMMEDIATE` to `COMMIT`, whose rows each
    /// return an id — in one call to a connection, holding the process's write lock, and
    /// returns those ids. Every statement sent through sqlx is a trip to the connection's
    /// thread made while holding the one write lock: one trip instead of several per row is
    /// what lets a single SQLite writer keep up with the worker pool. On failure it rolls
    /// back, and if it is dropped midway the next holder of the lock does
    /// ([`WriteGuard::script_conn`]), so no transaction stays open on a pooled connection.
    pub(super) async fn sqlite_script_ids(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<Vec<i64>, StoreError> {
        let rows: Vec<(i64,)> = self.sqlite_script_rows(db, what).await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// [`Stmt::sqlite_script_ids`], for rows of any shape.
    pub(super) async fn sqlite_script_rows<T: Record + FromLite>(
        self,
        db: &Db,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        let Db::Sqlite {
            pool,
            write_lock,
            durable,
            ..
        } = db
        else {
            return Err(StoreError::Other(format!(
                "cannot {what}: a multi-statement script runs on SQLite only"
            )));
        };
        let w = write_lock.lock_for(what).await;
        run_script(w, pool, &self.text, &self.args, *durable, what).await
    }
}

/// Runs a script from `BEGIN IMMEDIATE` to `COMMIT` under the lock `w` holds, in one trip,
/// rolling it back if it fails, and lets the lock go (returning once on disk when `durable`).
/// Its rows. On the write connection run on the caller's thread when there is one (`lite.rs`).
async fn run_script<T: Record + FromLite>(
    mut w: WriteGuard<'_>,
    pool: &sqlx::SqlitePool,
    text: &str,
    args: &[Arg<'_>],
    durable: bool,
    what: &'static str,
) -> Result<Vec<T>, StoreError> {
    if let Some(lite) = w.lite().await {
        let ran = lite.run_whole(text, args).and_then(decode);
        release(w, durable && ran.is_ok(), what).await?;
        return ran.map_err(ctx(what));
    }
    let conn = w.script_conn(pool).await.map_err(ctx(what))?;
    let ran = run_on!(&mut **conn, text, args, Mode::All, Sqlite).and_then(rows_of);
    if ran.is_err() {
        let _ = sqlx::query("ROLLBACK").execute(&mut **conn).await;
    }
    w.script_ended();
    release(w, durable && ran.is_ok(), what).await?;
    ran.map_err(ctx(what))
}

/// Ends the transaction `w` holds with `end` (`COMMIT` or `ROLLBACK`). If that fails, the
/// transaction stays marked running, for the next holder of the lock to roll back.
async fn end_tx(w: &mut WriteGuard<'_>, end: &'static str) -> Result<(), sqlx::Error> {
    let conn = w.running_conn().ok_or(sqlx::Error::PoolClosed)?;
    sqlx::query(end).execute(&mut **conn).await?;
    w.script_ended();
    Ok(())
}

/// Lets the write lock go after a write committed under it and, when `synced`, returns once
/// that write is on disk: the log is synced outside the lock, as for a group of new sales.
async fn release(w: WriteGuard<'_>, synced: bool, what: &str) -> Result<(), StoreError> {
    let lock = w.lock();
    let ticket = synced.then(|| lock.committed());
    drop(w);
    if let Some(ticket) = ticket {
        lock.sync_through(ticket).await.map_err(|e| {
            StoreError::Other(format!(
                "cannot {what}: committed but not synced to the disk ({e}); check the disk"
            ))
        })?;
    }
    Ok(())
}

/// An open transaction; dropped without [`Tx::commit`] it rolls back. On SQLite it holds the
/// process's write lock until it ends (the transaction is dropped before the lock).
pub(super) enum Tx<'l> {
    /// Run on the write lock's connection, held in the lock's slot marked running until
    /// [`Tx::commit`] or [`Tx::rollback`]: dropped before, it is rolled back by the next
    /// holder of the lock, before any other write.
    Sqlite {
        w: WriteGuard<'l>,
        /// Its commit returns once on disk.
        durable: bool,
    },
    Postgres(Transaction<'static, Postgres>),
}

impl Tx<'_> {
    /// Which SQL to pick where the backends differ.
    pub(super) fn dialect(&self) -> Dialect {
        match self {
            Tx::Sqlite { .. } => Dialect::Sqlite,
            Tx::Postgres(_) => Dialect::Postgres,
        }
    }

    pub(super) async fn commit(self, what: &'static str) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite { mut w, durable } => {
                w.write = what;
                end_tx(&mut w, "COMMIT").await.map_err(ctx(what))?;
                release(w, durable, what).await
            }
            Tx::Postgres(tx) => tx.commit().await.map_err(ctx(what)),
        }
    }

    /// [`Tx::commit`], returning only once the transaction is on disk, on the worker pool's
    /// handle too, whose commits do not wait for it: for what is sent out next and must never
    /// be taken back by a power loss (ARCA's numbers, `arca_claim.rs`).
    pub(super) async fn commit_durable(mut self, what: &'static str) -> Result<(), StoreError> {
        match &mut self {
            Tx::Sqlite { durable, .. } => *durable = true,
            // For this transaction alone; the pool's connections keep theirs.
            Tx::Postgres(tx) => {
                sqlx::query("SET LOCAL synchronous_commit = on")
                    .execute(&mut **tx)
                    .await
                    .map_err(ctx(what))?;
            }
        }
        self.commit(what).await
    }

    pub(super) async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite { mut w, .. } => end_tx(&mut w, "ROLLBACK").await,
            Tx::Postgres(tx) => tx.rollback().await,
        }
        .map_err(ctx("roll back"))
    }
}

impl Db {
    /// Which SQL to pick where the backends differ.
    pub(super) fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite { .. } => Dialect::Sqlite,
            Db::Postgres(..) => Dialect::Postgres,
        }
    }

    /// Starts a transaction (SQLite: after queueing on the write lock, `BEGIN IMMEDIATE`, which
    /// takes SQLite's lock up front).
    pub(super) async fn begin(&self) -> Result<Tx<'_>, StoreError> {
        match self {
            Db::Sqlite {
                pool,
                write_lock,
                durable,
                ..
            } => {
                let mut w = write_lock.lock_for("a transaction rolled back").await;
                let conn = w
                    .script_conn(pool)
                    .await
                    .map_err(ctx("begin a transaction"))?;
                if let Err(e) = sqlx::query("BEGIN IMMEDIATE").execute(&mut **conn).await {
                    // Nothing began.
                    w.script_ended();
                    return Err(ctx("begin a transaction")(e));
                }
                Ok(Tx::Sqlite {
                    w,
                    durable: *durable,
                })
            }
            Db::Postgres(pool, ..) => Ok(Tx::Postgres(
                pool.begin().await.map_err(ctx("begin a transaction"))?,
            )),
        }
    }
}

#[path = "exec_sale.rs"]
mod sale;

#[cfg(test)]
mod tests {
    use super::shift_params;

    #[test]
    fn placeholders_are_renumbered_and_nothing_else_changes() {
        assert_eq!(
            shift_params("UPDATE t SET a = $1, b = $12 WHERE c = '$' AND d = $2", 12),
            "UPDATE t SET a = $13, b = $24 WHERE c = '$' AND d = $14"
        );
        assert_eq!(shift_params("SELECT 1", 5), "SELECT 1");
        assert_eq!(
            shift_params("SELECT $$x$$, 'é', $3, $", 1),
            "SELECT $$x$$, 'é', $4, $"
        );
    }
}
