//! Cancellation rules (SAT 2022 scheme): which motivo is allowed, and whether the receptor must
//! accept (RMF regla 2.7.1.35). Pure functions over the stamped comprobante, so the admin's page
//! and action, the API and the tests agree; the fractions are the ones the sandbox PAC decides by.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::cfdi::Tfd;
use crate::cfdi::dom::{Element, NS_CFDI};
use crate::cfdi::money::parse_amount;
use crate::domain::time as clock;

/// Cancellation motivo (SAT 2022 scheme).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Motivo {
    /// `01`: emitido con errores con relación (requires the replacement's UUID).
    #[serde(rename = "01")]
    ConRelacion,
    /// `02`: emitido con errores sin relación.
    #[serde(rename = "02")]
    SinRelacion,
    /// `03`: no se llevó a cabo la operación.
    #[serde(rename = "03")]
    NoSeRealizo,
    /// `04`: operación nominativa relacionada en una factura global.
    #[serde(rename = "04")]
    NominativaEnGlobal,
}

impl Motivo {
    pub fn code(self) -> &'static str {
        match self {
            Self::ConRelacion => "01",
            Self::SinRelacion => "02",
            Self::NoSeRealizo => "03",
            Self::NominativaEnGlobal => "04",
        }
    }

    pub fn parse(s: &str) -> Option<Motivo> {
        Some(match s {
            "01" => Self::ConRelacion,
            "02" => Self::SinRelacion,
            "03" => Self::NoSeRealizo,
            "04" => Self::NominativaEnGlobal,
            _ => return None,
        })
    }
}

/// The receptor RFC of operations with the público en general.
pub use crate::cfdi::rfc::RFC_PUBLICO_EN_GENERAL as RFC_PUBLICO_GENERAL;

/// What a cancellation needs to know about a stamped comprobante.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelFacts {
    pub uuid: String,
    pub rfc_emisor: String,
    pub rfc_receptor: String,
    /// `Total` exactly as written in the comprobante.
    pub total: String,
    pub moneda: String,
    pub tipo_cambio: Option<String>,
    /// `TipoDeComprobante`: I, E, T, N, P.
    pub tipo: String,
    /// `FechaTimbrado` (Mexico City local time).
    pub fecha_timbrado: String,
    /// Whether it carries `InformacionGlobal` (a factura global).
    pub global: bool,
    /// `(TipoRelacion, UUID)` of its `CfdiRelacionados`.
    pub related: Vec<(String, String)>,
}

impl CancelFacts {
    /// Reads a stamped comprobante; `None` when it is not one (no TFD or no UUID).
    pub fn from_stamped(xml: &[u8]) -> Option<CancelFacts> {
        let root = Element::parse(xml).ok()?;
        let tfd = Tfd::from_comprobante(&root)?;
        if tfd.uuid.is_empty() {
            return None;
        }
        let a = |k: &str| root.attr(k).unwrap_or_default().to_owned();
        let rfc = |el: &str| {
            root.child_attr(NS_CFDI, el, "Rfc")
                .unwrap_or_default()
                .to_owned()
        };
        let mut related = Vec::new();
        for group in root.children_named(NS_CFDI, "CfdiRelacionados") {
            let tipo = group.attr("TipoRelacion").unwrap_or_default().to_owned();
            for r in group.children_named(NS_CFDI, "CfdiRelacionado") {
                if let Some(u) = r.attr("UUID") {
                    related.push((tipo.clone(), u.to_uppercase()));
                }
            }
        }
        Some(CancelFacts {
            uuid: tfd.uuid.to_uppercase(),
            rfc_emisor: rfc("Emisor"),
            rfc_receptor: rfc("Receptor"),
            total: a("Total"),
            moneda: a("Moneda"),
            tipo_cambio: root.attr("TipoCambio").map(str::to_owned),
            tipo: a("TipoDeComprobante"),
            fecha_timbrado: tfd.fecha_timbrado,
            global: root.child(NS_CFDI, "InformacionGlobal").is_some(),
            related,
        })
    }

