//! SQLite's write connection, run on the caller's thread: the statements of a write go straight
//! to SQLite while the write lock is held, without the trip to a connection thread and back
//! that sqlx makes for every call (about 30 µs of CPU each, in system calls and wake-ups, for
//! statements that take about 40 µs themselves). It runs what the appliance writes many times a
//! second: new sales, the worker pool's claims, numbering, seals, settles and logs. Transactions
//! and the rarer claims still run on sqlx's write connection, under the same lock
//! (`writer.rs`).
//!
//! Statements are the store's own (`$n` placeholders, scripts of several statements, the same
//! [`Arg`]s), bound as sqlx binds them, so what is stored does not depend on the connection
//! that wrote it. Errors come back as `sqlx::Error`s, as from any other connection.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};

use super::exec::Arg;

/// Scripts split into their statements, kept at most this many (then started over): scripts
/// differ by their number of rows, a handful of shapes each.
const SCRIPTS_KEPT: usize = 256;

/// The write connection ([`Lite::open`]).
pub(super) struct Lite {
    conn: Connection,
    /// Each script's statements, in order.
    scripts: HashMap<Box<str>, Arc<[String]>>,
}

impl std::fmt::Debug for Lite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lite")
            .field("scripts", &self.scripts.len())
            .finish()
    }
}

/// What a statement or script returned: its rows, and the rows its writes changed.
#[derive(Debug, Default)]
pub(super) struct Ran {
    pub(super) rows: Vec<LiteRow>,
    pub(super) affected: u64,
}

/// One row, its values by column.
#[derive(Debug)]
pub(super) struct LiteRow {
    names: Arc<[String]>,
    values: Vec<Value>,
}

impl LiteRow {
    /// The value of column `name`.
    pub(super) fn named(&self, name: &str) -> Result<&Value, String> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| &self.values[i])
            .ok_or_else(|| format!("no column {name}"))
    }

    /// The value of the column at `i`.
    pub(super) fn at(&self, i: usize) -> Result<&Value, String> {
        self.values
            .get(i)
            .ok_or_else(|| format!("no column {i} of {}", self.values.len()))
    }
}

impl Lite {
    /// Opens `file` for writing as sqlx's write connection did: the log's commits not waited
    /// for (`synchronous = NORMAL`, synced outside the lock), no checkpoint on commit (they
    /// run beside the writers), foreign keys on, and a busy wait for other processes.
    pub(super) fn open(file: &Path) -> Result<Self, sqlx::Error> {
        let conn = Connection::open_with_flags(
            file,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(error)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(error)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;
             PRAGMA wal_autocheckpoint = 0;
             PRAGMA journal_size_limit = 67108864;",
        )
        .map_err(error)?;
        // Every write statement of the process is prepared on it.
        conn.set_prepared_statement_cache_capacity(512);
        Ok(Lite {
            conn,
            scripts: HashMap::new(),
        })
    }

