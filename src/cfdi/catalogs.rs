//! The SAT catalogs the builder and validator need, embedded from `fixtures/sat/catalogs/`
//! (copied byte for byte from the SAT CSVs).

use std::collections::HashMap;
use std::sync::LazyLock;

const MONEDA: &str = include_str!("../../fixtures/sat/catalogs/c_Moneda.csv");
const USO_CFDI: &str = include_str!("../../fixtures/sat/catalogs/c_UsoCFDI.csv");
const REGIMEN: &str = include_str!("../../fixtures/sat/catalogs/c_RegimenFiscal.csv");
const FORMA_PAGO: &str = include_str!("../../fixtures/sat/catalogs/c_FormaPago.csv");

/// Splits one CSV line, honouring double quotes (the catalogs quote fields with commas).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for ch in line.chars() {
        match ch {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    out.push(cur);
    out
}

fn rows(csv: &'static str) -> impl Iterator<Item = Vec<String>> {
    csv.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(fields)
}

static CURRENCY_DECIMALS: LazyLock<HashMap<String, u32>> = LazyLock::new(|| {
    rows(MONEDA)
        .filter_map(|f| Some((f.first()?.clone(), f.get(2)?.parse().ok()?)))
        .collect()
});

/// UsoCFDI → the receptor régimenes it allows.
static USO_REGIMENES: LazyLock<HashMap<String, Vec<String>>> = LazyLock::new(|| {
    rows(USO_CFDI)
        .filter_map(|f| {
            let regs = f.get(6)?.split(',').map(|r| r.trim().to_owned()).collect();
            Some((f.first()?.clone(), regs))
        })
        .collect()
});

static REGIMENES: LazyLock<Vec<String>> =
    LazyLock::new(|| rows(REGIMEN).filter_map(|f| f.first().cloned()).collect());

static FORMAS_PAGO: LazyLock<Vec<String>> = LazyLock::new(|| {
    rows(FORMA_PAGO)
        .filter_map(|f| f.first().cloned())
        .collect()
});

/// `(code, description)` of every c_RegimenFiscal entry, in catalog order (for pick lists).
pub fn regimenes() -> Vec<(String, String)> {
    rows(REGIMEN)
        .filter_map(|f| Some((f.first()?.clone(), f.get(1)?.clone())))
        .collect()
}

/// `(code, description)` of every c_UsoCFDI entry, in catalog order (for pick lists).
pub fn usos_cfdi() -> Vec<(String, String)> {
    rows(USO_CFDI)
        .filter_map(|f| Some((f.first()?.clone(), f.get(1)?.clone())))
        .collect()
}

/// Decimals of a c_Moneda currency, or `None` when the code is not in the catalog.
pub fn currency_decimals(code: &str) -> Option<u32> {
    CURRENCY_DECIMALS.get(code).copied()
}

pub fn is_regimen(code: &str) -> bool {
    REGIMENES.iter().any(|r| r == code)
}

pub fn is_forma_pago(code: &str) -> bool {
    FORMAS_PAGO.iter().any(|r| r == code)
}

/// Whether `uso` exists and allows the receptor's `regimen` (c_UsoCFDI column
/// `regimenes_fiscales_receptores`).
pub fn uso_allows(uso: &str, regimen: &str) -> Option<bool> {
    USO_REGIMENES
        .get(uso)
        .map(|regs| regs.iter().any(|r| r == regimen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_embedded_catalogs() {
        assert_eq!(currency_decimals("MXN"), Some(2));
        assert_eq!(currency_decimals("USD"), Some(2));
        assert_eq!(currency_decimals("ZZZ"), None);
        assert!(is_regimen("601") && is_regimen("616") && !is_regimen("999"));
        assert!(is_forma_pago("04") && is_forma_pago("99") && !is_forma_pago("77"));
        assert_eq!(uso_allows("S01", "616"), Some(true));
        assert_eq!(uso_allows("G03", "616"), Some(false));
        assert_eq!(uso_allows("Z99", "616"), None);
    }
}
