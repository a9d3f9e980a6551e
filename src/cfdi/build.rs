//! From an `InvoiceRequest` to a `Comprobante`: every amount computed here, once.
//!
//! Line amounts keep up to six decimals (Anexo 20 allows it, and it is what lets a
//! tax-included price split into Base + Importe that add back to the price). Comprobante
//! amounts are the line amounts summed at full precision and rounded once to the currency's
//! decimals, which is how the PAC recomputes them.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::model::{
    CfdiRelacionados, Comprobante, Concepto, Emisor, Impuestos, InformacionGlobal, Receptor,
    Retencion, Traslado,
};
use super::money::{self, MAX_DECIMALS, round};
use super::request::{
    EmisorData, InvoiceRequest, LineData, ReceptorData, TaxTreatment, TipoComprobante,
};
use super::rfc::RFC_PUBLICO_EN_GENERAL;
use super::{CfdiError, catalogs};

pub const IMPUESTO_ISR: &str = "001";
pub const IMPUESTO_IVA: &str = "002";

impl TaxTreatment {
    /// The IVA rate, or `None` for exento and no-objeto.
    pub fn rate(self) -> Option<Decimal> {
        match self {
            Self::Iva16 => Some(Decimal::new(16, 2)),
            Self::Iva8 => Some(Decimal::new(8, 2)),
            Self::Iva0 => Some(Decimal::ZERO),
            Self::Exento | Self::NoObjeto => None,
        }
    }
}

pub(super) fn bad(msg: impl Into<String>) -> CfdiError {
    CfdiError::Request(msg.into())
}

fn check_code(what: &str, value: &str, len: usize) -> Result<(), CfdiError> {
    if value.len() == len && value.chars().all(|c| c.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} `{value}` must be {len} characters (SAT catalog code)"
        )))
    }
}

pub(super) fn check_text(what: &str, value: &str, max: usize) -> Result<(), CfdiError> {
    let n = value.chars().count();
    if value.trim().is_empty() || n > max {
        return Err(bad(format!(
            "{what} must have 1 to {max} characters, it has {n}"
        )));
    }
    if value.contains('|') {
        return Err(bad(format!(
            "{what} must not contain `|`, the cadena original's separator"
        )));
    }
    if value
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(bad(format!(
            "{what} contains a control character, which XML cannot carry"
        )));
    }
    Ok(())
}

/// An amount given in the request: within the CFDI's integer digits and decimals.
fn check_amount(what: &str, d: Decimal) -> Result<(), CfdiError> {
    money::check_limits(d).map_err(|why| bad(format!("{what} {d} {why}")))
}

/// A computed amount: `None` (the `Decimal` operation overflowed) or a value beyond the CFDI's
/// integer digits is an error naming `what`. Every operation in the builder is checked, so no
/// request can make it panic.
fn computed(what: &str, d: Option<Decimal>) -> Result<Decimal, CfdiError> {
    match d {
        Some(d) if money::in_range(d) => Ok(d),
        _ => Err(bad(format!(
            "{what} would be out of range: at most {} integer digits",
            money::MAX_INTEGER_DIGITS
        ))),
    }
}

/// `d` rounded to `dp` decimals, checked: rounding may carry it past the limit.
fn rounded(what: &str, d: Decimal, dp: u32) -> Result<Decimal, CfdiError> {
    computed(what, Some(round(d, dp)))
}

/// The sum of `values` rounded to `dp` decimals, checked.
fn sum(
    what: &str,
    values: impl IntoIterator<Item = Decimal>,
    dp: u32,
) -> Result<Decimal, CfdiError> {
    let s = values
        .into_iter()
        .try_fold(Decimal::ZERO, |acc, v| computed(what, acc.checked_add(v)))?;
    rounded(what, s, dp)
}