    /// Runs `text`, one statement or a script of several separated by `;`, with `args` (the
    /// `$n`-th is `args[n - 1]` in every statement). Its rows, in order, and what it changed.
    pub(super) fn run(&mut self, text: &str, args: &[Arg<'_>]) -> Result<Ran, sqlx::Error> {
        let statements = self.statements(text);
        let mut ran = Ran::default();
        for sql in statements.iter() {
            let mut st = self.conn.prepare_cached(sql).map_err(error)?;
            for i in 1..=st.parameter_count() {
                let n = st
                    .parameter_name(i)
                    .and_then(|name| name.strip_prefix(['$', '?']))
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(i);
                let arg = n.checked_sub(1).and_then(|k| args.get(k)).ok_or_else(|| {
                    sqlx::Error::Protocol(format!("no argument ${n} for `{sql}`"))
                })?;
                bind(&mut st, i, arg).map_err(error)?;
            }
            if st.column_count() == 0 {
                ran.affected += st.raw_execute().map_err(error)? as u64;
                continue;
            }
            let names: Arc<[String]> = st.column_names().iter().map(|n| n.to_string()).collect();
            let writes = !st.readonly();
            let mut rows = st.raw_query();
            while let Some(row) = rows.next().map_err(error)? {
                let values = (0..names.len())
                    .map(|i| row.get::<_, Value>(i))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(error)?;
                ran.rows.push(LiteRow {
                    names: names.clone(),
                    values,
                });
            }
            drop(rows);
            if writes {
                ran.affected += self.conn.changes();
            }
        }
        Ok(ran)
    }

    /// [`Lite::run`] for a write that must not stay half done: on failure, a transaction its
    /// statements left open is rolled back.
    pub(super) fn run_whole(&mut self, text: &str, args: &[Arg<'_>]) -> Result<Ran, sqlx::Error> {
        let ran = self.run(text, args);
        if ran.is_err() {
            self.roll_back_open();
        }
        ran
    }

    /// Ends the open transaction with `end` (`COMMIT` or `ROLLBACK`).
    pub(super) fn end(&self, end: &str) -> Result<(), sqlx::Error> {
        self.conn
            .prepare_cached(end)
            .map_err(error)?
            .raw_execute()
            .map_err(error)?;
        Ok(())
    }

    /// Rolls back a transaction left open by a failed statement, if one is.
    pub(super) fn roll_back_open(&self) {
        if !self.conn.is_autocommit() {
            let _ = self.end("ROLLBACK");
        }
    }

    /// `text`'s statements, split once and kept.
    fn statements(&mut self, text: &str) -> Arc<[String]> {
        if let Some(s) = self.scripts.get(text) {
            return s.clone();
        }
        if self.scripts.len() >= SCRIPTS_KEPT {
            self.scripts.clear();
        }
        let split: Arc<[String]> = split(text).into();
        self.scripts.insert(text.into(), split.clone());
        split
    }
}

/// Binds `arg` as sqlx binds it on SQLite: times as their text (RFC 3339 with `T`, naive ones
/// `YYYY-MM-DD HH:MM:SS.f`), booleans as 0 and 1.
fn bind(st: &mut rusqlite::Statement<'_>, i: usize, arg: &Arg<'_>) -> rusqlite::Result<()> {
    match arg {
        Arg::Str(v) => st.raw_bind_parameter(i, v.as_deref()),
        Arg::I64(v) => st.raw_bind_parameter(i, v),
        Arg::I32(v) => st.raw_bind_parameter(i, v),
        Arg::Bool(v) => st.raw_bind_parameter(i, v.map(i64::from)),
        Arg::Time(v) => st.raw_bind_parameter(
            i,
            v.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)),
        ),
        Arg::Naive(v) => st.raw_bind_parameter(i, v.map(|t| t.format("%F %T%.f").to_string())),
        Arg::Bytes(v) => st.raw_bind_parameter(i, v.as_deref()),
    }
}

/// The statements of a script, split at each `;` outside quotes and comments; empty ones left
/// out.
fn split(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quote: Option<u8> = None;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'\'' || c == b'"' => quote = Some(c),
            None if c == b'-' && bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            None if c == b';' => {
                out.push(text[start..i].trim().to_owned());
                start = i + 1;
            }
            None => {}
        }
        i += 1;
    }
    out.push(text[start..].trim().to_owned());
    out.retain(|s| !s.is_empty());
    out
}

/// SQLite's error as sqlx reports a database's: its message, and a constraint's kind.
fn error(e: rusqlite::Error) -> sqlx::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => sqlx::Error::Database(Box::new(Failed {
            message: message.unwrap_or_else(|| code.to_string()),
            code: code.extended_code,
        })),
        e => sqlx::Error::Protocol(e.to_string()),
    }
}

/// An error SQLite returned.
#[derive(Debug)]
struct Failed {
    message: String,
    /// SQLite's extended result code.
    code: std::ffi::c_int,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failed {}

impl sqlx::error::DatabaseError for Failed {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(self.code.to_string().into())
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        use rusqlite::ffi;
        match self.code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                sqlx::error::ErrorKind::UniqueViolation
            }
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => sqlx::error::ErrorKind::ForeignKeyViolation,
            ffi::SQLITE_CONSTRAINT_NOTNULL => sqlx::error::ErrorKind::NotNullViolation,
            ffi::SQLITE_CONSTRAINT_CHECK => sqlx::error::ErrorKind::CheckViolation,
            _ => sqlx::error::ErrorKind::Other,
        }
    }
}

