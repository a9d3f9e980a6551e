//! `[global]`: the factura global (sales without the customer's RFC). Every default is in
//! `config/default.toml`.

use serde::{Deserialize, Deserializer};

use crate::domain::period::Periodicidad;

/// The most conceptos one factura global may carry; a period with more sales is split.
pub const MAX_CONCEPTOS_LIMIT: usize = 5000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalSettings {
    /// `diaria`, `semanal`, `quincenal`, `mensual` or `bimestral` (c_Periodicidad 01–05).
    #[serde(deserialize_with = "periodicidad")]
    pub periodicidad: Periodicidad,
    /// Serie of the facturas globales (their own folio sequence).
    pub serie: String,
    /// Conceptos per factura global; a period with more sales gets several.
    pub max_conceptos: usize,
    /// Issue each closed period automatically (`serve`); `false` = only `autofactura global issue`.
    pub auto_issue: bool,
    /// How long after a period closes the automatic issue waits for late deliveries, in minutes.
    pub grace_minutes: u64,
    /// How often `serve` looks for closed periods, in seconds.
    pub interval_seconds: u64,
}

fn periodicidad<'de, D: Deserializer<'de>>(d: D) -> Result<Periodicidad, D::Error> {
    let s = String::deserialize(d)?;
    Periodicidad::parse(&s).ok_or_else(|| {
        serde::de::Error::custom(
            "expected \"diaria\", \"semanal\", \"quincenal\", \"mensual\" or \"bimestral\"",
        )
    })
}

impl GlobalSettings {
    /// Adds every problem of `[global]` to `p`; `regimen` is the emisor's régimen fiscal.
    pub(super) fn check(&self, regimen: &str, p: &mut Vec<String>) {
        // As [emisor] serie: the XSD allows 1 to 25 characters; letters and digits keep the
        // serie-folio unambiguous in lists and searches.
        if !(1..=25).contains(&self.serie.len())
            || !self.serie.chars().all(|c| c.is_ascii_alphanumeric())
        {
            p.push(format!(
                "[global] serie = {:?} must be 1 to 25 letters or digits",
                self.serie
            ));
        }
        if !(1..=MAX_CONCEPTOS_LIMIT).contains(&self.max_conceptos) {
            p.push(format!(
                "[global] max_conceptos = {} must be 1 to {MAX_CONCEPTOS_LIMIT}",
                self.max_conceptos
            ));
        }
        if self.interval_seconds == 0 {
            p.push("[global] interval_seconds must be at least 1".into());
        }
        // SAT: periodicidad 05 (bimestral) is for the Régimen de Incorporación Fiscal only.
        if self.periodicidad == Periodicidad::Bimestral && regimen != "621" {
            p.push(format!(
                "[global] periodicidad = \"bimestral\" is only for régimen 621 (RIF); [emisor] \
                 regimen_fiscal is {regimen}: choose diaria, semanal, quincenal or mensual"
            ));
        }
    }
}