/// Builds the comprobante for `req`, to be sealed with the certificate `no_certificado`.
pub fn build(req: &InvoiceRequest, no_certificado: &str) -> Result<Comprobante, CfdiError> {
    if req.tipo == TipoComprobante::Pago {
        return super::pagos::build_pago(req, no_certificado);
    }
    if req.pago.is_some() {
        return Err(bad("only a pago (tipo P) carries a `pago`"));
    }
    let dec = catalogs::currency_decimals(&req.moneda)
        .ok_or_else(|| bad(format!("currency `{}` is not in c_Moneda", req.moneda)))?;
    let tipo_cambio = match (req.moneda.as_str(), req.tipo_cambio) {
        ("MXN", None) => None,
        ("MXN", Some(tc)) if tc == Decimal::ONE => None,
        ("MXN", Some(tc)) => return Err(bad(format!("TipoCambio must be 1 for MXN, not {tc}"))),
        ("XXX", _) => return Err(bad("currency XXX (no currency) is not invoiced")),
        (m, None) => return Err(bad(format!("currency {m} needs a TipoCambio to MXN"))),
        (_, Some(tc)) if tc <= Decimal::ZERO => return Err(bad("TipoCambio must be positive")),
        (_, Some(tc)) => {
            check_amount("TipoCambio", tc)?;
            Some(tc.normalize())
        }
    };
    if !catalogs::is_forma_pago(&req.forma_pago) {
        return Err(bad(format!(
            "FormaPago `{}` is not in c_FormaPago",
            req.forma_pago
        )));
    }
    match req.metodo_pago.as_str() {
        "PUE" if req.forma_pago == "99" => {
            return Err(bad(
                "MetodoPago PUE needs the real FormaPago, not 99 (Por definir)",
            ));
        }
        "PPD" if req.forma_pago != "99" => {
            return Err(bad("MetodoPago PPD needs FormaPago 99 (Por definir)"));
        }
        "PUE" | "PPD" => {}
        other => return Err(bad(format!("MetodoPago `{other}` must be PUE or PPD"))),
    }
    let em = validate_emisor(req)?;
    let receptor = receptor(req)?;
    let informacion_global = match (&req.receptor, &req.informacion_global) {
        (ReceptorData::PublicoEnGeneral, Some(g)) => {
            if !["01", "02", "03", "04", "05"].contains(&g.periodicidad.as_str()) {
                return Err(bad(format!(
                    "Periodicidad `{}` must be 01-05",
                    g.periodicidad
                )));
            }
            let meses: u32 = g.meses.parse().unwrap_or(0);
            if g.meses.len() != 2 || !(1..=18).contains(&meses) {
                return Err(bad(format!("Meses `{}` must be 01-18", g.meses)));
            }
            // c_Meses 13–18 name two months: only a bimestral (05) period has them, and only
            // it has them.
            if (g.periodicidad == "05") != (13..=18).contains(&meses) {
                return Err(bad(format!(
                    "Meses `{}` does not fit Periodicidad `{}`: 13-18 (two months) go with 05 \
                     (bimestral) only, 01-12 with 01-04",
                    g.meses, g.periodicidad
                )));
            }
            if !(2021..=2100).contains(&g.anio) {
                return Err(bad(format!("Año {} is out of range", g.anio)));
            }
            Some(InformacionGlobal {
                periodicidad: g.periodicidad.clone(),
                meses: g.meses.clone(),
                anio: g.anio,
            })
        }
        (ReceptorData::PublicoEnGeneral, None) => {
            return Err(bad(
                "a factura global to PUBLICO EN GENERAL needs InformacionGlobal",
            ));
        }
        (ReceptorData::Nominativo { .. }, Some(_)) => {
            return Err(bad("InformacionGlobal is only for a factura global"));
        }
        (ReceptorData::Nominativo { .. }, None) => None,
    };
    let cfdi_relacionados = relacionados(req)?;
    if req.tipo == TipoComprobante::Egreso && cfdi_relacionados.is_empty() {
        return Err(bad(
            "an egreso must relate the ingreso it credits (TipoRelacion 01)",
        ));
    }
    if req.lines.is_empty() {
        return Err(bad("an invoice needs at least one line"));
    }

    let mut conceptos = req
        .lines
        .iter()
        .enumerate()
        .map(|(i, l)| build_line(l, req.prices_include_tax, dec).map_err(|e| prefix(i, e)))
        .collect::<Result<Vec<_>, _>>()?;
    if req.prices_include_tax && conceptos.iter().all(|c| c.retenciones.is_empty()) {
        let charged = req.lines.iter().try_fold(Decimal::ZERO, |acc, l| {
            l.cantidad
                .checked_mul(l.unit_price)
                .map(|c| round(c, MAX_DECIMALS))
                .and_then(|c| c.checked_sub(l.discount.unwrap_or_default()))
                .and_then(|net| acc.checked_add(net))
        });
        let target = rounded("Total", computed("Total", charged)?, dec)?;
        fit_total(&mut conceptos, target, dec)?;
    }

    let subtotal = sum("SubTotal", conceptos.iter().map(|c| c.importe), dec)?;
    let has_discount = conceptos.iter().any(|c| c.descuento.is_some());
    let descuento = if has_discount {
        Some(sum(
            "Descuento",
            conceptos.iter().filter_map(|c| c.descuento),
            dec,
        )?)
    } else {
        None
    };
    let impuestos = summarize(&conceptos, dec)?;
    let trasladados = impuestos.as_ref().and_then(|i| i.total_trasladados);
    let retenidos = impuestos.as_ref().and_then(|i| i.total_retenidos);
    let total = computed(
        "Total",
        subtotal
            .checked_sub(descuento.unwrap_or_default())
            .and_then(|t| t.checked_add(trasladados.unwrap_or_default()))
            .and_then(|t| t.checked_sub(retenidos.unwrap_or_default())),
    )?;
    if total < Decimal::ZERO {
        return Err(bad(format!("the total would be negative ({total})")));
    }

    Ok(Comprobante {
        serie: req.serie.clone(),
        folio: req.folio.clone(),
        fecha: req.fecha.format("%Y-%m-%dT%H:%M:%S").to_string(),
        sello: None,
        forma_pago: Some(req.forma_pago.clone()),
        no_certificado: no_certificado.to_owned(),
        certificado: None,
        condiciones_de_pago: req.condiciones_de_pago.clone(),
        subtotal,
        descuento,
        moneda: req.moneda.clone(),
        moneda_decimals: dec,
        tipo_cambio,
        total,
        tipo_de_comprobante: req.tipo.code().to_owned(),
        exportacion: req.exportacion.clone(),
        metodo_pago: Some(req.metodo_pago.clone()),
        lugar_expedicion: em.lugar_expedicion.clone(),
        informacion_global,
        cfdi_relacionados,
        emisor: Emisor {
            rfc: em.rfc.to_string(),
            nombre: em.nombre.clone(),
            regimen_fiscal: em.regimen_fiscal.clone(),
        },
        receptor,
        conceptos,
        impuestos,
        pagos: None,
        tfd: None,
    })
}

