//! The outcome of a stamping attempt: the outbox row's state after the PAC answered (or did
//! not), with the attempt that led to it and the merchant's webhook, in one write — one
//! outcome, or a batch of stamped ones. It is the outbox's (see `outbox.rs`), apart only
//! because the two would pass 800 lines together.
//!
//! The worker's drain rests on these writes, so their SQL is the one place a statement is
//! written per backend on purpose (see [`settle_sql`] and [`SETTLE_STAMPED_MANY_PG`]).

use chrono::{DateTime, Utc};

use super::attempts::{Attempt, INSERT_ATTEMPT, bind_attempt, counted};
use super::deliveries::{QUEUE_STAMPED, QUEUE_STAMPED_MANY_PG, stamped_message_id};
use super::exec::{Dialect, Stmt, column, shift_params, stmt};
use super::merchant::MERCHANT_EVENT;
use super::stash::clean;
use super::{Db, StoreError, ctx};
use crate::domain::DocumentState;

/// A stamping attempt's outcome ($7 the row, $8 the lease owner): stamped…
const SETTLE_STAMPED: &str = "UPDATE outbox SET state = 'stamped', uuid = $1, tfd_xml = $2, stamped_xml = $3, \
     fecha_timbrado = $4, stamped_at = $5, flag = COALESCE($6, flag), lease_owner = NULL, \
     lease_expires_at = NULL, last_error_code = NULL, last_error_message = NULL, updated_at = $5 \
     WHERE id = $7 AND lease_owner = $8 AND state || '' = 'stamping'";
/// …to be tried again at `run_at`…
const SETTLE_LATER: &str = "UPDATE outbox SET state = $1, run_at = $2, last_error_code = $3, last_error_message = $4, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = $5, uuid = $6 \
     WHERE id = $7 AND lease_owner = $8 AND state || '' = 'stamping'";
/// …or final, for a human.
const SETTLE_FINAL: &str = "UPDATE outbox SET state = $1, last_error_code = $2, last_error_message = $3, \
     lease_owner = NULL, lease_expires_at = NULL, updated_at = $4, run_at = $4, uuid = $5, \
     flag = COALESCE($6, flag) WHERE id = $7 AND lease_owner = $8 AND state || '' = 'stamping'";

/// What a stamping attempt leaves in the row.
#[derive(Debug, Clone)]
pub enum Settle<'a> {
    Stamped {
        uuid: &'a str,
        tfd_xml: &'a str,
        stamped_xml: &'a [u8],
        fecha_timbrado: &'a str,
        flag: Option<&'a str>,
    },
    /// `retry_scheduled` or `unknown`, run again at `run_at`.
    Later {
        state: DocumentState,
        run_at: DateTime<Utc>,
        code: Option<&'a str>,
        message: &'a str,
    },
    /// `failed` or `expired`: a human decides.
    Final {
        state: DocumentState,
        code: Option<&'a str>,
        message: &'a str,
    },
}

impl<'a> Settle<'a> {
    /// The UPDATE that records this outcome ($7 the row, $8 the lease owner).
    fn update_sql(&self) -> &'static str {
        match self {
            Settle::Stamped { .. } => SETTLE_STAMPED,
            Settle::Later { .. } => SETTLE_LATER,
            Settle::Final { .. } => SETTLE_FINAL,
        }
    }

    /// A stamped outcome's fields: uuid, TFD, stamped XML, FechaTimbrado and flag.
    #[allow(clippy::type_complexity)]
    fn stamped(&self) -> Option<(&'a str, &'a str, &'a [u8], &'a str, Option<&'a str>)> {
        match *self {
            Settle::Stamped {
                uuid,
                tfd_xml,
                stamped_xml,
                fecha_timbrado,
                flag,
            } => Some((uuid, tfd_xml, stamped_xml, fecha_timbrado, flag)),
            _ => None,
        }
    }

    /// Binds this outcome's own arguments (`$1`–`$6` of its [`Settle::update_sql`]) to `q`.
    fn bind(&self, q: Stmt<'a>, now: DateTime<Utc>) -> Stmt<'a> {
        let none = None::<String>;
        if let Some((uuid, tfd_xml, stamped_xml, fecha_timbrado, flag)) = self.stamped() {
            return q
                .bind(uuid)
                .bind(tfd_xml)
                .bind(stamped_xml)
                .bind(fecha_timbrado)
                .bind(now)
                .bind(flag);
        }
        match *self {
            // Bound above.
            Settle::Stamped { .. } => q,
            Settle::Later {
                state,
                run_at,
                code,
                message,
            } => q
                .bind(state)
                .bind(run_at)
                .bind(code)
                .bind(message)
                .bind(now)
                .bind(none),
            Settle::Final {
                state,
                code,
                message,
            } => q
                .bind(state)
                .bind(code)
                .bind(message)
                .bind(now)
                .bind(none.clone())
                .bind(none),
        }
    }

    /// The merchant event this outcome triggers (for any document: sale, API invoice, egreso,
    /// global or REP).
    fn merchant_event(&self) -> Option<&'static str> {
        match self {
            Settle::Stamped { .. } => Some("invoice.stamped"),
            // Final states are definite non-stamps; an unknown outcome is never final.
            Settle::Final { state, .. }
                if matches!(*state, DocumentState::Failed | DocumentState::Expired) =>
            {
                Some("invoice.failed")
            }
            _ => None,
        }
    }
}

