//! `[portal]`: the public self-invoicing portal (`/facturar`), where a customer turns a
//! receipt into a nominative CFDI. Every default is in `config/default.toml`.

use serde::Deserialize;

use super::SecretString;

/// The shortest `link_secret` accepted: an HMAC key should be at least as long as its output
/// is strong (32 characters of a random string).
pub const LINK_SECRET_MIN_LEN: usize = 32;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortalSettings {
    /// `false`: `/facturar` is not served at all (404).
    pub enabled: bool,
    /// The HMAC key of the signed links (`/facturar/{token}`). Unset: a random key generated
    /// on the first start and kept in the database, shared by every instance.
    pub link_secret: Option<SecretString>,
    /// Days after the end of the sale's month during which the customer may still invoice it
    /// (0: only within the month of the sale, Mexico City time).
    pub days_after_month_end: u32,
    /// How long a link printed by `autofactura portal link` stays valid, in days.
    pub link_valid_days: u32,
    /// Look-ups (reference + total) allowed per client address within `lookup_window_seconds`.
    pub lookups_per_window: usize,
    pub lookup_window_seconds: u64,
    /// The name the customer sees on the portal; unset = `[emisor] nombre`.
    pub merchant_name: Option<String>,
    /// Where customers reach the portal, for the links `portal link` prints (e.g.
    /// `https://facturas.example.mx`); unset = `http://` + `[server] listen`.
    pub public_url: Option<String>,
}

impl PortalSettings {
    /// Every problem of the section, each naming its key.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Some(s) = &self.link_secret
            && s.expose().chars().count() < LINK_SECRET_MIN_LEN
        {
            p.push(format!(
                "[portal] link_secret must be at least {LINK_SECRET_MIN_LEN} characters (e.g. `openssl rand -hex 32`), or unset to keep a generated one in the database"
            ));
        }
        if self.days_after_month_end > 366 {
            p.push("[portal] days_after_month_end must be 0 to 366".into());
        }
        if self.link_valid_days == 0 {
            p.push("[portal] link_valid_days must be at least 1".into());
        }
        if self.lookups_per_window == 0 || self.lookup_window_seconds == 0 {
            p.push(
                "[portal] lookups_per_window and lookup_window_seconds must be at least 1".into(),
            );
        }
        if let Some(u) = &self.public_url
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            p.push(format!(
                "[portal] public_url = {u:?} must start with http:// or https://"
            ));
        }
        p
    }
}