/// A row read from the write connection.
pub(super) trait FromLite: Sized {
    fn from_lite(row: &LiteRow) -> Result<Self, String>;
}

/// A column's value as a Rust type, read as sqlx reads it.
pub(super) trait LiteValue: Sized {
    fn from_value(v: &Value) -> Result<Self, String>;
}

/// The rows `ran` returned, as `T`s.
pub(super) fn decode<T: FromLite>(ran: Ran) -> Result<Vec<T>, sqlx::Error> {
    ran.rows
        .iter()
        .map(T::from_lite)
        .collect::<Result<_, _>>()
        .map_err(|e| sqlx::Error::Decode(e.into()))
}

fn mismatch<T>(v: &Value, want: &str) -> Result<T, String> {
    let got = match v {
        Value::Null => "NULL",
        Value::Integer(_) => "an integer",
        Value::Real(_) => "a real",
        Value::Text(_) => "text",
        Value::Blob(_) => "a blob",
    };
    Err(format!("{got} is not {want}"))
}

impl LiteValue for i64 {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Integer(i) => Ok(*i),
            v => mismatch(v, "an integer"),
        }
    }
}

impl LiteValue for i32 {
    fn from_value(v: &Value) -> Result<Self, String> {
        i32::try_from(i64::from_value(v)?).map_err(|e| e.to_string())
    }
}

impl LiteValue for bool {
    fn from_value(v: &Value) -> Result<Self, String> {
        Ok(i64::from_value(v)? != 0)
    }
}

impl LiteValue for String {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            v => mismatch(v, "text"),
        }
    }
}

impl LiteValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            Value::Text(s) => Ok(s.as_bytes().to_vec()),
            v => mismatch(v, "a blob"),
        }
    }
}

impl<T: LiteValue> LiteValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

impl LiteValue for crate::domain::DocumentState {
    fn from_value(v: &Value) -> Result<Self, String> {
        String::from_value(v)?.parse().map_err(|e| format!("{e}"))
    }
}

impl FromLite for super::rows::ClaimedStamp {
    fn from_lite(row: &LiteRow) -> Result<Self, String> {
        fn get<T: LiteValue>(row: &LiteRow, name: &str) -> Result<T, String> {
            T::from_value(row.named(name)?).map_err(|e| format!("column {name}: {e}"))
        }
        Ok(Self {
            id: get(row, "id")?,
            claimed_from: get(row, "claimed_from")?,
            stamp_key: get(row, "stamp_key")?,
            request_json: get(row, "request_json")?,
            sealed_xml: get(row, "sealed_xml")?,
            attempts: get(row, "attempts")?,
            test_mode: get(row, "test_mode")?,
            pac_route: get(row, "pac_route")?,
            serie: get(row, "serie")?,
            folio: get(row, "folio")?,
            payment_ref: get(row, "payment_ref")?,
        })
    }
}

macro_rules! tuple_from_lite {
    ($($t:ident $i:tt),+) => {
        impl<$($t: LiteValue),+> FromLite for ($($t,)+) {
            fn from_lite(row: &LiteRow) -> Result<Self, String> {
                Ok(($($t::from_value(row.at($i)?)?,)+))
            }
        }
    };
}
tuple_from_lite!(A 0);
tuple_from_lite!(A 0, B 1);
tuple_from_lite!(A 0, B 1, C 2);

#[cfg(test)]
mod tests {
    use super::{Lite, split};
    use crate::store::exec::Arg;
    use chrono::{TimeZone, Utc};
    use std::borrow::Cow;

