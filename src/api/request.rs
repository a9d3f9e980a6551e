//! The body of `POST /v1/invoices`: read (what is not JSON, not an invoice request, or carries
//! a bad key is a 400) and validated into the frozen comprobante (every problem a 422 naming
//! the field, nothing written).

use chrono::Utc;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::keys;
use crate::cfdi::{
    self, InvoiceRequest, LineData, ReceptorData, Rfc, TaxTreatment, TipoComprobante, money,
};
use crate::error::ApiError;

/// The body of `POST /v1/invoices`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateInvoice {
    #[serde(default)]
    pub idempotency_key: Option<serde_json::Value>,
    /// When given, must be the key's emisor.
    #[serde(default)]
    pub rfc_emisor: Option<String>,
    #[serde(default)]
    pub serie: Option<String>,
    #[serde(default)]
    pub folio: Option<String>,
    pub receptor: ReceptorInput,
    pub conceptos: Vec<ConceptoInput>,
    pub forma_pago: String,
    pub metodo_pago: String,
    #[serde(default)]
    pub moneda: Option<String>,
    #[serde(default)]
    pub tipo_cambio: Option<AmountInput>,
    #[serde(default)]
    pub condiciones_de_pago: Option<String>,
    /// Whether `valor_unitario` and `descuento` include the traslado (default false).
    #[serde(default)]
    pub precios_incluyen_impuestos: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceptorInput {
    pub rfc: String,
    pub nombre: String,
    pub regimen_fiscal: String,
    pub codigo_postal: String,
    pub uso_cfdi: String,
    /// Where the customer's email goes once stamped (`[email]`); optional.
    #[serde(default)]
    pub email: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConceptoInput {
    pub clave_prod_serv: String,
    #[serde(default)]
    pub no_identificacion: Option<String>,
    pub cantidad: AmountInput,
    pub clave_unidad: String,
    #[serde(default)]
    pub unidad: Option<String>,
    pub descripcion: String,
    pub valor_unitario: AmountInput,
    #[serde(default)]
    pub descuento: Option<AmountInput>,
    /// `iva16`, `iva8`, `iva0`, `exento` or `no_objeto`.
    pub impuesto: TaxTreatment,
}

/// An amount as the body gives it: a JSON string (as documented) or a number. Kept as text until
/// [`AmountInput::parse`], so that one beyond what a `Decimal` holds is still a 422 naming its
/// field rather than a malformed body.
#[derive(Debug, Clone)]
pub struct AmountInput(String);

impl<'de> Deserialize<'de> for AmountInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Self(s)),
            serde_json::Value::Number(n) => Ok(Self(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "an amount must be a decimal string like \"499.00\", not {other}"
            ))),
        }
    }
}

impl AmountInput {
    /// The amount, if it can be in a CFDI (not negative, at most 14 integer digits and 6
    /// decimals); otherwise a 422 naming `field`.
    pub fn parse(&self, field: &str) -> Result<Decimal, ApiError> {
        let text = self.0.trim();
        let invalid = |why: String| ApiError::invalid(field, format!("{:?} {why}", self.0));
        let d = text
            .parse::<Decimal>()
            .or_else(|_| Decimal::from_scientific(text))
            .map_err(|_| {
                invalid(format!(
                    "is not an amount: digits with an optional point, at most {} integer digits and {} decimals",
                    money::MAX_INTEGER_DIGITS,
                    money::MAX_DECIMALS
                ))
            })?;
        if d.is_sign_negative() && !d.is_zero() {
            return Err(invalid("must not be negative".into()));
        }
        money::check_limits(d).map_err(invalid)?;
        Ok(d)
    }
}

/// A `POST /v1/invoices` body, read.
pub struct CreateBody {
    /// The JSON, for the request hash.
    pub value: serde_json::Value,
    /// The caller's idempotency key (header or field).
    pub explicit: Option<keys::IdempotencyKey>,
    pub input: CreateInvoice,
}

/// Reads a `POST /v1/invoices` body with the `Idempotency-Key` header's value: what is not JSON,
/// not an invoice request, or carries a bad key is a 400. No database, no caller: the fuzz
/// target `api_invoice_body` runs it as the route does.
pub fn read_create_body(body: &[u8], header_key: Option<&str>) -> Result<CreateBody, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))?;
    let explicit = keys::explicit_key(header_key, value.get("idempotency_key"))?;
    let input: CreateInvoice = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::BadRequest(format!("the body is not an invoice request: {e}")))?;
    Ok(CreateBody {
        value,
        explicit,
        input,
    })
}

