//! What the portal's pages show: the templates (`templates/portal/`), the sale as the
//! customer reads it, and the fiscal form with its dropdowns from the SAT catalogs and an
//! error next to each field.

use askama::Template;

use crate::cfdi::catalogs;
use crate::cfdi::fiscal::{self, Field, FieldError};
use crate::ingest::CustomerData;

/// The frame of every page: the merchant's name, no admin chrome.
pub struct Frame {
    pub title: &'static str,
    pub merchant: String,
}

#[derive(Template)]
#[template(path = "portal/lookup.html")]
pub struct LookupPage {
    pub p: Frame,
    pub reference: String,
    pub total: String,
    /// The one answer for every look-up that finds nothing, whatever the reason.
    pub error: Option<&'static str>,
    pub reference_error: Option<&'static str>,
    pub total_error: Option<&'static str>,
}

/// The sale as the customer reads it.
pub struct SaleView {
    pub reference: String,
    pub date: String,
    pub total: String,
}

/// Where the sale stands, in the customer's words.
pub struct Status {
    /// `ok`, `info`, `warn` or `bad` (the box's colour).
    pub class: &'static str,
    pub heading: String,
    pub text: String,
}

/// A stamped invoice the customer can take away.
pub struct Stamped {
    pub serie_folio: String,
    pub uuid: String,
    pub receptor: String,
    pub xml_url: String,
    pub pdf_url: String,
}

#[derive(Template)]
#[template(path = "portal/sale.html")]
pub struct SalePage {
    pub p: Frame,
    pub sale: SaleView,
    pub status: Option<Status>,
    pub stamped: Option<Stamped>,
    pub form: Option<FormView>,
    /// Reload every few seconds (the invoice is being stamped).
    pub refresh: bool,
    /// Where the form posts: this very link.
    pub action: String,
}

/// One `<option>`.
pub struct Opt {
    pub code: String,
    pub label: String,
    pub selected: bool,
}

/// A field's value as typed and its error, if any.
#[derive(Default)]
pub struct Input {
    pub value: String,
    pub error: Option<String>,
}

/// The fiscal form, filled with what the customer gave (at checkout, or in the last try).
pub struct FormView {
    pub rfc: Input,
    pub razon_social: Input,
    pub regimen_fiscal: Input,
    pub codigo_postal: Input,
    pub uso_cfdi: Input,
    pub email: Input,
    pub regimenes: Vec<Opt>,
    pub usos: Vec<Opt>,
}

/// The form's fields as posted (missing ones empty).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct FiscalForm {
    #[serde(default)]
    pub rfc: String,
    #[serde(default)]
    pub razon_social: String,
    #[serde(default)]
    pub regimen_fiscal: String,
    #[serde(default)]
    pub codigo_postal: String,
    #[serde(default)]
    pub uso_cfdi: String,
    #[serde(default)]
    pub email: String,
}

impl FiscalForm {
    /// What the customer gave at checkout, to start from.
    pub fn from_customer(c: &CustomerData) -> Self {
        let v = |s: &Option<String>| s.clone().unwrap_or_default();
        FiscalForm {
            rfc: v(&c.rfc),
            razon_social: v(&c.nombre),
            regimen_fiscal: v(&c.regimen_fiscal),
            codigo_postal: v(&c.codigo_postal),
            uso_cfdi: v(&c.uso_cfdi),
            email: v(&c.email),
        }
    }

    pub fn fiscal_input(&self) -> fiscal::FiscalInput<'_> {
        fiscal::FiscalInput {
            rfc: Some(&self.rfc),
            nombre: Some(&self.razon_social),
            regimen_fiscal: Some(&self.regimen_fiscal),
            codigo_postal: Some(&self.codigo_postal),
            uso_cfdi: Some(&self.uso_cfdi),
        }
    }
}

impl FormView {
    /// The form showing `f`, each of `errors` next to its field.
    pub fn new(f: &FiscalForm, errors: &[FieldError]) -> Self {
        let input = |field: Field, value: &str| Input {
            value: value.trim().to_owned(),
            error: errors.iter().find(|e| e.field == field).map(FieldError::es),
        };
        let options = |entries: &mut dyn Iterator<Item = &catalogs::Entry>, chosen: &str| {
            entries
                .map(|e| Opt {
                    code: e.code.clone(),
                    label: format!("{} - {}", e.code, e.text.trim_end_matches('.')),
                    selected: e.code == chosen.trim(),
                })
                .collect()
        };
        FormView {
            rfc: input(Field::Rfc, &f.rfc),
            razon_social: input(Field::Nombre, &f.razon_social),
            regimen_fiscal: input(Field::RegimenFiscal, &f.regimen_fiscal),
            codigo_postal: input(Field::CodigoPostal, &f.codigo_postal),
            uso_cfdi: input(Field::UsoCfdi, &f.uso_cfdi),
            email: input(Field::Email, &f.email),
            regimenes: options(&mut catalogs::regimenes().iter(), &f.regimen_fiscal),
            usos: options(&mut fiscal::usos_for_ingreso(), &f.uso_cfdi.to_uppercase()),
        }
    }
}
