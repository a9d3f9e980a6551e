//! The neutral invoice request: everything needed to build one comprobante, and nothing derived.
//!
//! This is what the outbox freezes. It is serialized as JSON in the outbox row, and building it
//! is deterministic, so the same request always yields byte-identical XML and (PKCS#1 v1.5 being
//! deterministic) the same Sello.

use chrono::NaiveDateTime;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::rfc::Rfc;

/// Ingreso (a sale), egreso (a credit note for a refund) or pago (a complemento de pago).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TipoComprobante {
    /// `I`: a sale.
    #[serde(rename = "I")]
    Ingreso,
    /// `E`: a credit note, related to the ingreso by TipoRelacion 01.
    #[serde(rename = "E")]
    Egreso,
    /// `P`: a payment of a PPD invoice (Pagos 2.0); its amounts are in [`InvoiceRequest::pago`].
    #[serde(rename = "P")]
    Pago,
}

impl TipoComprobante {
    pub fn code(self) -> &'static str {
        match self {
            Self::Ingreso => "I",
            Self::Egreso => "E",
            Self::Pago => "P",
        }
    }
}

/// The issuer, as configured by the merchant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmisorData {
    pub rfc: Rfc,
    pub nombre: String,
    pub regimen_fiscal: String,
    /// Postal code of the place of issue (`LugarExpedicion`).
    pub lugar_expedicion: String,
}

/// Who receives the invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReceptorData {
    /// A customer who gave their fiscal data.
    Nominativo {
        rfc: Rfc,
        nombre: String,
        /// Postal code of the receptor's fiscal address.
        domicilio_fiscal: String,
        regimen_fiscal: String,
        uso_cfdi: String,
    },
    /// "PUBLICO EN GENERAL" (XAXX010101000, 616, S01, the issuer's postal code): a factura global.
    PublicoEnGeneral,
}

impl ReceptorData {
    /// The same receptor with UsoCFDI `uso` (what a document issued after the invoice, an
    /// egreso or a pago, asks for); público en general keeps its own.
    pub fn with_uso(&self, uso: &str) -> ReceptorData {
        match self {
            Self::Nominativo {
                rfc,
                nombre,
                domicilio_fiscal,
                regimen_fiscal,
                ..
            } => Self::Nominativo {
                rfc: rfc.clone(),
                nombre: nombre.clone(),
                domicilio_fiscal: domicilio_fiscal.clone(),
                regimen_fiscal: regimen_fiscal.clone(),
                uso_cfdi: uso.to_owned(),
            },
            Self::PublicoEnGeneral => Self::PublicoEnGeneral,
        }
    }
}

/// `InformacionGlobal` of a factura global.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InformacionGlobalData {
    /// c_Periodicidad: 01 diario … 05 bimestral.
    pub periodicidad: String,
    /// c_Meses: 01–12, or 13–18 for bimonthly periods.
    pub meses: String,
    pub anio: i32,
}

/// A `CfdiRelacionados` group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelacionadosData {
    /// c_TipoRelacion: 01 nota de crédito, 04 sustitución, …
    pub tipo_relacion: String,
    pub uuids: Vec<String>,
}

/// How a line is taxed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaxTreatment {
    /// IVA 16 %.
    Iva16,
    /// IVA 8 % (región fronteriza).
    Iva8,
    /// IVA 0 %.
    Iva0,
    /// IVA exento: a Traslado with `TipoFactor="Exento"`, no rate, no amount.
    Exento,
    /// Not subject to tax (`ObjetoImp="01"`): no Impuestos at all.
    NoObjeto,
}

/// A withholding on a line (only between businesses; rare for online sales).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetencionData {
    /// c_Impuesto: `001` ISR or `002` IVA.
    pub impuesto: String,
    /// Rate as a decimal fraction, e.g. `0.106667` or `0.100000`.
    pub tasa: Decimal,
    /// The Importe when the caller fixes it (an egreso's share of what the original withheld),
    /// on the currency's decimals: taken when Anexo 20's tolerance accepts it against the Base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importe: Option<Decimal>,
}

/// One line of the sale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineData {
    pub clave_prod_serv: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_identificacion: Option<String>,
    pub cantidad: Decimal,
    pub clave_unidad: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unidad: Option<String>,
    pub descripcion: String,
    /// Price of one unit, in the comprobante's currency. Includes the traslado when
    /// `prices_include_tax` is set.
    pub unit_price: Decimal,
    /// Discount on the whole line (not per unit), on the same basis as `unit_price`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discount: Option<Decimal>,
    pub tax: TaxTreatment,
    /// The traslado's Importe as the provider's tax engine computed it for the line (Stripe
    /// Tax), on the currency's decimals: taken when Anexo 20's tolerance accepts it against the
    /// Base, so the CFDI carries the taxes that were charged and its Total adds up to the charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_amount: Option<Decimal>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retenciones: Vec<RetencionData>,
}

/// Everything needed to build one comprobante.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceRequest {
    pub tipo: TipoComprobante,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serie: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folio: Option<String>,
    /// Issue time in the issuer's local time (America/Mexico_City), to the second. Frozen once.
    pub fecha: NaiveDateTime,
    /// c_Moneda code, e.g. `MXN` or `USD`.
    pub moneda: String,
    /// Required for any currency other than MXN (and XXX).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tipo_cambio: Option<Decimal>,
    /// c_FormaPago, e.g. `04` credit card. `99` with `PPD`. Empty for a pago (tipo P has none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub forma_pago: String,
    /// c_MetodoPago: `PUE` or `PPD`. Empty for a pago.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub metodo_pago: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condiciones_de_pago: Option<String>,
    /// c_Exportacion; `01` (no aplica) for domestic sales.
    #[serde(default = "default_exportacion")]
    pub exportacion: String,
    /// Whether `unit_price` and `discount` include the traslado (IVA). When they do, the
    /// builder splits each amount into Base and Importe.
    #[serde(default)]
    pub prices_include_tax: bool,
    pub emisor: EmisorData,
    pub receptor: ReceptorData,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub informacion_global: Option<InformacionGlobalData>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relacionados: Vec<RelacionadosData>,
    /// Empty for a pago: its one Concepto is fixed by the SAT.
    #[serde(default)]
    pub lines: Vec<LineData>,
    /// The payment a tipo P documents (and only a tipo P has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pago: Option<super::pagos::PagoData>,
}

fn default_exportacion() -> String {
    "01".to_owned()
}
