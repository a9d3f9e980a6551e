//! Argentina (ARCA): claiming numbers. A claim numbers one key or a batch of keys of one
//! sequence in one transaction (the sequence row first, naming the batch's last key, then each
//! reservation), and may first take over the open claims ARCA proved empty for good (the
//! barrier). Nothing here is held across a network call.

use chrono::{DateTime, Utc};

use super::arca::{
    ArcaSeq, ArcaSequenceRow, ArcaVoucherRow, NewReservation, Reserve, SEQ_WHERE, VOUCHER_COLUMNS,
    select_voucher,
};
use super::exec::{Dialected, Tx, stmt};
use super::{Db, StoreError};
use crate::domain::ArcaVoucherState;

/// The sequence's row, taken until the transaction ends on PostgreSQL (SQLite's transaction
/// already holds the only write lock).
static SEQUENCE_FOR_UPDATE: Dialected = Dialected::new(
    "SELECT last_number, last_key, last_date FROM arca_sequences \
     WHERE environment = $1 AND cuit = $2 AND pto_vta = $3 AND cbte_tipo = $4{LOCK}",
    &[("{LOCK}", "", " FOR UPDATE")],
);

fn ymd_max<'a>(a: &'a str, b: Option<&'a str>) -> &'a str {
    match b {
        Some(b) if b > a => b,
        _ => a,
    }
}

impl Db {
    /// In one transaction: the next number of `seq` for `new.key`, written to the sequence
    /// and then to the reservation it names. The next number is the last claim's plus one when
    /// that claim was authorized; after a rejection or a conflict (or on a new sequence) it is
    /// `arca_last + 1`, ARCA's own count read by the caller ([`Reserve::NeedLast`] without
    /// it). An open last claim hands out nothing ([`Reserve::Unsettled`]).
    pub async fn arca_reserve(
        &self,
        seq: ArcaSeq<'_>,
        new: &NewReservation<'_>,
        arca_last: Option<i64>,
    ) -> Result<Reserve, StoreError> {
        let claimed = self
            .arca_claim(seq, std::slice::from_ref(new), arca_last, &[])
            .await?;
        Ok(claimed.map_or_else(|r| r, |mut v| Reserve::Reserved(v.remove(0))))
    }

    /// The barrier for one key: `old`, the sequence's last claim, is superseded by `new.key`,
    /// which takes its number ([`Db::arca_claim`] with one old claim).
    pub async fn arca_supersede(
        &self,
        seq: ArcaSeq<'_>,
        old: &ArcaVoucherRow,
        new: &NewReservation<'_>,
    ) -> Result<Reserve, StoreError> {
        let claimed = self
            .arca_claim(
                seq,
                std::slice::from_ref(new),
                None,
                std::slice::from_ref(old),
            )
            .await?;
        Ok(claimed.map_or_else(|r| r, |mut v| Reserve::Reserved(v.remove(0))))
    }

