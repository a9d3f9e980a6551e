//! The CSD (certificado de sello digital): loading, checking, signing and verifying.
//!
//! `Sello` = base64(RSA PKCS#1 v1.5 SHA-256 signature of the cadena original). OpenSSL does the
//! RSA work, so one seal costs what `openssl speed rsa2048` says a signature costs.

use std::fmt;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use chrono_tz::America::Mexico_City;
use openssl::asn1::Asn1Time;
use openssl::hash::MessageDigest;
use openssl::md::Md;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private, Public};
use openssl::pkey_ctx::PkeyCtx;
use openssl::rsa::Padding;
use openssl::sign::Verifier;
use openssl::x509::X509;
use sha2::{Digest, Sha256};

use super::CfdiError;

fn csd_err(msg: impl Into<String>) -> CfdiError {
    CfdiError::Csd(msg.into())
}

/// A loaded certificate: what verification needs.
#[derive(Clone)]
pub struct Certificate {
    x509: X509,
    /// Decoded once: every Sello check needs it.
    public: PKey<Public>,
    no_certificado: String,
    der_b64: String,
    not_before: DateTime<Utc>,
    not_after: DateTime<Utc>,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("no_certificado", &self.no_certificado)
            .field("rfc", &self.rfc())
            .field("not_after", &self.not_after)
            .finish()
    }
}

fn asn1_to_utc(t: &openssl::asn1::Asn1TimeRef) -> Result<DateTime<Utc>, CfdiError> {
    let epoch = Asn1Time::from_unix(0).map_err(|e| csd_err(e.to_string()))?;
    let diff = epoch.diff(t).map_err(|e| csd_err(e.to_string()))?;
    let secs = i64::from(diff.days) * 86_400 + i64::from(diff.secs);
    DateTime::from_timestamp(secs, 0).ok_or_else(|| csd_err("certificate date out of range"))
}

impl Certificate {
    /// Parses a DER (`.cer`) or PEM certificate.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CfdiError> {
        let x509 = X509::from_der(bytes)
            .or_else(|_| X509::from_pem(bytes))
            .map_err(|e| csd_err(format!("not an X.509 certificate (DER or PEM): {e}")))?;
        let serial = x509
            .serial_number()
            .to_bn()
            .map(|bn| bn.to_vec())
            .map_err(|e| csd_err(e.to_string()))?;
        // SAT serials are ASCII digits stored as bytes: 0x33 0x30 … → "30…".
        let no_certificado = if serial.iter().all(u8::is_ascii_digit) {
            String::from_utf8_lossy(&serial).into_owned()
        } else {
            hex::encode(&serial)
        };
        let der = x509.to_der().map_err(|e| csd_err(e.to_string()))?;
        let public = x509.public_key().map_err(|e| csd_err(e.to_string()))?;
        Ok(Self {
            public,
            not_before: asn1_to_utc(x509.not_before())?,
            not_after: asn1_to_utc(x509.not_after())?,
            x509,
            no_certificado,
            der_b64: B64.encode(der),
        })
    }

    /// Parses the `Certificado` attribute of a comprobante (base64 DER).
    ///
    /// The last few certificates read are kept: an issuer sends the same one with every
    /// document, and decoding it (and its public key) costs more than the Sello check itself.
    pub fn from_base64(b64: &str) -> Result<Self, CfdiError> {
        static RECENT: std::sync::Mutex<Vec<(String, Certificate)>> =
            std::sync::Mutex::new(Vec::new());
        if let Ok(recent) = RECENT.lock()
            && let Some((_, c)) = recent.iter().find(|(k, _)| k == b64)
        {
            return Ok(c.clone());
        }
        let clean: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
        let der = B64
            .decode(clean)
            .map_err(|e| csd_err(format!("Certificado is not base64: {e}")))?;
        let cert = Self::from_bytes(&der)?;
        if let Ok(mut recent) = RECENT.lock() {
            if recent.len() >= 8 {
                recent.remove(0);
            }
            recent.push((b64.to_owned(), cert.clone()));
        }
        Ok(cert)
    }

    pub fn no_certificado(&self) -> &str {
        &self.no_certificado
    }

    /// The certificate, DER in base64, as the `Certificado` attribute carries it.
    pub fn base64(&self) -> &str {
        &self.der_b64
    }

    pub fn not_before(&self) -> DateTime<Utc> {
        self.not_before
    }

    pub fn not_after(&self) -> DateTime<Utc> {
        self.not_after
    }

    /// The holder's RFC, from `x500UniqueIdentifier` ("RFC / CURP-of-representative").
    pub fn rfc(&self) -> Option<String> {
        let name = self.x509.subject_name();
        let entry = name.entries_by_nid(Nid::X500UNIQUEIDENTIFIER).next()?;
        let text = entry.data().to_string().ok()?;
        text.split('/').next().map(|s| s.trim().to_owned())
    }

    /// The holder's name (`CN`).
    pub fn holder(&self) -> Option<String> {
        let name = self.x509.subject_name();
        let entry = name.entries_by_nid(Nid::COMMONNAME).next()?;
        entry.data().to_string().ok()
    }

    /// Whether the certificate was valid at a local Mexico City `fecha`.
    pub fn valid_at_local(&self, fecha: NaiveDateTime) -> bool {
        let Some(utc) = Mexico_City.from_local_datetime(&fecha).earliest() else {
            return false;
        };
        let utc = utc.with_timezone(&Utc);
        self.not_before <= utc && utc <= self.not_after
    }

    /// Verifies a base64 `sello` over `cadena`.
    pub fn verify(&self, cadena: &str, sello_b64: &str) -> Result<bool, CfdiError> {
        let Ok(sig) = B64.decode(sello_b64.trim()) else {
            return Ok(false);
        };
        let mut v = Verifier::new(MessageDigest::sha256(), &self.public)
            .map_err(|e| csd_err(e.to_string()))?;
        v.update(cadena.as_bytes())
            .map_err(|e| csd_err(e.to_string()))?;
        Ok(v.verify(&sig).unwrap_or(false))
    }
}

