//! `[arca]`: Argentina, Mercado Pago sales in ARS → ARCA vouchers (docs/arca.md). Off by
//! default; every default is in `config/default.toml`.

use std::path::PathBuf;

use serde::Deserialize;

use crate::arca::model::{Alicuota, CbteTipo, Environment, valid_cuit};

/// Where ARCA's services are, per environment (docs/arca.md §1).
const URLS: [(Environment, &str, &str); 2] = [
    (
        Environment::Homologacion,
        "https://wsaahomo.afip.gov.ar/ws/services/LoginCms",
        "https://wswhomo.afip.gov.ar/wsfev1/service.asmx",
    ),
    (
        Environment::Produccion,
        "https://wsaa.afip.gov.ar/ws/services/LoginCms",
        "https://servicios1.afip.gov.ar/wsfev1/service.asmx",
    ),
];

/// The emisor's IVA condition, which decides the voucher class it issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CondicionIva {
    /// Issues A (to an RI or monotributista) or B (to anyone else).
    ResponsableInscripto,
    /// Issues C.
    Monotributo,
    /// Issues C.
    Exento,
}

/// The buyer's IVA condition (`CondicionIVAReceptorId`, RG 5616).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Receptor {
    ResponsableInscripto,
    Monotributo,
    ConsumidorFinal,
    Exento,
    NoAlcanzado,
}

impl Receptor {
    const ALL: [Self; 5] = [
        Self::ResponsableInscripto,
        Self::Monotributo,
        Self::ConsumidorFinal,
        Self::Exento,
        Self::NoAlcanzado,
    ];

    /// `CondicionIVAReceptorId`: 1 RI, 6 Monotributo, 5 Consumidor Final, 4 Exento, 15 IVA
    /// no alcanzado.
    pub fn id(self) -> i32 {
        match self {
            Self::ResponsableInscripto => 1,
            Self::Monotributo => 6,
            Self::ConsumidorFinal => 5,
            Self::Exento => 4,
            Self::NoAlcanzado => 15,
        }
    }

    /// Its configuration name (`responsable_inscripto`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::ResponsableInscripto => "responsable_inscripto",
            Self::Monotributo => "monotributo",
            Self::ConsumidorFinal => "consumidor_final",
            Self::Exento => "exento",
            Self::NoAlcanzado => "no_alcanzado",
        }
    }

    /// A condition as a merchant writes it: its name (case and `-`/space ignored) or its
    /// `CondicionIVAReceptorId`.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim().to_lowercase().replace(['-', ' '], "_");
        Self::ALL
            .into_iter()
            .find(|r| r.name() == t || r.id().to_string() == t)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArcaSettings {
    /// Whether ARS sales become ARCA vouchers.
    pub enabled: bool,
    /// `homologacion` (ARCA's test service) or `produccion`.
    pub environment: Environment,
    /// The emisor's CUIT, 11 digits with its check digit.
    pub cuit: Option<i64>,
    /// The punto de venta, created as "RECE / Factura Electrónica - Web Services" and
    /// dedicated to the appliance.
    pub punto_venta: Option<i32>,
    /// PEM certificate ARCA signed for WSAA.
    pub cert: Option<PathBuf>,
    /// Its PEM private key (unencrypted).
    pub key: Option<PathBuf>,
    pub condicion_iva: CondicionIva,
    /// IVA rate of what is sold, in percent: 0, 2.5, 5, 10.5, 21 or 27 (class A and B).
    pub iva_rate: String,
    /// Overrides of the environment's endpoints (the sandbox ARCA in tests).
    pub wsaa_url: Option<String>,
    pub wsfe_url: Option<String>,
    /// Seconds for one WSAA or WSFEv1 call.
    pub timeout_seconds: u64,
    /// A stored access ticket is renewed this many minutes before it expires.
    pub ticket_renew_minutes: u64,
    /// How often `serve` and `worker` look for ARS sales to issue, in seconds.
    pub interval_seconds: u64,
    /// Vouchers of one sequence sent in one `FECAESolicitar` (`CantReg`), at most what ARCA's
    /// `FECompTotXRequest` allows (250 in homologación); 1 sends them one by one.
    pub batch: usize,
    /// The IVA condition of a buyer identified by CUIT when the sale does not say it (Mercado
    /// Pago does not know it; metadata `condicion_iva` does): `consumidor_final` (Factura B
    /// from an RI) unless the merchant sells to businesses.
    pub cuit_condicion_iva: Receptor,
    /// From this total in pesos a buyer must be identified (RG 5700/2025: ARS 10,000,000):
    /// a sale without DNI, CUIL or CUIT from here is held.
    pub anonymous_limit: String,
    /// What the printable voucher says of the emisor (RG 1415), and ARCA's QR address.
    pub print: ArcaPrint,
}

/// `[arca.print]`: the emisor's data ARCA does not hold for the voucher (it prints "—" for a
/// razón social not given), and the base of the verification QR (RG 4892).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArcaPrint {
    pub razon_social: Option<String>,
    pub domicilio: Option<String>,
    pub ingresos_brutos: Option<String>,
    /// As printed, e.g. `01/03/2019`.
    pub inicio_actividades: Option<String>,
    pub qr_base: String,
}

