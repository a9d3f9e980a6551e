//! Exchange rates: the TipoCambio (MXN per unit) of a sale charged in another currency.
//!
//! In order: the payment provider's own rate (Stripe's balance transaction, Mercado Pago's
//! conversion data, carried in [`crate::ingest::PaymentFacts::provider_rate`]); else the
//! `[fx]` source: a fixed table (tests, trials) or Banxico's SIE API (the FIX of the business
//! day before the payment, the rate the DOF publishes for it). Never a made-up rate: without a
//! source the answer is the reason, and the sale is held in `needs_attention` with it.
//!
//! Called by the webhook handlers before the ingest transaction (a network call is never made
//! inside one). Who may import it: `webhooks`, `startup`, `state`, tests.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use rust_decimal::Decimal;
use serde::Deserialize;

use crate::config::{FxSettings, FxSource};

/// How many days before the payment to ask Banxico for (weekends and holidays have no FIX).
const LOOKBACK_DAYS: i64 = 10;

/// Where rates come from, built once from `[fx]`.
#[derive(Debug, Clone)]
pub struct Rates {
    source: Source,
}

#[derive(Debug, Clone)]
enum Source {
    None,
    Fixed(BTreeMap<String, Decimal>),
    Banxico(Banxico),
}

#[derive(Debug, Clone)]
struct Banxico {
    http: reqwest::Client,
    api_base: String,
    token: String,
    series: BTreeMap<String, String>,
}

/// A TipoCambio as the CFDI takes it: positive, at most 6 decimals (the XSD's), trailing zeros
/// dropped. `None` for zero, negative or absurd values.
pub fn as_tipo_cambio(rate: Decimal) -> Option<Decimal> {
    let r = rate
        .round_dp_with_strategy(6, rust_decimal::RoundingStrategy::MidpointAwayFromZero)
        .normalize();
    (r > Decimal::ZERO).then_some(r)
}

impl Rates {
    pub fn from_settings(fx: &FxSettings) -> Result<Self, String> {
        let source = match fx.source {
            FxSource::None => Source::None,
            FxSource::Fixed => Source::Fixed(fx.fixed_rates()),
            FxSource::Banxico => {
                let token = fx
                    .token
                    .as_ref()
                    .ok_or("[fx] source = \"banxico\" needs token")?
                    .expose()
                    .to_owned();
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(fx.timeout_seconds.max(1)))
                    .build()
                    .map_err(|e| format!("cannot build the Banxico HTTP client: {e}"))?;
                Source::Banxico(Banxico {
                    http,
                    api_base: fx.api_base.trim_end_matches('/').to_owned(),
                    token,
                    series: fx.series.clone(),
                })
            }
        };
        Ok(Self { source })
    }

    /// No source: only providers' own rates.
    pub fn none() -> Self {
        Self {
            source: Source::None,
        }
    }

    /// The TipoCambio of a sale in `currency` paid at `paid_at`: `None` for MXN (none is
    /// written); the provider's rate when it gave one; else the configured source's; else
    /// `Some(Err(why))`.
    pub async fn tipo_cambio(
        &self,
        currency: &str,
        provider_rate: Option<Decimal>,
        paid_at: DateTime<Utc>,
    ) -> Option<Result<Decimal, RateError>> {
        if currency == "MXN" {
            return None;
        }
        if let Some(r) = provider_rate.and_then(as_tipo_cambio) {
            return Some(Ok(r));
        }
        let paid_on = crate::domain::time::to_local(paid_at).date();
        Some(match &self.source {
            Source::None => Err(RateError::settled(format!(
                "no exchange rate for currency {currency}: the payment provider reported none and no rate source is set ([fx] source = \"banxico\" with a token); give the TipoCambio in the admin (Fix)"
            ))),
            Source::Fixed(t) => t.get(currency).copied().and_then(as_tipo_cambio).ok_or_else(|| {
                RateError::settled(format!(
                    "no exchange rate for currency {currency}: [fx] rates has none; add it or give the TipoCambio in the admin (Fix)"
                ))
            }),
            Source::Banxico(b) => b.rate(currency, paid_on).await,
        })
    }
}

