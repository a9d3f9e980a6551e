//! PAC clients: every answer of every PAC becomes one outcome that leaves no doubt.
//!
//! The PAC is where money is spent and where a second real CFDI can be born, so the adapters
//! never guess. A stamp call ends in exactly one [`StampOutcome`]:
//!
//! - `Stamped`: a new stamp, with UUID, TFD and the full stamped XML.
//! - `AlreadyStamped`: the PAC had stamped this document (or this key) before; the original is
//!   returned, fetched by UUID when the PAC answered with the UUID only.
//! - `Rejected`: the PAC refused the document (code and message verbatim); only a changed
//!   document can succeed.
//! - `Retryable`: nothing happened (connection refused, 429, 503); the same bytes and key may be
//!   sent again, here or to a backup PAC.
//! - `Unknown`: the request may have been processed (timeout, connection dropped after sending,
//!   any other 5xx, an unreadable answer). The only next step is [`PacClient::recover_by_key`]
//!   with the same bytes and key; never new bytes, never a new key, never another PAC.
//!
//! The failures carry the PAC's HTTP status where the adapter saw one (`http_status`), for the
//! attempt log.
//!
//! Adapters: [`sw`] (SW Sapién REST; also what talks to the sandbox PAC, [`crate::pacsim`]),
//! [`finkok`] (SOAP), and [`failover`] (primary + backup). [`sat`] is the SAT status service.
//! [`Stamper`] is the PAC as the worker's [`crate::domain::Authority`].

pub mod failover;
pub mod finkok;
pub mod sat;
mod stamper;
pub mod sw;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cfdi::Tfd;
use crate::cfdi::dom::{Element, NS_TFD};
use crate::domain::StampKey;
/// The motivos are domain rules; the PAC clients send their codes.
pub use crate::domain::cancellation::Motivo;

pub use failover::{AttemptLog, Failover, Route};
pub use sat::{SatStatus, StatusOutcome, StatusQuery};
pub use stamper::Stamper;

/// A stamp as a PAC issued it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The folio fiscal, upper case.
    pub uuid: String,
    pub tfd: Tfd,
    /// The stamped comprobante, exactly as the PAC returned it.
    pub xml: Vec<u8>,
}

impl Stamp {
    /// Reads a stamped comprobante: it must carry a TFD with a UUID.
    pub fn from_xml(xml: Vec<u8>) -> Result<Stamp, String> {
        let tfd = Element::find_in(&xml, NS_TFD, "TimbreFiscalDigital")
            .map_err(|e| format!("stamped XML: {e}"))?
            .map(|e| Tfd::from_element(&e))
            .ok_or_else(|| "the returned XML carries no TimbreFiscalDigital".to_owned())?;
        if tfd.uuid.is_empty() {
            return Err("the returned TFD has no UUID".into());
        }
        Ok(Stamp {
            uuid: tfd.uuid.to_uppercase(),
            tfd,
            xml,
        })
    }

    /// Whether this stamp belongs to the sealed document `sealed_xml` (same Sello).
    pub fn belongs_to(&self, sealed_xml: &[u8]) -> bool {
        Element::root_attr(sealed_xml, "Sello")
            .ok()
            .flatten()
            .is_some_and(|s| s == self.tfd.sello_cfd)
    }
}

/// The outcome a call that got no usable answer ends with, whichever operation it was.
pub(crate) trait Failure {
    /// The PAC refused for now: try again later.
    fn refused(reason: String, retry_after: Option<Duration>, http_status: Option<u16>) -> Self;
    /// The answer was lost: whether the PAC acted is unknown.
    fn lost(reason: String, http_status: Option<u16>) -> Self;
}

