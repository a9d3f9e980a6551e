//! `[pdf]`: how the representación impresa is printed (paper, the merchant's logo); `[email]`:
//! how it reaches the customer (SMTP, sender). Every default is in `config/default.toml`.

use std::path::PathBuf;

use lettre::message::Mailbox;
use serde::Deserialize;

use super::secret::{SecretString, redact_url};

/// Paper size of the PDF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Paper {
    #[default]
    Letter,
    A4,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PdfSettings {
    /// `letter` (216 × 279 mm) or `a4`.
    pub paper: Paper,
    /// A JPEG or PNG (RGB or grayscale, no transparency) printed at the top left, at most
    /// 160 × 56 points; read once at start.
    pub logo: Option<PathBuf>,
}

/// `[email]`: the customer's email of every stamped document. Without `smtp_url` nothing is
/// sent and nothing is queued.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// `smtp://[user:pass@]host[:port]` (with `?tls=required` for STARTTLS) or `smtps://…`
    /// (implicit TLS). May carry a password.
    pub smtp_url: Option<SecretString>,
    /// The sender, `Facturas <facturas@example.mx>`; its domain ends every Message-ID.
    pub from: Option<String>,
    pub reply_to: Option<String>,
    /// A copy of every message (the merchant's archive), unseen by the customer.
    pub bcc: Option<String>,
    /// Seconds for one SMTP conversation.
    pub timeout_seconds: u64,
    /// Delays between attempts after a transient failure (server down, 4xx), in seconds; after
    /// the last one the delivery ends `failed`.
    pub retry_seconds: Vec<u64>,
}

impl EmailSettings {
    /// Whether email is on.
    pub fn enabled(&self) -> bool {
        self.smtp_url.is_some()
    }

    /// The domain of `from` when email is on: what Message-IDs end with.
    pub fn message_domain(&self) -> Option<String> {
        self.smtp_url.as_ref()?;
        let from: Mailbox = self.from.as_deref()?.parse().ok()?;
        Some(from.email.domain().to_owned())
    }

    /// Every problem of the section, each naming its key.
    pub(super) fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let Some(url) = &self.smtp_url else {
            return p;
        };
        let url = url.expose();
        if !(url.starts_with("smtp://") || url.starts_with("smtps://")) {
            p.push(format!(
                "[email] smtp_url = {:?} must start with smtp:// or smtps://",
                redact_url(url)
            ));
        }
        match &self.from {
            None => p.push(
                "[email] smtp_url needs from (e.g. \"Facturas <facturas@example.mx>\")".into(),
            ),
            Some(f) if f.parse::<Mailbox>().is_err() => {
                p.push(format!("[email] from = {f:?} is not an email address"))
            }
            Some(_) => {}
        }
        for (key, v) in [("reply_to", &self.reply_to), ("bcc", &self.bcc)] {
            if let Some(v) = v
                && v.parse::<Mailbox>().is_err()
            {
                p.push(format!("[email] {key} = {v:?} is not an email address"));
            }
        }
        if self.timeout_seconds == 0 {
            p.push("[email] timeout_seconds must be at least 1".into());
        }
        p
    }
}
