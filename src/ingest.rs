//! From a verified payment to what one transaction writes: the payment row and, when the sale
//! can be invoiced, the frozen comprobante (Fecha, receptor, lines, FormaPago, stamp key).
//!
//! Nothing here touches the network or the clock: Fecha comes from the payment's time, so the
//! same payment always freezes the same document, whenever and however often it is delivered.

use chrono::{DateTime, NaiveDateTime, Timelike, Utc};
use chrono_tz::America::Mexico_City;
use rust_decimal::Decimal;
use serde::Serialize;

use crate::cfdi::{
    self, EmisorData, InvoiceRequest, LineData, ReceptorData, Rfc, TaxTreatment, TipoComprobante,
};
use crate::config::{FormaPagoSettings, InvoiceSettings, Settings};
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::store::{NewPayment, OutboxDraft};

/// Metadata keys (Stripe `metadata`, Mercado Pago `metadata`) read for the receptor. The first
/// present key of each list wins.
pub const META_RFC: &[&str] = &["rfc", "tax_id", "receptor_rfc"];
pub const META_NOMBRE: &[&str] = &["razon_social", "nombre", "receptor_nombre", "business_name"];
pub const META_REGIMEN: &[&str] = &["regimen_fiscal", "regimen", "receptor_regimen"];
pub const META_CP: &[&str] = &[
    "codigo_postal",
    "cp",
    "domicilio_fiscal",
    "postal_code",
    "receptor_cp",
];
pub const META_USO: &[&str] = &["uso_cfdi", "uso"];

/// How the customer paid, as far as the provider tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// Card with funding `credit`, `debit`, `prepaid` or unknown (`None`).
    Card(Option<String>),
    Oxxo,
    Spei,
    /// Mercado Pago `payment_type_id` and `payment_method_id`.
    MercadoPago {
        payment_type: String,
        payment_method: String,
    },
    Other(String),
}

impl Method {
    pub fn label(&self) -> String {
        match self {
            Method::Card(f) => format!("card:{}", f.as_deref().unwrap_or("unknown")),
            Method::Oxxo => "oxxo".into(),
            Method::Spei => "spei".into(),
            Method::MercadoPago {
                payment_type,
                payment_method,
            } => format!("{payment_type}:{payment_method}"),
            Method::Other(o) => o.clone(),
        }
    }

    /// c_FormaPago per the configured table (`docs/cfdi-rules.md` §5).
    pub fn forma_pago(&self, t: &FormaPagoSettings) -> String {
        match self {
            Method::Card(Some(f)) if f == "credit" => t.card_credit.clone(),
            Method::Card(Some(f)) if f == "debit" => t.card_debit.clone(),
            Method::Card(Some(f)) if f == "prepaid" => t.card_prepaid.clone(),
            Method::Card(_) => t.card_unknown.clone(),
            Method::Oxxo => t.oxxo.clone(),
            Method::Spei => t.spei.clone(),
            Method::MercadoPago { payment_type, .. } => t
                .mercadopago
                .get(payment_type)
                .cloned()
                .unwrap_or_else(|| t.default.clone()),
            Method::Other(_) => t.default.clone(),
        }
    }
}

/// Fiscal data the customer gave, unvalidated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CustomerData {
    pub rfc: Option<String>,
    pub nombre: Option<String>,
    pub regimen_fiscal: Option<String>,
    pub codigo_postal: Option<String>,
    pub uso_cfdi: Option<String>,
    pub email: Option<String>,
}

impl CustomerData {
    /// Fills what is still missing from a metadata map (string → string).
    pub fn fill_from_metadata(&mut self, meta: Option<&serde_json::Value>) {
        let Some(meta) = meta.and_then(serde_json::Value::as_object) else {
            return;
        };
        let get = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| meta.get(*k).and_then(serde_json::Value::as_str))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        fill(&mut self.rfc, get(META_RFC).map(|s| s.to_uppercase()));
        fill(&mut self.nombre, get(META_NOMBRE));
        fill(&mut self.regimen_fiscal, get(META_REGIMEN));
        fill(&mut self.codigo_postal, get(META_CP));
        fill(&mut self.uso_cfdi, get(META_USO).map(|s| s.to_uppercase()));
    }
}

