//! The stamp key: the deterministic identity a comprobante is stamped under.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The deterministic key a comprobante is stamped under (SW's `customid`). Derived once from
/// what the document is for, so every retry, every worker and every instance sends the same key
/// for the same sale, and a PAC can recognise the repeat.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StampKey(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a stamp key: expected `af1-` and 40 lowercase hex digits")]
pub struct StampKeyError(pub String);

impl StampKey {
    /// The key of the document `purpose` (e.g. `ingreso`, `egreso:re_123`) for `payment_id`
    /// at `provider`.
    pub fn derive(provider: &str, payment_id: &str, purpose: &str) -> Self {
        let digest = Sha256::digest(format!("{provider}\u{1f}{payment_id}\u{1f}{purpose}"));
        Self(format!("af1-{}", &hex::encode(digest)[..40]))
    }

    pub fn parse(s: &str) -> Result<Self, StampKeyError> {
        let ok = s.len() == 44
            && s.starts_with("af1-")
            && s[4..]
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(StampKeyError(s.to_owned()))
        }
    }
}

string_newtype!(StampKey, StampKeyError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_sale_always_gets_the_same_key() {
        let a = StampKey::derive("stripe", "pi_123", "ingreso");
        assert_eq!(a, StampKey::derive("stripe", "pi_123", "ingreso"));
        assert_ne!(a, StampKey::derive("stripe", "pi_124", "ingreso"));
        assert_ne!(a, StampKey::derive("mercadopago", "pi_123", "ingreso"));
        assert_eq!(StampKey::parse(a.as_str()), Ok(a.clone()));
        assert!(StampKey::parse("af1-xyz").is_err());
    }
}
