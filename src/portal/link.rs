//! The portal's signed links: `/facturar/{payment}.{expires}.{hmac}`, the HMAC-SHA256 (hex) of
//! the payment row and the expiry (Unix seconds) under the portal's key. Whoever holds one may
//! see that sale and invoice it until it expires; nothing else can be read from it but the
//! row number.

use crate::webhooks::signature::{hmac_hex, matches};

/// What is signed: a fixed label (so no other HMAC of ours can pass for a link), the payment
/// row and the expiry.
fn parts(payment_row: i64, expires: i64) -> String {
    format!("autofactura-portal-link|{payment_row}|{expires}")
}

/// The token of a link to `payment_row` valid until `expires` (Unix seconds).
pub fn sign(key: &[u8], payment_row: i64, expires: i64) -> String {
    let mac = hmac_hex(key, &[parts(payment_row, expires).as_bytes()]);
    format!("{payment_row}.{expires}.{mac}")
}

/// Why a token does not open a sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkError {
    /// Not one of ours (malformed, or its signature does not match).
    Invalid,
    /// Ours, but past its expiry.
    Expired,
}

/// The payment row `token` opens at `now` (Unix seconds). The signature is checked (in
/// constant time) before the expiry, so an expired answer proves the link was ours.
pub fn verify(key: &[u8], token: &str, now: i64) -> Result<i64, LinkError> {
    let mut it = token.splitn(3, '.');
    let (Some(row_text), Some(exp_text), Some(mac)) = (it.next(), it.next(), it.next()) else {
        return Err(LinkError::Invalid);
    };
    // Only the spelling `sign` writes: one link, one text.
    let (Ok(row), Ok(exp)) = (row_text.parse::<i64>(), exp_text.parse::<i64>()) else {
        return Err(LinkError::Invalid);
    };
    if row.to_string() != row_text || exp.to_string() != exp_text {
        return Err(LinkError::Invalid);
    }
    if !matches(key, &[parts(row, exp).as_bytes()], mac) {
        return Err(LinkError::Invalid);
    }
    if now > exp {
        return Err(LinkError::Expired);
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_link_opens_its_payment_until_it_expires() {
        let t = sign(KEY, 42, 1_800_000_000);
        assert_eq!(verify(KEY, &t, 1_799_999_999), Ok(42));
        assert_eq!(verify(KEY, &t, 1_800_000_000), Ok(42));
        assert_eq!(verify(KEY, &t, 1_800_000_001), Err(LinkError::Expired));
    }

    #[test]
    fn a_changed_payment_expiry_or_key_is_refused() {
        let t = sign(KEY, 42, 1_800_000_000);
        let mac = t.rsplit('.').next().expect("mac");
        for forged in [
            format!("43.1800000000.{mac}"),
            format!("42.1900000000.{mac}"),
            t.replace("42.", "042."),
            format!("{t}0"),
            "42.1800000000".to_owned(),
            "x.y.z".to_owned(),
            String::new(),
        ] {
            assert_eq!(verify(KEY, &forged, 0), Err(LinkError::Invalid), "{forged}");
        }
        assert_eq!(
            verify(b"another key of thirty-two bytes!", &t, 0),
            Err(LinkError::Invalid)
        );
    }
}
