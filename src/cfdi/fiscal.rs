//! A customer's fiscal data, as typed (in a Stripe Checkout, in metadata, in the self-invoicing
//! portal), checked against the SAT's rules before it becomes a receptor: the RFC's shape and
//! kind of person (12 characters = moral, 13 = física), the régimen allowed for that kind of
//! person (c_RegimenFiscal), the código postal (c_CodigoPostal) and the UsoCFDI allowed for that
//! person and régimen (c_UsoCFDI). Every problem names its field, in Spanish for the customer
//! and in English for the operator.

use super::catalogs::{self, Entry};
use super::request::ReceptorData;
use super::rfc::{RFC_EXTRANJERO, RFC_PUBLICO_EN_GENERAL, Rfc};

/// The longest name accepted (the XSD's `Nombre` is at most 254 characters).
pub const NOMBRE_MAX: usize = 254;

/// The usos that belong to other kinds of comprobante, never to a sale's ingreso (CFDI40 rules:
/// CP01 only with TipoDeComprobante P, CN01 only with N).
const NOT_FOR_INGRESO: &[&str] = &["CP01", "CN01"];

/// A field of the customer's fiscal data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    Rfc,
    Nombre,
    RegimenFiscal,
    CodigoPostal,
    UsoCfdi,
    Email,
}

impl Field {
    /// Its name as a form field, a Checkout custom field key and a metadata key.
    pub fn key(self) -> &'static str {
        match self {
            Field::Rfc => "rfc",
            Field::Nombre => "razon_social",
            Field::RegimenFiscal => "regimen_fiscal",
            Field::CodigoPostal => "codigo_postal",
            Field::UsoCfdi => "uso_cfdi",
            Field::Email => "email",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Field::Rfc => "RFC",
            Field::Nombre => "razón social",
            Field::RegimenFiscal => "régimen fiscal",
            Field::CodigoPostal => "código postal",
            Field::UsoCfdi => "UsoCFDI",
            Field::Email => "email",
        }
    }
}

/// What is wrong with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Issue {
    Missing,
    RfcShape,
    /// XAXX010101000 or XEXX010101000: not a customer's own RFC.
    RfcGeneric,
    NombreTooLong,
    RegimenUnknown,
    /// The régimen is not for this kind of person (`moral`: the RFC is a persona moral's).
    RegimenNotFor {
        moral: bool,
    },
    CpShape,
    CpUnknown,
    UsoUnknown,
    UsoNotForIngreso,
    UsoNotForPersona {
        moral: bool,
    },
    UsoNotForRegimen {
        regimen: String,
    },
    EmailShape,
}

/// One field's problem, with the value as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: Field,
    pub issue: Issue,
    pub value: String,
}

fn persona(moral: bool) -> &'static str {
    if moral {
        "personas morales (RFC de 12 caracteres)"
    } else {
        "personas físicas (RFC de 13 caracteres)"
    }
}

fn person(moral: bool) -> &'static str {
    if moral {
        "a persona moral (12-character RFC)"
    } else {
        "a persona física (13-character RFC)"
    }
}

fn described(entry: Option<&Entry>, code: &str) -> String {
    entry.map_or_else(|| code.to_owned(), |e| format!("{code} ({})", e.text))
}

impl FieldError {
    fn new(field: Field, issue: Issue, value: &str) -> Self {
        FieldError {
            field,
            issue,
            value: value.to_owned(),
        }
    }