    /// In one transaction, consecutive numbers of `seq` for `news` (in order): the sequence row
    /// names the last of them, then each reservation is written. Without `old`, the first
    /// number follows the last claim as in [`Db::arca_reserve`]. With `old` (the barrier: the
    /// sequence's open claims from ARCA's next number up to its last claim, each proven empty
    /// and unable to land any more), each is settled `superseded` naming the key that takes its
    /// number (the last new key past the batch's end) and the batch starts at `old`'s first
    /// number; the conditions are checked again in each `UPDATE`, so a resend claimed meanwhile
    /// ([`Db::arca_claim_send`]) and the barrier cannot both win ([`Reserve::Moved`]).
    /// `Err` carries what happened instead of a reservation.
    pub async fn arca_claim(
        &self,
        seq: ArcaSeq<'_>,
        news: &[NewReservation<'_>],
        arca_last: Option<i64>,
        old: &[ArcaVoucherRow],
    ) -> Result<Result<Vec<ArcaVoucherRow>, Reserve>, StoreError> {
        let Some(first) = news.first() else {
            return Ok(Ok(Vec::new()));
        };
        let mut tx = self.begin().await?;
        for new in news {
            if let Some(v) = stmt(select_voucher())
                .bind(new.key)
                .fetch_optional_in(&mut tx, "read an ARCA voucher")
                .await?
            {
                tx.rollback().await?;
                return Ok(Err(Reserve::Existing(v)));
            }
        }
        let row: Option<ArcaSequenceRow> = stmt(SEQUENCE_FOR_UPDATE.text(tx.dialect()))
            .bind(seq.environment)
            .bind(seq.cuit)
            .bind(seq.pto_vta)
            .bind(seq.cbte_tipo)
            .fetch_optional_in(&mut tx, "take an ARCA sequence")
            .await?;
        let now = Utc::now();
        let number = if let Some(top) = old.last() {
            if row.as_ref().and_then(|r| r.last_key.as_deref()) != Some(top.key.as_str()) {
                tx.rollback().await?;
                return Ok(Err(Reserve::Moved));
            }
            for (i, o) in old.iter().enumerate() {
                let by = news.get(i).unwrap_or(&news[news.len() - 1]).key;
                if !supersede_in(&mut tx, o, by, now).await? {
                    tx.rollback().await?;
                    return Ok(Err(Reserve::Moved));
                }
            }
            old[0].number
        } else {
            let mut continues = false;
            if let Some(key) = row.as_ref().and_then(|r| r.last_key.clone()) {
                let last: Option<ArcaVoucherRow> = stmt(select_voucher())
                    .bind(key)
                    .fetch_optional_in(&mut tx, "read the last ARCA claim")
                    .await?;
                if let Some(last) = last {
                    if last.state.is_open() {
                        tx.rollback().await?;
                        return Ok(Err(Reserve::Unsettled(last)));
                    }
                    continues = last.state == ArcaVoucherState::Authorized;
                }
            }
            match (&row, arca_last) {
                (Some(r), _) if continues => r.last_number + 1,
                (_, Some(last)) => last + 1,
                _ => {
                    tx.rollback().await?;
                    return Ok(Err(Reserve::NeedLast));
                }
            }
        };
        let date = ymd_max(
            first.today,
            row.as_ref().and_then(|r| r.last_date.as_deref()),
        );
        let top = number + i64::try_from(news.len()).unwrap_or(i64::MAX) - 1;
        name_in(&mut tx, seq, news[news.len() - 1].key, top, date, now).await?;
        let mut claimed = Vec::with_capacity(news.len());
        for (n, new) in (number..).zip(news) {
            claimed.push(reserve_in(&mut tx, seq, new, n, date, now).await?);
        }
        // On disk before the first send: ARCA keeps a number it authorized, and a claim a
        // power loss took back would hand it out again, to a second voucher.
        tx.commit_durable("reserve ARCA numbers").await?;
        Ok(Ok(claimed))
    }

    /// The open claims of `seq` numbered above `above`, by number.
    pub async fn arca_open_above(
        &self,
        seq: ArcaSeq<'_>,
        above: i64,
    ) -> Result<Vec<ArcaVoucherRow>, StoreError> {
        stmt(format!(
            "SELECT {VOUCHER_COLUMNS} FROM arca_vouchers WHERE {SEQ_WHERE} AND number > $5 \
             AND state IN ('reserved', 'unknown') ORDER BY number"
        ))
        .bind(seq.environment)
        .bind(seq.cuit)
        .bind(seq.pto_vta)
        .bind(seq.cbte_tipo)
        .bind(above)
        .fetch_all(self, "list open ARCA claims")
        .await
    }

    /// Settles an open voucher ARCA left unprocessed in a batch (an earlier voucher of the
    /// request was refused) whose number was then proven empty: `superseded` with no key
    /// named yet; never sent again, its sale goes on under its next key. `false` if it was
    /// settled already.
    pub async fn arca_unprocessed(&self, key: &str, detail: &str) -> Result<bool, StoreError> {
        let n = stmt(
            "UPDATE arca_vouchers SET state = 'superseded', detail = $2, sending_until = NULL, \
             landing_until = NULL, updated_at = $3 WHERE key = $1 \
             AND state IN ('reserved', 'unknown')",
        )
        .bind(key)
        .bind(detail)
        .bind(Utc::now())
        .execute(self, "settle an unprocessed ARCA voucher")
        .await?;
        Ok(n == 1)
    }
}

/// In `tx`: `old` (open, no send of it in flight or able to land) is settled `superseded`,
/// naming `by`. `false` when it is no longer so.
async fn supersede_in(
    tx: &mut Tx<'_>,
    old: &ArcaVoucherRow,
    by: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let detail = format!(
        "ARCA proved number {} empty and no send of this key could still land: the number \
         went to {by}",
        old.number
    );
    let n = stmt(
        "UPDATE arca_vouchers SET state = 'superseded', superseded_by = $2, detail = $3, \
         sending_until = NULL, updated_at = $4 WHERE key = $1 AND number = $5 \
         AND state IN ('reserved', 'unknown') \
         AND (sending_until IS NULL OR sending_until < $4) \
         AND (landing_until IS NULL OR landing_until < $4)",
    )
    .bind(&old.key)
    .bind(by)
    .bind(&detail)
    .bind(now)
    .bind(old.number)
    .execute_in(tx, "supersede an ARCA voucher")
    .await?;
    Ok(n == 1)
}

/// In `tx`: the sequence row names `key` at `number`, its last claim (written before the
/// reservations it names).
async fn name_in(
    tx: &mut Tx<'_>,
    seq: ArcaSeq<'_>,
    key: &str,
    number: i64,
    date: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    stmt(
        "INSERT INTO arca_sequences (environment, cuit, pto_vta, cbte_tipo, last_number, \
         last_key, last_date, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (environment, cuit, pto_vta, cbte_tipo) DO UPDATE SET \
         last_number = EXCLUDED.last_number, last_key = EXCLUDED.last_key, \
         last_date = EXCLUDED.last_date, updated_at = EXCLUDED.updated_at",
    )
    .bind(seq.environment)
    .bind(seq.cuit)
    .bind(seq.pto_vta)
    .bind(seq.cbte_tipo)
    .bind(number)
    .bind(key)
    .bind(date)
    .bind(now)
    .execute_in(tx, "claim ARCA numbers")
    .await?;
    Ok(())
}

/// In `tx`: the reservation of `new.key` at `number`.
async fn reserve_in(
    tx: &mut Tx<'_>,
    seq: ArcaSeq<'_>,
    new: &NewReservation<'_>,
    number: i64,
    date: &str,
    now: DateTime<Utc>,
) -> Result<ArcaVoucherRow, StoreError> {
    stmt(format!(
        "INSERT INTO arca_vouchers (key, environment, cuit, pto_vta, cbte_tipo, number, \
         cbte_fch, input_hash, input, state, sending_until, landing_until, sends, created_at, \
         updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'reserved', $10, $11, 1, $12, \
         $12) RETURNING {VOUCHER_COLUMNS}"
    ))
    .bind(new.key)
    .bind(seq.environment)
    .bind(seq.cuit)
    .bind(seq.pto_vta)
    .bind(seq.cbte_tipo)
    .bind(number)
    .bind(date)
    .bind(new.input_hash)
    .bind(new.input)
    .bind(new.sending_until)
    .bind(new.landing_until)
    .bind(now)
    .fetch_one_in(tx, "reserve an ARCA number")
    .await
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use crate::config::{DatabaseSettings, SecretString};
    use crate::store::arca::{ArcaSeq, NewReservation};
    use crate::store::{Db, connect};

    /// The worker pool's handle does not wait for the disk, but the numbers a claim hands out,
    /// and a resend's claim, are on disk when they return: ARCA is sent them next, and keeps
    /// what it authorizes.
    #[tokio::test]
    async fn claims_on_the_workers_handle_are_on_disk_when_they_return() {
        let dir = tempfile::tempdir().expect("dir");
        let settings = DatabaseSettings {
            url: SecretString::new(format!("sqlite://{}", dir.path().join("a.db").display())),
            max_connections: 4,
        };
        let db = connect(&settings).await.expect("open");
        db.migrate().await.expect("migrate");
        let workers = db.for_workers(&settings).await.expect("workers");
        let Db::Sqlite { write_lock, .. } = &workers else {
            unreachable!("a SQLite URL")
        };
        let seq = ArcaSeq {
            environment: "homologacion",
            cuit: 20_111_111_112,
            pto_vta: 1,
            cbte_tipo: 6,
        };
        let now = Utc::now();
        let new = |key| NewReservation {
            key,
            input_hash: "h",
            input: "{}",
            today: "2026-12-07",
            sending_until: now,
            landing_until: now,
        };
        let before = write_lock.sync_counts().1;
        let claimed = workers
            .arca_claim(seq, &[new("k1"), new("k2")], Some(41), &[])
            .await
            .expect("claim")
            .expect("numbers");
        assert_eq!(
            claimed.iter().map(|v| v.number).collect::<Vec<_>>(),
            [42, 43]
        );
        let (committed, synced) = write_lock.sync_counts();
        assert!(synced > before, "the claim's commit was synced");
        assert_eq!(synced, committed, "every commit before the send is on disk");

        // A resend's claim (its sending window is over) is on disk the same way.
        let later = Utc::now() + chrono::Duration::seconds(30);
        let resend = workers
            .arca_claim_send("k1", later, later)
            .await
            .expect("claim a resend")
            .expect("its window was over");
        assert_eq!(resend.number, 42);
        let (committed, again) = write_lock.sync_counts();
        assert!(again > synced, "the resend's claim was synced");
        assert_eq!(again, committed);
    }
}
