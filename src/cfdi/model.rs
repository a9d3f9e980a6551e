//! The typed Comprobante 4.0, as the builder computes it and the XML writer prints it.
//!
//! Amounts are `Decimal`; how many decimals each one is printed with is the writer's job
//! (`money::fixed` for comprobante amounts, `money::line` for line amounts).

use rust_decimal::Decimal;

use super::tfd::Tfd;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comprobante {
    pub serie: Option<String>,
    pub folio: Option<String>,
    /// `YYYY-MM-DDThh:mm:ss`, issuer's local time.
    pub fecha: String,
    pub sello: Option<String>,
    pub forma_pago: Option<String>,
    pub no_certificado: String,
    pub certificado: Option<String>,
    pub condiciones_de_pago: Option<String>,
    pub subtotal: Decimal,
    pub descuento: Option<Decimal>,
    pub moneda: String,
    /// Decimals of `moneda` (c_Moneda).
    pub moneda_decimals: u32,
    pub tipo_cambio: Option<Decimal>,
    pub total: Decimal,
    pub tipo_de_comprobante: String,
    pub exportacion: String,
    pub metodo_pago: Option<String>,
    pub lugar_expedicion: String,
    pub informacion_global: Option<InformacionGlobal>,
    pub cfdi_relacionados: Vec<CfdiRelacionados>,
    pub emisor: Emisor,
    pub receptor: Receptor,
    pub conceptos: Vec<Concepto>,
    pub impuestos: Option<Impuestos>,
    /// The Pagos 2.0 complemento of a tipo P.
    pub pagos: Option<super::pagos::Pagos>,
    /// The complemento: the TFD once stamped.
    pub tfd: Option<Tfd>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformacionGlobal {
    pub periodicidad: String,
    pub meses: String,
    pub anio: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CfdiRelacionados {
    pub tipo_relacion: String,
    pub uuids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emisor {
    pub rfc: String,
    pub nombre: String,
    pub regimen_fiscal: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receptor {
    pub rfc: String,
    pub nombre: String,
    pub domicilio_fiscal_receptor: String,
    pub regimen_fiscal_receptor: String,
    pub uso_cfdi: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concepto {
    pub clave_prod_serv: String,
    pub no_identificacion: Option<String>,
    pub cantidad: Decimal,
    pub clave_unidad: String,
    pub unidad: Option<String>,
    pub descripcion: String,
    pub valor_unitario: Decimal,
    pub importe: Decimal,
    pub descuento: Option<Decimal>,
    /// c_ObjetoImp: `01` not subject to tax, `02` subject.
    pub objeto_imp: String,
    pub traslados: Vec<Traslado>,
    pub retenciones: Vec<Retencion>,
}

/// A transferred tax. `tasa` and `importe` are `None` for `TipoFactor="Exento"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traslado {
    pub base: Decimal,
    pub impuesto: String,
    pub tipo_factor: String,
    pub tasa: Option<Decimal>,
    pub importe: Option<Decimal>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retencion {
    pub base: Decimal,
    pub impuesto: String,
    pub tasa: Decimal,
    pub importe: Decimal,
}

/// Comprobante-level taxes: line taxes grouped and summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impuestos {
    pub total_retenidos: Option<Decimal>,
    pub total_trasladados: Option<Decimal>,
    /// (Impuesto, Importe), one per tax.
    pub retenciones: Vec<(String, Decimal)>,
    pub traslados: Vec<Traslado>,
}