impl CreateInvoice {
    /// The serie asked for, else the configured one.
    pub fn serie(&self, settings: &crate::config::Settings) -> String {
        self.serie
            .clone()
            .unwrap_or_else(|| settings.emisor.serie.clone())
    }
}

/// The frozen comprobante of a request and its total; `rate` is the TipoCambio `[fx]` gave
/// when the request sent none. Every problem is a 422 `VALIDATION_ERROR` (naming the field
/// when it is one) and nothing is written.
pub fn freeze(
    settings: &crate::config::Settings,
    input: &CreateInvoice,
    serie: &str,
    rate: Option<Decimal>,
) -> Result<(InvoiceRequest, Decimal), ApiError> {
    let mut request = build_request(settings, input, serie)?;
    if request.tipo_cambio.is_none() && request.moneda != "MXN" {
        request.tipo_cambio = rate;
    }
    let total = cfdi::build(&request, "00000000000000000000")
        .map_err(|e| ApiError::Validation(format!("the invoice cannot be built: {e}")))?
        .total;
    Ok((request, total))
}

/// The frozen comprobante of a request; every problem is a 422 `VALIDATION_ERROR` and nothing
/// is written.
fn build_request(
    settings: &crate::config::Settings,
    input: &CreateInvoice,
    serie: &str,
) -> Result<InvoiceRequest, ApiError> {
    let invalid = |m: String| ApiError::Validation(m);
    let text_ok = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_alphanumeric())
    };
    if !text_ok(serie, 25) {
        return Err(invalid(format!(
            "serie {serie:?} must be 1 to 25 letters or digits"
        )));
    }
    if let Some(f) = &input.folio
        && !text_ok(f, 40)
    {
        return Err(invalid(format!(
            "folio {f:?} must be 1 to 40 letters or digits"
        )));
    }
    let r = &input.receptor;
    let rfc =
        Rfc::parse(&r.rfc.trim().to_uppercase()).map_err(|e| invalid(format!("receptor: {e}")))?;
    if rfc.as_str() == cfdi::rfc::RFC_PUBLICO_EN_GENERAL {
        return Err(invalid(
            "receptor: público en general (XAXX010101000) is invoiced in the factura global, not here"
                .into(),
        ));
    }
    if !cfdi::catalogs::is_regimen(&r.regimen_fiscal) {
        return Err(invalid(format!(
            "receptor: régimen fiscal {:?} is not in c_RegimenFiscal",
            r.regimen_fiscal
        )));
    }
    if !(r.codigo_postal.len() == 5 && r.codigo_postal.chars().all(|c| c.is_ascii_digit())) {
        return Err(invalid(format!(
            "receptor: código postal {:?} is not 5 digits",
            r.codigo_postal
        )));
    }
    match cfdi::catalogs::uso_allows(&r.uso_cfdi, &r.regimen_fiscal) {
        Some(true) => {}
        Some(false) => {
            return Err(invalid(format!(
                "receptor: UsoCFDI {} is not allowed for régimen {}",
                r.uso_cfdi, r.regimen_fiscal
            )));
        }
        None => {
            return Err(invalid(format!(
                "receptor: UsoCFDI {:?} is not in c_UsoCFDI",
                r.uso_cfdi
            )));
        }
    }
    if r.nombre.trim().is_empty() {
        return Err(invalid("receptor: nombre is required".into()));
    }
    if let Some(e) = r.email.as_deref().filter(|e| !e.trim().is_empty())
        && cfdi::fiscal::check_email(Some(e)).is_err()
    {
        return Err(invalid(format!(
            "receptor: email {e:?} is not an email address"
        )));
    }
    if !cfdi::catalogs::is_forma_pago(&input.forma_pago) {
        return Err(invalid(format!(
            "forma_pago {:?} is not in c_FormaPago",
            input.forma_pago
        )));
    }
    match input.metodo_pago.as_str() {
        "PUE" => {}
        "PPD" if input.forma_pago == "99" => {}
        "PPD" => return Err(invalid("metodo_pago PPD needs forma_pago 99".into())),
        other => return Err(invalid(format!("metodo_pago {other:?} must be PUE or PPD"))),
    }
    if input.conceptos.is_empty() {
        return Err(invalid("conceptos: at least one is required".into()));
    }
    let moneda = input.moneda.clone().unwrap_or_else(|| "MXN".into());
    if !settings.invoice.invoices(&moneda) {
        return Err(invalid(format!(
            "moneda {moneda} is not invoiced here (configured: {})",
            settings.invoice.currencies.join(", ")
        )));
    }
    let tipo_cambio = input
        .tipo_cambio
        .as_ref()
        .map(|t| t.parse("tipo_cambio"))
        .transpose()?;
    let mut lines = Vec::with_capacity(input.conceptos.len());
    for (i, c) in input.conceptos.iter().enumerate() {
        let at = |f: &str| format!("conceptos[{i}].{f}");
        let cantidad = c.cantidad.parse(&at("cantidad"))?;
        let unit_price = c.valor_unitario.parse(&at("valor_unitario"))?;
        let discount = c
            .descuento
            .as_ref()
            .map(|d| d.parse(&at("descuento")))
            .transpose()?;
        // Both factors within the limits, their product (the line's Importe) may not be.
        if !cantidad
            .checked_mul(unit_price)
            .is_some_and(money::in_range)
        {
            return Err(ApiError::invalid(
                &format!("conceptos[{i}]"),
                format!(
                    "cantidad × valor_unitario ({cantidad} × {unit_price}) is out of range: at most {} integer digits",
                    money::MAX_INTEGER_DIGITS
                ),
            ));
        }
        lines.push(LineData {
            clave_prod_serv: c.clave_prod_serv.clone(),
            no_identificacion: c.no_identificacion.clone(),
            cantidad,
            clave_unidad: c.clave_unidad.clone(),
            unidad: c.unidad.clone(),
            descripcion: c.descripcion.trim().to_owned(),
            unit_price,
            discount,
            tax: c.impuesto,
            tax_amount: None,
            retenciones: Vec::new(),
        });
    }
    let emisor = &settings.emisor;
    let request = InvoiceRequest {
        tipo: TipoComprobante::Ingreso,
        serie: Some(serie.to_owned()),
        folio: input.folio.clone(),
        fecha: crate::domain::time::to_local_at(Utc::now(), &settings.emisor.lugar_expedicion),
        moneda,
        tipo_cambio,
        forma_pago: input.forma_pago.clone(),
        metodo_pago: input.metodo_pago.clone(),
        condiciones_de_pago: input.condiciones_de_pago.clone(),
        exportacion: "01".into(),
        prices_include_tax: input.precios_incluyen_impuestos,
        emisor: cfdi::EmisorData {
            rfc: Rfc::parse(&emisor.rfc).map_err(|e| invalid(format!("[emisor] {e}")))?,
            nombre: emisor.nombre.clone(),
            regimen_fiscal: emisor.regimen_fiscal.clone(),
            lugar_expedicion: emisor.lugar_expedicion.clone(),
        },
        receptor: ReceptorData::Nominativo {
            rfc,
            nombre: r.nombre.trim().to_uppercase(),
            domicilio_fiscal: r.codigo_postal.clone(),
            regimen_fiscal: r.regimen_fiscal.clone(),
            uso_cfdi: r.uso_cfdi.clone(),
        },
        informacion_global: None,
        relacionados: Vec::new(),
        lines,
        pago: None,
    };
    Ok(request)
}