/// Why a sale has no TipoCambio. `outage`: the source did not answer (network, HTTP error,
/// unreadable body), so asking again later may give one; not when it answered that it has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateError {
    pub reason: String,
    pub outage: bool,
}

impl RateError {
    /// The source answered, and has no rate: asking again will not help.
    fn settled(reason: String) -> Self {
        Self {
            reason,
            outage: false,
        }
    }
}

/// `GET /series/{id}/datos/{from}/{to}` of the SIE API.
#[derive(Debug, Deserialize)]
struct SieAnswer {
    bmx: SieBody,
}

#[derive(Debug, Deserialize)]
struct SieBody {
    series: Vec<SieSeries>,
}

#[derive(Debug, Deserialize)]
struct SieSeries {
    #[serde(default)]
    datos: Vec<SieDato>,
}

#[derive(Debug, Deserialize)]
struct SieDato {
    /// `dd/mm/yyyy`.
    fecha: String,
    /// A decimal, or `N/E` when there is none that day.
    dato: String,
}

impl Banxico {
    /// The last published value of the currency's series strictly before `paid_on`.
    async fn rate(&self, currency: &str, paid_on: NaiveDate) -> Result<Decimal, RateError> {
        let Some(series) = self.series.get(currency) else {
            return Err(RateError::settled(format!(
                "no exchange rate for currency {currency}: [fx.series] names no Banxico series for it; add one or give the TipoCambio in the admin (Fix)"
            )));
        };
        let from = paid_on - chrono::Duration::days(LOOKBACK_DAYS);
        let to = paid_on - chrono::Duration::days(1);
        let url = format!(
            "{}/series/{series}/datos/{}/{}",
            self.api_base,
            from.format("%Y-%m-%d"),
            to.format("%Y-%m-%d")
        );
        let unreachable = |e: String| RateError {
            outage: true,
            ..RateError::settled(format!(
                "no exchange rate for currency {currency}: Banxico's SIE API failed ({e}); retry from the admin once it answers, or give the TipoCambio there (Fix)"
            ))
        };
        let resp = self
            .http
            .get(&url)
            .header("Bmx-Token", &self.token)
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| unreachable(e.without_url().to_string()))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(unreachable(format!("HTTP {}", status.as_u16())));
        }
        let body: SieAnswer = resp
            .json()
            .await
            .map_err(|e| unreachable(format!("unreadable answer: {}", e.without_url())))?;
        body.bmx
            .series
            .iter()
            .flat_map(|s| s.datos.iter())
            .filter_map(|d| {
                let day = NaiveDate::parse_from_str(&d.fecha, "%d/%m/%Y").ok()?;
                let rate = d.dato.trim().replace(',', "").parse::<Decimal>().ok()?;
                (day < paid_on).then_some((day, rate))
            })
            .max_by_key(|(day, _)| *day)
            .and_then(|(_, r)| as_tipo_cambio(r))
            .ok_or_else(|| {
                RateError::settled(format!(
                    "no exchange rate for currency {currency}: Banxico published no {series} value between {from} and {to}; give the TipoCambio in the admin (Fix)"
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_written_with_at_most_six_decimals_and_never_zero() {
        assert_eq!(
            as_tipo_cambio("17.12345678".parse().unwrap()),
            Some("17.123457".parse().unwrap())
        );
        assert_eq!(
            as_tipo_cambio("18.2500".parse().unwrap()).map(|d| d.to_string()),
            Some("18.25".into())
        );
        assert_eq!(as_tipo_cambio(Decimal::ZERO), None);
        assert_eq!(as_tipo_cambio("-1".parse().unwrap()), None);
    }
}