/// One settle as one statement, and its arguments in order: the attempt's twelve when there is
/// one, then the settle's eight, then the merchant event's. The SQL differs because the
/// backends differ in how a write is made cheap:
/// - PostgreSQL: data-modifying `WITH` parts (the attempt, the outcome and the merchant's
///   event, each run once): one round trip and one implicit transaction, evaluating to the
///   number of outbox rows updated (0 when the lease was lost);
/// - SQLite: several settles in one script for [`Stmt::sqlite_script_ids`] — `BEGIN
///   IMMEDIATE`, then for each the attempt, the outcome (returning the row's id when the lease
///   still held) and the merchant's event, then `COMMIT`.
///
/// (On PostgreSQL it takes one settle: a batch goes through [`SETTLE_STAMPED_MANY_PG`].)
fn settle_sql(
    d: Dialect,
    settles: &[(i64, Settle<'_>, Option<Attempt<'_>>)],
    mail: Option<&str>,
) -> String {
    let mut sql = String::from(match d {
        Dialect::Sqlite => "BEGIN IMMEDIATE;\n",
        Dialect::Postgres => "WITH ",
    });
    let mut used = 0;
    for (_, s, attempt) in settles {
        if attempt.is_some() {
            let insert = shift_params(INSERT_ATTEMPT, used);
            match d {
                Dialect::Sqlite => sql.push_str(&format!("{insert};\n")),
                Dialect::Postgres => sql.push_str(&format!("logged AS ({insert}), ")),
            }
            used += 12;
        }
        let update = shift_params(s.update_sql(), used);
        match d {
            Dialect::Sqlite => sql.push_str(&format!("{update} RETURNING id;\n")),
            Dialect::Postgres => sql.push_str(&format!("settled AS ({update} RETURNING id)")),
        }
        used += 8;
        if s.merchant_event().is_some() {
            // Only when the outcome was written: SQLite asks `changes()` (the UPDATE's count),
            // PostgreSQL whether `settled` returned the row.
            let event = shift_params(MERCHANT_EVENT, used);
            match d {
                Dialect::Sqlite => sql.push_str(&format!("{event} AND changes() = 1;\n")),
                Dialect::Postgres => sql.push_str(&format!(
                    ", queued AS ({event} AND EXISTS (SELECT 1 FROM settled))"
                )),
            }
            used += 3;
        }
        if mail.is_some() && s.stamped().is_some() {
            // The customer's email, queued with the stamp (see `deliveries.rs`).
            let queue = shift_params(QUEUE_STAMPED.text(d), used);
            match d {
                Dialect::Sqlite => sql.push_str(&format!("{queue};\n")),
                Dialect::Postgres => sql.push_str(&format!(", mailed AS ({queue})")),
            }
            used += 3;
        }
    }
    sql.push_str(match d {
        Dialect::Sqlite => "COMMIT;",
        Dialect::Postgres => " SELECT count(*) FROM settled",
    });
    sql
}