#[cfg(test)]
mod tests {
    #[test]
    fn amounts_are_read_as_sent_and_kept_within_the_cfdi_limits() {
        let parse = |json: &str| {
            serde_json::from_str::<crate::api::request::AmountInput>(json)
                .expect("an amount")
                .parse("x")
                .map(|d| d.to_string())
                .map_err(|e| e.to_string())
        };
        assert_eq!(parse(r#""499.00""#).as_deref(), Ok("499.00"));
        assert_eq!(parse(r#"" 499 ""#).as_deref(), Ok("499"));
        assert_eq!(parse("12.5").as_deref(), Ok("12.5"));
        assert_eq!(parse(r#""1e3""#).as_deref(), Ok("1000"));
        assert_eq!(
            parse(r#""99999999999999.999999""#).as_deref(),
            Ok("99999999999999.999999")
        );
        for bad in [
            r#""100000000000000""#,
            r#""1.0000001""#,
            r#""-1""#,
            r#""""#,
            r#""NaN""#,
            r#""1e-7""#,
            r#""1e99999999999""#,
            r#""1e-99999999999""#,
            "1e300",
            r#""79228162514264337593543950336""#,
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.starts_with("x: "), "{bad}: {e}");
        }
        assert!(serde_json::from_str::<crate::api::request::AmountInput>("true").is_err());
    }
}