/// A CSD: certificate plus private key, checked to belong together.
pub struct Csd {
    cert: Certificate,
    key: PKey<Private>,
    /// The holder's RFC, read once from the certificate.
    rfc: Option<String>,
    /// Signing contexts ready for reuse: setting one up costs a measurable share of an RSA
    /// signature, and contexts are not shareable between threads, so each signer borrows one.
    ctxs: std::sync::Mutex<Vec<PkeyCtx<Private>>>,
}

impl Clone for Csd {
    fn clone(&self) -> Self {
        Self {
            cert: self.cert.clone(),
            key: self.key.clone(),
            rfc: self.rfc.clone(),
            ctxs: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl fmt::Debug for Csd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key.
        f.debug_struct("Csd")
            .field("cert", &self.cert)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl Csd {
    /// Loads a `.cer` (DER) and a `.key` (PKCS#8 DER encrypted with `password`; PEM also
    /// accepted) and checks that they are a pair.
    pub fn from_bytes(cer: &[u8], key: &[u8], password: &str) -> Result<Self, CfdiError> {
        let cert = Certificate::from_bytes(cer)?;
        let key = PKey::private_key_from_pkcs8_passphrase(key, password.as_bytes())
            .or_else(|_| PKey::private_key_from_pem_passphrase(key, password.as_bytes()))
            .or_else(|_| PKey::private_key_from_pem(key))
            .map_err(|_| {
                csd_err("cannot open the .key: wrong password, or not a PKCS#8 private key")
            })?;
        let public = cert.public.clone();
        if !public.public_eq(&key) {
            return Err(csd_err(format!(
                "the .key does not belong to certificate {}",
                cert.no_certificado
            )));
        }
        let rfc = cert.rfc();
        Ok(Self {
            cert,
            key,
            rfc,
            ctxs: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The holder's RFC.
    pub fn rfc(&self) -> Option<&str> {
        self.rfc.as_deref()
    }

    fn new_ctx(&self) -> Result<PkeyCtx<Private>, CfdiError> {
        let e = |e: openssl::error::ErrorStack| csd_err(e.to_string());
        let mut ctx = PkeyCtx::new(&self.key).map_err(e)?;
        ctx.sign_init().map_err(e)?;
        ctx.set_rsa_padding(Padding::PKCS1).map_err(e)?;
        ctx.set_signature_md(Md::sha256()).map_err(e)?;
        Ok(ctx)
    }

    /// Loads from files, naming the file in errors.
    pub fn from_files(cer: &Path, key: &Path, password: &str) -> Result<Self, CfdiError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| csd_err(format!("cannot read {}: {e}", p.display())))
        };
        Self::from_bytes(&read(cer)?, &read(key)?, password)
    }

    pub fn certificate(&self) -> &Certificate {
        &self.cert
    }

    pub fn no_certificado(&self) -> &str {
        self.cert.no_certificado()
    }

    /// Signs `cadena`: base64 of the RSA PKCS#1 v1.5 SHA-256 signature.
    pub fn sign(&self, cadena: &str) -> Result<String, CfdiError> {
        let digest = Sha256::digest(cadena.as_bytes());
        // The lock is held only to take or return a context, never while signing.
        let pooled = self.ctxs.lock().ok().and_then(|mut v| v.pop());
        let mut ctx = match pooled {
            Some(c) => c,
            None => self.new_ctx()?,
        };
        let mut sig = Vec::with_capacity(256);
        ctx.sign_to_vec(&digest, &mut sig)
            .map_err(|e| csd_err(e.to_string()))?;
        if let Ok(mut v) = self.ctxs.lock() {
            v.push(ctx);
        }
        Ok(B64.encode(sig))
    }
}
