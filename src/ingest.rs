//! From a verified payment to what one transaction writes: the payment row and, when the sale
//! can be invoiced, the frozen comprobante (Fecha, receptor, lines, FormaPago, stamp key).
//!
//! Nothing here touches the network or the clock: Fecha comes from the payment's time, so the
//! same payment always freezes the same document, whenever and however often it is delivered.

use chrono::{DateTime, NaiveDateTime, Timelike, Utc};
use chrono_tz::America::Mexico_City;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::basket::{self, SaleLine};
use crate::cfdi::fiscal::{self, FiscalInput};
use crate::cfdi::{
    self, EmisorData, InvoiceRequest, LineData, ReceptorData, Rfc, TaxTreatment, TipoComprobante,
};
use crate::config::{FormaPagoSettings, InvoiceSettings, Settings};
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::store::{NewPayment, OutboxDraft, PaymentRow};

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
/// Metadata keys holding the merchant's order reference, which customers can look a sale up by
/// at the portal.
pub const META_ORDER: &[&str] = &["order_id", "order_number", "pedido"];

/// The merchant's order reference in a metadata map, when there is one.
pub fn order_reference(meta: Option<&serde_json::Value>) -> Option<String> {
    let meta = meta?.as_object()?;
    META_ORDER
        .iter()
        .find_map(|k| meta.get(*k)?.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

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

/// Fiscal data the customer gave, unvalidated (stored as the payment's `customer_json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
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

impl CustomerData {
    /// Fills what is still missing from Stripe Checkout `custom_fields` (dropdown, text or
    /// numeric) whose keys are ours. Stripe asks for alphanumeric keys, so `regimenfiscal` is
    /// read as `regimen_fiscal` (case, `_` and `-` are ignored).
    pub fn fill_from_custom_fields(&mut self, fields: Option<&serde_json::Value>) {
        let Some(fields) = fields.and_then(serde_json::Value::as_array) else {
            return;
        };
        for f in fields {
            let Some(key) = f.get("key").and_then(serde_json::Value::as_str) else {
                continue;
            };
            let value = ["dropdown", "text", "numeric"]
                .iter()
                .find_map(|t| f.get(*t)?.get("value")?.as_str())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned);
            let key: String = key
                .chars()
                .filter(|c| *c != '_' && *c != '-')
                .flat_map(char::to_lowercase)
                .collect();
            let slot = match key.as_str() {
                "rfc" => &mut self.rfc,
                "razonsocial" => &mut self.nombre,
                "regimenfiscal" => &mut self.regimen_fiscal,
                "codigopostal" => &mut self.codigo_postal,
                "usocfdi" => &mut self.uso_cfdi,
                _ => continue,
            };
            fill(slot, value);
        }
    }

    /// As the fiscal check reads it.
    pub fn fiscal_input(&self) -> FiscalInput<'_> {
        FiscalInput {
            rfc: self.rfc.as_deref(),
            nombre: self.nombre.as_deref(),
            regimen_fiscal: self.regimen_fiscal.as_deref(),
            codigo_postal: self.codigo_postal.as_deref(),
            uso_cfdi: self.uso_cfdi.as_deref(),
        }
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
    /// Other references the customer may hold (Checkout Session id, receipt number, order
    /// reference): the portal finds the sale by any of them.
    pub references: Vec<String>,
    /// What was sold, line by line (Checkout line items, invoice lines, Mercado Pago items);
    /// empty: one Concepto with the `[invoice]` keys.
    pub lines: Vec<SaleLine>,
    /// The exchange rate the payment provider itself reports (MXN per unit of `currency`,
    /// Stripe's balance transaction), when the sale is not in MXN.
    pub provider_rate: Option<Decimal>,
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
    /// Whether customers can complete their data at `/facturar` (`[portal] enabled`).
    portal: bool,
}

/// `paid_at` as the issuer's local time (America/Mexico_City), to the second.
pub fn fecha_of(paid_at: DateTime<Utc>) -> NaiveDateTime {
    let local = paid_at.with_timezone(&Mexico_City).naive_local();
    local.with_nanosecond(0).unwrap_or(local)
}

/// What of a sale the comprobante is made of, whether it comes from a webhook or a payment
/// already recorded (the portal).
struct Sale<'a> {
    provider: &'a str,
    payment_id: &'a str,
    amount: Decimal,
    currency: &'a str,
    forma_pago: String,
    description: Option<&'a str>,
    livemode: bool,
    /// The operator's exchange rate, for a currency not configured (the admin's fix form).
    tipo_cambio: Option<Decimal>,
    lines: &'a [SaleLine],
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
            portal: s.portal.enabled,
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
            // Recorded with the payment already; a re-plan writes no payment row.
            references: Vec::new(),
            lines: stored_lines(p)?,
            provider_rate: None,
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
            references: facts.references.clone(),
            lines_json: (!facts.lines.is_empty())
                .then(|| serde_json::to_string(&facts.lines).ok())
                .flatten(),
        };
        let attention = |mut p: NewPayment, reason: String| {
            p.status = "needs_attention".into();
            p.reason = Some(reason);
            (p, None)
        };
        if let Err(reason) = self.invoiceable(facts.amount, &facts.currency, tipo_cambio) {
            return attention(payment, reason);
        }
        let receptor = match self.receptor(&facts.customer) {
            Ok(Some(r)) => r,
            Ok(None) => {
                payment.status = "awaiting_global".into();
                payment.reason = Some(if self.portal {
                    "no RFC from the customer: included in the factura global, unless the customer self-invoices at /facturar first".into()
                } else {
                    "no RFC from the customer: included in the factura global".into()
                });
                return (payment, None);
            }
            Err(reason) => return attention(payment, reason),
        };
        let sale = Sale {
            provider: facts.provider,
            payment_id: &facts.payment_id,
            amount: facts.amount,
            currency: &facts.currency,
            forma_pago,
            description: facts.description.as_deref(),
            livemode: facts.livemode,
            tipo_cambio,
            lines: &facts.lines,
        };
        match self.draft(&sale, receptor, fecha) {
            Ok(d) => (payment, Some(d)),
            Err(reason) => attention(payment, reason),
        }
    }

    /// The ingreso of a recorded payment for the receptor the customer gave at the portal,
    /// frozen with `fecha` (now: the sale may be weeks old, and the SAT counts its 72 hours
    /// from Fecha). `Err` says why this sale cannot be invoiced this way.
    pub fn portal_draft(
        &self,
        p: &PaymentRow,
        receptor: ReceptorData,
        fecha: NaiveDateTime,
    ) -> Result<OutboxDraft, String> {
        let amount: Decimal = p.payment.amount.parse().map_err(|_| {
            format!(
                "the recorded amount {:?} is not a decimal",
                p.payment.amount
            )
        })?;
        self.invoiceable(amount, &p.payment.currency, None)?;
        let lines = stored_lines(&p.payment)?;
        let sale = Sale {
            provider: &p.payment.provider,
            payment_id: &p.payment.payment_id,
            amount,
            currency: &p.payment.currency,
            forma_pago: p
                .payment
                .forma_pago
                .clone()
                .unwrap_or_else(|| self.forma_pago.default.clone()),
            description: None,
            livemode: p.payment.livemode,
            tipo_cambio: None,
            lines: &lines,
        };
        self.draft(&sale, receptor, fecha)
    }

    /// Whether a sale in `currency` for `amount` can be invoiced at all; an operator's
    /// exchange rate (`tipo_cambio`) makes any c_Moneda currency invoiceable.
    pub fn invoiceable(
        &self,
        amount: Decimal,
        currency: &str,
        tipo_cambio: Option<Decimal>,
    ) -> Result<(), String> {
        let rated = tipo_cambio.is_some() && cfdi::catalogs::currency_decimals(currency).is_some();
        if !rated && !self.invoice.currencies.iter().any(|c| c == currency) {
            return Err(format!(
                "currency {currency} is not invoiced (configured: {})",
                self.invoice.currencies.join(", ")
            ));
        }
        if amount <= Decimal::ZERO {
            return Err(format!("amount {amount} is not positive"));
        }
        Ok(())
    }

    /// The frozen ingreso of `sale` for `receptor`, dated `fecha`.
    fn draft(
        &self,
        sale: &Sale<'_>,
        receptor: ReceptorData,
        fecha: NaiveDateTime,
    ) -> Result<OutboxDraft, String> {
        let (lines, prices_include_tax) = self.lines(sale)?;
        let request = InvoiceRequest {
            tipo: TipoComprobante::Ingreso,
            serie: Some(self.serie.clone()),
            // Only for the build check below: the row is frozen without a folio, assigned
            // when a worker seals it (store/folios.rs).
            folio: Some("1".into()),
            fecha,
            moneda: sale.currency.to_owned(),
            tipo_cambio: sale.tipo_cambio.filter(|_| sale.currency != "MXN"),
            forma_pago: sale.forma_pago.clone(),
            metodo_pago: self.invoice.metodo_pago.clone(),
            condiciones_de_pago: None,
            exportacion: "01".into(),
            prices_include_tax,
            emisor: self.emisor.clone(),
            receptor,
            informacion_global: None,
            relacionados: Vec::new(),
            lines,
        };
        // Building (no signing) catches a request that could never be stamped, so it is
        // recorded with its reason instead of sitting in the outbox.
        let built = cfdi::build(&request, "00000000000000000000")
            .map_err(|e| format!("the invoice cannot be built: {e}"))?;
        // Lines described by the provider must add up to what was charged, to the centavo.
        if !sale.lines.is_empty() && built.total != sale.amount {
            return Err(format!(
                "the sale's lines add up to {} {} but {} was charged: invoice it by hand",
                built.total, sale.currency, sale.amount
            ));
        }
        let (state, code, message) = if !sale.livemode && !self.sandbox_pac {
            (
                DocumentState::NeedsAttention,
                Some("test_mode".to_owned()),
                Some("test-mode payment: never sent to a production PAC".to_owned()),
            )
        } else {
            (DocumentState::Pending, None, None)
        };
        Ok(OutboxDraft {
            kind: DocumentKind::Ingreso,
            stamp_key: StampKey::derive(
                sale.provider,
                sale.payment_id,
                DocumentKind::Ingreso.as_str(),
            ),
            request,
            state,
            error_code: code,
            error_message: message,
            test_mode: !sale.livemode,
        })
    }

    /// The Conceptos of `sale` and whether their prices include the tax: its lines, or one
    /// line for the whole amount with the `[invoice]` keys.
    fn lines(&self, sale: &Sale<'_>) -> Result<(Vec<LineData>, bool), String> {
        if !sale.lines.is_empty() {
            return basket::conceptos(sale.lines, &self.invoice, self.tax);
        }
        let line = LineData {
            clave_prod_serv: self.invoice.clave_prod_serv.clone(),
            no_identificacion: None,
            cantidad: Decimal::ONE,
            clave_unidad: self.invoice.clave_unidad.clone(),
            unidad: Some(self.invoice.unidad.clone()),
            descripcion: basket::clean_text(
                sale.description.unwrap_or(""),
                &self.invoice.descripcion,
                1000,
            ),
            unit_price: sale.amount,
            discount: None,
            tax: self.tax,
            retenciones: Vec::new(),
        };
        Ok((vec![line], self.invoice.prices_include_tax))
    }

    /// The validated receptor; `Ok(None)` = público en general (factura global). `Err` names
    /// every field that is missing or wrong, and where the sale goes from here.
    fn receptor(&self, c: &CustomerData) -> Result<Option<ReceptorData>, String> {
        let Some(raw_rfc) = c.rfc.as_deref() else {
            return Ok(None);
        };
        if fiscal::normalize_rfc(raw_rfc) == cfdi::rfc::RFC_PUBLICO_EN_GENERAL {
            return Ok(None);
        }
        fiscal::check(&c.fiscal_input(), Some(&self.invoice.uso_cfdi))
            .map(Some)
            .map_err(|errors| {
                let problems: Vec<String> = errors.iter().map(fiscal::FieldError::en).collect();
                let next = if self.portal {
                    "the customer can self-invoice at /facturar (receipt reference and total paid)"
                } else {
                    "the self-invoicing portal is off ([portal] enabled = false): invoice it by hand"
                };
                format!(
                    "the customer's fiscal data cannot be used: {}; {next}",
                    problems.join("; ")
                )
            })
    }
}