    /// The total in MXN (Total × TipoCambio for other currencies), when readable.
    pub fn total_mxn(&self) -> Option<Decimal> {
        let total = parse_amount(&self.total)?;
        if self.moneda == "MXN" {
            return Some(total);
        }
        self.tipo_cambio
            .as_deref()
            .and_then(parse_amount)
            // Read from a stamped XML: amounts there may be beyond what a product can hold.
            .and_then(|tc| total.checked_mul(tc))
    }

    /// When the stamp was issued, in UTC.
    pub fn stamped_at(&self) -> Option<DateTime<Utc>> {
        crate::cfdi::verify::parse_fecha(&self.fecha_timbrado).and_then(clock::from_local)
    }
}

/// One fraction of regla 2.7.1.35 that lets the issuer cancel without the receptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemption {
    pub fraction: &'static str,
    pub text: String,
}

/// The fractions of regla 2.7.1.35 that apply at `now` (I, III, IV, II, VII, IX: the ones a
/// document shows; the others describe taxpayers). Empty = the receptor must accept.
pub fn exemptions(f: &CancelFacts, now: DateTime<Utc>) -> Vec<Exemption> {
    let mut out = Vec::new();
    if f.tipo != "P"
        && let Some(t) = f.total_mxn()
        && t <= Decimal::new(1000, 0)
    {
        out.push(Exemption {
            fraction: "I",
            text: format!("total {t} MXN is at most $1,000.00"),
        });
    }
    match f.tipo.as_str() {
        "N" => out.push(Exemption {
            fraction: "II",
            text: "a nómina".into(),
        }),
        "E" => out.push(Exemption {
            fraction: "III",
            text: "an egreso".into(),
        }),
        "T" => out.push(Exemption {
            fraction: "IV",
            text: "a traslado".into(),
        }),
        _ => {}
    }
    if f.rfc_receptor == RFC_PUBLICO_GENERAL {
        out.push(Exemption {
            fraction: "VII",
            text: "issued to the público en general".into(),
        });
    }
    if let Some(at) = f.stamped_at() {
        let until = clock::end_of_next_business_day(at);
        if now <= until {
            out.push(Exemption {
                fraction: "IX",
                text: format!(
                    "within the business day after issue (until {})",
                    clock::to_local(until).format("%Y-%m-%d %H:%M")
                ),
            });
        }
    }
    out
}

/// Whether the receptor must accept a cancellation requested at `now`.
pub fn requires_acceptance(f: &CancelFacts, now: DateTime<Utc>) -> bool {
    exemptions(f, now).is_empty()
}

/// Why a motivo cannot be used for this document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MotivoError {
    #[error("motivo 01 needs the UUID of the replacement (FolioSustitucion)")]
    MissingReplacement,
    #[error("{0} is not a UUID")]
    BadUuid(String),
    #[error("the replacement {0} is not a stamped document of this appliance")]
    UnknownReplacement(String),
    #[error("the replacement {replacement} does not relate to {uuid} with TipoRelacion 04")]
    NotRelated { replacement: String, uuid: String },
    #[error("a document cannot replace itself")]
    SelfReplacement,
    #[error("motivo 04 is only for a factura global whose operation is now invoiced nominatively")]
    NotGlobal,
    #[error("FolioSustitucion is only used with motivo 01")]
    UnexpectedReplacement,
}

/// A UUID as SAT writes it: 8-4-4-4-12 hexadecimal digits, upper case.
pub fn parse_uuid(s: &str) -> Result<String, MotivoError> {
    let u = s.trim().to_uppercase();
    let groups: Vec<&str> = u.split('-').collect();
    let ok = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.chars().all(|c| c.is_ascii_hexdigit()));
    if ok {
        Ok(u)
    } else {
        Err(MotivoError::BadUuid(s.trim().to_owned()))
    }
}