/// Declares a PAC outcome enum: its own variants, then the failures a stamp and a
/// cancellation share, with the adapters' constructors of those failures.
macro_rules! outcome_with_failures {
    ($(#[$meta:meta])* pub enum $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        pub enum $name {
            $($own)*
            /// The PAC's code and message, verbatim. No HTTP status: the message is the PAC's own
            /// text (SW answers these with 400), and the attempt log records rejections without one.
            Rejected {
                code: String,
                message: String,
            },
            Retryable {
                reason: String,
                retry_after: Option<Duration>,
                /// The PAC's HTTP status when it answered one, for the attempt log.
                http_status: Option<u16>,
            },
            Unknown {
                reason: String,
                http_status: Option<u16>,
            },
        }

        impl Failure for $name {
            fn refused(reason: String, retry_after: Option<Duration>, http_status: Option<u16>) -> Self {
                Self::Retryable {
                    reason,
                    retry_after,
                    http_status,
                }
            }

            fn lost(reason: String, http_status: Option<u16>) -> Self {
                Self::unknown(reason, http_status)
            }
        }

        impl $name {
            /// A refusal with the PAC's code and message.
            pub(crate) fn rejected(code: String, message: String) -> Self {
                Self::Rejected { code, message }
            }

            pub(crate) fn retryable(reason: impl Into<String>, http_status: Option<u16>) -> Self {
                Self::Retryable {
                    reason: reason.into(),
                    retry_after: None,
                    http_status,
                }
            }

            pub(crate) fn unknown(reason: impl Into<String>, http_status: Option<u16>) -> Self {
                Self::Unknown {
                    reason: reason.into(),
                    http_status,
                }
            }
        }
    };
}

outcome_with_failures! {
    /// The result of one stamp call.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum StampOutcome {
        Stamped(Stamp),
        /// The PAC had stamped before. `same_content` is false when the key had been used for other
        /// content (SW `CFDI3307`): the stamp is real, but it is not of these bytes.
        AlreadyStamped {
            stamp: Stamp,
            same_content: bool,
        },
    }
}

impl StampOutcome {
    /// The stamp, when there is one.
    pub fn stamp(&self) -> Option<&Stamp> {
        match self {
            Self::Stamped(s) | Self::AlreadyStamped { stamp: s, .. } => Some(s),
            _ => None,
        }
    }
}

/// The result of asking a PAC whether a document was stamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    Found(Stamp),
    /// The PAC definitely holds no stamp for it.
    NotFound,
    /// The PAC could not answer; the question stays open.
    Unresolved {
        reason: String,
        /// The PAC's HTTP status when it answered one, for the attempt log.
        http_status: Option<u16>,
    },
}

/// A lookup that got no answer, refused or lost alike, leaves the question open.
impl Failure for Recovery {
    fn refused(reason: String, _: Option<Duration>, http_status: Option<u16>) -> Self {
        Self::unresolved(reason, http_status)
    }

    fn lost(reason: String, http_status: Option<u16>) -> Self {
        Self::unresolved(reason, http_status)
    }
}

impl Recovery {
    pub(crate) fn unresolved(reason: impl Into<String>, http_status: Option<u16>) -> Self {
        Self::Unresolved {
            reason: reason.into(),
            http_status,
        }
    }
}

/// A cancellation request for one UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    pub rfc_emisor: String,
    pub uuid: String,
    pub motivo: Motivo,
    /// Required with motivo `01`: the UUID of the replacement.
    pub folio_sustitucion: Option<String>,
}

outcome_with_failures! {
    /// The result of a cancellation request. `Requested` means SAT *received* the request (`201`)
    /// or already had it (`202`), never that the CFDI is cancelled: poll the SAT status for that.
    /// `Rejected` is a refusal: `203` RFC mismatch, `205` UUID unknown (also right after
    /// stamping, until SAT ingests it), `no_cancelable`, a bad motivo.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum CancelOutcome {
        Requested {
            /// `201` or `202`.
            code: String,
            /// The SAT acuse XML, to keep: the PAC does not keep it for us.
            acuse: String,
            /// `EstatusCancelacion` when the PAC reports it with the request.
            estatus_cancelacion: Option<String>,
        },
    }
}

/// The `[pac]` table, typed and checked with the rest of the settings.
pub use crate::config::{PacConfig, PacKind};

/// A configuration that cannot produce a client.
#[derive(Debug, thiserror::Error)]
pub enum PacError {
    #[error("[pac] {0}")]
    Config(String),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// A PAC client. Cheap to share behind an `Arc`; every method may run concurrently.
pub enum PacClient {
    Sw(sw::SwClient),
    Finkok(finkok::FinkokClient),
    Failover(Box<Failover>),
}

impl fmt::Debug for PacClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sw(_) => "PacClient::Sw",
            Self::Finkok(_) => "PacClient::Finkok",
            Self::Failover(_) => "PacClient::Failover",
        })
    }
}