    /// Every kind of argument is stored as sqlx stores it: the same values, of the same types,
    /// whichever connection wrote them.
    #[tokio::test]
    async fn values_are_stored_as_sqlx_stores_them() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("t.db");
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let pool = sqlx::SqlitePool::connect(&url).await.expect("pool");
        sqlx::query("CREATE TABLE t (k TEXT, s TEXT, i INTEGER, j INTEGER, b INTEGER, t TEXT, n TEXT, x BLOB)")
            .execute(&pool)
            .await
            .expect("table");
        let at = Utc.with_ymd_and_hms(2026, 12, 7, 4, 5, 6).unwrap()
            + chrono::Duration::microseconds(789);
        let insert = "INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        sqlx::query(insert)
            .bind("sqlx")
            .bind("añ'o")
            .bind(-7_i64)
            .bind(3_i32)
            .bind(true)
            .bind(at)
            .bind(at.naive_utc())
            .bind(&b"\x00\x01"[..])
            .execute(&pool)
            .await
            .expect("sqlx insert");
        let mut lite = Lite::open(&file).expect("open");
        let args = [
            Arg::Str(Some(Cow::Borrowed("lite"))),
            Arg::Str(Some(Cow::Borrowed("añ'o"))),
            Arg::I64(Some(-7)),
            Arg::I32(Some(3)),
            Arg::Bool(Some(true)),
            Arg::Time(Some(at)),
            Arg::Naive(Some(at.naive_utc())),
            Arg::Bytes(Some(Cow::Borrowed(&b"\x00\x01"[..]))),
        ];
        let ran = lite.run(insert, &args).expect("lite insert");
        assert_eq!(ran.affected, 1);
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT k, quote(s) || quote(i) || quote(j) || quote(b) || quote(t) || quote(n) || quote(x) \
             || typeof(s) || typeof(i) || typeof(j) || typeof(b) || typeof(t) || typeof(n) || typeof(x) \
             FROM t ORDER BY k DESC",
        )
        .fetch_all(&pool)
        .await
        .expect("read");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].1, rows[1].1, "sqlx: {rows:?}");
        let nulls = [
            Arg::Str(Some(Cow::Borrowed("none"))),
            Arg::Str(None),
            Arg::I64(None),
            Arg::I32(None),
            Arg::Bool(None),
            Arg::Time(None),
            Arg::Naive(None),
            Arg::Bytes(None),
        ];
        lite.run(insert, &nulls).expect("nulls");
        let (count,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM t WHERE k = 'none' AND coalesce(s, i, j, b, t, n, x) IS NULL",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        assert_eq!(count, 1);
    }

    /// A script's `$n` is the n-th argument in every statement, in any order, and its rows come
    /// back in order; a failed statement leaves nothing open.
    #[test]
    fn a_script_binds_by_number_and_returns_its_rows() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("t.db");
        // An empty file is an empty database.
        std::fs::File::create(&file).expect("file");
        let mut lite = Lite::open(&file).expect("open");
        lite.run("CREATE TABLE t (a INTEGER, b TEXT)", &[])
            .expect("table");
        let args = [Arg::I64(Some(5)), Arg::Str(Some(Cow::Borrowed("x")))];
        let ran = lite
            .run(
                "BEGIN IMMEDIATE;\nINSERT INTO t (b, a) VALUES ($2, $1);\n\
                 INSERT INTO t (a, b) VALUES ($1 + 1, $2 || $2) RETURNING a, b;\nCOMMIT",
                &args,
            )
            .expect("script");
        let rows: Vec<(i64, String)> = super::decode(ran).expect("rows");
        assert_eq!(rows, vec![(6, "xx".to_owned())]);
        assert!(
            lite.run("SELECT $0", &args).is_err(),
            "a placeholder without its argument is an error"
        );
        let failed = lite.run(
            "BEGIN IMMEDIATE;\nINSERT INTO nowhere VALUES (1);\nCOMMIT",
            &[],
        );
        assert!(failed.is_err());
        lite.roll_back_open();
        assert!(lite.conn.is_autocommit());
        let ran = lite.run("SELECT count(*) FROM t", &[]).expect("count");
        assert_eq!(super::decode::<(i64,)>(ran).expect("count"), vec![(2,)]);
    }

    #[test]
    fn a_script_splits_at_semicolons_outside_quotes_and_comments() {
        assert_eq!(
            split("BEGIN IMMEDIATE;\nINSERT INTO t VALUES ('a;b', \"c;\"); -- x; y\nCOMMIT;"),
            vec![
                "BEGIN IMMEDIATE",
                "INSERT INTO t VALUES ('a;b', \"c;\")",
                "-- x; y\nCOMMIT"
            ]
        );
        assert_eq!(split("SELECT 1"), vec!["SELECT 1"]);
    }
}