/// Checks the request's Exportacion, Serie, Folio and emisor, and returns the emisor.
pub(super) fn validate_emisor(req: &InvoiceRequest) -> Result<&EmisorData, CfdiError> {
    check_code("Exportacion", &req.exportacion, 2)?;
    if let Some(s) = &req.serie {
        check_text("Serie", s, 25)?;
    }
    if let Some(f) = &req.folio {
        check_text("Folio", f, 40)?;
    }
    let em = &req.emisor;
    check_text("Emisor nombre", &em.nombre, 300)?;
    if !catalogs::is_regimen(&em.regimen_fiscal) {
        return Err(bad(format!(
            "Emisor RegimenFiscal `{}` is not in c_RegimenFiscal",
            em.regimen_fiscal
        )));
    }
    check_postal_code("LugarExpedicion", &em.lugar_expedicion)?;
    Ok(em)
}

/// The checked Receptor of `req`.
pub(super) fn receptor(req: &InvoiceRequest) -> Result<Receptor, CfdiError> {
    let em = &req.emisor;
    Ok(match &req.receptor {
        ReceptorData::Nominativo {
            rfc,
            nombre,
            domicilio_fiscal,
            regimen_fiscal,
            uso_cfdi,
        } => {
            check_text("Receptor nombre", nombre, 300)?;
            check_postal_code("Receptor DomicilioFiscal", domicilio_fiscal)?;
            if !catalogs::is_regimen(regimen_fiscal) {
                return Err(bad(format!(
                    "Receptor régimen `{regimen_fiscal}` is not in c_RegimenFiscal"
                )));
            }
            match catalogs::uso_allows(uso_cfdi, regimen_fiscal) {
                None => return Err(bad(format!("UsoCFDI `{uso_cfdi}` is not in c_UsoCFDI"))),
                Some(false) => {
                    return Err(bad(format!(
                        "UsoCFDI {uso_cfdi} is not allowed for régimen {regimen_fiscal} (c_UsoCFDI)"
                    )));
                }
                Some(true) => {}
            }
            if rfc.as_str() == RFC_PUBLICO_EN_GENERAL && req.informacion_global.is_none() {
                return Err(bad(
                    "CFDI40146: XAXX010101000 is only for a factura global; use receptor kind publico_en_general",
                ));
            }
            Receptor {
                rfc: rfc.to_string(),
                nombre: nombre.clone(),
                domicilio_fiscal_receptor: domicilio_fiscal.clone(),
                regimen_fiscal_receptor: regimen_fiscal.clone(),
                uso_cfdi: uso_cfdi.clone(),
            }
        }
        ReceptorData::PublicoEnGeneral => Receptor {
            rfc: RFC_PUBLICO_EN_GENERAL.to_owned(),
            nombre: "PUBLICO EN GENERAL".to_owned(),
            domicilio_fiscal_receptor: em.lugar_expedicion.clone(),
            regimen_fiscal_receptor: "616".to_owned(),
            uso_cfdi: "S01".to_owned(),
        },
    })
}

