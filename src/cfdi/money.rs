//! Amounts: rounding and the textual forms Anexo 20 expects. `rust_decimal` only.
//!
//! Line values (ValorUnitario, Importe, Base, tax Importe) carry up to six decimals; comprobante
//! values (SubTotal, Total, summary taxes) carry exactly the currency's decimals and are
//! computed from line values summed at full precision, then rounded once.

use rust_decimal::{Decimal, RoundingStrategy};

/// Most decimals any CFDI amount may have.
pub const MAX_DECIMALS: u32 = 6;

/// Most integer digits of any amount, Cantidad or TipoCambio here (below 10^14). The SAT's
/// `t_Importe` allows 18, but a product of two amounts (Cantidad × ValorUnitario, Total ×
/// TipoCambio) must stay within `Decimal` (about 7.9 × 10^28) and its result within the CFDI's
/// own limit; 10^14 is beyond any real sale.
pub const MAX_INTEGER_DIGITS: u32 = 14;

/// Whether `d` has at most [`MAX_INTEGER_DIGITS`] integer digits.
pub fn in_range(d: Decimal) -> bool {
    d.abs() < Decimal::from(10u64.pow(MAX_INTEGER_DIGITS))
}

/// Checks that `d` can be written in a CFDI: at most [`MAX_INTEGER_DIGITS`] integer digits and
/// [`MAX_DECIMALS`] decimals. The error says which limit, for the caller to prefix with the
/// amount and where it came from.
pub fn check_limits(d: Decimal) -> Result<(), String> {
    if !in_range(d) {
        return Err(format!(
            "is out of range: at most {MAX_INTEGER_DIGITS} integer digits"
        ));
    }
    if d.normalize().scale() > MAX_DECIMALS {
        return Err(format!("has more than {MAX_DECIMALS} decimals"));
    }
    Ok(())
}

/// SAT rounding: half away from zero.
pub fn round(d: Decimal, dp: u32) -> Decimal {
    d.round_dp_with_strategy(dp, RoundingStrategy::MidpointAwayFromZero)
}

/// Exactly `dp` decimals: `100` → `100.00`.
pub fn fixed(d: Decimal, dp: u32) -> String {
    let mut r = round(d, dp);
    r.rescale(dp);
    r.to_string()
}

/// Between `min_dp` and six decimals, trailing zeros past `min_dp` dropped: line amounts.
pub fn line(d: Decimal, min_dp: u32) -> String {
    let mut r = round(d, MAX_DECIMALS).normalize();
    if r.scale() < min_dp {
        r.rescale(min_dp);
    }
    r.to_string()
}

/// Number of decimals written in a textual amount (`"13.7936"` → 4).
pub fn decimals_of(s: &str) -> u32 {
    s.split_once('.')
        .map_or(0, |(_, f)| u32::try_from(f.len()).unwrap_or(u32::MAX))
}

/// `10^-dp`, the smallest unit at `dp` decimals (at most 28, all a `Decimal` holds: a text
/// with more decimals is read rounded to 28).
pub fn unit(dp: u32) -> Decimal {
    Decimal::new(1, dp.min(Decimal::MAX_SCALE))
}

/// Parses a CFDI amount attribute strictly: digits, optional point and decimals, no sign or
/// exponent.
pub fn parse_amount(s: &str) -> Option<Decimal> {
    let ok = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
        && s.matches('.').count() <= 1
        && !s.starts_with('.')
        && !s.ends_with('.');
    if ok { s.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().expect("decimal")
    }

    #[test]
    fn rounds_half_away_from_zero() {
        assert_eq!(round(d("0.125"), 2), d("0.13"));
        assert_eq!(round(d("0.135"), 2), d("0.14"));
        assert_eq!(round(d("2.5"), 0), d("3"));
    }

    #[test]
    fn formats_fixed_and_line_amounts() {
        assert_eq!(fixed(d("100"), 2), "100.00");
        assert_eq!(fixed(d("13.7936"), 2), "13.79");
        assert_eq!(line(d("86.206897"), 2), "86.206897");
        assert_eq!(line(d("100.000000"), 2), "100.00");
        assert_eq!(line(d("13.7936"), 2), "13.7936");
        assert_eq!(line(d("0"), 0), "0");
    }

    #[test]
    fn limits_are_fourteen_integer_digits_and_six_decimals() {
        assert!(check_limits(d("99999999999999.999999")).is_ok());
        assert!(check_limits(d("100000000000000")).is_err());
        assert!(check_limits(d("-100000000000000")).is_err());
        assert!(check_limits(Decimal::MAX).is_err());
        assert!(check_limits(d("0.0000001")).is_err());
        assert!(
            check_limits(d("1.1000000")).is_ok(),
            "trailing zeros are not decimals"
        );
    }

    #[test]
    fn parses_only_plain_amounts() {
        assert_eq!(parse_amount("12.50"), Some(d("12.50")));
        assert_eq!(parse_amount("-1"), None);
        assert_eq!(parse_amount("1e3"), None);
        assert_eq!(parse_amount(""), None);
        assert_eq!(parse_amount("1."), None);
        assert_eq!(decimals_of("13.7936"), 4);
        assert_eq!(decimals_of("13"), 0);
    }
}