/// Sets `slot` to `value` when `slot` is empty.
pub fn fill(slot: &mut Option<String>, value: Option<String>) {
    if slot.is_none() {
        *slot = value;
    }
}

/// A payment confirmed by a provider, in our terms.
#[derive(Debug, Clone)]
pub struct PaymentFacts {
    pub provider: &'static str,
    pub payment_id: String,
    pub event_id: String,
    /// Major units, exact.
    pub amount: Decimal,
    /// ISO 4217, uppercase.
    pub currency: String,
    pub method: Method,
    /// When the payment succeeded (the comprobante's Fecha, in Mexico City time).
    pub paid_at: DateTime<Utc>,
    pub livemode: bool,
    pub customer: CustomerData,
    pub description: Option<String>,
}

/// Turns payments into frozen invoice requests, per the settings.
#[derive(Debug, Clone)]
pub struct Ingestor {
    emisor: EmisorData,
    serie: String,
    invoice: InvoiceSettings,
    tax: TaxTreatment,
    forma_pago: FormaPagoSettings,
    sandbox_pac: bool,
}

/// `paid_at` as the issuer's local time (America/Mexico_City), to the second.
pub fn fecha_of(paid_at: DateTime<Utc>) -> NaiveDateTime {
    let local = paid_at.with_timezone(&Mexico_City).naive_local();
    local.with_nanosecond(0).unwrap_or(local)
}

impl Ingestor {
    pub fn new(s: &Settings) -> Result<Self, String> {
        let rfc = Rfc::parse(&s.emisor.rfc).map_err(|e| e.to_string())?;
        Ok(Self {
            emisor: EmisorData {
                rfc,
                nombre: s.emisor.nombre.clone(),
                regimen_fiscal: s.emisor.regimen_fiscal.clone(),
                lugar_expedicion: s.emisor.lugar_expedicion.clone(),
            },
            serie: s.emisor.serie.clone(),
            invoice: s.invoice.clone(),
            tax: s
                .tax_treatment()
                .ok_or_else(|| format!("unknown tax {:?}", s.invoice.tax))?,
            forma_pago: s.forma_pago.clone(),
            sandbox_pac: s.is_sandbox(),
        })
    }

    /// What to write for `facts`: the payment row, and the outbox draft when the sale can be
    /// invoiced now.
    pub fn plan(&self, facts: &PaymentFacts) -> (NewPayment, Option<OutboxDraft>) {
        let forma_pago = if self.invoice.metodo_pago == "PPD" {
            "99".to_owned()
        } else {
            facts.method.forma_pago(&self.forma_pago)
        };
        self.plan_with(facts, forma_pago, None, fecha_of(facts.paid_at))
    }

    /// A payment that needed attention, corrected by an operator: its stored facts with the
    /// `customer` data they typed and, for a currency this appliance does not invoice by
    /// itself, the exchange rate (TipoCambio) they gave; Fecha `fecha`. The draft to freeze,
    /// or why it still cannot be.
    pub fn replan(
        &self,
        p: &NewPayment,
        customer: CustomerData,
        tipo_cambio: Option<Decimal>,
        fecha: NaiveDateTime,
    ) -> Result<OutboxDraft, String> {
        let provider = match p.provider.as_str() {
            "stripe" => "stripe",
            "mercadopago" => "mercadopago",
            other => return Err(format!("unknown provider {other}")),
        };
        let amount: Decimal = p
            .amount
            .parse()
            .map_err(|_| format!("stored amount {:?} is not a decimal", p.amount))?;
        let facts = PaymentFacts {
            provider,
            payment_id: p.payment_id.clone(),
            event_id: p.event_id.clone(),
            amount,
            currency: p.currency.clone(),
            method: Method::Other(p.method.clone()),
            paid_at: p.paid_at,
            livemode: p.livemode,
            customer,
            description: None,
        };
        let forma_pago = p
            .forma_pago
            .clone()
            .unwrap_or_else(|| self.forma_pago.default.clone());
        let (payment, draft) = self.plan_with(&facts, forma_pago, tipo_cambio, fecha);
        match (payment.status.as_str(), draft) {
            ("invoice_pending", Some(d)) => Ok(d),
            ("awaiting_global", _) => Err(
                "without an RFC the sale goes into the factura global: give the customer's RFC"
                    .into(),
            ),
            (_, _) => Err(payment
                .reason
                .unwrap_or_else(|| "it still cannot be invoiced".into())),
        }
    }