/// Checks a motivo against the document to cancel and, for `01`, its replacement's stamped
/// comprobante (`None` when we hold no stamped document with that UUID). Returns the
/// FolioSustitucion to send.
pub fn check_motivo(
    motivo: Motivo,
    doc: &CancelFacts,
    folio_sustitucion: Option<&str>,
    replacement: Option<&CancelFacts>,
) -> Result<Option<String>, MotivoError> {
    let folio = folio_sustitucion
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(parse_uuid)
        .transpose()?;
    match motivo {
        Motivo::ConRelacion => {
            let folio = folio.ok_or(MotivoError::MissingReplacement)?;
            if folio == doc.uuid {
                return Err(MotivoError::SelfReplacement);
            }
            let r = replacement.ok_or_else(|| MotivoError::UnknownReplacement(folio.clone()))?;
            let relates = r
                .related
                .iter()
                .any(|(tipo, u)| tipo == "04" && u.eq_ignore_ascii_case(&doc.uuid));
            if !relates {
                return Err(MotivoError::NotRelated {
                    replacement: folio,
                    uuid: doc.uuid.clone(),
                });
            }
            Ok(Some(folio))
        }
        _ if folio.is_some() => Err(MotivoError::UnexpectedReplacement),
        Motivo::NominativaEnGlobal if !doc.global => Err(MotivoError::NotGlobal),
        _ => Ok(None),
    }
}

/// A cancellation checked against its document, ready to be recorded and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelOrder {
    pub uuid: String,
    pub rfc_emisor: String,
    pub rfc_receptor: String,
    pub total: String,
    pub motivo: Motivo,
    pub folio_sustitucion: Option<String>,
    /// Decided when asked (regla 2.7.1.35), so the worker and the admin show the same answer.
    pub requires_acceptance: bool,
}

impl CancelFacts {
    /// The cancellation of this document with `motivo`, asked for at `now`.
    pub fn order(
        &self,
        motivo: Motivo,
        folio_sustitucion: Option<String>,
        now: DateTime<Utc>,
    ) -> CancelOrder {
        CancelOrder {
            uuid: self.uuid.clone(),
            rfc_emisor: self.rfc_emisor.clone(),
            rfc_receptor: self.rfc_receptor.clone(),
            total: self.total.clone(),
            motivo,
            folio_sustitucion,
            requires_acceptance: requires_acceptance(self, now),
        }
    }
}

/// Why a cancel request is refused before anything is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The motivo as it was sent: none of 01, 02, 03, 04 (each caller words its own answer).
    NotAMotivo(String),
    Motivo(MotivoError),
}

/// The cancel request as the admin's form and the API's body send it (motivo and
/// FolioSustitucion as typed), checked against the document `doc`. For motivo 01 with a
/// well-formed folio, `stamped_xml` gives the stamped comprobante we hold under that UUID
/// (`None` when there is none); it is called for nothing else. `Err` is only the lookup's.
pub async fn check_request<E>(
    doc: &CancelFacts,
    motivo: &str,
    folio_sustitucion: Option<&str>,
    now: DateTime<Utc>,
    stamped_xml: impl AsyncFnOnce(String) -> Result<Option<Vec<u8>>, E>,
) -> Result<Result<CancelOrder, Refused>, E> {
    let Some(motivo) = Motivo::parse(motivo.trim()) else {
        return Ok(Err(Refused::NotAMotivo(motivo.to_owned())));
    };
    let folio = folio_sustitucion.map(str::trim).filter(|f| !f.is_empty());
    let replacement = match (motivo, folio.map(parse_uuid)) {
        (Motivo::ConRelacion, Some(Ok(u))) => stamped_xml(u)
            .await?
            .and_then(|x| CancelFacts::from_stamped(&x)),
        _ => None,
    };
    Ok(check_motivo(motivo, doc, folio, replacement.as_ref())
        .map(|folio| doc.order(motivo, folio, now))
        .map_err(Refused::Motivo))
}

