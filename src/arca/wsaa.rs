//! WSAA, the first pieces (docs/arca.md §2): the access ticket request (TRA), its CMS
//! signature, and reading `loginCms`'s answer. The call itself, the ticket cache in
//! `arca_tickets` and the refresh under a lease remain.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Duration, FixedOffset, Utc};
use openssl::pkcs7::{Pkcs7, Pkcs7Flags};
use openssl::pkey::PKey;
use openssl::stack::Stack;
use openssl::x509::X509;

use crate::cfdi::dom::Element;

use super::wsfe::text;

#[derive(Debug, thiserror::Error)]
pub enum WsaaError {
    #[error("the WSAA certificate or key cannot be used: {0}")]
    Credentials(String),
    /// ARCA refuses a second login while a ticket is valid: read the stored one instead.
    #[error("WSAA: a valid ticket exists already (coe.alreadyAuthenticated)")]
    AlreadyAuthenticated,
    #[error("WSAA answer not understood: {0}")]
    Malformed(String),
}

/// A WSAA access ticket: what every WSFEv1 call carries, valid until `expires_at`.
#[derive(Clone, PartialEq, Eq)]
pub struct Ticket {
    pub token: String,
    pub sign: String,
    pub generated_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Token and sign are credentials: never printed.
impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The `loginTicketRequest` for `service` (`wsfe`), valid from five minutes before `now` (clock
/// skew) to five after, in Argentina's offset; `uniqueId` is `now` in unix seconds.
pub fn login_ticket_request(service: &str, now: DateTime<Utc>) -> String {
    let ar = FixedOffset::west_opt(3 * 3600).expect("UTC-3 is an offset");
    let at = |t: DateTime<Utc>| t.with_timezone(&ar).format("%Y-%m-%dT%H:%M:%S%:z");
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><loginTicketRequest version=\"1.0\"><header>\
         <uniqueId>{}</uniqueId><generationTime>{}</generationTime>\
         <expirationTime>{}</expirationTime></header><service>{service}</service>\
         </loginTicketRequest>",
        now.timestamp(),
        at(now - Duration::minutes(5)),
        at(now + Duration::minutes(5)),
    )
}

/// The TRA signed as ARCA wants it: CMS SignedData, content attached, signer certificate
/// included, DER, base64 (`openssl smime -sign -nodetach -outform DER`).
pub fn sign_tra(tra: &str, cert_pem: &[u8], key_pem: &[u8]) -> Result<String, WsaaError> {
    let bad = |e: openssl::error::ErrorStack| WsaaError::Credentials(e.to_string());
    let cert = X509::from_pem(cert_pem).map_err(bad)?;
    let key = PKey::private_key_from_pem(key_pem).map_err(bad)?;
    let none = Stack::new().map_err(bad)?;
    let cms = Pkcs7::sign(&cert, &key, &none, tra.as_bytes(), Pkcs7Flags::BINARY).map_err(bad)?;
    Ok(STANDARD.encode(cms.to_der().map_err(bad)?))
}

/// Reads `loginCms`'s SOAP answer: the ticket inside the escaped `loginCmsReturn`, or the
/// fault that says a ticket exists already.
pub fn parse_login_response(body: &[u8]) -> Result<Ticket, WsaaError> {
    let root = Element::parse(body).map_err(|e| WsaaError::Malformed(e.to_string()))?;
    if let Some(fault) = text(&root, "faultcode").or_else(|| text(&root, "faultstring")) {
        if fault.contains("alreadyAuthenticated") {
            return Err(WsaaError::AlreadyAuthenticated);
        }
        return Err(WsaaError::Malformed(format!("fault {fault}")));
    }
    // The element's text is the escaped ticket document, unescaped by the parser.
    let inner = text(&root, "loginCmsReturn")
        .ok_or_else(|| WsaaError::Malformed("no loginCmsReturn".into()))?;
    let ticket =
        Element::parse(inner.as_bytes()).map_err(|e| WsaaError::Malformed(e.to_string()))?;
    let field =
        |name: &str| text(&ticket, name).ok_or_else(|| WsaaError::Malformed(format!("no {name}")));
    let time = |name: &str| -> Result<DateTime<Utc>, WsaaError> {
        DateTime::parse_from_rfc3339(&field(name)?)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| WsaaError::Malformed(format!("{name}: {e}")))
    };
    Ok(Ticket {
        token: field("token")?,
        sign: field("sign")?,
        generated_at: time("generationTime")?,
        expires_at: time("expirationTime")?,
    })
}

