//! `[admin]`: the dashboard's password, listener, cookies, sessions and background
//! reconciliation. Every default is in `config/default.toml`.

use serde::{Deserialize, Deserializer};

use super::SecretString;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    pub password: Option<SecretString>,
    /// An argon2 PHC string (`$argon2id$…`), instead of `password`.
    pub password_hash: Option<SecretString>,
    /// A listener of its own for `/admin` and `/v1`; unset (or `[server] listen`) = the same.
    pub listen: Option<String>,
    /// Always mark cookies `Secure` (also done per request when it came over TLS).
    #[serde(deserialize_with = "true_or_false")]
    pub secure_cookies: bool,
    /// How long a session lasts (0 counts as 1).
    #[serde(deserialize_with = "whole_number")]
    pub session_hours: u64,
    /// How often reconciliation runs in the background; 0 = only on demand.
    #[serde(deserialize_with = "whole_number")]
    pub reconcile_interval_seconds: u64,
    /// A document whose SAT window closes within this many hours is shown red and counted
    /// under "At risk" on the dashboard.
    #[serde(deserialize_with = "whole_number")]
    pub at_risk_hours: u64,
    /// How often the pages refresh themselves, in seconds; 0 = never.
    #[serde(deserialize_with = "whole_number")]
    pub refresh_seconds: u64,
}

/// A non-negative integer, also written as a string (`"12"`), as the admin always accepted.
fn whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::Integer(n) => u64::try_from(n).ok(),
        toml::Value::String(v) => v.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| serde::de::Error::custom("expected a whole number"))
}

/// `true` or `false`, also written as a string (`"true"`; any other string is false), as the
/// admin always accepted.
fn true_or_false<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::Boolean(b) => Ok(b),
        toml::Value::String(v) => Ok(v.trim() == "true"),
        _ => Err(serde::de::Error::custom("expected true or false")),
    }
}