    /// The message shown to the customer, next to the field.
    pub fn es(&self) -> String {
        let v = &self.value;
        match (&self.issue, self.field) {
            (Issue::Missing, Field::Rfc) => "Escriba su RFC.".into(),
            (Issue::Missing, Field::Nombre) => {
                "Escriba su nombre o razón social como aparece en su Constancia de Situación Fiscal."
                    .into()
            }
            (Issue::Missing, Field::RegimenFiscal) => "Elija su régimen fiscal.".into(),
            (Issue::Missing, Field::CodigoPostal) => {
                "Escriba el código postal de su domicilio fiscal.".into()
            }
            (Issue::Missing, Field::UsoCfdi) => "Elija el uso que dará a la factura.".into(),
            (Issue::Missing, Field::Email) => "Escriba su correo electrónico.".into(),
            (Issue::RfcShape, _) => format!(
                "El RFC «{v}» no es válido: son 12 caracteres (persona moral) o 13 (persona física): \
                 las letras, la fecha AAMMDD y la homoclave."
            ),
            (Issue::RfcGeneric, _) => format!(
                "{v} es el RFC genérico de las ventas sin factura a nombre de nadie; escriba su propio RFC."
            ),
            (Issue::NombreTooLong, _) => {
                format!("El nombre o razón social puede tener a lo más {NOMBRE_MAX} caracteres.")
            }
            (Issue::RegimenUnknown, _) => "Elija un régimen fiscal de la lista.".into(),
            (Issue::RegimenNotFor { moral }, _) => format!(
                "El régimen {} no aplica a {}.",
                described(catalogs::regimen(v), v),
                persona(*moral)
            ),
            (Issue::CpShape, _) => "El código postal son 5 dígitos.".into(),
            (Issue::CpUnknown, _) => {
                format!("El código postal {v} no existe en el catálogo del SAT.")
            }
            (Issue::UsoUnknown, _) => "Elija un uso de CFDI de la lista.".into(),
            (Issue::UsoNotForIngreso, _) => {
                format!("El uso {v} no aplica a una factura de venta; elija otro.")
            }
            (Issue::UsoNotForPersona { moral }, _) => format!(
                "El uso {} no aplica a {}.",
                described(catalogs::uso(v), v),
                persona(*moral)
            ),
            (Issue::UsoNotForRegimen { regimen }, _) => format!(
                "El uso {} no está permitido para el régimen {regimen}.",
                described(catalogs::uso(v), v)
            ),
            (Issue::EmailShape, _) => format!("El correo electrónico «{v}» no es válido."),
        }
    }

    /// The message for the operator (a payment's reason, the logs).
    pub fn en(&self) -> String {
        let (v, label) = (&self.value, self.field.label());
        match &self.issue {
            Issue::Missing => format!(
                "{label} missing (Checkout custom field or metadata `{}`)",
                self.field.key()
            ),
            Issue::RfcShape => Rfc::parse(v)
                .err()
                .map_or_else(|| format!("`{v}` is not a valid RFC"), |e| e.to_string()),
            Issue::RfcGeneric => format!("{v} is the generic RFC, not the customer's"),
            Issue::NombreTooLong => format!("{label} longer than {NOMBRE_MAX} characters"),
            Issue::RegimenUnknown => format!("{label} {v:?} is not in c_RegimenFiscal"),
            Issue::RegimenNotFor { moral } => {
                format!("{label} {v} does not apply to {}", person(*moral))
            }
            Issue::CpShape => format!("{label} {v:?} is not 5 digits"),
            Issue::CpUnknown => format!("{label} {v} is not in c_CodigoPostal"),
            Issue::UsoUnknown => format!("{label} {v:?} is not in c_UsoCFDI"),
            Issue::UsoNotForIngreso => format!("{label} {v} is not for a sale's ingreso"),
            Issue::UsoNotForPersona { moral } => {
                format!("{label} {v} does not apply to {}", person(*moral))
            }
            Issue::UsoNotForRegimen { regimen } => {
                format!("{label} {v} is not allowed for régimen {regimen}")
            }
            Issue::EmailShape => format!("{label} {v:?} is not an email address"),
        }
    }
}

/// The fiscal data as given; `None` or blank = not given.
#[derive(Debug, Clone, Copy, Default)]
pub struct FiscalInput<'a> {
    pub rfc: Option<&'a str>,
    pub nombre: Option<&'a str>,
    pub regimen_fiscal: Option<&'a str>,
    pub codigo_postal: Option<&'a str>,
    pub uso_cfdi: Option<&'a str>,
}