/// The lines recorded with a payment (none for a sale of one Concepto).
fn stored_lines(p: &NewPayment) -> Result<Vec<SaleLine>, String> {
    p.lines_json.as_deref().map_or(Ok(Vec::new()), |j| {
        serde_json::from_str(j).map_err(|e| format!("the recorded lines are unreadable: {e}"))
    })
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
            references: Vec::new(),
            lines: Vec::new(),
            provider_rate: None,
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
    fn checkout_custom_fields_fill_the_customer_data_before_anything_else() {
        let fields = serde_json::json!([
            { "key": "regimenfiscal", "type": "dropdown",
              "dropdown": { "value": "612", "options": [{ "label": "612 - …", "value": "612" }] } },
            { "key": "uso_cfdi", "type": "dropdown", "dropdown": { "value": "G03", "options": [] } },
            { "key": "RazonSocial", "type": "text", "text": { "value": " Berenice Ximo Quezada " } },
            { "key": "codigo-postal", "type": "numeric", "numeric": { "value": "26015" } },
            { "key": "rfc", "type": "text", "text": { "value": null } },
            { "key": "engraving", "type": "text", "text": { "value": "ignored" } }
        ]);
        let mut c = CustomerData {
            uso_cfdi: Some("S01".into()),
            ..CustomerData::default()
        };
        c.fill_from_custom_fields(Some(&fields));
        assert_eq!(
            c,
            CustomerData {
                rfc: None,
                nombre: Some("Berenice Ximo Quezada".into()),
                regimen_fiscal: Some("612".into()),
                codigo_postal: Some("26015".into()),
                uso_cfdi: Some("S01".into()),
                email: None,
            },
            "an unanswered field stays empty, a value already there is kept"
        );
    }

    #[test]
    fn data_breaking_a_catalog_rule_sends_the_customer_to_the_portal() {
        let ing = Ingestor::new(&Settings::defaults().expect("settings")).expect("ingestor");
        // 601 is a persona moral's régimen; XIQB891116QE4 is a persona física.
        let wrong = CustomerData {
            regimen_fiscal: Some("601".into()),
            ..full_customer()
        };
        let (p, d) = ing.plan(&facts(wrong));
        assert!(d.is_none());
        let reason = p.reason.unwrap_or_default();
        assert_eq!(p.status, "needs_attention");
        assert!(
            reason.contains("régimen fiscal 601 does not apply to a persona física"),
            "{reason}"
        );
        assert!(reason.contains("self-invoice at /facturar"), "{reason}");
        let off = Settings::from_parts(Some("[portal]\nenabled = false\n"), &[]).expect("settings");
        let ing = Ingestor::new(&off).expect("ingestor");
        let unknown_cp = CustomerData {
            codigo_postal: Some("17000".into()),
            ..full_customer()
        };
        let reason = ing.plan(&facts(unknown_cp)).0.reason.unwrap_or_default();
        assert!(
            reason.contains("17000 is not in c_CodigoPostal"),
            "{reason}"
        );
        assert!(reason.contains("portal is off"), "{reason}");
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
