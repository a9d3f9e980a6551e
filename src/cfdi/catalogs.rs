//! The SAT catalogs the builder and validator need, embedded from `fixtures/sat/catalogs/`
//! (copied byte for byte from the SAT CSVs, except c_CodigoPostal: its 3.3 MB CSV is kept as
//! the 15 runs of consecutive codes it consists of, written by `scripts/sat-cp-ranges`).

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

const MONEDA: &str = include_str!("../../fixtures/sat/catalogs/c_Moneda.csv");
const USO_CFDI: &str = include_str!("../../fixtures/sat/catalogs/c_UsoCFDI.csv");
const REGIMEN: &str = include_str!("../../fixtures/sat/catalogs/c_RegimenFiscal.csv");
const FORMA_PAGO: &str = include_str!("../../fixtures/sat/catalogs/c_FormaPago.csv");
const CODIGO_POSTAL: &str = include_str!("../../fixtures/sat/catalogs/c_CodigoPostal.ranges");
/// c_CodigoPostal's `huso_horario` as runs of sorted codes sharing one zone (also written by
/// `scripts/sat-cp-ranges`).
const HUSOS: &str = include_str!("../../fixtures/sat/catalogs/c_CodigoPostal.husos");
/// The enumerations of SAT's `catCFDI.xsd`, one catalog a line: its name, then its codes
/// (c_ClaveProdServ and c_ClaveUnidad among them). Shared by ingest (product keys) and the
/// sandbox PAC's XSD check.
const XSD_CODES: &str = include_str!("../../fixtures/pacsim/catCFDI-codes.txt");

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

static CURRENCY_VARIATION: LazyLock<HashMap<String, u32>> = LazyLock::new(|| {
    rows(MONEDA)
        .filter_map(|f| Some((f.first()?.clone(), f.get(3)?.parse().ok()?)))
        .collect()
});

/// Catalog name → its codes, as `catCFDI.xsd` enumerates them.
static XSD_CATALOGS: LazyLock<HashMap<&'static str, HashSet<&'static str>>> = LazyLock::new(|| {
    XSD_CODES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut it = l.split(' ');
            Some((it.next()?, it.collect()))
        })
        .collect()
});

/// Whether `code` is in the `catCFDI.xsd` enumeration `catalog` (`c_ClaveProdServ`,
/// `c_ClaveUnidad`, `c_ObjetoImp`, …), as a PAC checks it.
pub fn in_xsd_catalog(catalog: &str, code: &str) -> bool {
    XSD_CATALOGS
        .get(catalog)
        .is_some_and(|codes| codes.contains(code))
}

/// UsoCFDI → the receptor régimenes it allows.
static USO_REGIMENES: LazyLock<HashMap<String, Vec<String>>> = LazyLock::new(|| {
    rows(USO_CFDI)
        .filter_map(|f| {
            let regs = f.get(6)?.split(',').map(|r| r.trim().to_owned()).collect();
            Some((f.first()?.clone(), regs))
        })
        .collect()
});

/// One entry of c_RegimenFiscal or c_UsoCFDI: its code, its text and which kind of person
/// (física, moral) may use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub code: String,
    pub text: String,
    pub fisica: bool,
    pub moral: bool,
}

impl Entry {
    /// Whether a persona moral (`true`) or física (`false`) may use it.
    pub fn applies_to(&self, moral: bool) -> bool {
        if moral { self.moral } else { self.fisica }
    }
}

/// Both catalogs have `id,texto,aplica_fisica,aplica_moral,…`, `1` or empty.
fn entries(csv: &'static str) -> Vec<Entry> {
    rows(csv)
        .filter_map(|f| {
            Some(Entry {
                code: f.first()?.clone(),
                text: f.get(1)?.clone(),
                fisica: f.get(2)? == "1",
                moral: f.get(3)? == "1",
            })
        })
        .collect()
}

static REGIMENES: LazyLock<Vec<Entry>> = LazyLock::new(|| entries(REGIMEN));

static USOS: LazyLock<Vec<Entry>> = LazyLock::new(|| entries(USO_CFDI));

/// c_CodigoPostal as sorted runs `(first, last)`.
static CP_RUNS: LazyLock<Vec<(u32, u32)>> = LazyLock::new(|| {
    CODIGO_POSTAL
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (a, b) = l.trim().split_once('-')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
});

/// The time zones of c_CodigoPostal (`huso_horario`), as the SAT names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Huso {
    /// Tiempo del Centro (UTC−6, no daylight saving since 2022).
    Centro,
    /// Tiempo del Centro en Frontera: the northern border strip on Central time with the US
    /// daylight-saving dates.
    CentroFrontera,
    /// Tiempo del Noroeste: Baja California, UTC−8 with the US daylight-saving dates.
    Noroeste,
    /// Tiempo del Pacífico (UTC−7, no daylight saving).
    Pacifico,
    /// Tiempo del Sureste: Quintana Roo, UTC−5.
    Sureste,
}

impl Huso {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.trim() {
            "Tiempo del Centro" => Self::Centro,
            "Tiempo del Centro en Frontera" => Self::CentroFrontera,
            "Tiempo del Noroeste" => Self::Noroeste,
            "Tiempo del Pacífico" => Self::Pacifico,
            "Tiempo del Sureste" => Self::Sureste,
            _ => return None,
        })
    }

    /// As the catalog writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Centro => "Tiempo del Centro",
            Self::CentroFrontera => "Tiempo del Centro en Frontera",
            Self::Noroeste => "Tiempo del Noroeste",
            Self::Pacifico => "Tiempo del Pacífico",
            Self::Sureste => "Tiempo del Sureste",
        }
    }
}

