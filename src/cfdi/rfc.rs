//! `Rfc`: a Mexican tax id, parsed once.

use serde::{Deserialize, Serialize};

/// A syntactically valid RFC: 3 letters (persona moral) or 4 (persona física), the date
/// YYMMDD and a three-character homoclave. The generic RFCs `XAXX010101000` (público en
/// general) and `XEXX010101000` (extranjero) fit the same shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Rfc(String);

/// The generic RFC of "PUBLICO EN GENERAL".
pub const RFC_PUBLICO_EN_GENERAL: &str = "XAXX010101000";
/// The generic RFC of a foreign receptor.
pub const RFC_EXTRANJERO: &str = "XEXX010101000";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "`{0}` is not a valid RFC: expected 3-4 letters, a date YYMMDD and a 3-character homoclave, in capitals (e.g. EKU9003173C9)"
)]
pub struct RfcError(pub String);

impl Rfc {
    pub fn parse(s: &str) -> Result<Self, RfcError> {
        let s = s.trim();
        let chars: Vec<char> = s.chars().collect();
        let letters = match chars.len() {
            12 => 3,
            13 => 4,
            _ => return Err(RfcError(s.to_owned())),
        };
        let is_letter = |c: char| c.is_ascii_uppercase() || c == '&' || c == 'Ñ';
        let date: String = chars[letters..letters + 6].iter().collect();
        let ok = chars[..letters].iter().all(|&c| is_letter(c))
            && date.chars().all(|c| c.is_ascii_digit())
            && valid_yymmdd(&date)
            && chars[letters + 6..]
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(RfcError(s.to_owned()))
        }
    }

    pub fn publico_en_general() -> Self {
        Self(RFC_PUBLICO_EN_GENERAL.to_owned())
    }

    /// Whether this is one of the two generic RFCs.
    pub fn is_generic(&self) -> bool {
        self.0 == RFC_PUBLICO_EN_GENERAL || self.0 == RFC_EXTRANJERO
    }

    /// Persona moral (12 characters) or física (13).
    pub fn is_persona_moral(&self) -> bool {
        self.0.chars().count() == 12
    }
}

fn valid_yymmdd(d: &str) -> bool {
    let month: u32 = d[2..4].parse().unwrap_or(0);
    let day: u32 = d[4..6].parse().unwrap_or(0);
    (1..=12).contains(&month) && (1..=31).contains(&day)
}

string_newtype!(Rfc, RfcError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_morales_fisicas_and_generic() {
        for ok in [
            "EKU9003173C9",
            "XIQB891116QE4",
            "XAXX010101000",
            "&AB010101AB1",
            "ÑAÑ0101019A1",
        ] {
            assert!(Rfc::parse(ok).is_ok(), "{ok}");
        }
        assert!(Rfc::parse("EKU9003173C9").unwrap().is_persona_moral());
        assert!(Rfc::publico_en_general().is_generic());
    }

    #[test]
    fn rejects_bad_shapes_with_a_reason() {
        for bad in [
            "",
            "EKU900317",
            "eku9003173c9",
            "EKU9013173C9",
            "EKU9003323C9",
            "EKU9003173C9X1",
        ] {
            let err = Rfc::parse(bad).expect_err(bad);
            assert!(err.to_string().contains("not a valid RFC"));
        }
    }
}
