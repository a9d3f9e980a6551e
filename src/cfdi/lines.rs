//! One concepto and the comprobante's taxes: a line's Base, Importe, traslados and retenciones
//! ([`build_line`]), the Impuestos node summed from the lines ([`summarize`]), and the move of one
//! line that makes a tax-included basket total what was charged ([`fit_total`]).

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::CfdiError;
use super::checks::{bad, check_amount, check_code, check_text, computed, rounded, sum};
use super::model::{Concepto, Impuestos, Retencion, Traslado};
use super::money::{MAX_DECIMALS, round};
use super::request::{LineData, TaxTreatment};

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
pub(super) fn fit_total(
    conceptos: &mut [Concepto],
    target: Decimal,
    dec: u32,
) -> Result<(), CfdiError> {
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

pub(super) fn build_line(l: &LineData, include_tax: bool, dec: u32) -> Result<Concepto, CfdiError> {
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
pub(super) fn summarize(conceptos: &[Concepto], dec: u32) -> Result<Option<Impuestos>, CfdiError> {
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