/// The checked CfdiRelacionados of `req`.
pub(super) fn relacionados(req: &InvoiceRequest) -> Result<Vec<CfdiRelacionados>, CfdiError> {
    let mut cfdi_relacionados = Vec::new();
    for rel in &req.relacionados {
        check_code("TipoRelacion", &rel.tipo_relacion, 2)?;
        if rel.uuids.is_empty() {
            return Err(bad("CfdiRelacionados needs at least one UUID"));
        }
        for u in &rel.uuids {
            if !is_uuid(u) {
                return Err(bad(format!("related UUID `{u}` is not a UUID")));
            }
        }
        cfdi_relacionados.push(CfdiRelacionados {
            tipo_relacion: rel.tipo_relacion.clone(),
            uuids: rel.uuids.iter().map(|u| u.to_uppercase()).collect(),
        });
    }
    Ok(cfdi_relacionados)
}

/// The Total the summary of `conceptos` comes to: SubTotal, Descuento and each traslado group are
/// rounded on their own, as `build` and `summarize` do.
struct Sums {
    importes: Decimal,
    descuento: Decimal,
    /// Per traslado group (Impuesto, TipoFactor, Tasa): the unrounded sum of the line importes.
    taxes: BTreeMap<TrasladoKey, Decimal>,
}

impl Sums {
    fn of(conceptos: &[Concepto], dec: u32) -> Option<Sums> {
        let mut taxes = BTreeMap::new();
        let (mut importes, mut descuento) = (Decimal::ZERO, Decimal::ZERO);
        for c in conceptos {
            importes = importes.checked_add(c.importe)?;
            descuento = descuento.checked_add(c.descuento.unwrap_or_default())?;
            for t in c.traslados.iter().filter(|t| t.importe.is_some()) {
                let e: &mut Decimal = taxes.entry(traslado_key(t)).or_default();
                *e = e.checked_add(t.importe.unwrap_or_default())?;
            }
        }
        Some(Sums {
            importes,
            descuento: round(descuento, dec),
            taxes,
        })
    }