#[cfg(test)]
mod tests {
    use openssl::asn1::Asn1Time;
    use openssl::hash::MessageDigest;
    use openssl::rsa::Rsa;
    use openssl::x509::store::X509StoreBuilder;
    use openssl::x509::{X509Builder, X509NameBuilder};

    use super::*;

    /// A throwaway self-signed certificate and its key, as PEM.
    fn credentials() -> (Vec<u8>, Vec<u8>) {
        let key = PKey::from_rsa(Rsa::generate(2048).expect("rsa")).expect("key");
        let mut name = X509NameBuilder::new().expect("name");
        name.append_entry_by_text("CN", "autofactura-test")
            .expect("cn");
        let name = name.build();
        let mut b = X509Builder::new().expect("builder");
        b.set_version(2).expect("version");
        b.set_subject_name(&name).expect("subject");
        b.set_issuer_name(&name).expect("issuer");
        b.set_pubkey(&key).expect("pubkey");
        b.set_not_before(&Asn1Time::days_from_now(0).expect("t"))
            .expect("nb");
        b.set_not_after(&Asn1Time::days_from_now(1).expect("t"))
            .expect("na");
        b.sign(&key, MessageDigest::sha256()).expect("sign");
        (
            b.build().to_pem().expect("pem"),
            key.private_key_to_pem_pkcs8().expect("pem"),
        )
    }

    #[test]
    fn the_tra_is_signed_with_its_content_attached_and_the_certificate_inside() {
        let now = DateTime::parse_from_rfc3339("2026-12-04T15:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let tra = login_ticket_request("wsfe", now);
        assert!(tra.contains("<uniqueId>1796396400</uniqueId>"), "{tra}");
        assert!(tra.contains("<generationTime>2026-12-04T11:55:00-03:00</generationTime>"));
        assert!(tra.contains("<expirationTime>2026-12-04T12:05:00-03:00</expirationTime>"));
        let (cert, key) = credentials();
        let cms = sign_tra(&tra, &cert, &key).expect("signed");
        let der = STANDARD.decode(cms).expect("base64");
        let p7 = Pkcs7::from_der(&der).expect("CMS SignedData");
        // Verified with nothing but what the CMS carries: the signer's certificate is inside,
        // and the content comes out of it (attached).
        let store = X509StoreBuilder::new().expect("store").build();
        let mut content = Vec::new();
        p7.verify(
            &Stack::new().expect("stack"),
            &store,
            None,
            Some(&mut content),
            Pkcs7Flags::NOVERIFY,
        )
        .expect("the signature verifies");
        assert_eq!(content, tra.as_bytes());
        let wrong = sign_tra(&tra, &cert, &credentials().1);
        assert!(matches!(wrong, Err(WsaaError::Credentials(_))), "{wrong:?}");
    }

    #[test]
    fn the_ticket_is_read_from_the_escaped_login_cms_return() {
        let body = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
            <soapenv:Body><loginCmsResponse xmlns=\"http://wsaa.view.sua.dvadac.desein.afip.gov\">\
            <loginCmsReturn>&lt;?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?&gt;\
            &lt;loginTicketResponse version=\"1.0\"&gt;&lt;header&gt;&lt;uniqueId&gt;2378329039\
            &lt;/uniqueId&gt;&lt;generationTime&gt;2021-07-26T09:22:00.396-03:00&lt;/generationTime&gt;\
            &lt;expirationTime&gt;2021-07-26T21:22:00.396-03:00&lt;/expirationTime&gt;&lt;/header&gt;\
            &lt;credentials&gt;&lt;token&gt;PD94bWwg&lt;/token&gt;&lt;sign&gt;c2lnbg==&lt;/sign&gt;\
            &lt;/credentials&gt;&lt;/loginTicketResponse&gt;</loginCmsReturn></loginCmsResponse>\
            </soapenv:Body></soapenv:Envelope>";
        let t = parse_login_response(body.as_bytes()).expect("ticket");
        assert_eq!(
            (t.token.as_str(), t.sign.as_str()),
            ("PD94bWwg", "c2lnbg==")
        );
        assert_eq!(t.expires_at - t.generated_at, Duration::hours(12));
        let fault = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
            <soapenv:Body><soapenv:Fault><faultcode>ns1:coe.alreadyAuthenticated</faultcode>\
            <faultstring>El CEE ya posee un TA valido para el acceso al WSN solicitado</faultstring>\
            </soapenv:Fault></soapenv:Body></soapenv:Envelope>";
        assert!(matches!(
            parse_login_response(fault.as_bytes()),
            Err(WsaaError::AlreadyAuthenticated)
        ));
    }
}
