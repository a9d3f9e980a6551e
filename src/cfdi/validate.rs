//! The local validator: what a PAC rejects for amounts, checked before any PAC is called.
//!
//! It reads the parsed XML, not the builder's model, so it judges exactly the bytes that would
//! be sent, whoever built them. Each problem names the SAT code when there is one.

use std::collections::BTreeMap;
use std::fmt;

use rust_decimal::Decimal;

use super::catalogs;
use super::dom::{Element, NS_CFDI};
use super::money::{MAX_INTEGER_DIGITS, decimals_of, parse_amount, round, unit};

/// One reason a document would be rejected.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The SAT error code a PAC answers with, when there is one (`CFDI40108`, …).
    pub code: Option<&'static str>,
    pub message: String,
}

impl Problem {
    pub fn new(code: Option<&'static str>, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(c) => write!(f, "{c}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Reads amount attributes, recording a problem for each one that is missing, malformed or out
/// of range.
struct Amounts<'p> {
    problems: &'p mut Vec<Problem>,
}

impl Amounts<'_> {
    fn get(&mut self, e: &Element, attr: &str, required: bool) -> Option<Decimal> {
        match e.attr(attr) {
            None if required => {
                self.problems
                    .push(Problem::new(None, format!("{}@{attr} is missing", e.name)));
                None
            }
            None => None,
            Some(v) => {
                let d = parse_amount(v);
                if d.is_none() {
                    self.problems.push(Problem::new(
                        None,
                        format!("{}@{attr}=\"{v}\" is not an amount", e.name),
                    ));
                    return None;
                }
                let integer_digits = v.split('.').next().unwrap_or(v).trim_start_matches('0');
                // Every sum and product of amounts this size stays within `Decimal`, whose
                // operators panic on overflow.
                if integer_digits.len() > MAX_INTEGER_DIGITS as usize {
                    self.problems.push(Problem::new(
                        None,
                        format!(
                            "{}@{attr}=\"{v}\" is out of range (more than {MAX_INTEGER_DIGITS} integer digits)",
                            e.name
                        ),
                    ));
                    return None;
                }
                d
            }
        }
    }
}

/// Truncates toward zero at `dp` decimals.
fn trunc(d: Decimal, dp: u32) -> Decimal {
    d.round_dp_with_strategy(dp, rust_decimal::RoundingStrategy::ToZero)
}

/// Rounds away from zero at `dp` decimals (ceiling for positives).
fn ceil(d: Decimal, dp: u32) -> Decimal {
    d.round_dp_with_strategy(dp, rust_decimal::RoundingStrategy::AwayFromZero)
}

/// Anexo 20's tolerance for a tax amount: the product of the rate and the Base's own rounding
/// interval, truncated / raised to the decimals the Importe is written with.
pub fn tax_in_tolerance(
    base: Decimal,
    base_dp: u32,
    rate: Decimal,
    importe: Decimal,
    imp_dp: u32,
) -> bool {
    let half = unit(base_dp) / Decimal::TWO;
    let lower = trunc((base - half) * rate, imp_dp);
    let upper = ceil((base + half - Decimal::new(1, 12)) * rate, imp_dp);
    lower <= importe && importe <= upper
}

type GroupKey = (String, String, Option<String>);

