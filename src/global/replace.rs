//! Cancelling a factura global with motivo 01: the SAT wants the replacement first. The
//! replacement is built anew from the same sales (with the settings as they are now: that is
//! the correction), relates to the old global with TipoRelacion 04 and takes its sales over, in
//! one transaction. Once the worker has stamped it, the cancellation of the old global with
//! motivo 01 and FolioSustitucion = the replacement's UUID is requested
//! ([`request_substitution_cancels`], run by `serve`'s loop and `global issue`).

use super::plan::{Planner, Replacing, Slot};
use crate::domain::DocumentState;
use crate::domain::cancellation::CancelFacts;
use crate::domain::period::{Period, Periodicidad};
use crate::domain::time::now_at;
use crate::store::{Db, Frozen, StoreError};

/// Freezes the replacement of the stamped global `outbox_id` for `actor`; its document id, or
/// why not (in words for the person who asked).
pub async fn replace(
    db: &Db,
    planner: &Planner,
    outbox_id: i64,
    actor: &str,
) -> Result<Result<i64, String>, StoreError> {
    let Some(g) = db.global(outbox_id).await? else {
        return Ok(Err(format!(
            "document #{outbox_id} is not a factura global"
        )));
    };
    if let Some(by) = g.replaced_by {
        return Ok(Err(format!(
            "global #{outbox_id} already has a replacement: #{by}; its cancellation (motivo 01) \
             is requested once #{by} is stamped"
        )));
    }
    let uuid = match (&g.uuid, g.state) {
        (Some(u), DocumentState::Stamped) => u.clone(),
        _ => {
            return Ok(Err(format!(
                "global #{outbox_id} is {}: only a stamped global is replaced",
                g.state
            )));
        }
    };
    let dates = (
        g.identity.period_start.parse::<chrono::NaiveDate>(),
        g.identity.period_end.parse::<chrono::NaiveDate>(),
        Periodicidad::parse(&g.identity.periodicidad),
    );
    let (Ok(start), Ok(end), Some(periodicidad)) = dates else {
        return Ok(Err(format!(
            "global #{outbox_id} has an unreadable period ({} {}..{})",
            g.identity.periodicidad, g.identity.period_start, g.identity.period_end
        )));
    };
    let period = Period {
        periodicidad,
        start,
        end,
    };
    let sales = db.global_members(outbox_id).await?;
    let seq = db
        .next_global_seq(
            &g.identity.rfc_emisor,
            &g.identity.periodicidad,
            &g.identity.period_start,
            &g.identity.moneda,
        )
        .await?;
    let replacing = Replacing {
        outbox_id,
        uuid: &uuid,
    };
    let slot = Slot {
        period,
        moneda: &g.identity.moneda,
        seq,
    };
    let fecha = now_at(&planner.emisor.lugar_expedicion);
    let new = match planner.global(slot, &sales, fecha, Some(replacing), actor) {
        Ok(n) => n,
        Err(e) => return Ok(Err(format!("the replacement cannot be built: {e}"))),
    };
    Ok(match db.freeze_global(&new).await? {
        Frozen::Global { outbox_id: id } => {
            tracing::info!(%actor, replaced = outbox_id, replacement = id, "factura global replacement frozen (motivo 01)");
            Ok(id)
        }
        Frozen::Changed(why) => Err(format!(
            "global #{outbox_id} changed meanwhile ({why}); reload and check it again"
        )),
    })
}

/// Requests the motivo 01 cancellation of every replaced global whose replacement is stamped
/// (once: a global asked to be cancelled before is left to its cancellation). Returns the
/// documents asked for.
pub async fn request_substitution_cancels(db: &Db) -> Result<Vec<i64>, StoreError> {
    let mut asked = Vec::new();
    for s in db.pending_substitutions().await? {
        let Some(facts) = db
            .document(s.replaced)
            .await?
            .and_then(|d| d.stamped_xml)
            .and_then(|x| CancelFacts::from_stamped(&x))
        else {
            continue;
        };
        let done = crate::cancel::request(
            db,
            s.replaced,
            &facts,
            "01",
            Some(&s.replacement_uuid),
            "factura global (replaced, motivo 01)",
        )
        .await?;
        match done {
            Ok(()) => {
                tracing::info!(replaced = s.replaced, replacement = s.replacement, uuid = %s.replacement_uuid, "cancellation of the replaced factura global requested (motivo 01)");
                asked.push(s.replaced);
            }
            Err(refusal) => {
                tracing::warn!(
                    replaced = s.replaced,
                    replacement = s.replacement,
                    ?refusal,
                    "the replaced factura global cannot be cancelled yet"
                );
            }
        }
    }
    Ok(asked)
}
