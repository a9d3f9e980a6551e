//! Folio sequences (`folio_sequences`, one row per serie): the numbers of the comprobantes.
//!
//! A comprobante without an explicit folio is frozen at ingest with none; the worker numbers a
//! claimed batch just before sealing it ([`Db::assign_folios`]): per serie, one statement (one
//! transaction on SQLite) takes the serie's row once for the whole batch, so no webhook ever
//! waits on it. The folio is committed with the row before the row is sealed and never changes
//! after: a row claimed again (its worker died) keeps it. An explicit numeric folio (API) moves
//! the serie's next number past itself ([`bump_past_in`]), so numbering never hands it out.

use std::collections::BTreeMap;

use super::exec::{Dialected, Tx, column, stmt};
use super::stash::clean;
use super::{Db, StoreError, ctx};

/// PostgreSQL, in one statement: locks the rows of the batch still without a folio (in id
/// order, so two statements never wait on each other's rows), advances the serie's sequence by
/// their number (its row taken once), and numbers them in id order from the first number taken.
/// `FOR UPDATE` re-reads each row as last committed: a row another worker took over meanwhile
/// (`lease_owner`) or numbered is left out, and no number is taken for it.
/// Its commit waits for the disk (`synchronous_commit` on for this statement alone, where the
/// worker pool's handle has it off): the PAC will stamp these numbers, and a database crash that
/// took the numbering back could number the rows otherwise and seal other bytes for a sale the
/// PAC has stamped already.
const ASSIGN_PG: &str = "WITH durable AS (SELECT set_config('synchronous_commit', 'on', true)), \
    mine AS (SELECT id FROM outbox WHERE id = ANY($1::bigint[]) \
      AND COALESCE(serie, '') = $2 AND folio IS NULL AND lease_owner = $3 AND state = 'stamping' \
      AND EXISTS (SELECT 1 FROM durable) ORDER BY id FOR UPDATE), \
    numbered AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS n, COUNT(*) OVER () AS k FROM mine), \
    seq AS (INSERT INTO folio_sequences AS s (serie, next_folio) SELECT $2, 1 + COUNT(*) FROM mine \
      ON CONFLICT (serie) DO UPDATE SET next_folio = s.next_folio + EXCLUDED.next_folio - 1 \
      RETURNING s.next_folio AS next) \
    UPDATE outbox o SET folio = (seq.next - numbered.k + numbered.n - 1)::text \
    FROM numbered, seq WHERE o.id = numbered.id RETURNING o.id, o.folio";

/// The batch's rows (`$1`) of serie `$2` that lease owner `$3` holds and that have no folio.
const MINE_SQLITE: &str = "id IN (SELECT value FROM json_each($1)) AND COALESCE(serie, '') = $2 \
    AND folio IS NULL AND lease_owner = $3 AND state = 'stamping'";

/// SQLite, in one script (one trip to the connection, one transaction under the write lock):
/// advances the serie's sequence by the number of the batch's rows still without a folio, then
/// numbers those rows in id order from the first number taken. The rows to number are read in
/// full before any is written (the window functions need them all), so a row numbered by this
/// statement never leaves the set it counts; with none to number, the sequence moves by none.
/// The ids come as a JSON array (`$1`; SQLite has no array parameter), then the serie and the
/// lease's owner.
const ASSIGN_SQLITE: &str = "BEGIN IMMEDIATE;
INSERT INTO folio_sequences (serie, next_folio) SELECT $2, 1 + COUNT(*) FROM outbox WHERE {MINE} \
  ON CONFLICT (serie) DO UPDATE SET next_folio = folio_sequences.next_folio + excluded.next_folio - 1;
UPDATE outbox SET folio = CAST(m.first + m.n - 1 AS TEXT) \
  FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS n, \
    (SELECT next_folio FROM folio_sequences WHERE serie = $2) - COUNT(*) OVER () AS first \
    FROM outbox WHERE {MINE}) AS m \
  WHERE outbox.id = m.id RETURNING id, folio;
