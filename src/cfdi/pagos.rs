//! The complemento de pago (CFDI tipo P, Pagos 2.0): one payment of one PPD document.
//!
//! [`build_pago`] turns a tipo P request into its comprobante (SubTotal 0, Total 0, Moneda XXX,
//! the fixed Concepto 84111506 / ACT, UsoCFDI CP01, no FormaPago nor MetodoPago) and computes
//! the `DoctoRelacionado` (saldo before and after, the taxes of the payment in proportion to the
//! document's), the `ImpuestosP` and the `Totales` in MXN. [`super::validate_pagos::check`] is
//! what a PAC verifies of those amounts, on the parsed XML.
//!
//! The taxes of a parcialidad telescope: its BaseDR is the document's Base × saldo before ÷ Total
//! minus the same at the saldo after, each rounded to six decimals, so the parcialidades of a
//! document add up exactly to its Base whatever their number.

use chrono::NaiveDateTime;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

use super::build::{receptor, validate_emisor};
use super::checks::{bad, check_text, is_uuid};
use super::model::{Comprobante, Concepto, Emisor, Traslado};
use super::money::{self, MAX_DECIMALS, round};
use super::request::InvoiceRequest;
use super::{CfdiError, catalogs};

/// ClaveProdServ and ClaveUnidad of the one Concepto of every tipo P.
pub const CLAVE_PROD_SERV_PAGO: &str = "84111506";
pub const CLAVE_UNIDAD_PAGO: &str = "ACT";
/// The UsoCFDI of every tipo P.
pub const USO_CFDI_PAGOS: &str = "CP01";

/// One payment of one document, as the request freezes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PagoData {
    /// When the money arrived (`FechaPago`), issuer's local time.
    pub fecha_pago: NaiveDateTime,
    /// c_FormaPago of the payment (`FormaDePagoP`); never 99.
    pub forma_pago: String,
    /// c_Moneda of the payment (`MonedaP`).
    pub moneda: String,
    /// Pesos per unit of `moneda` (`TipoCambioP`); none (written `1`) for MXN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tipo_cambio: Option<Decimal>,
    /// Amount received, in `moneda` (`Monto`).
    pub monto: Decimal,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_operacion: Option<String>,
    pub documento: DoctoData,
}

/// The PPD document a payment settles (part of), with what it owed before this payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctoData {
    /// The document's UUID (`IdDocumento`).
    pub uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serie: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folio: Option<String>,
    /// The document's currency (`MonedaDR`).
    pub moneda: String,
    /// Units of the document's currency per unit of the payment's (`EquivalenciaDR`); needed
    /// only when the currencies differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equivalencia: Option<Decimal>,
    /// 1 for the first payment of the document, then 2, 3…
    pub num_parcialidad: u32,
    /// What the document still owed before this payment (`ImpSaldoAnt`).
    pub saldo_anterior: Decimal,
    /// The document's Total.
    pub total: Decimal,
    /// The document's comprobante-level traslados (its `Impuestos/Traslados`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traslados: Vec<DocTraslado>,
}

/// One traslado of the paid document, summed over its lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocTraslado {
    pub impuesto: String,
    pub tipo_factor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasa: Option<Decimal>,
    pub base: Decimal,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub importe: Option<Decimal>,
}

impl DocTraslado {
    /// The traslados of a built document, to carry into its payments.
    pub fn of(c: &Comprobante) -> Vec<DocTraslado> {
        c.impuestos
            .iter()
            .flat_map(|i| &i.traslados)
            .map(|t| DocTraslado {
                impuesto: t.impuesto.clone(),
                tipo_factor: t.tipo_factor.clone(),
                tasa: t.tasa,
                base: t.base,
                importe: t.importe,
            })
            .collect()
    }
}

/// The computed complemento.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pagos {
    pub totales: Totales,
    pub pago: Pago,
}