/// Builds the client `cfg` describes, with its backup when `[pac.backup]` is set. A sandbox
/// needs its `url` here: startup starts the in-process one for the embedded default and
/// fills it in ([`crate::startup::connect_pac`]).
pub fn connect(cfg: &PacConfig) -> Result<PacClient, PacError> {
    let primary = PacClient::from_config(cfg)?;
    match &cfg.backup {
        Some(b) => {
            if b.kind == PacKind::Sandbox && b.url.is_none() {
                return Err(PacError::Config(
                    "[pac.backup] of kind sandbox needs a url".into(),
                ));
            }
            let backup = PacClient::from_config(b)?;
            Ok(PacClient::Failover(Box::new(Failover::new(
                primary, backup,
            ))))
        }
        None => Ok(primary),
    }
}

impl PacClient {
    /// Builds one client (no backup) from `cfg`; `kind = "sandbox"` needs a `url` here.
    pub fn from_config(cfg: &PacConfig) -> Result<PacClient, PacError> {
        match cfg.kind {
            PacKind::Sw | PacKind::Sandbox => Ok(PacClient::Sw(sw::SwClient::new(cfg)?)),
            PacKind::Finkok => Ok(PacClient::Finkok(finkok::FinkokClient::new(cfg)?)),
        }
    }

    /// Stamps the frozen sealed bytes under `key`.
    pub async fn stamp(&self, xml: &[u8], key: &StampKey) -> StampOutcome {
        match self {
            Self::Sw(c) => c.stamp(xml, key).await,
            Self::Finkok(c) => c.stamp(xml).await,
            Self::Failover(f) => f.stamp(xml, key, &failover::NoLog).await.1,
        }
    }

    /// Resolves an `Unknown`: did the PAC stamp these bytes under this key? Where the PAC has no
    /// pure lookup by key (SW), this resends the same bytes with the same key, which the PAC
    /// answers with the original stamp or, if it never had it, stamps now: either way one CFDI.
    pub async fn recover_by_key(&self, xml: &[u8], key: &StampKey) -> Recovery {
        match self {
            Self::Sw(c) => c.recover_by_key(xml, key).await,
            Self::Finkok(c) => c.recover_by_content(xml).await,
            Self::Failover(f) => {
                f.recover_by_key(xml, key, &[Route::Primary, Route::Backup])
                    .await
            }
        }
    }

    /// As [`PacClient::recover_by_key`], but a failover pair asks only the PACs `log` says the
    /// key was sent to (the primary when it names none). Asking SW means resending the bytes,
    /// so asking a PAC that never had them would stamp them there: a second CFDI when the
    /// other one holds the first.
    pub async fn recover_logged(
        &self,
        xml: &[u8],
        key: &StampKey,
        log: &dyn failover::AttemptLog,
    ) -> Recovery {
        match self {
            Self::Failover(f) => f.recover_logged(xml, key, log).await,
            other => other.recover_by_key(xml, key).await,
        }
    }

    /// Fetches a stamp by its UUID (Finkok also needs the issuer's RFC).
    pub async fn recover_by_uuid(&self, uuid: &str, rfc_emisor: &str) -> Recovery {
        match self {
            Self::Sw(c) => c.recover_by_uuid(uuid).await,
            Self::Finkok(c) => c.recover_by_uuid(uuid, rfc_emisor).await,
            Self::Failover(f) => f.recover_by_uuid(uuid, rfc_emisor).await,
        }
    }

    /// Requests the cancellation of a UUID.
    pub async fn cancel(&self, req: &CancelRequest) -> CancelOutcome {
        match self {
            Self::Sw(c) => c.cancel(req).await,
            Self::Finkok(c) => c.cancel(req).await,
            Self::Failover(f) => f.cancel(req).await,
        }
    }

    /// Asks the SAT status service about a stamped CFDI.
    pub async fn sat_status(&self, q: &StatusQuery) -> StatusOutcome {
        match self {
            Self::Sw(c) => c.sat_status(q).await,
            Self::Finkok(c) => c.sat_status(q).await,
            Self::Failover(f) => f.sat_status(q).await,
        }
    }
}

