//! The checks every builder (ingreso, egreso, pago) runs on a request's fields, and the checked
//! arithmetic its amounts are computed with: an error names the field, and no request can make a
//! builder panic.

use rust_decimal::Decimal;

use super::CfdiError;
use super::money::{self, round};

pub(super) fn bad(msg: impl Into<String>) -> CfdiError {
    CfdiError::Request(msg.into())
}

pub(super) fn check_code(what: &str, value: &str, len: usize) -> Result<(), CfdiError> {
    if value.len() == len && value.chars().all(|c| c.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} `{value}` must be {len} characters (SAT catalog code)"
        )))
    }
}

pub(super) fn check_text(what: &str, value: &str, max: usize) -> Result<(), CfdiError> {
    let n = value.chars().count();
    if value.trim().is_empty() || n > max {
        return Err(bad(format!(
            "{what} must have 1 to {max} characters, it has {n}"
        )));
    }
    if value.contains('|') {
        return Err(bad(format!(
            "{what} must not contain `|`, the cadena original's separator"
        )));
    }
    if value
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(bad(format!(
            "{what} contains a control character, which XML cannot carry"
        )));
    }
    Ok(())
}

/// An amount given in the request: within the CFDI's integer digits and decimals.
pub(super) fn check_amount(what: &str, d: Decimal) -> Result<(), CfdiError> {
    money::check_limits(d).map_err(|why| bad(format!("{what} {d} {why}")))
}

/// A computed amount: `None` (the `Decimal` operation overflowed) or a value beyond the CFDI's
/// integer digits is an error naming `what`. Every operation in the builder is checked, so no
/// request can make it panic.
pub(super) fn computed(what: &str, d: Option<Decimal>) -> Result<Decimal, CfdiError> {
    match d {
        Some(d) if money::in_range(d) => Ok(d),
        _ => Err(bad(format!(
            "{what} would be out of range: at most {} integer digits",
            money::MAX_INTEGER_DIGITS
        ))),
    }
}

/// `d` rounded to `dp` decimals, checked: rounding may carry it past the limit.
pub(super) fn rounded(what: &str, d: Decimal, dp: u32) -> Result<Decimal, CfdiError> {
    computed(what, Some(round(d, dp)))
}

/// The sum of `values` rounded to `dp` decimals, checked.
pub(super) fn sum(
    what: &str,
    values: impl IntoIterator<Item = Decimal>,
    dp: u32,
) -> Result<Decimal, CfdiError> {
    let s = values
        .into_iter()
        .try_fold(Decimal::ZERO, |acc, v| computed(what, acc.checked_add(v)))?;
    rounded(what, s, dp)
}

pub(super) fn check_postal_code(what: &str, cp: &str) -> Result<(), CfdiError> {
    if cp.len() == 5 && cp.chars().all(|c| c.is_ascii_digit()) {
        Ok(())
    } else {
        Err(bad(format!("{what} `{cp}` must be a 5-digit postal code")))
    }
}

pub(super) fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}