    /// The Total once line importes move by `d_importe` and group `key`'s taxes by `d_tax`.
    fn total(
        &self,
        dec: u32,
        d_importe: Decimal,
        key: Option<&TrasladoKey>,
        d_tax: Decimal,
    ) -> Decimal {
        let taxes: Decimal = self
            .taxes
            .iter()
            .map(|(k, v)| round(if Some(k) == key { *v + d_tax } else { *v }, dec))
            .sum();
        round(self.importes + d_importe, dec) - self.descuento + taxes
    }
}

fn traslado_key(t: &Traslado) -> TrasladoKey {
    (t.impuesto.clone(), t.tipo_factor.clone(), t.tasa)
}

/// Tax-included prices: every line adds back to what it charged at six decimals, but the
/// comprobante rounds SubTotal, Descuento and each rate's traslados separately, so a basket
/// with several rates can total a unit (centavo, yen) more or less than was charged. This moves
/// one line's Base (and with it its traslado, Importe and ValorUnitario) by the smallest amount,
/// in millionths, that brings the Total to `target`, a unit at a time; each line stays within
/// the SAT's rounding tolerances. Left as is when no such move exists: the caller then sees the
/// difference and holds the sale.
fn fit_total(conceptos: &mut [Concepto], target: Decimal, dec: u32) -> Result<(), CfdiError> {
    for _ in 0..5 {
        let Some(sums) = Sums::of(conceptos, dec) else {
            return Ok(());
        };
        let now = sums.total(dec, Decimal::ZERO, None, Decimal::ZERO);
        if now == target {
            return Ok(());
        }
        let gap = (now - target).abs();
        // Every line's moves that just cross a rounding boundary, smallest first: the first
        // that closes the gap, else the first that narrows it.
        let mut moves: Vec<(usize, Decimal)> = Vec::new();
        for (i, c) in conceptos.iter().enumerate() {
            if let [t] = c.traslados.as_slice()
                && let (Some(rate), Some(_)) = (t.tasa, t.importe)
            {
                let group = sums
                    .taxes
                    .get(&traslado_key(t))
                    .copied()
                    .unwrap_or_default();
                moves.extend(crossings(sums.importes, group, rate, dec).map(|d| (i, d)));
            }
        }
        moves.sort_by_key(|(i, d)| (d.abs(), *i));
        let mut narrowing = None;
        let mut found = None;
        for &(i, delta) in &moves {
            let t = &conceptos[i].traslados[0];
            let (Some(rate), Some(tax)) = (t.tasa, t.importe) else {
                continue;
            };
            let base = t.base + delta;
            if base <= Decimal::ZERO {
                continue;
            }
            let new_tax = round(base * rate, MAX_DECIMALS);
            let total = sums.total(dec, delta, Some(&traslado_key(t)), new_tax - tax);
            if total == target {
                found = Some((i, delta));
                break;
            }
            if narrowing.is_none() && (total - target).abs() < gap {
                narrowing = Some((i, delta));
            }
        }
        let Some((i, delta)) = found.or(narrowing) else {
            return Ok(());
        };
        let c = &mut conceptos[i];
        let t = &mut c.traslados[0];
        t.base = computed("Base", t.base.checked_add(delta))?;
        t.importe = Some(round(t.base * t.tasa.unwrap_or_default(), MAX_DECIMALS));
        c.importe = computed(
            "Importe",
            t.base.checked_add(c.descuento.unwrap_or_default()),
        )?;
        c.valor_unitario = computed(
            "ValorUnitario",
            c.importe
                .checked_div(c.cantidad)
                .map(|v| round(v, MAX_DECIMALS)),
        )?;
    }
    Ok(())
}

