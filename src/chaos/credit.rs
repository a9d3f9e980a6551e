//! The chaos run's refunds: each partly refunded sale must end credited by exactly one stamped
//! egreso, for the refund's amount, related to the sale's own UUID.

use std::collections::HashSet;

use super::check::{EgresoDoc, Verdict};

/// How a refunded sale counts: by the stamped egresos related to its own UUID `stamped`.
pub(super) fn credit(
    v: &mut Verdict,
    name: &str,
    amount: &str,
    stamped: &[&str],
    egresos: &[EgresoDoc],
    pac_uuids: &HashSet<String>,
) {
    v.refunds += 1;
    let [sale] = stamped else {
        v.problems.push(format!(
            "{name}: refunded, but has no single UUID to credit"
        ));
        return;
    };
    let ours: Vec<&EgresoDoc> = egresos
        .iter()
        .filter(|e| {
            e.related_uuid
                .as_deref()
                .is_some_and(|u| u.eq_ignore_ascii_case(sale))
        })
        .collect();
    let same = |a: &str, b: &str| a.parse::<rust_decimal::Decimal>().ok() == b.parse().ok();
    match ours.as_slice() {
        [e] if e.status == "stamped"
            && e.uuid
                .as_deref()
                .is_some_and(|u| pac_uuids.contains(&u.to_uppercase()))
            && same(&e.total, amount) =>
        {
            v.credited += 1;
        }
        [] => v
            .problems
            .push(format!("{name}: refund of {amount} has no egreso")),
        [e] => v.problems.push(format!(
            "{name}: refund of {amount} credited by an egreso {} of {} (UUID {:?})",
            e.status, e.total, e.uuid
        )),
        many => {
            v.duplicated += many.len() - 1;
            v.problems.push(format!(
                "{name}: refund of {amount} credited by {} egresos",
                many.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::{Globals, PacStamp, SaleKind, SentPayment, check_with_globals};
    use super::*;
    use crate::store::InvoiceRow;

    /// A refunded sale stamped `UUID-S`, and the PAC's stamps of it and of `egresos`.
    fn run(egresos: &[(&str, &str, &str)]) -> Verdict {
        let sent = [SentPayment {
            provider: "stripe".into(),
            payment_id: "pi_r".into(),
            stamp_key: "key-r".into(),
            near_window: false,
            kind: SaleKind::Nominative,
            refund: Some("30.00".into()),
        }];
        let ours = [InvoiceRow {
            provider: "stripe".into(),
            payment_id: "pi_r".into(),
            status: crate::domain::DocumentState::Stamped.into(),
            uuid: Some("UUID-S".into()),
            serie: Some("A".into()),
            folio: Some("1".into()),
            ..InvoiceRow::default()
        }];
        let mut pac = vec![PacStamp {
            uuid: "UUID-S".into(),
            customid: Some("key-r".into()),
        }];
        let globals = Globals {
            egresos: egresos
                .iter()
                .map(|(uuid, status, total)| {
                    pac.push(PacStamp {
                        uuid: (*uuid).into(),
                        customid: Some(format!("key-{uuid}")),
                    });
                    EgresoDoc {
                        status: (*status).into(),
                        uuid: Some((*uuid).into()),
                        related_uuid: Some("uuid-s".into()),
                        total: (*total).into(),
                    }
                })
                .collect(),
            ..Globals::default()
        };
        check_with_globals(&sent, &ours, &globals, &pac, &[])
    }

    #[test]
    fn a_refund_is_credited_by_one_stamped_egreso_of_its_amount() {
        let v = run(&[("UUID-E", "stamped", "30")]);
        assert!(v.is_ok(), "{v:?}");
        assert_eq!((v.refunds, v.credited, v.orphans), (1, 1, 0), "{v:?}");
    }

    #[test]
    fn a_missing_extra_or_wrong_egreso_fails_the_run() {
        let missing = run(&[]);
        assert_eq!((missing.refunds, missing.credited), (1, 0));
        assert!(!missing.is_ok());
        let twice = run(&[
            ("UUID-E", "stamped", "30.00"),
            ("UUID-F", "stamped", "30.00"),
        ]);
        assert_eq!(twice.duplicated, 1, "{twice:?}");
        assert!(!twice.is_ok());
        let over = run(&[("UUID-E", "stamped", "116.00")]);
        assert!(!over.is_ok(), "{over:?}");
        let failed = run(&[("UUID-E", "failed", "30.00")]);
        assert!(!failed.is_ok(), "{failed:?}");
    }
}
