//! Who an Argentine sale's voucher names, from what Mercado Pago sent (`payer.identification`)
//! and the merchant's metadata (`condicion_iva`), without I/O (docs/arca.md, the buyer).
//!
//! - CUIT (check digit verified) → DocTipo 80. Mercado Pago does not know a CUIT's IVA
//!   condition: the metadata's `condicion_iva` says it, else `[arca] cuit_condicion_iva`
//!   (consumidor final by default: a Factura B, which any buyer may receive; a Factura A to a
//!   buyer who is not an RI or monotributista would be wrong).
//! - CUIL (same check digit) → 86 and DNI → 96: a person, consumidor final.
//! - Nothing → 99 / 0, consumidor final, below `[arca] anonymous_limit` (RG 5700/2025). A
//!   document that cannot be used (a wrong check digit, an unknown type) is treated as
//!   nothing, and the sale's reason says so. From the limit on, the sale is held.

use rust_decimal::Decimal;

use super::model::{DocTipo, valid_cuit};
use crate::config::{ArcaSettings, Receptor};

/// The buyer a voucher names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buyer {
    pub doc_tipo: DocTipo,
    pub doc_nro: i64,
    pub receptor: Receptor,
    /// Said on the sale when part of what the sale carried was not used, and why.
    pub note: Option<String>,
}

/// What the sale carried: Mercado Pago's identification type and number, the metadata's IVA
/// condition.
#[derive(Debug, Clone, Copy, Default)]
pub struct Given<'a> {
    pub kind: Option<&'a str>,
    pub number: Option<&'a str>,
    pub condicion_iva: Option<&'a str>,
}

/// The document number as digits (`20-26756539-3`, `26.756.539` are written both ways).
fn digits(number: &str) -> Option<i64> {
    let d: String = number
        .chars()
        .filter(|c| !matches!(c, '-' | '.' | ' '))
        .collect();
    (!d.is_empty() && d.len() <= 11 && d.bytes().all(|b| b.is_ascii_digit()))
        .then(|| d.parse().ok())
        .flatten()
}

/// The buyer of a sale of `total` pesos, or why the sale cannot be issued as it is (the reason
/// a human reads, saying what to do).
pub fn buyer(given: Given<'_>, total: Decimal, cfg: &ArcaSettings) -> Result<Buyer, String> {
    let kind = given.kind.map(|k| k.trim().to_uppercase());
    let number = given.number.and_then(digits);
    let person = |doc_tipo, doc_nro| Buyer {
        doc_tipo,
        doc_nro,
        receptor: Receptor::ConsumidorFinal,
        note: None,
    };
    let unusable = match (kind.as_deref(), number) {
        (Some("CUIT"), Some(n)) if valid_cuit(n) => {
            let (receptor, note) = match given.condicion_iva {
                None => (cfg.cuit_condicion_iva, None),
                Some(c) => match Receptor::parse(c) {
                    Some(r) => (r, None),
                    None => (
                        cfg.cuit_condicion_iva,
                        Some(format!(
                            "metadata condicion_iva {c:?} is not an IVA condition: taken as \
                             {} ([arca] cuit_condicion_iva)",
                            cfg.cuit_condicion_iva.name()
                        )),
                    ),
                },
            };
            return Ok(Buyer {
                doc_tipo: DocTipo::Cuit,
                doc_nro: n,
                receptor,
                note,
            });
        }
        (Some("CUIL"), Some(n)) if valid_cuit(n) => return Ok(person(DocTipo::Cuil, n)),
        (Some("DNI"), Some(n)) if (1..100_000_000).contains(&n) => {
            return Ok(person(DocTipo::Dni, n));
        }
        (None, None) if given.number.is_none() => None,
        _ => Some(format!(
            "payer.identification {} {} is not a valid CUIT, CUIL or DNI",
            given.kind.unwrap_or("(no type)"),
            given.number.unwrap_or("(no number)")
        )),
    };
    let limit = cfg
        .anonymous_limit()
        .unwrap_or(super::model::ANONYMOUS_LIMIT);
    if total >= limit {
        return Err(format!(
            "a sale of ARS {total} must name its buyer from ARS {limit} (RG 5700/2025, [arca] \
             anonymous_limit) and {}: ask the buyer for their DNI, CUIL or CUIT and invoice this \
             sale by hand; have the checkout collect payer.identification so later sales carry it",
            unusable
                .as_deref()
                .unwrap_or("Mercado Pago sent no payer.identification")
        ));
    }
    Ok(Buyer {
        note: unusable.map(|u| format!("{u}: issued to a consumidor final without identification")),
        ..person(DocTipo::SinIdentificar, 0)
    })
}