/// The moves of a line's Base (at `rate`) that take the SubTotal's unrounded sum `importes`, or
/// its traslado group's `taxes`, just across one of the two nearest rounding boundaries either
/// way, each a millionth or two to either side (the tax is rounded to six decimals).
fn crossings(
    importes: Decimal,
    taxes: Decimal,
    rate: Decimal,
    dec: u32,
) -> impl Iterator<Item = Decimal> {
    let unit = Decimal::new(1, dec.min(MAX_DECIMALS));
    let half = unit / Decimal::TWO;
    // The boundaries (odd multiples of half a unit) around `x`, as moves of `x`.
    let around = move |x: Decimal| {
        let m = ((x - half) / unit).floor();
        [-1i64, 0, 1, 2].map(move |n| (m + Decimal::from(n)) * unit + half - x)
    };
    let step = Decimal::new(1, MAX_DECIMALS);
    let mut moves: Vec<Decimal> = around(importes).to_vec();
    if rate > Decimal::ZERO {
        moves.extend(around(taxes).map(|d| d / rate));
    }
    moves.into_iter().flat_map(move |d| {
        let d = round(d, MAX_DECIMALS);
        [-2i64, -1, 0, 1, 2].map(move |k| d + step * Decimal::from(k))
    })
}

/// Whether `tax`, the amount a provider's tax engine charged on `base` at `rate`, is within
/// Anexo 20's tolerance as both are written (the currency's decimals at least).
fn charged_tax_fits(base: Decimal, rate: Decimal, tax: Decimal, dec: u32) -> bool {
    let written = |d: Decimal| round(d, MAX_DECIMALS).normalize().scale().max(dec);
    crate::cfdi::validate::tax_in_tolerance(base, written(base), rate, tax, written(tax))
}

fn prefix(i: usize, e: CfdiError) -> CfdiError {
    match e {
        CfdiError::Request(m) => CfdiError::Request(format!("line {}: {m}", i + 1)),
        other => other,
    }
}

fn check_postal_code(what: &str, cp: &str) -> Result<(), CfdiError> {
    if cp.len() == 5 && cp.chars().all(|c| c.is_ascii_digit()) {
        Ok(())
    } else {
        Err(bad(format!("{what} `{cp}` must be a 5-digit postal code")))
    }
}

