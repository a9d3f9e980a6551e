//! From a verified payment to what one transaction writes: the payment row and, when the sale
//! can be invoiced, the frozen comprobante (Fecha, receptor, lines, FormaPago, stamp key).
//!
//! Nothing here touches the network or the clock: Fecha comes from the payment's time, so the
//! same payment always freezes the same document, whenever and however often it is delivered.

use crate::domain::PaymentStatus;
use chrono::{DateTime, NaiveDateTime, Timelike, Utc};
use chrono_tz::America::Mexico_City;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::basket::{self, SaleLine};
use crate::cfdi::fiscal::{self, FiscalInput};
use crate::cfdi::{
    self, EmisorData, InvoiceRequest, LineData, ReceptorData, Rfc, TaxTreatment, TipoComprobante,
};
use crate::config::{FormaPagoSettings, InvoiceSettings, PacEnvironment, Settings};
use crate::domain::{DocumentKind, DocumentState, StampKey};
use crate::store::{ArcaDraft, NewPayment, OutboxDraft, PaymentRow};

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
    /// An Argentine buyer's document and IVA condition (ARCA, `crate::arca::buyer`); only on
    /// sales in ARS, and then only serialized.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identification: Option<Identification>,
}

/// What identifies an Argentine buyer, unvalidated: Mercado Pago's `payer.identification`
/// (`type` CUIT, CUIL, DNI, …, and `number`) and the IVA condition the merchant's checkout put
/// in the payment's metadata (`condicion_iva`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Identification {
    pub kind: Option<String>,
    pub number: Option<String>,
    pub condicion_iva: Option<String>,
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
    /// When the payment succeeded (the comprobante's Fecha, in local time at LugarExpedicion).
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
    /// The exchange rate the payment provider itself reports, MXN per unit of `currency`
    /// (Stripe's balance transaction, Mercado Pago's conversion data); the first source of
    /// TipoCambio ([`crate::fx`]).
    pub provider_rate: Option<rust_decimal::Decimal>,
}

/// The TipoCambio of a sale as [`crate::fx::Rates::tipo_cambio`] found it: `None` for MXN,
/// else the rate or why there is none.
pub type Rated = Option<Result<Decimal, String>>;

/// Turns payments into frozen invoice requests, per the settings.
#[derive(Debug, Clone)]
pub struct Ingestor {
    emisor: EmisorData,
    serie: String,
    invoice: InvoiceSettings,
    tax: TaxTreatment,
    forma_pago: FormaPagoSettings,
    sandbox_pac: bool,
    /// Whether `[pac]` stamps for real: payments of the other mode are held.
    pac_env: PacEnvironment,
    /// Whether customers can complete their data at `/facturar` (`[portal] enabled`).
    portal: bool,
    /// With `[arca] enabled`: sales in ARS go to ARCA instead of a CFDI, their voucher frozen
    /// by these settings.
    arca: Option<crate::config::ArcaSettings>,
}