    fn plan_with(
        &self,
        facts: &PaymentFacts,
        forma_pago: String,
        tipo_cambio: Option<Decimal>,
        fecha: NaiveDateTime,
    ) -> (NewPayment, Option<OutboxDraft>) {
        let mut payment = NewPayment {
            provider: facts.provider.to_owned(),
            payment_id: facts.payment_id.clone(),
            event_id: facts.event_id.clone(),
            amount: facts.amount.to_string(),
            currency: facts.currency.clone(),
            method: facts.method.label(),
            forma_pago: Some(forma_pago.clone()),
            customer_json: serde_json::to_string(&facts.customer).unwrap_or_else(|_| "{}".into()),
            paid_at: facts.paid_at,
            livemode: facts.livemode,
            status: "invoice_pending".into(),
            reason: None,
        };
        let attention = |mut p: NewPayment, reason: String| {
            p.status = "needs_attention".into();
            p.reason = Some(reason);
            (p, None)
        };
        // An operator's exchange rate makes any c_Moneda currency invoiceable.
        let rated =
            tipo_cambio.is_some() && cfdi::catalogs::currency_decimals(&facts.currency).is_some();
        if !rated && !self.invoice.currencies.iter().any(|c| c == &facts.currency) {
            let reason = format!(
                "currency {} is not invoiced (configured: {})",
                facts.currency,
                self.invoice.currencies.join(", ")
            );
            return attention(payment, reason);
        }
        if facts.amount <= Decimal::ZERO {
            return attention(payment, format!("amount {} is not positive", facts.amount));
        }
        let receptor = match self.receptor(&facts.customer) {
            Ok(Some(r)) => r,
            Ok(None) => {
                payment.status = "awaiting_global".into();
                payment.reason =
                    Some("no RFC from the customer: included in the factura global".into());
                return (payment, None);
            }
            Err(reason) => return attention(payment, reason),
        };
        let request = InvoiceRequest {
            tipo: TipoComprobante::Ingreso,
            serie: Some(self.serie.clone()),
            // Only for the build check below: the row is frozen without a folio, assigned
            // when a worker seals it (store/folios.rs).
            folio: Some("1".into()),
            fecha,
            moneda: facts.currency.clone(),
            tipo_cambio: tipo_cambio.filter(|_| facts.currency != "MXN"),
            forma_pago,
            metodo_pago: self.invoice.metodo_pago.clone(),
            condiciones_de_pago: None,
            exportacion: "01".into(),
            prices_include_tax: self.invoice.prices_include_tax,
            emisor: self.emisor.clone(),
            receptor,
            informacion_global: None,
            relacionados: Vec::new(),
            lines: vec![LineData {
                clave_prod_serv: self.invoice.clave_prod_serv.clone(),
                no_identificacion: None,
                cantidad: Decimal::ONE,
                clave_unidad: self.invoice.clave_unidad.clone(),
                unidad: Some(self.invoice.unidad.clone()),
                descripcion: clean_text(
                    facts.description.as_deref(),
                    &self.invoice.descripcion,
                    1000,
                ),
                unit_price: facts.amount,
                discount: None,
                tax: self.tax,
                retenciones: Vec::new(),
            }],
        };
        // Building (no signing) catches a request that could never be stamped, so it is
        // recorded with its reason instead of sitting in the outbox.
        if let Err(e) = cfdi::build(&request, "00000000000000000000") {
            return attention(payment, format!("the invoice cannot be built: {e}"));
        }
        let (state, code, message) = if !facts.livemode && !self.sandbox_pac {
            (
                DocumentState::NeedsAttention,
                Some("test_mode".to_owned()),
                Some("test-mode payment: never sent to a production PAC".to_owned()),
            )
        } else {
            (DocumentState::Pending, None, None)
        };
        let draft = OutboxDraft {
            kind: DocumentKind::Ingreso,
            stamp_key: StampKey::derive(
                facts.provider,
                &facts.payment_id,
                DocumentKind::Ingreso.as_str(),
            ),
            request,
            state,
            error_code: code,
            error_message: message,
            test_mode: !facts.livemode,
        };
        (payment, Some(draft))
    }

