//! The sandbox's WSAA `LoginCms`: it checks a login as the WSAA specification lists it, with
//! its fault codes (docs/arca.md §2): the base64 (`cms.bad.base64`), the CMS
//! (`cms.bad`), the signer's certificate inside it (`cms.cert.notFound`), the signature over
//! the attached TRA (`cms.sign.invalid`), the TRA's schema (`xml.bad`), its times
//! (`xml.generationTime.invalid`, `xml.expirationTime.expired`, `xml.expirationTime.invalid`),
//! the service (`wsn.notFound`), and a second login while a ticket of the same certificate and
//! service is valid and was handed out less than `relogin_seconds` ago (`coe.alreadyAuthenticated`;
//! ARCA reportedly accepts a new login a few minutes after the last one, its earlier ticket
//! still valid). The certificate's chain is not checked: the
//! sandbox trusts any self-signed certificate (ARCA's `cms.cert.untrusted` is not modelled).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Duration, Utc};
use openssl::pkcs7::{Pkcs7, Pkcs7Flags};
use openssl::stack::Stack;
use openssl::x509::store::X509StoreBuilder;
use serde::{Deserialize, Serialize};

use super::ArcaSim;
use crate::arca::wsaa::SERVICE;
use crate::arca::wsfe::{find, text};
use crate::cfdi::dom::Element;

/// A ticket the sandbox handed out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimTicket {
    /// SHA-256 of the signer's certificate.
    pub fingerprint: String,
    pub service: String,
    pub token: String,
    pub sign: String,
    pub expires_at: DateTime<Utc>,
    /// When it was handed out (absent in older state files: refused for its whole life).
    #[serde(default)]
    pub issued_at: Option<DateTime<Utc>>,
}

/// A refusal: the fault code (without its `ns1:` prefix) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginFault(pub &'static str, pub &'static str);

fn fault<T>(code: &'static str, msg: &'static str) -> Result<T, LoginFault> {
    Err(LoginFault(code, msg))
}

fn time(tra: &Element, name: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&text(tra, name)?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The TRA inside `cms` (base64 of a DER CMS) and its signer's fingerprint, if the signature
/// holds.
fn signed_tra(cms: &str) -> Result<(Vec<u8>, String), LoginFault> {
    let compact: String = cms.chars().filter(|c| !c.is_whitespace()).collect();
    let Ok(der) = STANDARD.decode(compact) else {
        return fault("cms.bad.base64", "No se puede decodificar el BASE64");
    };
    let Ok(p7) = Pkcs7::from_der(&der) else {
        return fault("cms.bad", "El CMS no es valido");
    };
    let none = Stack::new().expect("an empty stack");
    let signer = p7
        .signers(&none, Pkcs7Flags::empty())
        .ok()
        .and_then(|s| s.iter().next().map(ToOwned::to_owned));
    let Some(signer) = signer else {
        return fault(
            "cms.cert.notFound",
            "No se ha encontrado certificado de firmador",
        );
    };
    let store = X509StoreBuilder::new().expect("a store").build();
    let mut content = Vec::new();
    // NOVERIFY: the chain is not checked (see the module's comment); the signature is.
    if p7
        .verify(
            &none,
            &store,
            None,
            Some(&mut content),
            Pkcs7Flags::NOVERIFY,
        )
        .is_err()
        || content.is_empty()
    {
        return fault(
            "cms.sign.invalid",
            "Firma inválida o algoritmo no soportado",
        );
    }
    let digest = signer
        .digest(openssl::hash::MessageDigest::sha256())
        .map_err(|_| LoginFault("cms.bad", "El CMS no es valido"))?;
    Ok((content, hex::encode(digest)))
}

impl ArcaSim {
    /// `loginCms(in0)`: a new ticket for the TRA signed in `cms`, stored before it is
    /// returned, or the fault ARCA would answer.
    pub fn login(&self, cms: &str, now: DateTime<Utc>) -> Result<SimTicket, LoginFault> {
        let (tra, fingerprint) = signed_tra(cms)?;
        let xml_bad = || {
            LoginFault(
                "xml.bad",
                "No se ha podido interpretar el XML contra el SCHEMA",
            )
        };
        let tra = Element::parse(&tra).map_err(|_| xml_bad())?;
        if tra.name != "loginTicketRequest" || find(&tra, "header").is_none() {
            return Err(xml_bad());
        }
        let service = text(&tra, "service").ok_or_else(xml_bad)?;
        let Some(generated) = time(&tra, "generationTime") else {
            return fault(
                "xml.generationTime.invalid",
                "generationTime posee formato o dato inválido",
            );
        };
        let Some(expires) = time(&tra, "expirationTime") else {
            return Err(xml_bad());
        };
        if generated > now || generated < now - Duration::hours(24) {
            return fault(
                "xml.generationTime.invalid",
                "generationTime posee formato o dato inválido",
            );
        }
        if expires < now {
            return fault(
                "xml.expirationTime.expired",
                "El tiempo de expiración es inferior a la hora actual",
            );
        }
        if expires - generated > Duration::hours(24) {
            return fault(
                "xml.expirationTime.invalid",
                "El tiempo de expiración del documento es superior a 24 horas",
            );
        }
        if service != SERVICE {
            return fault("wsn.notFound", "Servicio informado inexistente");
        }
        let mut state = self.state();
        let relogin = Duration::seconds(
            i64::try_from(
                self.relogin_seconds
                    .load(std::sync::atomic::Ordering::SeqCst),
            )
            .unwrap_or(600),
        );
        if state.tickets.iter().any(|t| {
            t.fingerprint == fingerprint
                && t.service == service
                && t.expires_at > now
                && t.issued_at.is_none_or(|at| at + relogin > now)
        }) {
            return fault(
                "coe.alreadyAuthenticated",
                "El CEE ya posee un TA valido para el acceso al WSN solicitado",
            );
        }
        let n = state.tickets.len() + 1;
        let seconds = self
            .ticket_seconds
            .load(std::sync::atomic::Ordering::SeqCst);
        let ticket = SimTicket {
            fingerprint,
            service,
            token: STANDARD.encode(format!("arcasim-token-{n}-{}", uuid::Uuid::new_v4())),
            sign: STANDARD.encode(format!("arcasim-sign-{n}-{}", uuid::Uuid::new_v4())),
            expires_at: now + Duration::seconds(i64::try_from(seconds).unwrap_or(43_200)),
            issued_at: Some(now),
        };
        self.save(&super::Record::Ticket(ticket.clone()))
            .map_err(|_| LoginFault("wsaa.internalError", "Error interno"))?;
        state.tickets.retain(|t| t.expires_at > now);
        state.tickets.push(ticket.clone());
        self.logins
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(ticket)
    }

    /// Whether `token` and `sign` are a ticket the sandbox handed out, valid now.
    pub fn valid_ticket(&self, token: &str, sign: &str, now: DateTime<Utc>) -> bool {
        self.state()
            .tickets
            .iter()
            .any(|t| t.token == token && t.sign == sign && t.expires_at > now)
    }
}