fn given(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// An RFC as people type it: capitals, without the spaces and hyphens often put between its
/// parts.
pub fn normalize_rfc(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .flat_map(char::to_uppercase)
        .collect()
}

/// A name as the SAT registers it: capitals, single spaces, no control characters.
pub fn normalize_nombre(s: &str) -> String {
    s.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .to_uppercase()
}

/// Checks `input` and returns the receptor, or every problem found (each field at most once).
/// `default_uso` is used when no UsoCFDI was given (webhooks: `[invoice] uso_cfdi`, or S01 when
/// that one is not allowed for this receptor); without it a missing UsoCFDI is a problem (the
/// portal asks for one).
pub fn check(
    input: &FiscalInput<'_>,
    default_uso: Option<&str>,
) -> Result<ReceptorData, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut fail = |field, issue, value: &str| errors.push(FieldError::new(field, issue, value));

    let rfc = match given(input.rfc).map(normalize_rfc) {
        None => {
            fail(Field::Rfc, Issue::Missing, "");
            None
        }
        Some(raw) => match Rfc::parse(&raw) {
            Err(_) => {
                fail(Field::Rfc, Issue::RfcShape, &raw);
                None
            }
            Ok(r) if r.as_str() == RFC_PUBLICO_EN_GENERAL || r.as_str() == RFC_EXTRANJERO => {
                fail(Field::Rfc, Issue::RfcGeneric, &raw);
                None
            }
            Ok(r) => Some(r),
        },
    };
    let moral = rfc.as_ref().map(Rfc::is_persona_moral);

    let nombre = match given(input.nombre).map(normalize_nombre) {
        None => {
            fail(Field::Nombre, Issue::Missing, "");
            None
        }
        Some(n) if n.chars().count() > NOMBRE_MAX => {
            fail(Field::Nombre, Issue::NombreTooLong, "");
            None
        }
        Some(n) => Some(n),
    };

    let regimen = match given(input.regimen_fiscal) {
        None => {
            fail(Field::RegimenFiscal, Issue::Missing, "");
            None
        }
        Some(code) => match catalogs::regimen(code) {
            None => {
                fail(Field::RegimenFiscal, Issue::RegimenUnknown, code);
                None
            }
            Some(r) => match moral {
                Some(m) if !r.applies_to(m) => {
                    fail(
                        Field::RegimenFiscal,
                        Issue::RegimenNotFor { moral: m },
                        code,
                    );
                    None
                }
                _ => Some(r),
            },
        },
    };

    let cp = match given(input.codigo_postal) {
        None => {
            fail(Field::CodigoPostal, Issue::Missing, "");
            None
        }
        Some(cp) if cp.len() != 5 || !cp.bytes().all(|b| b.is_ascii_digit()) => {
            fail(Field::CodigoPostal, Issue::CpShape, cp);
            None
        }
        Some(cp) if !catalogs::is_codigo_postal(cp) => {
            fail(Field::CodigoPostal, Issue::CpUnknown, cp);
            None
        }
        Some(cp) => Some(cp.to_owned()),
    };

    let uso = match given(input.uso_cfdi).map(str::to_uppercase) {
        Some(code) => match uso_problem(&code, moral, regimen) {
            Some(issue) => {
                fail(Field::UsoCfdi, issue, &code);
                None
            }
            None => Some(code),
        },
        None => match default_uso {
            // The configured default when this receptor may use it; S01 (sin efectos
            // fiscales) is allowed for every régimen and person otherwise.
            Some(d) if uso_problem(d, moral, regimen).is_none() => Some(d.to_owned()),
            Some(_) => Some("S01".to_owned()),
            None => {
                fail(Field::UsoCfdi, Issue::Missing, "");
                None
            }
        },
    };

    match (rfc, nombre, regimen, cp, uso) {
        (Some(rfc), Some(nombre), Some(regimen), Some(cp), Some(uso)) if errors.is_empty() => {
            Ok(ReceptorData::Nominativo {
                rfc,
                nombre,
                domicilio_fiscal: cp,
                regimen_fiscal: regimen.code.clone(),
                uso_cfdi: uso,
            })
        }
        _ => Err(errors),
    }
}