/// [`settle_sql`]'s arguments.
fn bind_settles<'a>(
    mut q: Stmt<'a>,
    owner: &'a str,
    settles: &[(i64, Settle<'a>, Option<Attempt<'a>>)],
    mail: Option<&str>,
    now: DateTime<Utc>,
) -> Stmt<'a> {
    for (id, s, attempt) in settles {
        if let Some(a) = attempt {
            q = bind_attempt(q, a, now);
        }
        q = s.bind(q, now).bind(*id).bind(owner);
        if let Some(e) = s.merchant_event() {
            q = q.bind(e).bind(now).bind(*id);
        }
        if let Some(message_id) = s.stamped().and_then(|st| stamped_message_id(st.0, mail)) {
            q = q.bind(message_id).bind(now).bind(*id);
        }
    }
    q
}

/// A stamp's outcome and the call that brought it, owned, so that several can be stored in one
/// write ([`Db::settle_stamped_many`]).
#[derive(Debug, Clone)]
pub struct StampedOutcome {
    pub id: i64,
    pub uuid: String,
    pub tfd_xml: String,
    pub stamped_xml: Vec<u8>,
    pub fecha_timbrado: String,
    pub flag: Option<String>,
    /// The attempt log's `pac`, `outcome`, `code`, `http_status` and `latency_ms`.
    pub pac: String,
    pub outcome: String,
    pub code: Option<String>,
    pub http_status: Option<i32>,
    pub latency_ms: i64,
}

impl StampedOutcome {
    /// The owned form of a stamped settle of row `id` with the stamp call that brought it;
    /// `None` for any other outcome, or one without its call.
    pub fn of(id: i64, s: &Settle<'_>, attempt: Option<&Attempt<'_>>) -> Option<Self> {
        let ((uuid, tfd_xml, stamped_xml, fecha_timbrado, flag), a) = (s.stamped()?, attempt?);
        (a.operation == "stamp" && a.message.is_none()).then(|| StampedOutcome {
            id,
            uuid: uuid.to_owned(),
            tfd_xml: tfd_xml.to_owned(),
            stamped_xml: stamped_xml.to_vec(),
            fecha_timbrado: fecha_timbrado.to_owned(),
            flag: flag.map(str::to_owned),
            pac: a.pac.to_owned(),
            outcome: a.outcome.to_owned(),
            code: a.code.map(str::to_owned),
            http_status: a.http_status,
            latency_ms: a.latency_ms,
        })
    }

    fn settle(&self) -> Settle<'_> {
        Settle::Stamped {
            uuid: &self.uuid,
            tfd_xml: &self.tfd_xml,
            stamped_xml: &self.stamped_xml,
            fecha_timbrado: &self.fecha_timbrado,
            flag: self.flag.as_deref(),
        }
    }

    fn attempt<'a>(&'a self, worker: &'a str) -> Attempt<'a> {
        Attempt {
            outbox_id: Some(self.id),
            cancellation_id: None,
            operation: "stamp",
            pac: &self.pac,
            outcome: &self.outcome,
            http_status: self.http_status,
            code: self.code.as_deref(),
            message: None,
            latency_ms: self.latency_ms,
            uuid: Some(&self.uuid),
            worker,
        }
    }
}

/// PostgreSQL: several stamped outcomes in one statement, as [`settle_sql`] stores one: the
/// attempts, the rows (each only while `$14` holds its lease) and the merchants' events.
/// Arguments are arrays, one element per outcome, so the text is the same for any number of
/// them. (SQLite has no arrays: it runs [`settle_sql`]'s script of several settles.) `$15`
/// holds each customer's email Message-ID (NULL: no email), queued by `{MAILED}`.
const SETTLE_STAMPED_MANY_PG: &str = "WITH v AS (SELECT * FROM unnest($1::bigint[], $2::text[], \
     $3::text[], $4::bytea[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], \
     $10::int[], $11::bigint[], $15::text[]) AS v(id, uuid, tfd_xml, stamped_xml, fecha_timbrado, \
     flag, pac, outcome, code, http_status, latency_ms, message_id)), \
     logged AS (INSERT INTO pac_attempts (outbox_id, cancellation_id, operation, pac, outcome, \
     http_status, code, message, latency_ms, uuid, worker, at) \
     SELECT id, NULL, 'stamp', pac, outcome, http_status, code, NULL, latency_ms, uuid, $12, $13 \
     FROM v), \
     settled AS (UPDATE outbox o SET state = 'stamped', uuid = v.uuid, tfd_xml = v.tfd_xml, \
     stamped_xml = v.stamped_xml, fecha_timbrado = v.fecha_timbrado, stamped_at = $13, \
     flag = COALESCE(v.flag, o.flag), lease_owner = NULL, lease_expires_at = NULL, \
     last_error_code = NULL, last_error_message = NULL, updated_at = $13 \
     FROM v WHERE o.id = v.id AND o.lease_owner = $14 AND o.state || '' = 'stamping' \
     RETURNING o.id), \
     queued AS (INSERT INTO merchant_events (outbox_id, event_type, state, attempts, run_at, \
     created_at) SELECT id, 'invoice.stamped', 'pending', 0, $13, $13 FROM settled), {MAILED} \
     SELECT id FROM settled";

