//! TipoCambio as a PAC checks it (Anexo 20's matriz de errores, CFDI40114–CFDI40118): `1` or
//! absent for MXN, absent for XXX, present for any other currency, the XSD's pattern, and
//! within c_Moneda's `porcentaje_variacion` of the published rate unless a Confirmacion
//! ratifies it. The published rates are the sandbox's table
//! (`fixtures/pacsim/tipos-de-cambio.csv`); a currency not there is checked for shape only.

use std::collections::HashMap;
use std::sync::LazyLock;

use rust_decimal::Decimal;

use crate::cfdi::catalogs;
use crate::cfdi::dom::Element;

const REFERENCE: &str = include_str!("../../fixtures/pacsim/tipos-de-cambio.csv");

static RATES: LazyLock<HashMap<&'static str, Decimal>> = LazyLock::new(|| {
    REFERENCE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("moneda"))
        .filter_map(|l| {
            let (m, r) = l.split_once(',')?;
            Some((m.trim(), r.trim().parse().ok()?))
        })
        .collect()
});

/// A rejection: SAT code, its message, what the sandbox saw.
pub type Rejection = (&'static str, &'static str, String);

/// `[0-9]{1,18}(.[0-9]{1,6})?`.
fn pattern_ok(t: &str) -> bool {
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str, lo: usize, hi: usize| {
        (lo..=hi).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
    };
    digits(int, 1, 18) && (!t.contains('.') || digits(frac, 1, 6))
}

/// The first TipoCambio rule the comprobante `root` breaks, if any.
pub fn check(root: &Element) -> Option<Rejection> {
    let moneda = root.attr("Moneda").unwrap_or_default();
    let tc = root.attr("TipoCambio");
    match (moneda, tc) {
        ("MXN", Some(t)) if t != "1" => Some((
            "CFDI40114",
            "El campo TipoCambio no tiene el valor \"1\" y la moneda indicada es MXN.",
            format!("Moneda MXN, TipoCambio {t}"),
        )),
        ("MXN", _) => None,
        ("XXX", Some(t)) => Some((
            "CFDI40116",
            "El campo TipoCambio no se debe registrar cuando el campo Moneda tiene el valor XXX.",
            format!("Moneda XXX, TipoCambio {t}"),
        )),
        ("XXX", None) => None,
        (m, None) => Some((
            "CFDI40115",
            "El campo TipoCambio se debe registrar cuando el campo Moneda tiene un valor distinto de MXN y XXX.",
            format!("Moneda {m} without TipoCambio"),
        )),
        (m, Some(t)) => {
            if !pattern_ok(t) {
                return Some((
                    "CFDI40117",
                    "El campo TipoCambio no cumple con el patrón requerido.",
                    format!("TipoCambio {t}"),
                ));
            }
            let rate: Decimal = t.parse().ok()?;
            let published = *RATES.get(m)?;
            let pct = Decimal::from(catalogs::currency_variation(m)?);
            let allowed = published * pct / Decimal::ONE_HUNDRED;
            let outside = (rate - published).abs() > allowed;
            (outside && root.attr("Confirmacion").is_none()).then(|| {
                (
                    "CFDI40118",
                    "Cuando el valor del campo TipoCambio se encuentre fuera de los límites establecidos, debe existir el campo Confirmacion.",
                    format!(
                        "TipoCambio {t} for {m}: the published rate is {published}, the limits {} to {} ({pct}%)",
                        published - allowed,
                        published + allowed
                    ),
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(attrs: &str) -> Element {
        let xml =
            format!(r#"<cfdi:Comprobante xmlns:cfdi="http://www.sat.gob.mx/cfd/4" {attrs}/>"#);
        Element::parse(xml.as_bytes()).expect("xml")
    }

    fn code(attrs: &str) -> Option<&'static str> {
        check(&root(attrs)).map(|r| r.0)
    }

    #[test]
    fn tipo_cambio_is_checked_as_a_pac_does() {
        assert_eq!(code(r#"Moneda="MXN""#), None);
        assert_eq!(code(r#"Moneda="MXN" TipoCambio="1""#), None);
        assert_eq!(code(r#"Moneda="MXN" TipoCambio="17.5""#), Some("CFDI40114"));
        assert_eq!(code(r#"Moneda="USD""#), Some("CFDI40115"));
        assert_eq!(code(r#"Moneda="XXX" TipoCambio="1""#), Some("CFDI40116"));
        assert_eq!(
            code(r#"Moneda="USD" TipoCambio="18.1234567""#),
            Some("CFDI40117")
        );
        // USD 17.75 ± 5 %: 16.8625 to 18.6375.
        assert_eq!(code(r#"Moneda="USD" TipoCambio="16.8625""#), None);
        assert_eq!(code(r#"Moneda="USD" TipoCambio="18.6375""#), None);
        assert_eq!(
            code(r#"Moneda="USD" TipoCambio="16.86""#),
            Some("CFDI40118")
        );
        assert_eq!(
            code(r#"Moneda="USD" TipoCambio="18.64""#),
            Some("CFDI40118")
        );
        assert_eq!(code(r#"Moneda="USD" TipoCambio="25""#), Some("CFDI40118"));
        assert_eq!(
            code(r#"Moneda="USD" TipoCambio="25" Confirmacion="ECVH1""#),
            None,
            "a Confirmacion ratifies it"
        );
        // Not in the sandbox's table: shape only.
        assert_eq!(code(r#"Moneda="BRL" TipoCambio="3.4""#), None);
    }
}