/// Why `code` cannot be this receptor's UsoCFDI; what is not known yet (a bad RFC or régimen)
/// is not held against it.
fn uso_problem(code: &str, moral: Option<bool>, regimen: Option<&Entry>) -> Option<Issue> {
    let Some(uso) = catalogs::uso(code) else {
        return Some(Issue::UsoUnknown);
    };
    if NOT_FOR_INGRESO.contains(&code) {
        return Some(Issue::UsoNotForIngreso);
    }
    if let Some(m) = moral
        && !uso.applies_to(m)
    {
        return Some(Issue::UsoNotForPersona { moral: m });
    }
    if let Some(r) = regimen
        && catalogs::uso_allows(code, &r.code) == Some(false)
    {
        return Some(Issue::UsoNotForRegimen {
            regimen: r.code.clone(),
        });
    }
    None
}

/// The usos a sale's ingreso may carry (c_UsoCFDI without CP01 and CN01), for a dropdown.
pub fn usos_for_ingreso() -> impl Iterator<Item = &'static Entry> {
    catalogs::usos()
        .iter()
        .filter(|u| !NOT_FOR_INGRESO.contains(&u.code.as_str()))
}

/// A plausible email address (one `@`, a dotted domain, no spaces, at most 254 characters),
/// trimmed; the customer is the one who needs it right.
pub fn check_email(raw: Option<&str>) -> Result<String, FieldError> {
    let Some(email) = given(raw) else {
        return Err(FieldError::new(Field::Email, Issue::Missing, ""));
    };
    let ok = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.split('.').count() >= 2
                && domain.split('.').all(|p| !p.is_empty())
        });
    if ok {
        Ok(email.to_owned())
    } else {
        Err(FieldError::new(Field::Email, Issue::EmailShape, email))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(
        rfc: &'a str,
        regimen: &'a str,
        cp: &'a str,
        uso: Option<&'a str>,
    ) -> FiscalInput<'a> {
        FiscalInput {
            rfc: Some(rfc),
            nombre: Some("  Berenice   Ximo Quezada "),
            regimen_fiscal: Some(regimen),
            codigo_postal: Some(cp),
            uso_cfdi: uso,
        }
    }

    fn issues(r: Result<ReceptorData, Vec<FieldError>>) -> Vec<(Field, Issue)> {
        r.expect_err("should fail")
            .into_iter()
            .map(|e| (e.field, e.issue))
            .collect()
    }

    #[test]
    fn valid_data_becomes_a_nominative_receptor_normalized() {
        let r = check(&input("xiqb-891116-qe4", "612", "26015", Some("g03")), None);
        assert_eq!(
            r.expect("valid"),
            ReceptorData::Nominativo {
                rfc: Rfc::parse("XIQB891116QE4").expect("rfc"),
                nombre: "BERENICE XIMO QUEZADA".into(),
                domicilio_fiscal: "26015".into(),
                regimen_fiscal: "612".into(),
                uso_cfdi: "G03".into(),
            }
        );
    }

    #[test]
    fn the_regimen_must_fit_the_kind_of_person() {
        // 601 is for personas morales; XIQB… (13 characters) is a persona física.
        assert_eq!(
            issues(check(
                &input("XIQB891116QE4", "601", "26015", Some("G03")),
                None
            )),
            vec![(Field::RegimenFiscal, Issue::RegimenNotFor { moral: false })]
        );
        // 612 is for personas físicas; EKU… (12 characters) is a persona moral.
        assert_eq!(
            issues(check(
                &input("EKU9003173C9", "612", "42501", Some("G03")),
                None
            )),
            vec![(Field::RegimenFiscal, Issue::RegimenNotFor { moral: true })]
        );
        assert!(check(&input("EKU9003173C9", "626", "42501", Some("G03")), None).is_ok());
    }

    #[test]
    fn the_uso_must_fit_the_person_and_the_regimen() {
        // D01 (honorarios médicos) is for personas físicas only.
        assert_eq!(
            issues(check(
                &input("EKU9003173C9", "601", "42501", Some("D01")),
                None
            )),
            vec![(Field::UsoCfdi, Issue::UsoNotForPersona { moral: true })]
        );
        // 616 (sin obligaciones fiscales) allows S01 and G02, not G03.
        assert_eq!(
            issues(check(
                &input("XIQB891116QE4", "616", "26015", Some("G03")),
                None
            )),
            vec![(
                Field::UsoCfdi,
                Issue::UsoNotForRegimen {
                    regimen: "616".into()
                }
            )]
        );
        for (uso, issue) in [
            ("CP01", Issue::UsoNotForIngreso),
            ("Z99", Issue::UsoUnknown),
        ] {
            assert_eq!(
                issues(check(
                    &input("XIQB891116QE4", "612", "26015", Some(uso)),
                    None
                )),
                vec![(Field::UsoCfdi, issue)]
            );
        }
        assert!(usos_for_ingreso().all(|u| u.code != "CP01" && u.code != "CN01"));
        assert_eq!(usos_for_ingreso().count(), 22);
    }

    #[test]
    fn a_missing_uso_takes_the_default_when_allowed_else_s01_and_the_portal_asks() {
        let uso_of = |regimen, default| match check(
            &input("XIQB891116QE4", regimen, "26015", None),
            default,
        ) {
            Ok(ReceptorData::Nominativo { uso_cfdi, .. }) => uso_cfdi,
            other => panic!("{other:?}"),
        };
        assert_eq!(uso_of("612", Some("G03")), "G03");
        assert_eq!(uso_of("616", Some("G03")), "S01");
        assert_eq!(
            issues(check(&input("XIQB891116QE4", "612", "26015", None), None)),
            vec![(Field::UsoCfdi, Issue::Missing)]
        );
    }

    #[test]
    fn every_bad_field_is_reported_at_once_in_both_languages() {
        let bad = FiscalInput {
            rfc: Some("NOPE"),
            nombre: Some("   "),
            regimen_fiscal: Some("999"),
            codigo_postal: Some("17000"),
            uso_cfdi: Some("G03"),
        };
        let errs = check(&bad, None).expect_err("bad");
        let fields: Vec<Field> = errs.iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            vec![
                Field::Rfc,
                Field::Nombre,
                Field::RegimenFiscal,
                Field::CodigoPostal
            ]
        );
        assert!(errs[0].es().contains("no es válido") && errs[0].en().contains("not a valid RFC"));
        assert!(errs[1].es().contains("Constancia") && errs[1].en().contains("missing"));
        assert!(
            errs[3].es().contains("17000 no existe") && errs[3].en().contains("c_CodigoPostal")
        );
        let cp = check(&input("XIQB891116QE4", "612", "2601", Some("G03")), None);
        assert_eq!(issues(cp), vec![(Field::CodigoPostal, Issue::CpShape)]);
        let generic = check(&input("XAXX010101000", "616", "26015", Some("S01")), None);
        assert_eq!(issues(generic), vec![(Field::Rfc, Issue::RfcGeneric)]);
    }

    #[test]
    fn emails_are_checked_for_their_shape() {
        assert_eq!(
            check_email(Some(" ana@example.mx ")).as_deref(),
            Ok("ana@example.mx")
        );
        for bad in [
            "ana",
            "ana@",
            "@example.mx",
            "ana@mx",
            "a b@example.mx",
            "a@b@c.mx",
            "ana@x..mx",
        ] {
            let e = check_email(Some(bad)).expect_err(bad);
            assert_eq!(e.issue, Issue::EmailShape, "{bad}");
        }
        assert_eq!(check_email(None).map_err(|e| e.issue), Err(Issue::Missing));
    }
}