impl ArcaSettings {
    pub fn wsaa_url(&self) -> &str {
        self.wsaa_url.as_deref().unwrap_or_else(|| self.urls().1)
    }

    pub fn wsfe_url(&self) -> &str {
        self.wsfe_url.as_deref().unwrap_or_else(|| self.urls().2)
    }

    fn urls(&self) -> &(Environment, &'static str, &'static str) {
        URLS.iter()
            .find(|u| u.0 == self.environment)
            .expect("every environment has its URLs")
    }

    /// The alícuota of `iva_rate`, if it names one.
    pub fn alicuota(&self) -> Option<Alicuota> {
        let rate: rust_decimal::Decimal = self.iva_rate.parse().ok()?;
        Alicuota::ALL
            .into_iter()
            .find(|a| a.rate() * rust_decimal::Decimal::ONE_HUNDRED == rate)
    }

    /// The voucher a sale to `receptor` gets: A from an RI to an RI or a monotributista, B
    /// from an RI to anyone else, C from a monotributista or an exento (docs/arca.md §5).
    pub fn factura_for(&self, receptor: Receptor) -> CbteTipo {
        match (self.condicion_iva, receptor) {
            (
                CondicionIva::ResponsableInscripto,
                Receptor::ResponsableInscripto | Receptor::Monotributo,
            ) => CbteTipo::FacturaA,
            (
                CondicionIva::ResponsableInscripto,
                Receptor::ConsumidorFinal | Receptor::Exento | Receptor::NoAlcanzado,
            ) => CbteTipo::FacturaB,
            (CondicionIva::Monotributo | CondicionIva::Exento, _) => CbteTipo::FacturaC,
        }
    }

    /// `anonymous_limit` in pesos, if it is a positive amount.
    pub fn anonymous_limit(&self) -> Option<rust_decimal::Decimal> {
        self.anonymous_limit
            .parse()
            .ok()
            .filter(|l: &rust_decimal::Decimal| *l > rust_decimal::Decimal::ZERO)
    }

    /// Adds every problem of `[arca]` to `p` (none when it is off).
    pub(super) fn check(&self, p: &mut Vec<String>) {
        if !self.enabled {
            return;
        }
        match self.cuit {
            None => p.push("[arca] cuit is required when [arca] enabled = true".into()),
            Some(c) if !valid_cuit(c) => p.push(format!(
                "[arca] cuit = {c} is not a CUIT (11 digits, the last one its check digit)"
            )),
            Some(_) => {}
        }
        match self.punto_venta {
            None => p.push("[arca] punto_venta is required when [arca] enabled = true".into()),
            Some(n) if !(1..=99_998).contains(&n) => {
                p.push(format!("[arca] punto_venta = {n} must be 1 to 99998"));
            }
            Some(_) => {}
        }
        self.check_credentials(p);
        if self.alicuota().is_none() {
            p.push(format!(
                "[arca] iva_rate = {:?} must be one of 0, 2.5, 5, 10.5, 21, 27",
                self.iva_rate
            ));
        }
        for (key, url) in [("wsaa_url", &self.wsaa_url), ("wsfe_url", &self.wsfe_url)] {
            if let Some(u) = url
                && !(u.starts_with("http://") || u.starts_with("https://"))
            {
                p.push(format!("[arca] {key} must start with http:// or https://"));
            }
        }
        if self.anonymous_limit().is_none() {
            p.push(format!(
                "[arca] anonymous_limit = {:?} must be an amount in pesos (ARCA's: \"10000000\")",
                self.anonymous_limit
            ));
        }
        if self.timeout_seconds == 0 || self.interval_seconds == 0 {
            p.push("[arca] timeout_seconds and interval_seconds must be at least 1".into());
        }
        if !(1..=9998).contains(&self.batch) {
            p.push("[arca] batch must be between 1 and 9998 (ARCA's CantReg, error 10001)".into());
        }
        if self.ticket_renew_minutes >= 11 * 60 {
            p.push("[arca] ticket_renew_minutes must be under 660 (a ticket lives 12 h)".into());
        }
    }