    /// The validated receptor; `Ok(None)` = público en general (factura global).
    fn receptor(&self, c: &CustomerData) -> Result<Option<ReceptorData>, String> {
        let Some(raw_rfc) = c.rfc.as_deref() else {
            return Ok(None);
        };
        let rfc = Rfc::parse(&raw_rfc.to_uppercase()).map_err(|e| format!("customer {e}"))?;
        if rfc.as_str() == cfdi::rfc::RFC_PUBLICO_EN_GENERAL {
            return Ok(None);
        }
        let mut missing = Vec::new();
        if c.nombre.is_none() {
            missing.push(format!("nombre (metadata `{}`)", META_NOMBRE[0]));
        }
        if c.regimen_fiscal.is_none() {
            missing.push(format!("régimen fiscal (metadata `{}`)", META_REGIMEN[0]));
        }
        if c.codigo_postal.is_none() {
            missing.push(format!("código postal (metadata `{}`)", META_CP[0]));
        }
        if !missing.is_empty() {
            return Err(format!(
                "RFC {rfc} given but {} missing",
                missing.join(", ")
            ));
        }
        let nombre = c.nombre.clone().unwrap_or_default().trim().to_uppercase();
        let regimen = c.regimen_fiscal.clone().unwrap_or_default();
        let cp = c.codigo_postal.clone().unwrap_or_default();
        if !cfdi::catalogs::is_regimen(&regimen) {
            return Err(format!(
                "régimen fiscal {regimen:?} of RFC {rfc} is not in c_RegimenFiscal"
            ));
        }
        if !(cp.len() == 5 && cp.chars().all(|ch| ch.is_ascii_digit())) {
            return Err(format!("código postal {cp:?} of RFC {rfc} is not 5 digits"));
        }
        let uso = match &c.uso_cfdi {
            Some(u) => match cfdi::catalogs::uso_allows(u, &regimen) {
                Some(true) => u.clone(),
                Some(false) => {
                    return Err(format!("UsoCFDI {u} is not allowed for régimen {regimen}"));
                }
                None => return Err(format!("UsoCFDI {u:?} is not in c_UsoCFDI")),
            },
            None if cfdi::catalogs::uso_allows(&self.invoice.uso_cfdi, &regimen) == Some(true) => {
                self.invoice.uso_cfdi.clone()
            }
            // S01 (sin efectos fiscales) is allowed for every régimen.
            None => "S01".into(),
        };
        Ok(Some(ReceptorData::Nominativo {
            rfc,
            nombre,
            domicilio_fiscal: cp,
            regimen_fiscal: regimen,
            uso_cfdi: uso,
        }))
    }
}

/// A description fit for the CFDI: `|` and control characters replaced, at most `max` chars.
fn clean_text(s: Option<&str>, default: &str, max: usize) -> String {
    let cleaned: String = s
        .unwrap_or("")
        .chars()
        .map(|c| if c == '|' || c.is_control() { ' ' } else { c })
        .take(max)
        .collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() {
        default.to_owned()
    } else {
        cleaned.to_owned()
    }
}

