//! `[fx]`: where the exchange rate (TipoCambio) of a sale in another currency comes from when
//! the payment provider reports none. Every default is in `config/default.toml`.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::Deserialize;

use super::SecretString;

/// Which rate source `[fx] source` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FxSource {
    /// Only the provider's own rate: a sale without one is held in `needs_attention`.
    None,
    /// The `rates` table (MXN per unit), for tests and trials.
    Fixed,
    /// Banxico's SIE API: the FIX (or the series in `series`) of the business day before the
    /// payment, as the DOF publishes it.
    Banxico,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FxSettings {
    pub source: FxSource,
    /// `fixed`: currency → MXN per unit, as a decimal string (`USD = "17.5025"`).
    #[serde(deserialize_with = "currency_keys")]
    pub rates: BTreeMap<String, String>,
    /// `banxico`: the SIE API token (the `Bmx-Token` header).
    pub token: Option<SecretString>,
    /// `banxico`: where the SIE API is (tests point it at a local server).
    pub api_base: String,
    /// `banxico`: currency → SIE series id (USD is SF43718, the FIX).
    #[serde(deserialize_with = "currency_keys")]
    pub series: BTreeMap<String, String>,
    pub timeout_seconds: u64,
    /// How many times a stored sale waits for a rate source that does not answer before it
    /// is held (the waits back off from the provider's retry interval).
    pub outage_retries: i32,
}

/// A table keyed by currency, its codes uppercased: environment variables arrive in lowercase
/// (`AUTOFACTURA__FX__RATES__USD` gives `usd`), and c_Moneda codes are uppercase.
fn currency_keys<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = BTreeMap::<String, String>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k.to_ascii_uppercase(), v))
        .collect())
}

impl FxSettings {
    /// The `fixed` table as decimals; entries that do not parse are left out (validation
    /// reports them).
    pub fn fixed_rates(&self) -> BTreeMap<String, Decimal> {
        self.rates
            .iter()
            .filter_map(|(c, r)| Some((c.clone(), r.trim().parse::<Decimal>().ok()?)))
            .collect()
    }

    pub(super) fn check(&self, p: &mut Vec<String>) {
        for (c, r) in &self.rates {
            if crate::cfdi::catalogs::currency_decimals(c).is_none() || c == "MXN" || c == "XXX" {
                p.push(format!(
                    "[fx] rates: {c:?} is not a c_Moneda currency other than MXN and XXX (uppercase, e.g. USD)"
                ));
            }
            match r.trim().parse::<Decimal>() {
                Ok(d) if d > Decimal::ZERO && d.scale() <= 6 => {}
                _ => p.push(format!(
                    "[fx] rates.{c} = {r:?} must be a positive decimal with at most 6 decimals, written as a string (e.g. \"17.5025\")"
                )),
            }
        }
        match self.source {
            FxSource::Fixed if self.rates.is_empty() => p.push(
                "[fx] source = \"fixed\" needs a rates table (e.g. rates = { USD = \"17.5025\" })"
                    .into(),
            ),
            FxSource::Banxico if self.token.is_none() => p.push(
                "[fx] source = \"banxico\" needs token (ask for one at banxico.org.mx/SieAPIRest)"
                    .into(),
            ),
            _ => {}
        }
        if !(self.api_base.starts_with("http://") || self.api_base.starts_with("https://")) {
            p.push("[fx] api_base must start with http:// or https://".into());
        }
        if self.timeout_seconds == 0 {
            p.push("[fx] timeout_seconds must be at least 1".into());
        }
        if self.outage_retries < 0 {
            p.push("[fx] outage_retries must not be negative (0 holds a sale at once)".into());
        }
    }
}
