//! `[refunds]`: refunds and lost disputes → CFDI de egreso (`docs/refunds.md`). Every default is
//! in `config/default.toml`.

use serde::Deserialize;

/// What a full refund of a sale does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullRefund {
    /// An egreso for the whole sale, like any refund.
    Egreso,
    /// Within the month of the sale, cancel the ingreso (motivo 02); an egreso when the
    /// cancellation is not possible.
    Cancel,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefundSettings {
    /// Serie of the egresos (their own folio sequence).
    pub serie: String,
    /// `egreso` (default) or `cancel`.
    pub full: FullRefund,
    /// How often `serve` looks for refunds whose original was stamped since, in seconds.
    pub interval_seconds: u64,
}

impl RefundSettings {
    /// Adds every problem of `[refunds]` to `p`.
    pub(super) fn check(&self, p: &mut Vec<String>) {
        if !(1..=25).contains(&self.serie.len())
            || !self.serie.chars().all(|c| c.is_ascii_alphanumeric())
        {
            p.push(format!(
                "[refunds] serie = {:?} must be 1 to 25 letters or digits",
                self.serie
            ));
        }
        if self.interval_seconds == 0 {
            p.push("[refunds] interval_seconds must be at least 1".into());
        }
    }
}