/// Stripe amounts are integer minor units: `11600` MXN → `116.00`.
pub fn from_minor_units(minor: i64, currency: &str) -> Option<Decimal> {
    let dp = cfdi::catalogs::currency_decimals(currency)?;
    Some(Decimal::new(minor, dp))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn facts(customer: CustomerData) -> PaymentFacts {
        PaymentFacts {
            provider: "stripe",
            payment_id: "pi_1".into(),
            event_id: "evt_1".into(),
            amount: Decimal::new(11600, 2),
            currency: "MXN".into(),
            method: Method::Card(Some("debit".into())),
            paid_at: Utc
                .with_ymd_and_hms(2026, 1, 15, 3, 30, 0)
                .single()
                .expect("time"),
            livemode: true,
            customer,
            description: Some("Plan | Pro".into()),
        }
    }

    fn full_customer() -> CustomerData {
        CustomerData {
            rfc: Some("XIQB891116QE4".into()),
            nombre: Some("Berenice Ximo Quezada".into()),
            regimen_fiscal: Some("612".into()),
            codigo_postal: Some("26015".into()),
            uso_cfdi: None,
            email: None,
        }
    }

    #[test]
    fn a_complete_payment_freezes_a_request_with_fecha_in_mexico_city() {
        let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
        let (p, d) = ing.plan(&facts(full_customer()));
        assert_eq!(p.status, "invoice_pending");
        let d = d.expect("draft");
        assert_eq!(
            d.request.fecha.to_string(),
            "2026-01-14 21:30:00",
            "UTC−6 in January"
        );
        assert_eq!(d.request.forma_pago, "28");
        assert_eq!(d.request.lines[0].descripcion, "Plan   Pro");
        assert_eq!(d.stamp_key, StampKey::derive("stripe", "pi_1", "ingreso"));
        assert_eq!(d.state, DocumentState::Pending);
        match &d.request.receptor {
            ReceptorData::Nominativo {
                uso_cfdi, nombre, ..
            } => {
                assert_eq!(uso_cfdi, "G03");
                assert_eq!(nombre, "BERENICE XIMO QUEZADA");
            }
            other => panic!("unexpected receptor {other:?}"),
        }
    }

    #[test]
    fn no_rfc_or_the_generic_rfc_waits_for_the_factura_global() {
        let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
        let (p, d) = ing.plan(&facts(CustomerData::default()));
        assert_eq!((p.status.as_str(), d.is_none()), ("awaiting_global", true));
        let generic = CustomerData {
            rfc: Some("XAXX010101000".into()),
            ..CustomerData::default()
        };
        assert_eq!(ing.plan(&facts(generic)).0.status, "awaiting_global");
    }

    #[test]
    fn incomplete_or_invalid_receptor_data_needs_attention_with_a_reason() {
        let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
        let partial = CustomerData {
            rfc: Some("XIQB891116QE4".into()),
            ..CustomerData::default()
        };
        let (p, d) = ing.plan(&facts(partial));
        assert!(d.is_none());
        assert_eq!(p.status, "needs_attention");
        assert!(
            p.reason.as_deref().unwrap_or("").contains("régimen fiscal"),
            "{:?}",
            p.reason
        );
        let bad = CustomerData {
            rfc: Some("NOPE".into()),
            ..full_customer()
        };
        assert!(
            ing.plan(&facts(bad))
                .0
                .reason
                .unwrap_or_default()
                .contains("not a valid RFC")
        );
    }

    #[test]
    fn unsupported_currency_needs_attention() {
        let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
        let f = PaymentFacts {
            currency: "USD".into(),
            ..facts(full_customer())
        };
        let (p, d) = ing.plan(&f);
        assert!(d.is_none());
        assert!(p.reason.unwrap_or_default().contains("currency USD"));
    }

    #[test]
    fn forma_pago_follows_the_configured_table() {
        let t = Settings::defaults().expect("settings").forma_pago;
        assert_eq!(Method::Card(Some("credit".into())).forma_pago(&t), "04");
        assert_eq!(Method::Card(None).forma_pago(&t), "04");
        assert_eq!(Method::Oxxo.forma_pago(&t), "01");
        assert_eq!(Method::Spei.forma_pago(&t), "03");
        let mp = |ty: &str| {
            Method::MercadoPago {
                payment_type: ty.into(),
                payment_method: "x".into(),
            }
            .forma_pago(&t)
        };
        assert_eq!(
            (
                mp("debit_card").as_str(),
                mp("account_money").as_str(),
                mp("new_thing").as_str()
            ),
            ("28", "06", "99")
        );
    }

    #[test]
    fn minor_units_use_the_currency_decimals() {
        assert_eq!(from_minor_units(11600, "MXN"), Some(Decimal::new(11600, 2)));
        assert_eq!(from_minor_units(1, "ZZZ"), None);
    }
}
