//! Secrets and what may be printed of them: [`SecretString`] (`[redacted]` in `Debug` and
//! `Display`), URLs with their password and secret parameters taken out, tables with secret-looking
//! keys redacted.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer};

/// A secret: printed as `[redacted]` by `Debug` and `Display`; read with [`SecretString::expose`].
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A Standard Webhooks secret (`whsec_` + base64), which signs the webhooks sent to the merchant.
/// Checked at load ([`WebhookSecret::key`] is `Some` in any loaded settings).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct WebhookSecret(SecretString);

impl WebhookSecret {
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The key bytes, `None` when the secret is not `whsec_` + base64.
    pub fn key(&self) -> Option<Vec<u8>> {
        Self::decode(self.expose())
    }

    /// `whsec_` stripped, the rest base64-decoded (unlike Stripe's secrets, used as they are).
    pub fn decode(secret: &str) -> Option<Vec<u8>> {
        let b64 = secret.strip_prefix("whsec_")?;
        STANDARD.decode(b64).ok().filter(|k| !k.is_empty())
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// `postgres://user:pass@host/db` → `postgres://user:[redacted]@host/db`. The user info ends at
/// the last `@` (a password may hold `@`), and query parameters that look secret
/// (`?password=…`, `?sslpassword=…`, `?token=…`) are redacted too.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_query(url);
    };
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:[redacted]@{}", redact_query(host)),
            None => format!("{userinfo}@{}", redact_query(host)),
        },
        None => redact_query(rest),
    };
    format!("{scheme}://{rest}")
}

/// `…?a=1&password=x` → `…?a=1&password=[redacted]`.
fn redact_query(text: &str) -> String {
    let Some((head, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if looks_secret(k) => format!("{k}=[redacted]"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// A URL for a log line: redacted and without its query string, which often carries a token
/// (the merchant's webhook URL).
pub fn url_for_log(url: &str) -> String {
    let redacted = redact_url(url);
    match redacted.split_once('?') {
        Some((head, _)) => format!("{head}?[query not shown]"),
        None => redacted,
    }
}

pub(super) fn looks_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "token", "key", "pass"]
        .iter()
        .any(|s| k.contains(s))
}

/// Accepts a TOML array of strings or one comma-separated string (handy in env variables).
pub(super) fn list_or_csv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SecretString>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        List(Vec<String>),
        Csv(String),
    }
    Ok(match Either::deserialize(d)? {
        Either::List(v) => v,
        Either::Csv(s) => s.split(',').map(str::to_owned).collect(),
    }
    .into_iter()
    .map(|s| s.trim().to_owned())
    .filter(|s| !s.is_empty())
    .map(SecretString)
    .collect())
}
