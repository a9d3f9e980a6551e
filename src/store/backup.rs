//! Online backups: a consistent copy of the SQLite database taken while the appliance serves
//! (`autofactura backup`). PostgreSQL is backed up with its own tools (`pg_dump`,
//! docs/ops/backups.md).

use std::path::Path;

use super::{Db, StoreError, ctx};

impl Db {
    /// Writes a consistent copy of the SQLite database to `out` with `VACUUM INTO`: one read
    /// transaction, so writers go on meanwhile (WAL) and the copy is the database as of its
    /// start, compacted. `out` must not exist yet.
    pub async fn backup_into(&self, out: &Path) -> Result<(), StoreError> {
        match self {
            Db::Sqlite { pool, .. } => {
                let target = out.to_str().ok_or_else(|| {
                    StoreError::Other(format!("{} is not a UTF-8 path", out.display()))
                })?;
                sqlx::query("VACUUM INTO ?1")
                    .bind(target)
                    .execute(pool)
                    .await
                    .map_err(ctx("copy the SQLite database (VACUUM INTO)"))?;
                Ok(())
            }
            Db::Postgres(..) => Err(StoreError::Other(
                "`autofactura backup` copies SQLite; back up PostgreSQL with pg_dump \
                 (docs/ops/backups.md)"
                    .into(),
            )),
        }
    }
}