/// `pago20:Totales`, in MXN with two decimals.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Totales {
    pub base_iva16: Option<Decimal>,
    pub impuesto_iva16: Option<Decimal>,
    pub base_iva8: Option<Decimal>,
    pub impuesto_iva8: Option<Decimal>,
    pub base_iva0: Option<Decimal>,
    pub impuesto_iva0: Option<Decimal>,
    pub base_exento: Option<Decimal>,
    pub monto_total_pagos: Decimal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pago {
    /// `YYYY-MM-DDThh:mm:ss`.
    pub fecha_pago: String,
    pub forma_pago: String,
    pub moneda: String,
    pub moneda_decimals: u32,
    pub tipo_cambio: Decimal,
    pub monto: Decimal,
    pub num_operacion: Option<String>,
    pub docto: DoctoRelacionado,
    pub traslados: Vec<Traslado>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctoRelacionado {
    pub id_documento: String,
    pub serie: Option<String>,
    pub folio: Option<String>,
    pub moneda: String,
    pub moneda_decimals: u32,
    pub equivalencia: Decimal,
    pub num_parcialidad: u32,
    pub saldo_anterior: Decimal,
    pub pagado: Decimal,
    pub saldo_insoluto: Decimal,
    /// `01` when the document carries no taxes, `02` otherwise.
    pub objeto_imp: String,
    pub traslados: Vec<Traslado>,
}

fn positive(what: &str, d: Decimal, dec: u32) -> Result<(), CfdiError> {
    money::check_limits(d).map_err(|why| bad(format!("{what} {d} {why}")))?;
    if d <= Decimal::ZERO {
        return Err(bad(format!("{what} must be positive, it is {d}")));
    }
    if d.normalize().scale() > dec {
        return Err(bad(format!("{what} {d} has more than {dec} decimals")));
    }
    Ok(())
}

fn currency(what: &str, m: &str) -> Result<u32, CfdiError> {
    match catalogs::currency_decimals(m) {
        Some(_) if m == "XXX" => Err(bad(format!(
            "{what} cannot be XXX: a payment has a currency"
        ))),
        Some(d) => Ok(d),
        None => Err(bad(format!("{what} `{m}` is not in c_Moneda"))),
    }
}

/// Computes the complemento of `p`.
pub fn build_pagos(p: &PagoData) -> Result<Pagos, CfdiError> {
    if !catalogs::is_forma_pago(&p.forma_pago) || p.forma_pago == "99" {
        return Err(bad(format!(
            "FormaDePagoP `{}` must be a c_FormaPago code other than 99",
            p.forma_pago
        )));
    }
    let dec_p = currency("MonedaP", &p.moneda)?;
    let tipo_cambio = match (p.moneda.as_str(), p.tipo_cambio) {
        ("MXN", None) => Decimal::ONE,
        ("MXN", Some(tc)) if tc == Decimal::ONE => Decimal::ONE,
        ("MXN", Some(tc)) => return Err(bad(format!("TipoCambioP must be 1 for MXN, not {tc}"))),
        (m, None) => return Err(bad(format!("MonedaP {m} needs a TipoCambioP to MXN"))),
        (_, Some(tc)) => {
            positive("TipoCambioP", tc, MAX_DECIMALS)?;
            tc.normalize()
        }
    };
    positive("Monto", p.monto, dec_p)?;
    if let Some(n) = &p.num_operacion {
        check_text("NumOperacion", n, 100)?;
    }
    let d = &p.documento;
    if !is_uuid(&d.uuid) {
        return Err(bad(format!("IdDocumento `{}` is not a UUID", d.uuid)));
    }
    if let Some(s) = &d.serie {
        check_text("Serie", s, 25)?;
    }
    if let Some(f) = &d.folio {
        check_text("Folio", f, 40)?;
    }
    let dec_dr = currency("MonedaDR", &d.moneda)?;
    let equivalencia = match (d.moneda == p.moneda, d.equivalencia) {
        (true, None) => Decimal::ONE,
        (true, Some(e)) if e == Decimal::ONE => Decimal::ONE,
        (true, Some(e)) => {
            return Err(bad(format!(
                "EquivalenciaDR must be 1 when MonedaDR is MonedaP, not {e}"
            )));
        }
        (false, None) => {
            return Err(bad(format!(
                "a payment in {} of a document in {} needs EquivalenciaDR",
                p.moneda, d.moneda
            )));
        }
        (false, Some(e)) => {
            positive("EquivalenciaDR", e, MAX_DECIMALS)?;
            e.normalize()
        }
    };
    if !(1..=999).contains(&d.num_parcialidad) {
        return Err(bad(format!(
            "NumParcialidad {} must be 1 to 999",
            d.num_parcialidad
        )));
    }
    positive("document Total", d.total, dec_dr)?;
    positive("ImpSaldoAnt", d.saldo_anterior, dec_dr)?;
    if d.saldo_anterior > d.total {
        return Err(bad(format!(
            "ImpSaldoAnt {} exceeds the document's Total {}",
            d.saldo_anterior, d.total
        )));
    }
    // In the document's currency; truncated so that ImpPagado ÷ EquivalenciaDR never exceeds
    // the Monto received.
    let pagado = (p.monto * equivalencia).round_dp_with_strategy(dec_dr, RoundingStrategy::ToZero);
    if pagado <= Decimal::ZERO {
        return Err(bad(
            "the payment is worth nothing in the document's currency",
        ));
    }
    if pagado > d.saldo_anterior {
        return Err(bad(format!(
            "overpayment: {pagado} {} paid but the saldo insoluto is {} (ImpPagado must not exceed ImpSaldoAnt)",
            d.moneda, d.saldo_anterior
        )));
    }
    let insoluto = d.saldo_anterior - pagado;
    let share = |x: Decimal| {
        round(x * d.saldo_anterior / d.total, MAX_DECIMALS)
            - round(x * insoluto / d.total, MAX_DECIMALS)
    };
    let mut traslados = Vec::new();
    for t in &d.traslados {
        if t.base < Decimal::ZERO || t.importe.is_some_and(|i| i < Decimal::ZERO) {
            return Err(bad("a document traslado is negative"));
        }
        let base = share(t.base);
        traslados.push(Traslado {
            base,
            impuesto: t.impuesto.clone(),
            tipo_factor: t.tipo_factor.clone(),
            tasa: t.tasa,
            importe: t
                .tasa
                .filter(|_| t.importe.is_some())
                .map(|r| round(base * r, MAX_DECIMALS)),
        });
    }
    // ImpuestosP: the document's traslados in the payment's currency (one document per pago).
    let traslados_p: Vec<Traslado> = traslados
        .iter()
        .map(|t| Traslado {
            base: round(t.base / equivalencia, MAX_DECIMALS),
            importe: t.importe.map(|i| round(i / equivalencia, MAX_DECIMALS)),
            ..t.clone()
        })
        .collect();
    let mxn = |x: Decimal| round(x * tipo_cambio, 2);
    let mut totales = Totales {
        monto_total_pagos: mxn(p.monto),
        ..Totales::default()
    };
    for t in traslados_p.iter().filter(|t| t.impuesto == "002") {
        let (base, imp) = match (
            t.tipo_factor.as_str(),
            t.tasa.map(|r| r * Decimal::ONE_HUNDRED),
        ) {
            ("Exento", _) => (&mut totales.base_exento, None),
            ("Tasa", Some(r)) if r == Decimal::from(16) => {
                (&mut totales.base_iva16, Some(&mut totales.impuesto_iva16))
            }
            ("Tasa", Some(r)) if r == Decimal::from(8) => {
                (&mut totales.base_iva8, Some(&mut totales.impuesto_iva8))
            }
            ("Tasa", Some(r)) if r.is_zero() => {
                (&mut totales.base_iva0, Some(&mut totales.impuesto_iva0))
            }
            _ => {
                return Err(bad(
                    "a document traslado has an IVA rate Pagos 2.0 cannot total",
                ));
            }
        };
        *base = Some(mxn(t.base));
        if let Some(imp) = imp {
            *imp = Some(mxn(t.importe.unwrap_or_default()));
        }
    }
    Ok(Pagos {
        totales,
        pago: Pago {
            fecha_pago: p.fecha_pago.format("%Y-%m-%dT%H:%M:%S").to_string(),
            forma_pago: p.forma_pago.clone(),
            moneda: p.moneda.clone(),
            moneda_decimals: dec_p,
            tipo_cambio,
            monto: p.monto,
            num_operacion: p.num_operacion.clone(),
            docto: DoctoRelacionado {
                id_documento: d.uuid.to_uppercase(),
                serie: d.serie.clone(),
                folio: d.folio.clone(),
                moneda: d.moneda.clone(),
                moneda_decimals: dec_dr,
                equivalencia,
                num_parcialidad: d.num_parcialidad,
                saldo_anterior: d.saldo_anterior,
                pagado,
                saldo_insoluto: insoluto,
                objeto_imp: if traslados.is_empty() { "01" } else { "02" }.to_owned(),
                traslados,
            },
            traslados: traslados_p,
        },
    })
}

/// The comprobante of a tipo P request.
pub fn build_pago(req: &InvoiceRequest, no_certificado: &str) -> Result<Comprobante, CfdiError> {
    let Some(p) = &req.pago else {
        return Err(bad("a pago (tipo P) needs its `pago`"));
    };
    if req.moneda != "XXX" || req.tipo_cambio.is_some() {
        return Err(bad("a pago is issued in Moneda XXX, without TipoCambio"));
    }
    if !req.forma_pago.is_empty() || !req.metodo_pago.is_empty() {
        return Err(bad(
            "a pago has no FormaPago nor MetodoPago (they go in the Pago)",
        ));
    }
    if !req.lines.is_empty() || req.informacion_global.is_some() {
        return Err(bad("a pago has no lines nor InformacionGlobal"));
    }
    if req.relacionados.iter().any(|r| r.tipo_relacion != "04") {
        return Err(bad(
            "a pago relates other CFDIs only to substitute them (04)",
        ));
    }
    let em = validate_emisor(req)?;
    let receptor = receptor(req)?;
    if receptor.uso_cfdi != USO_CFDI_PAGOS {
        return Err(bad(format!(
            "a pago's UsoCFDI is {USO_CFDI_PAGOS}, not {}",
            receptor.uso_cfdi
        )));
    }
    let pagos = build_pagos(p)?;
    let zero = Decimal::ZERO;
    Ok(Comprobante {
        serie: req.serie.clone(),
        folio: req.folio.clone(),
        fecha: req.fecha.format("%Y-%m-%dT%H:%M:%S").to_string(),
        sello: None,
        forma_pago: None,
        no_certificado: no_certificado.to_owned(),
        certificado: None,
        condiciones_de_pago: None,
        subtotal: zero,
        descuento: None,
        moneda: "XXX".to_owned(),
        moneda_decimals: 0,
        tipo_cambio: None,
        total: zero,
        tipo_de_comprobante: "P".to_owned(),
        exportacion: req.exportacion.clone(),
        metodo_pago: None,
        lugar_expedicion: em.lugar_expedicion.clone(),
        informacion_global: None,
        cfdi_relacionados: super::build::relacionados(req)?,
        emisor: Emisor {
            rfc: em.rfc.to_string(),
            nombre: em.nombre.clone(),
            regimen_fiscal: em.regimen_fiscal.clone(),
        },
        receptor,
        conceptos: vec![Concepto {
            clave_prod_serv: CLAVE_PROD_SERV_PAGO.to_owned(),
            no_identificacion: None,
            cantidad: Decimal::ONE,
            clave_unidad: CLAVE_UNIDAD_PAGO.to_owned(),
            unidad: None,
            descripcion: "Pago".to_owned(),
            valor_unitario: zero,
            importe: zero,
            descuento: None,
            objeto_imp: "01".to_owned(),
            traslados: vec![],
            retenciones: vec![],
        }],
        impuestos: None,
        pagos: Some(pagos),
        tfd: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().expect("decimal")
    }

    fn pago(parcialidad: u32, saldo: &str, monto: &str) -> PagoData {
        PagoData {
            fecha_pago: "2026-11-29T10:30:00".parse().expect("fecha"),
            forma_pago: "03".into(),
            moneda: "MXN".into(),
            tipo_cambio: None,
            monto: d(monto),
            num_operacion: None,
            documento: DoctoData {
                uuid: "5fb2822e-396d-4725-8521-cdc4bdd20ccf".into(),
                serie: None,
                folio: None,
                moneda: "MXN".into(),
                equivalencia: None,
                num_parcialidad: parcialidad,
                saldo_anterior: d(saldo),
                total: d("1160.00"),
                traslados: vec![DocTraslado {
                    impuesto: "002".into(),
                    tipo_factor: "Tasa".into(),
                    tasa: Some(d("0.16")),
                    base: d("1000.00"),
                    importe: Some(d("160.00")),
                }],
            },
        }
    }

    #[test]
    fn parcialidades_carry_the_document_in_proportion() {
        let payments = [
            ("1160.00", "400.00"),
            ("760.00", "333.33"),
            ("426.67", "426.67"),
        ];
        let (mut base, mut iva, mut paid) = (Decimal::ZERO, Decimal::ZERO, Decimal::ZERO);
        for (i, (saldo, monto)) in payments.iter().enumerate() {
            let n = u32::try_from(i + 1).expect("small");
            let p = build_pagos(&pago(n, saldo, monto)).expect("pago builds");
            let dr = &p.pago.docto;
            assert_eq!(dr.num_parcialidad, n);
            assert_eq!(dr.saldo_insoluto, d(saldo) - d(monto));
            let t = &dr.traslados[0];
            // Each parcialidad's base is its share of the document's.
            assert!(
                (t.base - d(monto) / d("1.16")).abs() < d("0.000002"),
                "{t:?}"
            );
            base += t.base;
            iva += t.importe.expect("importe");
            paid += dr.pagado;
            assert_eq!(p.totales.monto_total_pagos, d(monto));
        }
        assert_eq!(
            base,
            d("1000.00"),
            "the bases add up to the document's, exactly"
        );
        assert_eq!(round(iva, 2), d("160.00"));
        assert_eq!(paid, d("1160.00"));
    }

    #[test]
    fn an_overpayment_is_refused() {
        let e = build_pagos(&pago(2, "760.00", "760.01")).expect_err("overpayment");
        assert!(e.to_string().contains("overpayment"), "{e}");
        assert!(build_pagos(&pago(2, "760.00", "760.00")).is_ok());
    }

    #[test]
    fn another_currency_needs_and_uses_equivalencia() {
        let mut p = pago(1, "1160.00", "58.00");
        p.moneda = "USD".into();
        p.tipo_cambio = Some(d("20"));
        assert!(build_pagos(&p).is_err(), "EquivalenciaDR is required");
        p.documento.equivalencia = Some(d("20"));
        let b = build_pagos(&p).expect("builds");
        assert_eq!(b.pago.docto.pagado, d("1160.00"));
        assert_eq!(b.pago.docto.saldo_insoluto, Decimal::ZERO);
        assert_eq!(b.totales.monto_total_pagos, d("1160.00"));
        assert_eq!(b.totales.base_iva16, Some(d("1000.00")));
    }
}