/// `paid_at` as Mexico City time, to the second (SAT's calendar: periods of the factura
/// global). A Fecha is local time at the LugarExpedicion: [`Ingestor::fecha`].
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
    /// MXN per unit of `currency` (none for MXN).
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
            pac_env: s.pac_environment(),
            portal: s.portal.enabled,
            arca: s.arca.enabled.then(|| s.arca.clone()),
        })
    }

    /// `t` as local time at the emisor's LugarExpedicion, to the second: the Fecha of a
    /// document frozen for an event at `t`.
    pub fn fecha(&self, t: DateTime<Utc>) -> NaiveDateTime {
        crate::domain::time::to_local_at(t, &self.emisor.lugar_expedicion)
    }

    /// What to write for `facts` with only the provider's own exchange rate (no `[fx]`
    /// source): see [`Ingestor::plan_rated`].
    pub fn plan(&self, facts: &PaymentFacts) -> (NewPayment, Option<OutboxDraft>) {
        let rated = (facts.currency != "MXN").then(|| {
            facts
                .provider_rate
                .and_then(crate::fx::as_tipo_cambio)
                .ok_or_else(|| {
                    format!(
                        "no exchange rate for currency {}: the payment provider reported none",
                        facts.currency
                    )
                })
        });
        self.plan_rated(facts, rated)
    }

    /// What to write for `facts`, whose TipoCambio was looked up as `rated`: the payment
    /// row, and the outbox draft when the sale can be invoiced now.
    pub fn plan_rated(
        &self,
        facts: &PaymentFacts,
        rated: Rated,
    ) -> (NewPayment, Option<OutboxDraft>) {
        let forma_pago = if self.invoice.metodo_pago == "PPD" {
            "99".to_owned()
        } else {
            facts.method.forma_pago(&self.forma_pago)
        };
        self.plan_with(facts, forma_pago, rated, self.fecha(facts.paid_at))
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
        let rated = (facts.currency != "MXN").then(|| {
            tipo_cambio.ok_or_else(|| {
                format!(
                    "TipoCambio: give the exchange rate of {} to MXN",
                    facts.currency
                )
            })
        });
        let (payment, draft) = self.plan_with(&facts, forma_pago, rated, fecha);
        match (payment.status, draft) {
            (PaymentStatus::InvoicePending, Some(d)) => Ok(d),
            (PaymentStatus::AwaitingGlobal, _) => Err(
                "without an RFC the sale goes into the factura global: give the customer's RFC"
                    .into(),
            ),
            (_, _) => Err(payment
                .reason
                .unwrap_or_else(|| "it still cannot be invoiced".into())),
        }
    }

    /// Whether the sale becomes an ARCA voucher, not a CFDI (a sale in ARS, Mercado Pago's or
    /// Stripe's, with `[arca]` on: sales are routed by currency): it needs no TipoCambio.
    pub fn for_arca(&self, facts: &PaymentFacts) -> bool {
        self.arca.is_some() && facts.currency == "ARS"
    }

    fn plan_with(
        &self,
        facts: &PaymentFacts,
        forma_pago: String,
        rated: Rated,
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
            status: PaymentStatus::InvoicePending,
            reason: None,
            references: facts.references.clone(),
            lines_json: (!facts.lines.is_empty())
                .then(|| serde_json::to_string(&facts.lines).ok())
                .flatten(),
            tipo_cambio: None,
            arca: None,
        };
        let attention = |mut p: NewPayment, reason: String| {
            p.status = PaymentStatus::NeedsAttention;
            p.reason = Some(reason);
            (p, None)
        };
        if let Some(cfg) = self.arca.as_ref().filter(|_| self.for_arca(facts)) {
            // Argentina: the voucher is ARCA's, frozen here (its type and input) and issued by
            // the worker pool's ARCA lane (`arca::drain`), not a CFDI.
            let order =
                crate::arca::order::freeze(cfg, &payment.amount, &payment.customer_json, None);
            let draft = ArcaDraft {
                key: format!("{}:{}", facts.provider, facts.payment_id),
                order: order.map(|o| o.to_json()),
            };
            let (status, reason) = draft.payment_status();
            payment.status = status;
            payment.reason = Some(reason);
            payment.arca = Some(draft);
            return (payment, None);
        }
        let tipo_cambio = match self.invoiceable(facts.amount, &facts.currency, rated) {
            Ok(t) => t,
            Err(reason) => return attention(payment, reason),
        };
        payment.tipo_cambio = tipo_cambio.map(|t| t.to_string());
        let receptor = match self.receptor(&facts.customer) {
            Ok(Some(r)) => r,
            Ok(None) => {
                payment.status = PaymentStatus::AwaitingGlobal;
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
        let tipo_cambio = self.invoiceable(
            amount,
            &p.payment.currency,
            // The rate found at ingest, when there was one; never a new one.
            (p.payment.currency != "MXN").then(|| {
                p.payment
                    .tipo_cambio
                    .as_deref()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| {
                        format!(
                            "a sale in {} is invoiced from the admin (Fix), where its TipoCambio is given",
                            p.payment.currency
                        )
                    })
            }),
        )?;
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
            tipo_cambio,
            lines: &lines,
        };
        self.draft(&sale, receptor, fecha)
    }

    /// Whether a sale in `currency` for `amount`, with the TipoCambio found as `rated`, can be
    /// invoiced at all: the TipoCambio to write (none for MXN), or why not.
    pub fn invoiceable(
        &self,
        amount: Decimal,
        currency: &str,
        rated: Rated,
    ) -> Result<Option<Decimal>, String> {
        if !self.invoice.invoices(currency) {
            return Err(format!(
                "currency {currency} is not invoiced (configured: {})",
                self.invoice.currencies.join(", ")
            ));
        }
        if amount <= Decimal::ZERO {
            return Err(format!("amount {amount} is not positive"));
        }
        let decimals = cfdi::catalogs::currency_decimals(currency).unwrap_or(2);
        if amount.normalize().scale() > decimals {
            // Rounding it would make the CFDI's Total differ from what was charged.
            return Err(format!(
                "amount {amount} {currency} has more decimals than c_Moneda allows for {currency} ({decimals})"
            ));
        }
        match (currency, rated) {
            ("MXN", _) => Ok(None),
            (_, Some(Ok(rate))) => Ok(Some(rate)),
            (_, Some(Err(why))) => Err(why),
            (c, None) => Err(format!("no exchange rate for currency {c}")),
        }
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
            pago: None,
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
        let (state, code, message) = match crate::config::environment_mismatch(
            self.pac_env,
            self.sandbox_pac,
            sale.livemode,
        ) {
            Some((code, message)) => (
                DocumentState::NeedsAttention,
                Some(code.to_owned()),
                Some(message.to_owned()),
            ),
            None => (DocumentState::Pending, None, None),
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
            tax_amount: None,
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
mod tests;
