//! From an `InvoiceRequest` to a `Comprobante`: every amount computed here, once.
//!
//! Line amounts keep up to six decimals (Anexo 20 allows it, and it is what lets a
//! tax-included price split into Base + Importe that add back to the price). Comprobante
//! amounts are the line amounts summed at full precision and rounded once to the currency's
//! decimals, which is how the PAC recomputes them. The lines and their taxes are computed in
//! [`super::lines`]; the field checks are in [`super::checks`].

use rust_decimal::Decimal;

use super::checks::{
    bad, check_amount, check_code, check_postal_code, check_text, computed, is_uuid, rounded, sum,
};
pub use super::lines::{IMPUESTO_ISR, IMPUESTO_IVA};
use super::lines::{build_line, fit_total, summarize};
use super::model::{CfdiRelacionados, Comprobante, Emisor, InformacionGlobal, Receptor};
use super::money::{MAX_DECIMALS, round};
use super::request::{EmisorData, InvoiceRequest, ReceptorData, TipoComprobante};
use super::rfc::RFC_PUBLICO_EN_GENERAL;
use super::{CfdiError, catalogs};

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

fn prefix(i: usize, e: CfdiError) -> CfdiError {
    match e {
        CfdiError::Request(m) => CfdiError::Request(format!("line {}: {m}", i + 1)),
        other => other,
    }
}