/// Checks CFDI40108, CFDI40119, CFDI40167, CFDI40215 and CFDI40221 (and the neighbouring sums
/// that have no code of their own) on a parsed comprobante, and a tipo P's Pagos 2.0 amounts
/// ([`super::validate_pagos::check`]).
pub fn check_amounts(root: &Element) -> Vec<Problem> {
    let mut problems = Vec::new();
    if root.attr("TipoDeComprobante") == Some("P") {
        problems.extend(super::validate_pagos::check(root));
    }
    let moneda = root.attr("Moneda").unwrap_or_default();
    let Some(dec) = catalogs::currency_decimals(moneda) else {
        problems.push(Problem::new(
            None,
            format!("Moneda `{moneda}` is not in c_Moneda"),
        ));
        return problems;
    };
    let mut am = Amounts {
        problems: &mut problems,
    };
    let subtotal = am.get(root, "SubTotal", true);
    let descuento = am.get(root, "Descuento", false);
    let total = am.get(root, "Total", true);

    let mut sum_importe = Decimal::ZERO;
    let mut sum_desc: Option<Decimal> = None;
    let mut tras_groups: BTreeMap<GroupKey, (Decimal, Option<Decimal>)> = BTreeMap::new();
    let mut ret_groups: BTreeMap<String, Decimal> = BTreeMap::new();
    let mut line_problems = Vec::new();
    for (i, c) in root
        .path(NS_CFDI, &["Conceptos", "Concepto"])
        .into_iter()
        .enumerate()
    {
        let n = i + 1;
        let mut am = Amounts {
            problems: &mut line_problems,
        };
        if let Some(imp) = am.get(c, "Importe", true) {
            sum_importe += imp;
            if let (Some(q), Some(vu)) = (
                am.get(c, "Cantidad", true),
                am.get(c, "ValorUnitario", true),
            ) {
                let dp = |a: &str| decimals_of(c.attr(a).unwrap_or_default());
                let (hq, hv) = (
                    unit(dp("Cantidad")) / Decimal::TWO,
                    unit(dp("ValorUnitario")) / Decimal::TWO,
                );
                let tiny = Decimal::new(1, 12);
                let lower = trunc((q - hq) * (vu - hv), dp("Importe"));
                let upper = ceil((q + hq - tiny) * (vu + hv - tiny), dp("Importe"));
                if imp < lower || imp > upper {
                    am.problems.push(Problem::new(
                        None,
                        format!("concepto {n}: Importe {imp} is outside the range allowed for Cantidad {q} × ValorUnitario {vu}"),
                    ));
                }
            }
        }
        if let Some(d) = am.get(c, "Descuento", false) {
            sum_desc = Some(sum_desc.unwrap_or_default() + d);
        }
        for t in c.path(NS_CFDI, &["Impuestos", "Traslados", "Traslado"]) {
            let base = am.get(t, "Base", true).unwrap_or_default();
            let key = (
                t.attr("Impuesto").unwrap_or_default().to_owned(),
                t.attr("TipoFactor").unwrap_or_default().to_owned(),
                t.attr("TasaOCuota").map(str::to_owned),
            );
            let importe = am.get(t, "Importe", false);
            let g = tras_groups.entry(key).or_insert((Decimal::ZERO, None));
            g.0 += base;
            if let Some(imp) = importe {
                g.1 = Some(g.1.unwrap_or_default() + imp);
            }
            if let (Some(rate), Some(imp)) = (am.get(t, "TasaOCuota", false), importe) {
                let bdp = decimals_of(t.attr("Base").unwrap_or_default());
                let idp = decimals_of(t.attr("Importe").unwrap_or_default());
                if !tax_in_tolerance(base, bdp, rate, imp, idp) {
                    am.problems.push(Problem::new(
                        Some("CFDI40167"),
                        format!(
                            "concepto {n}: Traslado Importe {imp} is outside the range allowed for Base {base} × TasaOCuota {rate} = {}",
                            base * rate
                        ),
                    ));
                }
            }
        }
        let mut am = Amounts {
            problems: &mut line_problems,
        };
        for r in c.path(NS_CFDI, &["Impuestos", "Retenciones", "Retencion"]) {
            let base = am.get(r, "Base", true).unwrap_or_default();
            let rate = am.get(r, "TasaOCuota", true).unwrap_or_default();
            let imp = am.get(r, "Importe", true).unwrap_or_default();
            *ret_groups
                .entry(r.attr("Impuesto").unwrap_or_default().to_owned())
                .or_default() += imp;
            let bdp = decimals_of(r.attr("Base").unwrap_or_default());
            let idp = decimals_of(r.attr("Importe").unwrap_or_default());
            if !tax_in_tolerance(base, bdp, rate, imp, idp) {
                am.problems.push(Problem::new(
                    None,
                    format!("concepto {n}: Retencion Importe {imp} is outside the range allowed for Base {base} × TasaOCuota {rate}"),
                ));
            }
        }
    }
    problems.append(&mut line_problems);

    if let Some(st) = subtotal {
        let expected = round(sum_importe, dec);
        if st != expected {
            problems.push(Problem::new(
                Some("CFDI40108"),
                format!("SubTotal {st} is not the sum of the conceptos' Importe, {expected}"),
            ));
        }
    }
    match (descuento, sum_desc) {
        (Some(d), Some(s)) if d != round(s, dec) => problems.push(Problem::new(
            None,
            format!(
                "Descuento {d} is not the sum of the conceptos' Descuento, {}",
                round(s, dec)
            ),
        )),
        (Some(d), None) if !d.is_zero() => problems.push(Problem::new(
            None,
            format!("Descuento {d} is present but no concepto has a Descuento"),
        )),
        (None, Some(s)) if !s.is_zero() => problems.push(Problem::new(
            None,
            format!("the conceptos have Descuento {s} but the comprobante has none"),
        )),
        _ => {}
    }

    // Comprobante-level Impuestos.
    let imp = root.child(NS_CFDI, "Impuestos");
    let mut am = Amounts {
        problems: &mut problems,
    };
    let total_tras = imp.and_then(|i| am.get(i, "TotalImpuestosTrasladados", false));
    let total_ret = imp.and_then(|i| am.get(i, "TotalImpuestosRetenidos", false));
    let mut sum_summary_tras = Decimal::ZERO;
    let mut seen = Vec::new();
    let mut summary_problems = Vec::new();
    for t in imp
        .map(|i| i.path(NS_CFDI, &["Traslados", "Traslado"]))
        .unwrap_or_default()
    {
        let mut am = Amounts {
            problems: &mut summary_problems,
        };
        let key = (
            t.attr("Impuesto").unwrap_or_default().to_owned(),
            t.attr("TipoFactor").unwrap_or_default().to_owned(),
            t.attr("TasaOCuota").map(str::to_owned),
        );
        let base = am.get(t, "Base", true);
        let importe = am.get(t, "Importe", false);
        sum_summary_tras += importe.unwrap_or_default();
        let label = format!("{} {} {}", key.0, key.1, key.2.clone().unwrap_or_default());
        match tras_groups.iter().find(|(k, _)| same_group(k, &key)) {
            None => summary_problems.push(Problem::new(
                Some("CFDI40215"),
                format!("Traslado {label} has no matching traslado in the conceptos"),
            )),
            Some((k, (gbase, gimp))) => {
                seen.push(k.clone());
                if let Some(b) = base
                    && b != round(*gbase, dec)
                {
                    summary_problems.push(Problem::new(
                        None,
                        format!(
                            "Traslado {label}: Base {b} is not the sum of the conceptos' Base, {}",
                            round(*gbase, dec)
                        ),
                    ));
                }
                let expected = gimp.map(|g| round(g, dec));
                if importe != expected {
                    summary_problems.push(Problem::new(
                        Some("CFDI40215"),
                        format!(
                            "Traslado {label}: Importe {} is not the sum of the conceptos' Importe, {}",
                            opt(importe),
                            opt(expected)
                        ),
                    ));
                }
            }
        }
    }
    for k in tras_groups
        .keys()
        .filter(|k| !seen.iter().any(|s| same_group(s, k)))
    {
        summary_problems.push(Problem::new(
            Some("CFDI40215"),
            format!(
                "the conceptos have traslados {} {} {} missing from the comprobante's Impuestos",
                k.0,
                k.1,
                k.2.clone().unwrap_or_default()
            ),
        ));
    }
    problems.append(&mut summary_problems);
    let any_tras_importe = tras_groups.values().any(|g| g.1.is_some());
    match total_tras {
        Some(t) if t != sum_summary_tras => problems.push(Problem::new(
            Some("CFDI40221"),
            format!("TotalImpuestosTrasladados {t} is not the sum of the traslados' Importe, {sum_summary_tras}"),
        )),
        None if any_tras_importe => problems.push(Problem::new(
            Some("CFDI40221"),
            "the conceptos carry traslados but TotalImpuestosTrasladados is missing",
        )),
        _ => {}
    }
    let mut sum_summary_ret = Decimal::ZERO;
    let mut am = Amounts {
        problems: &mut problems,
    };
    let mut ret_rows = Vec::new();
    for r in imp
        .map(|i| i.path(NS_CFDI, &["Retenciones", "Retencion"]))
        .unwrap_or_default()
    {
        let v = am.get(r, "Importe", true).unwrap_or_default();
        sum_summary_ret += v;
        ret_rows.push((r.attr("Impuesto").unwrap_or_default().to_owned(), v));
    }
    for (k, v) in &ret_rows {
        let expected = ret_groups.get(k).map(|g| round(*g, dec));
        if expected != Some(*v) {
            problems.push(Problem::new(
                None,
                format!(
                    "Retencion {k}: Importe {v} is not the sum of the conceptos' retenciones, {}",
                    opt(expected)
                ),
            ));
        }
    }
    match total_ret {
        Some(t) if t != sum_summary_ret => problems.push(Problem::new(
            None,
            format!(
                "TotalImpuestosRetenidos {t} is not the sum of the retenciones, {sum_summary_ret}"
            ),
        )),
        None if !ret_groups.is_empty() => problems.push(Problem::new(
            None,
            "the conceptos carry retenciones but TotalImpuestosRetenidos is missing",
        )),
        _ => {}
    }

    if let (Some(st), Some(t)) = (subtotal, total) {
        let expected = st - descuento.unwrap_or_default() + total_tras.unwrap_or_default()
            - total_ret.unwrap_or_default();
        if t != expected {
            problems.push(Problem::new(
                Some("CFDI40119"),
                format!("Total {t} is not SubTotal − Descuento + TotalImpuestosTrasladados − TotalImpuestosRetenidos = {expected}"),
            ));
        }
    }
    for (attr, v) in [
        ("SubTotal", subtotal),
        ("Descuento", descuento),
        ("Total", total),
    ] {
        if v.is_some() && decimals_of(root.attr(attr).unwrap_or_default()) > dec {
            problems.push(Problem::new(
                None,
                format!("{attr} has more decimals than {moneda} allows ({dec})"),
            ));
        }
    }
    problems
}

/// TasaOCuota compared as numbers: "0.16" and "0.160000" are the same rate.
fn same_group(a: &GroupKey, b: &GroupKey) -> bool {
    let rate = |s: &Option<String>| s.as_deref().and_then(parse_amount);
    a.0 == b.0 && a.1 == b.1 && rate(&a.2) == rate(&b.2)
}

fn opt(d: Option<Decimal>) -> String {
    d.map_or_else(|| "(none)".to_owned(), |d| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_accepts_rounded_and_two_decimal_tax() {
        let d = |s: &str| s.parse::<Decimal>().expect("decimal");
        // 86.21 × 0.16 = 13.7936; written with 2 decimals the range is [13.79, 13.80].
        assert!(tax_in_tolerance(d("86.21"), 2, d("0.16"), d("13.79"), 2));
        assert!(tax_in_tolerance(d("86.21"), 2, d("0.16"), d("13.7936"), 4));
        assert!(!tax_in_tolerance(d("86.21"), 2, d("0.16"), d("13.78"), 2));
        assert!(!tax_in_tolerance(d("86.21"), 2, d("0.16"), d("13.7950"), 4));
    }
}