/// The leading code of a PAC message: `CFDI40102 - …` → `CFDI40102`, `307. El …` → `307`.
pub fn message_code(message: &str) -> String {
    message
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// How a transport failure reads: refused before sending (nothing happened) or lost after
/// (anything may have happened).
pub(crate) enum Transport {
    /// `http_status`: the answer that refused it, when one came (SW's failed login).
    Refused {
        reason: String,
        http_status: Option<u16>,
    },
    Lost(String),
}

pub(crate) fn transport_error(e: &reqwest::Error) -> Transport {
    // A connect error (refused, DNS, connect timeout) means the request never left.
    if e.is_connect() {
        Transport::Refused {
            reason: format!("connection failed: {e}"),
            http_status: None,
        }
    } else if e.is_timeout() {
        Transport::Lost(format!("timed out waiting for the answer: {e}"))
    } else {
        Transport::Lost(format!("connection lost: {e}"))
    }
}

/// Seconds from a `Retry-After` header.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// An answer's status as outcomes carry it, set wherever their text says `HTTP {status}`. Only
/// 100 to 599: the attempt log, which used to read the status back out of that text, never
/// recorded other numbers.
pub(crate) fn http_status(status: reqwest::StatusCode) -> Option<u16> {
    Some(status.as_u16()).filter(|s| (100..600).contains(s))
}

/// The HTTP statuses that say the server refused the work before doing any: 429 and 503.
/// Any other 5xx may come after the PAC committed (a gateway timing out on a slow stamp), so
/// it is `Unknown`.
pub(crate) fn refused_status(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || status == reqwest::StatusCode::SERVICE_UNAVAILABLE
}

/// The PAC's base URL from `cfg` (no trailing `/`); an adapter of `kind` cannot run without it.
pub(crate) fn base_url(cfg: &PacConfig, kind: &str) -> Result<String, PacError> {
    cfg.url
        .as_deref()
        .filter(|u| !u.is_empty())
        .map(|u| u.trim_end_matches('/').to_owned())
        .ok_or_else(|| PacError::Config(format!("url is required for kind = \"{kind}\"")))
}

pub(crate) fn http_client(cfg: &PacConfig) -> Result<reqwest::Client, PacError> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(cfg.connect_timeout.max(1)))
        .timeout(Duration::from_secs(cfg.request_timeout.max(1)))
        .build()
        .map_err(|e| PacError::Http(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_read_from_the_start_of_the_message() {
        assert_eq!(
            message_code("307. El comprobante contiene un timbre previo."),
            "307"
        );
        assert_eq!(message_code("CFDI3307 - Timbre duplicado."), "CFDI3307");
        assert_eq!(message_code("CFDI40102 - El resultado"), "CFDI40102");
    }

    #[test]
    fn config_defaults_to_the_sandbox_and_hides_secrets() {
        let cfg: PacConfig = toml::from_str("").unwrap();
        assert_eq!(cfg.kind, PacKind::Sandbox);
        let cfg: PacConfig = toml::from_str(
            "kind = \"sw\"\nurl = \"https://services.test.sw.com.mx\"\nuser = \"u\"\npassword = \"hunter2\"\n[backup]\nkind = \"finkok\"\nurl = \"https://demo-facturacion.finkok.com\"\ntoken = \"tok-secret\"\n",
        )
        .unwrap();
        assert_eq!(cfg.kind, PacKind::Sw);
        assert_eq!(cfg.backup.as_ref().map(|b| b.kind), Some(PacKind::Finkok));
        let dbg = format!("{cfg:?}");
        assert!(
            !dbg.contains("hunter2") && !dbg.contains("tok-secret"),
            "{dbg}"
        );
        assert!(toml::from_str::<PacConfig>("kind = \"sw\"\nurll = \"x\"").is_err());
    }

    #[test]
    fn an_adapter_without_a_url_says_so_and_a_trailing_slash_is_dropped() {
        for (kind, name) in [(PacKind::Sw, "sw"), (PacKind::Finkok, "finkok")] {
            let cfg = PacConfig {
                kind,
                url: Some(String::new()),
                ..PacConfig::default()
            };
            let err = PacClient::from_config(&cfg).err().map(|e| e.to_string());
            let want = format!("[pac] url is required for kind = \"{name}\"");
            assert_eq!(err, Some(want));
        }
        let cfg = PacConfig {
            url: Some("http://127.0.0.1:1/".into()),
            ..PacConfig::default()
        };
        assert_eq!(base_url(&cfg, "sw").unwrap(), "http://127.0.0.1:1");
    }
}