pub(super) fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn build_line(l: &LineData, include_tax: bool, dec: u32) -> Result<Concepto, CfdiError> {
    check_code("ClaveProdServ", &l.clave_prod_serv, 8)?;
    if !l.clave_prod_serv.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad(format!(
            "ClaveProdServ `{}` must be 8 digits",
            l.clave_prod_serv
        )));
    }
    if !(2..=3).contains(&l.clave_unidad.len()) {
        return Err(bad(format!(
            "ClaveUnidad `{}` must be a c_ClaveUnidad code",
            l.clave_unidad
        )));
    }
    check_text("Descripcion", &l.descripcion, 1000)?;
    if let Some(u) = &l.unidad {
        check_text("Unidad", u, 20)?;
    }
    if let Some(n) = &l.no_identificacion {
        check_text("NoIdentificacion", n, 100)?;
    }
    if l.cantidad <= Decimal::ZERO {
        return Err(bad(format!(
            "Cantidad must be positive, it is {}",
            l.cantidad
        )));
    }
    check_amount("Cantidad", l.cantidad)?;
    if l.unit_price < Decimal::ZERO {
        return Err(bad(format!(
            "unit price must not be negative, it is {}",
            l.unit_price
        )));
    }
    check_amount("unit price", l.unit_price)?;
    if let Some(d) = l.discount {
        if d < Decimal::ZERO {
            return Err(bad("discount must not be negative"));
        }
        check_amount("discount", d)?;
    }
    let rate = l.tax.rate();
    if l.tax == TaxTreatment::NoObjeto && !l.retenciones.is_empty() {
        return Err(bad(
            "a line not subject to tax (ObjetoImp 01) cannot carry retenciones",
        ));
    }
    // Tax-included prices: the IVA is taken out of the line's net amount first, and the Base is
    // what remains, so Base + Importe of the traslado add back to exactly what was charged.
    let r6 = |d: Decimal| round(d, MAX_DECIMALS);
    let charged = computed(
        "Importe (Cantidad × unit price)",
        l.cantidad.checked_mul(l.unit_price).map(r6),
    )?;
    let (valor_unitario, importe, descuento, base, tax_importe) = match rate {
        Some(r) if include_tax => {
            let net = computed(
                "Importe",
                charged.checked_sub(l.discount.unwrap_or_default()),
            )?;
            if net < Decimal::ZERO {
                return Err(bad(format!(
                    "discount {} exceeds the line amount",
                    l.discount.unwrap_or_default()
                )));
            }
            let one_plus = Decimal::ONE + r;
            let tax = match l.tax_amount.filter(|t| *t >= Decimal::ZERO && *t <= net) {
                Some(t) if charged_tax_fits(net - t, r, t, dec) => t,
                _ => computed(
                    "traslado Importe",
                    net.checked_mul(r)
                        .and_then(|t| t.checked_div(one_plus))
                        .map(r6),
                )?,
            };
            let base = computed("Base", net.checked_sub(tax))?;
            // The Descuento in whole centavos (the currency's decimals): the summary's
            // SubTotal − Descuento is then exactly the rounded sum of the Bases, whose
            // sub-centavo part the traslados' sum complements, so the Total is what was
            // charged for any basket. A Descuento with six decimals rounds on its own, and a
            // basket could land a centavo off.
            let descuento = l
                .discount
                .map(|d| {
                    computed(
                        "Descuento",
                        d.checked_div(one_plus)
                            .map(|x| round(x, dec.min(MAX_DECIMALS))),
                    )
                })
                .transpose()?;
            let importe = computed("Importe", base.checked_add(descuento.unwrap_or_default()))?;
            (
                computed("ValorUnitario", importe.checked_div(l.cantidad).map(r6))?,
                importe,
                descuento,
                base,
                Some(tax),
            )
        }
        _ => {
            let importe = charged;
            let base = computed("Base", importe.checked_sub(l.discount.unwrap_or_default()))?;
            if base < Decimal::ZERO {
                return Err(bad(format!(
                    "discount {} exceeds the line amount {importe}",
                    l.discount.unwrap_or_default()
                )));
            }
            let tax = rate
                .map(|r| match l.tax_amount {
                    Some(t) if t >= Decimal::ZERO && charged_tax_fits(base, r, t, dec) => Ok(t),
                    _ => computed("traslado Importe", base.checked_mul(r).map(r6)),
                })
                .transpose()?;
            (l.unit_price, importe, l.discount, base, tax)
        }
    };
    let traslados = match (l.tax, rate) {
        (TaxTreatment::NoObjeto, _) => vec![],
        (_, None) => vec![Traslado {
            base,
            impuesto: IMPUESTO_IVA.to_owned(),
            tipo_factor: "Exento".to_owned(),
            tasa: None,
            importe: None,
        }],
        (_, Some(r)) => vec![Traslado {
            base,
            impuesto: IMPUESTO_IVA.to_owned(),
            tipo_factor: "Tasa".to_owned(),
            tasa: Some(r),
            importe: tax_importe,
        }],
    };
    let mut retenciones = Vec::new();
    for r in &l.retenciones {
        if r.impuesto != IMPUESTO_ISR && r.impuesto != IMPUESTO_IVA {
            return Err(bad(format!(
                "retención impuesto `{}` must be 001 (ISR) or 002 (IVA)",
                r.impuesto
            )));
        }
        if r.tasa <= Decimal::ZERO || r.tasa >= Decimal::ONE {
            return Err(bad(format!(
                "retención rate {} must be between 0 and 1",
                r.tasa
            )));
        }
        check_amount("retención rate", r.tasa)?;
        let exact = computed("retención Importe", base.checked_mul(r.tasa).map(r6))?;
        let fits = |w: &Decimal| *w >= Decimal::ZERO && charged_tax_fits(base, r.tasa, *w, dec);
        retenciones.push(Retencion {
            base,
            impuesto: r.impuesto.clone(),
            tasa: r.tasa,
            importe: r.importe.filter(fits).unwrap_or(exact),
        });
    }
    Ok(Concepto {
        clave_prod_serv: l.clave_prod_serv.clone(),
        no_identificacion: l.no_identificacion.clone(),
        cantidad: l.cantidad.normalize(),
        clave_unidad: l.clave_unidad.clone(),
        unidad: l.unidad.clone(),
        descripcion: l.descripcion.clone(),
        valor_unitario,
        importe,
        descuento,
        objeto_imp: if l.tax == TaxTreatment::NoObjeto {
            "01"
        } else {
            "02"
        }
        .to_owned(),
        traslados,
        retenciones,
    })
}