/// The buyer a human gives a held or refused sale of `total` pesos (the admin's correction):
/// `kind` `CUIT`, `CUIL`, `DNI` or empty (no identification), its `number`, and the IVA
/// condition's name or id (empty: consumidor final). Unlike [`buyer`], a document that cannot
/// be used is an error saying why, never taken as nobody. The corrected values to store.
pub fn corrected(
    kind: &str,
    number: &str,
    condicion: &str,
    total: Decimal,
    cfg: &ArcaSettings,
) -> Result<(String, String, Receptor), String> {
    let kind = kind.trim().to_uppercase();
    let receptor = match condicion.trim() {
        "" => Receptor::ConsumidorFinal,
        c => Receptor::parse(c).ok_or_else(|| {
            format!(
                "{c:?} is not an IVA condition: responsable_inscripto, monotributo, \
                 consumidor_final, exento or no_alcanzado"
            )
        })?,
    };
    let n = digits(number);
    match (kind.as_str(), n) {
        ("", _) if !number.trim().is_empty() => {
            return Err("a document number needs its type: CUIT, CUIL or DNI".into());
        }
        ("", _) => {}
        ("CUIT" | "CUIL", Some(n)) if valid_cuit(n) => {}
        ("CUIT" | "CUIL", _) => {
            return Err(format!(
                "{kind} {number:?} is not valid: 11 digits whose last is the check digit \
                 (e.g. 20-26756539-3)"
            ));
        }
        ("DNI", Some(n)) if (1..100_000_000).contains(&n) => {}
        ("DNI", _) => return Err(format!("DNI {number:?} is not valid: up to 8 digits")),
        _ => return Err(format!("{kind:?} is not CUIT, CUIL or DNI")),
    }
    if kind != "CUIT" && receptor != Receptor::ConsumidorFinal {
        return Err(format!(
            "a buyer without a CUIT is a consumidor final: a {} buyer is named by their CUIT",
            receptor.name()
        ));
    }
    let number = n.map(|n| n.to_string()).unwrap_or_default();
    let given = Given {
        kind: Some(kind.as_str()).filter(|k| !k.is_empty()),
        number: Some(number.as_str()).filter(|n| !n.is_empty()),
        condicion_iva: Some(receptor.name()),
    };
    let b = buyer(given, total, cfg)?;
    Ok((kind, number, b.receptor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ArcaSettings {
        crate::config::Settings::defaults().expect("defaults").arca
    }

    fn of(kind: Option<&str>, number: Option<&str>, condicion: Option<&str>) -> Buyer {
        let given = Given {
            kind,
            number,
            condicion_iva: condicion,
        };
        buyer(given, Decimal::new(121_000, 2), &cfg()).expect("a buyer")
    }

    #[test]
    fn documents_become_doc_tipo_and_conditions() {
        let b = of(Some("CUIT"), Some("20-26756539-3"), None);
        assert_eq!(
            (b.doc_tipo, b.doc_nro, b.receptor),
            (DocTipo::Cuit, 20_267_565_393, Receptor::ConsumidorFinal)
        );
        let b = of(
            Some("CUIT"),
            Some("20267565393"),
            Some("responsable_inscripto"),
        );
        assert_eq!(b.receptor, Receptor::ResponsableInscripto);
        let b = of(Some("cuil"), Some("20267565393"), Some("1"));
        assert_eq!(
            (b.doc_tipo, b.receptor),
            (DocTipo::Cuil, Receptor::ConsumidorFinal)
        );
        let b = of(Some("DNI"), Some("26.756.539"), None);
        assert_eq!((b.doc_tipo, b.doc_nro), (DocTipo::Dni, 26_756_539));
        let b = of(None, None, None);
        assert_eq!(
            (b.doc_tipo, b.doc_nro, b.note),
            (DocTipo::SinIdentificar, 0, None)
        );
    }

    #[test]
    fn a_correction_names_a_valid_buyer_or_says_what_is_wrong() {
        let small = Decimal::new(121_000, 2);
        let big = Decimal::new(10_000_000, 0);
        let ok = |k, n, c, t| corrected(k, n, c, t, &cfg());
        assert_eq!(
            ok("cuit", "20-26756539-3", "responsable_inscripto", big),
            Ok((
                "CUIT".into(),
                "20267565393".into(),
                Receptor::ResponsableInscripto
            ))
        );
        assert_eq!(
            ok("DNI", "26.756.539", "", big),
            Ok(("DNI".into(), "26756539".into(), Receptor::ConsumidorFinal))
        );
        assert!(ok("", "", "", small).is_ok());
        for (k, n, c, t, says) in [
            ("CUIT", "20267565394", "", small, "check digit"),
            ("DNI", "123456789", "", small, "up to 8 digits"),
            ("PASAPORTE", "1", "", small, "not CUIT"),
            ("", "26756539", "", small, "needs its type"),
            (
                "CUIT",
                "20267565393",
                "gremio",
                small,
                "not an IVA condition",
            ),
            (
                "DNI",
                "26756539",
                "monotributo",
                small,
                "named by their CUIT",
            ),
            ("", "", "", big, "DNI, CUIL or CUIT"),
        ] {
            let why = ok(k, n, c, t).expect_err(says);
            assert!(why.contains(says), "{k} {n} {c}: {why}");
        }
    }

    #[test]
    fn an_unusable_document_is_anonymous_below_the_limit_and_held_from_it() {
        let b = of(Some("CUIT"), Some("20267565394"), None);
        assert_eq!(b.doc_tipo, DocTipo::SinIdentificar);
        assert!(b.note.is_some_and(|n| n.contains("20267565394")));
        let big = Decimal::new(10_000_000, 0);
        let why = buyer(Given::default(), big, &cfg()).expect_err("held");
        assert!(why.contains("DNI, CUIL or CUIT"), "{why}");
        let just_below = big - Decimal::new(1, 2);
        assert!(buyer(Given::default(), just_below, &cfg()).is_ok());
        let dni = Given {
            kind: Some("DNI"),
            number: Some("26756539"),
            condicion_iva: None,
        };
        assert!(buyer(dni, big, &cfg()).is_ok());
    }
}