COMMIT";
static ASSIGN_SQLITE_TEXT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| ASSIGN_SQLITE.replace("{MINE}", MINE_SQLITE));

/// Moves serie `$1`'s next number to at least `$2`.
static BUMP: Dialected = Dialected::new(
    "INSERT INTO folio_sequences (serie, next_folio) VALUES ($1, $2) ON CONFLICT (serie) \
     DO UPDATE SET next_folio = {GREATEST}(folio_sequences.next_folio, EXCLUDED.next_folio)",
    &[("{GREATEST}", "MAX", "GREATEST")],
);

/// The number an explicit folio would be if numbering handed it out (decimal digits only,
/// read as a number so that `007` is kept clear of 7 too); `None` when numbering never could.
pub(super) fn automatic_number(folio: &str) -> Option<i64> {
    if folio.is_empty() || !folio.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    folio.parse().ok()
}

/// In `tx`, before an explicit folio is checked and taken: when it is a number numbering could
/// reach, the serie's next number moves past it. This takes the serie's row until `tx` ends, so
/// a batch being numbered either committed first (and the check that follows sees the folio
/// taken) or numbers after this commits, from past the explicit folio.
pub(super) async fn bump_past_in(
    tx: &mut Tx<'_>,
    serie: &str,
    folio: &str,
) -> Result<(), StoreError> {
    let Some(next) = automatic_number(folio).and_then(|n| n.checked_add(1)) else {
        return Ok(());
    };
    stmt(BUMP.text(tx.dialect()))
        .bind(serie)
        .bind(next)
        .execute_in(tx, "move the folio sequence past an explicit folio")
        .await?;
    Ok(())
}

impl Db {
    /// Numbers the rows `rows` (id, serie) that `owner` holds the lease of and that have no
    /// folio yet: per serie, the next folios in id order, each serie's sequence taken once.
    /// Returns the folio of each row numbered; a row left out was taken over by another worker
    /// (its lease expired) or numbered already, and must not be sealed by this one.
    pub async fn assign_folios(
        &self,
        owner: &str,
        rows: &[(i64, String)],
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let mut by_serie: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for (id, serie) in rows {
            by_serie.entry(serie.as_str()).or_default().push(*id);
        }
        let mut out = Vec::with_capacity(rows.len());
        for (serie, ids) in by_serie {
            out.extend(self.assign_serie(owner, serie, &ids).await?);
        }
        Ok(out)
    }

    async fn assign_serie(
        &self,
        owner: &str,
        serie: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let what = "assign folios";
        match self {
            Db::Postgres(pool, stash) => {
                let mut conn = stash.take(pool).await.map_err(ctx(what))?;
                let numbered = sqlx::query_as(ASSIGN_PG)
                    .bind(column(ids, |id| *id))
                    .bind(serie)
                    .bind(owner)
                    .fetch_all(&mut *conn)
                    .await;
                stash.put(conn, clean(&numbered));
                numbered.map_err(ctx(what))
            }
            Db::Sqlite { .. } => {
                let ids = serde_json::Value::from(ids.to_vec()).to_string();
                stmt(ASSIGN_SQLITE_TEXT.as_str())
                    .bind(ids)
                    .bind(serie)
                    .bind(owner)
                    .sqlite_script_rows(self, what)
                    .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::automatic_number;

    #[test]
    fn only_decimal_folios_are_in_numberings_way() {
        assert_eq!(automatic_number("77"), Some(77));
        assert_eq!(automatic_number("007"), Some(7));
        assert_eq!(automatic_number("A77"), None);
        assert_eq!(automatic_number(""), None);
        assert_eq!(automatic_number("-1"), None);
        assert_eq!(
            automatic_number(&"9".repeat(40)),
            None,
            "beyond any number handed out"
        );
    }
}