/// [`SETTLE_STAMPED_MANY_PG`] with its `{MAILED}` part, built once.
static SETTLE_STAMPED_MANY_PG_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    SETTLE_STAMPED_MANY_PG.replace("{MAILED}", QUEUE_STAMPED_MANY_PG.text(Dialect::Postgres))
});

impl Db {
    /// Settles a claimed row, if this worker still holds its lease, and appends the attempt that
    /// led to it in the same transaction (one commit, and the log never disagrees with the row).
    /// `false` when the lease was lost (another worker reclaimed the row; it will reach the same
    /// answer from the idempotent PAC); the attempt is logged either way. With `mail` (email
    /// on: the domain of `[email] from`), a stamp queues the customer's email in the same write.
    pub async fn settle_stamp(
        &self,
        id: i64,
        owner: &str,
        s: &Settle<'_>,
        attempt: Option<&Attempt<'_>>,
        mail: Option<&str>,
    ) -> Result<bool, StoreError> {
        let now = Utc::now();
        let one = [(id, s.clone(), attempt.cloned())];
        let sql = settle_sql(self.dialect(), &one, mail);
        let q = bind_settles(stmt(sql), owner, &one, mail, now);
        let what = "settle an outbox row";
        let n = match self.dialect() {
            Dialect::Sqlite => q.sqlite_script_ids(self, what).await?.len() as i64,
            Dialect::Postgres => q.writes().fetch_one::<(i64,)>(self, what).await?.0,
        };
        Ok(n == 1)
    }

    /// Stores several stamped outcomes of this worker (`owner`) in one write, with their
    /// attempts, as [`Db::settle_stamp`] stores one. Returns the ids whose lease still held
    /// (the others were reclaimed; their attempts are logged all the same).
    pub async fn settle_stamped_many(
        &self,
        owner: &str,
        outcomes: &[StampedOutcome],
        mail: Option<&str>,
    ) -> Result<Vec<i64>, StoreError> {
        let now = Utc::now();
        let what = "settle outbox rows";
        match self {
            Db::Sqlite { .. } => {
                let settles: Vec<_> = outcomes
                    .iter()
                    .map(|o| (o.id, o.settle(), Some(o.attempt(owner))))
                    .collect();
                bind_settles(
                    stmt(settle_sql(Dialect::Sqlite, &settles, mail)),
                    owner,
                    &settles,
                    mail,
                    now,
                )
                .sqlite_script_ids(self, what)
                .await
            }
            Db::Postgres(pool, stash) => {
                for o in outcomes {
                    counted(&o.attempt(owner));
                }
                let mut conn = stash.take(pool).await.map_err(ctx(what))?;
                let settled = sqlx::query_scalar(SETTLE_STAMPED_MANY_PG_SQL.as_str())
                    .bind(column(outcomes, |o| o.id))
                    .bind(column(outcomes, |o| o.uuid.as_str()))
                    .bind(column(outcomes, |o| o.tfd_xml.as_str()))
                    .bind(column(outcomes, |o| o.stamped_xml.as_slice()))
                    .bind(column(outcomes, |o| o.fecha_timbrado.as_str()))
                    .bind(column(outcomes, |o| o.flag.as_deref()))
                    .bind(column(outcomes, |o| o.pac.as_str()))
                    .bind(column(outcomes, |o| o.outcome.as_str()))
                    .bind(column(outcomes, |o| o.code.as_deref()))
                    .bind(column(outcomes, |o| o.http_status))
                    .bind(column(outcomes, |o| o.latency_ms))
                    .bind(owner)
                    .bind(now)
                    .bind(owner)
                    .bind(column(outcomes, |o| stamped_message_id(&o.uuid, mail)))
                    .fetch_all(&mut *conn)
                    .await;
                stash.put(conn, clean(&settled));
                settled.map_err(ctx(what))
            }
        }
    }
}