/// `(first code of the run, zone)`, sorted.
static HUSO_RUNS: LazyLock<Vec<(u32, Huso)>> = LazyLock::new(|| {
    HUSOS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (range, zone) = l.trim().split_once(' ')?;
            let (first, _) = range.split_once('-')?;
            Some((first.parse().ok()?, Huso::parse(zone)?))
        })
        .collect()
});

/// The `huso_horario` of a código postal of c_CodigoPostal; `None` for a code not in it.
pub fn huso_horario(cp: &str) -> Option<Huso> {
    if !is_codigo_postal(cp) {
        return None;
    }
    let n: u32 = cp.parse().ok()?;
    let i = HUSO_RUNS.partition_point(|(first, _)| *first <= n);
    HUSO_RUNS.get(i.checked_sub(1)?).map(|(_, h)| *h)
}

static FORMAS_PAGO: LazyLock<Vec<String>> = LazyLock::new(|| {
    rows(FORMA_PAGO)
        .filter_map(|f| f.first().cloned())
        .collect()
});

/// `(code, description)` of every entry of `catalog` (c_RegimenFiscal, c_UsoCFDI), in catalog
/// order, for the admin's pick lists.
pub fn options(catalog: &[Entry]) -> Vec<(String, String)> {
    catalog
        .iter()
        .map(|e| (e.code.clone(), e.text.clone()))
        .collect()
}

/// `porcentaje_variacion` of a c_Moneda currency: how far (in percent) a TipoCambio may be
/// from the published rate before a PAC asks for a Confirmacion (CFDI40118).
pub fn currency_variation(code: &str) -> Option<u32> {
    CURRENCY_VARIATION.get(code).copied()
}

/// Decimals of a c_Moneda currency, or `None` when the code is not in the catalog.
pub fn currency_decimals(code: &str) -> Option<u32> {
    CURRENCY_DECIMALS.get(code).copied()
}

pub fn is_regimen(code: &str) -> bool {
    regimen(code).is_some()
}

/// c_RegimenFiscal, in catalog order.
pub fn regimenes() -> &'static [Entry] {
    &REGIMENES
}

pub fn regimen(code: &str) -> Option<&'static Entry> {
    REGIMENES.iter().find(|r| r.code == code)
}

/// c_UsoCFDI, in catalog order.
pub fn usos() -> &'static [Entry] {
    &USOS
}

pub fn uso(code: &str) -> Option<&'static Entry> {
    USOS.iter().find(|u| u.code == code)
}

/// Whether `cp` is a código postal of c_CodigoPostal (five digits).
pub fn is_codigo_postal(cp: &str) -> bool {
    if cp.len() != 5 || !cp.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Ok(n) = cp.parse::<u32>() else {
        return false;
    };
    // The last run starting at or before `n` is the only one that can hold it.
    let i = CP_RUNS.partition_point(|(first, _)| *first <= n);
    i > 0 && n <= CP_RUNS[i - 1].1
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

    #[test]
    fn knows_who_may_use_each_regimen_and_uso() {
        assert_eq!(regimenes().len(), 19);
        let r601 = regimen("601").expect("601");
        assert!(r601.applies_to(true) && !r601.applies_to(false));
        assert_eq!(r601.text, "General de Ley Personas Morales");
        let r626 = regimen("626").expect("626");
        assert!(r626.applies_to(true) && r626.applies_to(false));
        assert!(regimen("612").is_some_and(|r| !r.moral && r.fisica));
        assert!(uso("D01").is_some_and(|u| u.fisica && !u.moral));
        assert_eq!(
            uso("G02").map(|u| u.text.as_str()),
            Some("Devoluciones, descuentos o bonificaciones.")
        );
        assert_eq!(usos().len(), 24);
    }

    #[test]
    fn husos_come_from_the_runs_of_the_catalog() {
        assert_eq!(HUSO_RUNS.len(), 38);
        for (cp, huso) in [
            ("06600", Huso::Centro),
            ("42501", Huso::Centro),
            ("22000", Huso::Noroeste),
            ("21000", Huso::Noroeste),
            ("23000", Huso::Pacifico),
            ("83000", Huso::Pacifico),
            ("63726", Huso::Centro),
            ("63727", Huso::Pacifico),
            ("32000", Huso::CentroFrontera),
            ("88000", Huso::CentroFrontera),
            ("77500", Huso::Sureste),
            ("99999", Huso::Centro),
        ] {
            assert_eq!(huso_horario(cp), Some(huso), "{cp}");
        }
        assert_eq!(huso_horario("17000"), None, "not in c_CodigoPostal");
        assert_eq!(currency_variation("USD"), Some(5));
        assert_eq!(currency_variation("XXX"), Some(0));
    }

    #[test]
    fn codigos_postales_come_from_the_runs_of_the_catalog() {
        assert_eq!(CP_RUNS.len(), 15);
        assert!(CP_RUNS.windows(2).all(|w| w[0].1 < w[1].0), "sorted, apart");
        for ok in [
            "00000", "01000", "06600", "16999", "20000", "26015", "42501", "54539", "99999",
        ] {
            assert!(is_codigo_postal(ok), "{ok}");
        }
        for bad in [
            "00001", "00999", "17000", "19999", "20640", "54538", "54540", "90751", "1234",
            "123456", "0600a", " 0660",
        ] {
            assert!(!is_codigo_postal(bad), "{bad}");
        }
    }
}