    /// The certificate and key must be readable PEM and belong together, or WSAA answers
    /// `cms.sign.invalid` on the first sale.
    fn check_credentials(&self, p: &mut Vec<String>) {
        let (Some(cert), Some(key)) = (&self.cert, &self.key) else {
            p.push(
                "[arca] cert and key (PEM files of the WSAA certificate ARCA signed) are \
                 required when [arca] enabled = true"
                    .into(),
            );
            return;
        };
        let read = |path: &PathBuf, what: &str, p: &mut Vec<String>| match std::fs::read(path) {
            Ok(b) => Some(b),
            Err(e) => {
                p.push(format!("[arca] {what} = {}: {e}", path.display()));
                None
            }
        };
        let (Some(c), Some(k)) = (read(cert, "cert", p), read(key, "key", p)) else {
            return;
        };
        let Ok(c) = openssl::x509::X509::from_pem(&c) else {
            p.push(format!(
                "[arca] cert = {} is not a PEM certificate",
                cert.display()
            ));
            return;
        };
        let Ok(k) = openssl::pkey::PKey::private_key_from_pem(&k) else {
            p.push(format!(
                "[arca] key = {} is not an unencrypted PEM private key",
                key.display()
            ));
            return;
        };
        if !c.public_key().is_ok_and(|pk| pk.public_eq(&k)) {
            p.push(format!(
                "[arca] key = {} is not the key of cert = {}",
                key.display(),
                cert.display()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Settings;
    use super::*;

    fn fixture(name: &str) -> String {
        format!("{}/fixtures/arca/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn enabled(extra: &str) -> String {
        format!(
            "[arca]\nenabled = true\ncuit = 20111111112\npunto_venta = 3\ncert = {:?}\n\
             key = {:?}\n{extra}",
            fixture("test.crt"),
            fixture("test.key")
        )
    }

    #[test]
    fn arca_is_off_by_default_and_a_complete_section_loads() {
        let off = Settings::defaults().expect("defaults");
        assert!(!off.arca.enabled);
        let s = Settings::from_parts(Some(&enabled("")), &[]).expect("valid [arca]");
        assert_eq!(s.arca.environment, Environment::Homologacion);
        assert!(
            s.arca
                .wsaa_url()
                .starts_with("https://wsaahomo.afip.gov.ar/")
        );
        assert!(
            s.arca
                .wsfe_url()
                .starts_with("https://wswhomo.afip.gov.ar/")
        );
        assert_eq!(s.arca.alicuota(), Some(Alicuota::Veintiuno));
        let prod = enabled("environment = \"produccion\"\nwsfe_url = \"http://127.0.0.1:9/x\"\n");
        let s = Settings::from_parts(Some(&prod), &[]).expect("valid [arca]");
        assert_eq!(
            s.arca.wsaa_url(),
            "https://wsaa.afip.gov.ar/ws/services/LoginCms"
        );
        assert_eq!(s.arca.wsfe_url(), "http://127.0.0.1:9/x");
        // Spelled as in Spanish, with its accent.
        let accented = enabled("environment = \"producción\"\n");
        let s = Settings::from_parts(Some(&accented), &[]).expect("accented environment");
        assert_eq!(s.arca.environment, Environment::Produccion);
    }

    #[test]
    fn an_enabled_arca_section_names_every_problem() {
        let bad = "[arca]\nenabled = true\ncuit = 20111111113\npunto_venta = 0\n\
                   iva_rate = \"19\"\nwsaa_url = \"ftp://x\"\nanonymous_limit = \"-1\"\n";
        let err = Settings::from_parts(Some(bad), &[])
            .expect_err("refused")
            .to_string();
        for needle in [
            "[arca] cuit = 20111111113 is not a CUIT",
            "[arca] punto_venta = 0",
            "[arca] cert and key",
            "[arca] iva_rate = \"19\"",
            "[arca] wsaa_url",
            "[arca] anonymous_limit = \"-1\"",
        ] {
            assert!(err.contains(needle), "{needle} not in {err}");
        }
        // A key that is not the certificate's.
        let other = std::env::temp_dir().join(format!("arca-other-{}.key", std::process::id()));
        let key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).expect("rsa"))
            .expect("key");
        std::fs::write(&other, key.private_key_to_pem_pkcs8().expect("pem")).expect("write");
        let text = enabled("").replace(&fixture("test.key"), &other.display().to_string());
        let err = Settings::from_parts(Some(&text), &[])
            .expect_err("refused")
            .to_string();
        std::fs::remove_file(&other).ok();
        assert!(err.contains("is not the key of cert"), "{err}");
        let bad = "[arca]\nenvironment = \"testing\"\n";
        assert!(Settings::from_parts(Some(bad), &[]).is_err());
    }

    #[test]
    fn the_voucher_class_follows_the_emisor_and_the_buyer() {
        let mut s = Settings::defaults().expect("defaults").arca;
        assert_eq!(s.factura_for(Receptor::ConsumidorFinal), CbteTipo::FacturaC);
        s.condicion_iva = CondicionIva::ResponsableInscripto;
        assert_eq!(s.factura_for(Receptor::ConsumidorFinal), CbteTipo::FacturaB);
        assert_eq!(s.factura_for(Receptor::Monotributo), CbteTipo::FacturaA);
        assert_eq!(
            s.factura_for(Receptor::ResponsableInscripto),
            CbteTipo::FacturaA
        );
        assert_eq!(s.factura_for(Receptor::Exento), CbteTipo::FacturaB);
        assert_eq!(s.cuit_condicion_iva, Receptor::ConsumidorFinal);
        assert_eq!(
            Receptor::parse("Responsable Inscripto"),
            Some(Receptor::ResponsableInscripto)
        );
        assert_eq!(Receptor::parse("6"), Some(Receptor::Monotributo));
        assert_eq!(Receptor::parse("ri"), None);
    }
}