/// (Impuesto, TipoFactor, TasaOCuota).
type TrasladoKey = (String, String, Option<Decimal>);

/// Groups the line taxes into the comprobante-level Impuestos, summing at full precision and
/// rounding each group once.
fn summarize(conceptos: &[Concepto], dec: u32) -> Result<Option<Impuestos>, CfdiError> {
    let add = |what: &str, a: Decimal, b: Decimal| computed(what, a.checked_add(b));
    // Key: (Impuesto, TipoFactor, TasaOCuota), the grouping Anexo 20 prescribes.
    let mut tras: BTreeMap<TrasladoKey, (Decimal, Option<Decimal>)> = BTreeMap::new();
    let mut ret: BTreeMap<String, Decimal> = BTreeMap::new();
    for c in conceptos {
        for t in &c.traslados {
            let e = tras
                .entry((t.impuesto.clone(), t.tipo_factor.clone(), t.tasa))
                .or_insert((Decimal::ZERO, None));
            e.0 = add("traslado Base", e.0, t.base)?;
            if let Some(i) = t.importe {
                e.1 = Some(add("traslado Importe", e.1.unwrap_or_default(), i)?);
            }
        }
        for r in &c.retenciones {
            let e = ret.entry(r.impuesto.clone()).or_default();
            *e = add("retención Importe", *e, r.importe)?;
        }
    }
    if tras.is_empty() && ret.is_empty() {
        return Ok(None);
    }
    let mut traslados = Vec::with_capacity(tras.len());
    for ((impuesto, tipo_factor, tasa), (base, importe)) in tras {
        traslados.push(Traslado {
            base: rounded("traslado Base", base, dec)?,
            impuesto,
            tipo_factor,
            tasa,
            importe: importe
                .map(|i| rounded("traslado Importe", i, dec))
                .transpose()?,
        });
    }
    let retenciones = ret
        .into_iter()
        .map(|(k, v)| Ok((k, rounded("retención Importe", v, dec)?)))
        .collect::<Result<Vec<(String, Decimal)>, CfdiError>>()?;
    let any_importe = traslados.iter().any(|t| t.importe.is_some());
    let total_trasladados = if any_importe {
        let importes = traslados.iter().filter_map(|t| t.importe);
        Some(sum("TotalImpuestosTrasladados", importes, dec)?)
    } else {
        None
    };
    let total_retenidos = if retenciones.is_empty() {
        None
    } else {
        Some(sum(
            "TotalImpuestosRetenidos",
            retenciones.iter().map(|(_, v)| *v),
            dec,
        )?)
    };
    Ok(Some(Impuestos {
        total_trasladados,
        total_retenidos,
        retenciones,
        traslados,
    }))
}