/// The motivos, for forms: code and SAT's text.
pub const MOTIVOS: &[(&str, &str)] = &[
    ("01", "Comprobante emitido con errores con relación"),
    ("02", "Comprobante emitido con errores sin relación"),
    ("03", "No se llevó a cabo la operación"),
    (
        "04",
        "Operación nominativa relacionada en una factura global",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(total: &str, tipo: &str, receptor: &str, fecha_timbrado: &str) -> CancelFacts {
        CancelFacts {
            uuid: "6F2C2A3B-1111-4222-8333-944445555666".into(),
            rfc_emisor: "EKU9003173C9".into(),
            rfc_receptor: receptor.into(),
            total: total.into(),
            moneda: "MXN".into(),
            tipo_cambio: None,
            tipo: tipo.into(),
            fecha_timbrado: fecha_timbrado.into(),
            global: false,
            related: vec![],
        }
    }

    fn at(local: &str) -> DateTime<Utc> {
        crate::cfdi::verify::parse_fecha(local)
            .and_then(clock::from_local)
            .expect("time")
    }

    #[test]
    fn regla_2_7_1_35_fractions() {
        // Stamped Friday 2026-01-02; next business day is Monday 2026-01-05.
        let stamped = "2026-01-02T12:00:00";
        let later = at("2026-01-07T09:00:00");
        let big = facts("1160.00", "I", "XIQB891116QE4", stamped);
        assert!(requires_acceptance(&big, later));
        assert!(!requires_acceptance(&big, at("2026-01-05T23:00:00")), "IX");
        assert!(!requires_acceptance(
            &facts("1000.00", "I", "XIQB891116QE4", stamped),
            later
        ));
        assert!(requires_acceptance(
            &facts("1000.01", "I", "XIQB891116QE4", stamped),
            later
        ));
        assert!(!requires_acceptance(
            &facts("5000.00", "E", "XIQB891116QE4", stamped),
            later
        ));
        assert!(!requires_acceptance(
            &facts("5000.00", "I", RFC_PUBLICO_GENERAL, stamped),
            later
        ));
        let mut usd = facts("100.00", "I", "XIQB891116QE4", stamped);
        usd.moneda = "USD".into();
        usd.tipo_cambio = Some("17.50".into());
        assert!(requires_acceptance(&usd, later), "1,750 MXN");
        // A Total and TipoCambio whose product overflows `Decimal`: unknown, so not under $1,000.
        usd.total = "79228162514264337593543950335".into();
        usd.tipo_cambio = Some("2".into());
        assert_eq!(usd.total_mxn(), None);
        assert!(requires_acceptance(&usd, later));
        let fr: Vec<_> = exemptions(
            &facts("10.00", "I", RFC_PUBLICO_GENERAL, stamped),
            at("2026-01-02T13:00:00"),
        )
        .into_iter()
        .map(|e| e.fraction)
        .collect();
        assert_eq!(fr, ["I", "VII", "IX"]);
    }

    #[test]
    fn motivo_01_needs_a_replacement_related_by_04() {
        let doc = facts("1160.00", "I", "XIQB891116QE4", "2026-01-02T12:00:00");
        assert_eq!(
            check_motivo(Motivo::ConRelacion, &doc, None, None),
            Err(MotivoError::MissingReplacement)
        );
        let other = "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE";
        assert_eq!(
            check_motivo(Motivo::ConRelacion, &doc, Some(other), None),
            Err(MotivoError::UnknownReplacement(other.into()))
        );
        let mut rep = facts("1160.00", "I", "XIQB891116QE4", "2026-01-03T12:00:00");
        rep.uuid = other.into();
        rep.related = vec![("01".into(), doc.uuid.clone())];
        assert!(matches!(
            check_motivo(Motivo::ConRelacion, &doc, Some(other), Some(&rep)),
            Err(MotivoError::NotRelated { .. })
        ));
        rep.related = vec![("04".into(), doc.uuid.clone())];
        assert_eq!(
            check_motivo(
                Motivo::ConRelacion,
                &doc,
                Some(&other.to_lowercase()),
                Some(&rep)
            ),
            Ok(Some(other.into()))
        );
        assert_eq!(
            check_motivo(Motivo::SinRelacion, &doc, Some(other), None),
            Err(MotivoError::UnexpectedReplacement)
        );
        assert_eq!(
            check_motivo(Motivo::SinRelacion, &doc, None, None),
            Ok(None)
        );
        assert_eq!(
            check_motivo(Motivo::NominativaEnGlobal, &doc, None, None),
            Err(MotivoError::NotGlobal)
        );
        assert!(matches!(parse_uuid("nope"), Err(MotivoError::BadUuid(_))));
    }
}
