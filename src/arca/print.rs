//! What an authorized voucher prints (RG 1415's fields, RG 4892's QR), from its stored
//! reservation alone: the exact input sent, the number and date it was authorized at, the CAE.
//! The layout is [`crate::pdf::voucher`]'s.

use anyhow::{Context, bail};
use base64::Engine;
use chrono::NaiveDate;
use rust_decimal::Decimal;

use super::model::{CbteTipo, DocTipo, VoucherInput};
use crate::config::{ArcaSettings, CondicionIva};
use crate::pdf::voucher::{Linea, VoucherPrint};
use crate::store::ArcaVoucherRow;

/// The voucher type's printed title and class letter, by ARCA's code.
fn kind(code: i32) -> Option<(&'static str, char)> {
    CbteTipo::from_code(code).map(|t| {
        let titulo = if t.is_credit_note() {
            "NOTA DE CRÉDITO"
        } else {
            "FACTURA"
        };
        (titulo, t.class())
    })
}

/// `CondicionIVAReceptorId` as ARCA's table (`FEParamGetCondicionIvaReceptor`) names it.
fn condicion_receptor(id: i32) -> &'static str {
    match id {
        1 => "IVA Responsable Inscripto",
        4 => "IVA Sujeto Exento",
        5 => "Consumidor Final",
        6 => "Responsable Monotributo",
        7 => "Sujeto No Categorizado",
        8 => "Proveedor del Exterior",
        9 => "Cliente del Exterior",
        10 => "IVA Liberado – Ley N° 19.640",
        13 => "Monotributista Social",
        15 => "IVA No Alcanzado",
        16 => "Monotributo Trabajador Independiente Promovido",
        _ => "—",
    }
}

fn condicion_emisor(c: CondicionIva) -> &'static str {
    match c {
        CondicionIva::ResponsableInscripto => "IVA Responsable Inscripto",
        CondicionIva::Monotributo => "Responsable Monotributo",
        CondicionIva::Exento => "IVA Sujeto Exento",
    }
}

/// A stored date, `yyyy-mm-dd` or ARCA's `yyyymmdd`.
fn date(s: &str) -> anyhow::Result<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .or_else(|_| NaiveDate::parse_from_str(s, "%Y%m%d"))
        .with_context(|| format!("date {s:?}"))
}

fn ar(d: NaiveDate) -> String {
    d.format("%d/%m/%Y").to_string()
}

/// Pesos as printed in Argentina: `$ 1.234,50`.
fn money(mon_id: &str, d: Decimal) -> String {
    let s = format!("{:.2}", d.round_dp(2));
    let (int, dec) = s.split_once('.').unwrap_or((&s, "00"));
    let (sign, int) = int.strip_prefix('-').map_or(("", int), |i| ("-", i));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push('.');
        }
        grouped.push(c);
    }
    let symbol = if mon_id == "PES" { "$" } else { mon_id };
    format!("{symbol} {sign}{grouped},{dec}")
}

/// ARCA's verification URL (RG 4892): `base?p=` and the standard base64 of the JSON document,
/// its fields in the specification's order; the buyer's document is left out for an anonymous
/// consumidor final.
pub fn qr_url(base: &str, row: &ArcaVoucherRow, input: &VoucherInput, cae: &str) -> String {
    let receptor = match input.doc_tipo {
        DocTipo::SinIdentificar => String::new(),
        t => format!(
            r#","tipoDocRec":{},"nroDocRec":{}"#,
            t.code(),
            input.doc_nro
        ),
    };
    let json = format!(
        r#"{{"ver":1,"fecha":"{}","cuit":{},"ptoVta":{},"tipoCmp":{},"nroCmp":{},"importe":{},"moneda":"{}","ctz":{}{receptor},"tipoCodAut":"E","codAut":{}}}"#,
        row.cbte_fch,
        row.cuit,
        row.pto_vta,
        row.cbte_tipo,
        row.number,
        input.imp_total.round_dp(2).normalize(),
        input.mon_id,
        input.mon_cotiz.normalize(),
        cae.trim_start_matches('0'),
    );
    format!(
        "{base}?p={}",
        base64::engine::general_purpose::STANDARD.encode(json)
    )
}

/// What `row` prints; only an authorized voucher (with its CAE) has a printable form.
pub fn printable(row: &ArcaVoucherRow, cfg: &ArcaSettings) -> anyhow::Result<VoucherPrint> {
    let (Some(cae), Some(cae_due)) = (&row.cae, &row.cae_due) else {
        bail!(
            "voucher {} is {}, not authorized: only a voucher with its CAE can be printed",
            row.key,
            row.state
        );
    };
    let input: VoucherInput =
        serde_json::from_str(&row.input).context("the voucher's stored input")?;
    let (titulo, letra) = kind(row.cbte_tipo).with_context(|| {
        format!(
            "voucher type {} is not one the appliance issues",
            row.cbte_tipo
        )
    })?;
    let p = &cfg.print;
    let mut emisor = vec![p.razon_social.clone().unwrap_or_else(|| "—".into())];
    emisor.push(format!("CUIT: {}", row.cuit));
    emisor.extend(
        p.domicilio
            .iter()
            .map(|d| format!("Domicilio comercial: {d}")),
    );
    emisor.push(format!(
        "Condición frente al IVA: {}",
        condicion_emisor(cfg.condicion_iva)
    ));
    emisor.extend(
        p.ingresos_brutos
            .iter()
            .map(|d| format!("Ingresos Brutos: {d}")),
    );
    emisor.extend(
        p.inicio_actividades
            .iter()
            .map(|d| format!("Fecha de inicio de actividades: {d}")),
    );
    let mut receptor = match input.doc_tipo {
        DocTipo::SinIdentificar => vec!["Consumidor final".to_owned()],
        DocTipo::Cuit => vec![format!("CUIT: {}", input.doc_nro)],
        DocTipo::Cuil => vec![format!("CUIL: {}", input.doc_nro)],
        DocTipo::Dni => vec![format!("DNI: {}", input.doc_nro)],
    };
    receptor.push(format!(
        "Condición frente al IVA: {}",
        condicion_receptor(input.condicion_iva_receptor)
    ));
    let m = |d: Decimal| money(&input.mon_id, d);
    let mut datos = vec![("Concepto", concepto(input.concepto.code()).to_owned())];
    datos.push(("Moneda", input.mon_id.clone()));
    if input.mon_id != "PES" {
        datos.push(("Cotización", input.mon_cotiz.normalize().to_string()));
    }
    if let (Some(d), Some(h)) = (input.fch_serv_desde, input.fch_serv_hasta) {
        datos.push(("Período facturado", format!("{} al {}", ar(d), ar(h))));
    }
    if let Some(v) = input.fch_vto_pago {
        datos.push(("Vencimiento del pago", ar(v)));
    }
    for a in &input.cbtes_asoc {
        // A nota de crédito names the voucher it credits.
        let (titulo, letra) = kind(a.tipo).unwrap_or(("COMPROBANTE", '?'));
        datos.push((
            "Comprobante asociado",
            format!(
                "{titulo} {letra} {:05}-{:08} del {}",
                a.pto_vta,
                a.nro,
                ar(a.cbte_fch)
            ),
        ));
    }
    // Class A itemizes IVA; B and C print prices with it included.
    let shown = if letra == 'A' {
        input.imp_neto + input.imp_op_ex + input.imp_tot_conc
    } else {
        input.imp_total - input.imp_trib
    };
    let lineas = vec![Linea {
        descripcion: match row.key.split_once(':') {
            Some(("mercadopago", id)) => format!("Venta Mercado Pago N° {id}"),
            Some(("stripe", id)) => format!("Venta Stripe {id}"),
            _ => format!("Venta {}", row.key),
        },
        cantidad: "1".into(),
        precio: m(shown),
        importe: m(shown),
    }];
    let mut totales = Vec::new();
    if letra == 'A' {
        totales.push(("Importe neto gravado".to_owned(), m(input.imp_neto)));
        for a in &input.iva {
            let pct = (a.alicuota.rate() * Decimal::ONE_HUNDRED).normalize();
            totales.push((format!("IVA {pct} %"), m(a.importe)));
        }
    }
    for (label, v) in [
        ("Importe exento", input.imp_op_ex),
        ("Importe no gravado", input.imp_tot_conc),
        ("Otros tributos", input.imp_trib),
    ] {
        if !v.is_zero() {
            totales.push((label.to_owned(), m(v)));
        }
    }
    totales.push(("Total".to_owned(), m(input.imp_total)));
    if letra == 'B' && !input.imp_iva.is_zero() {
        // Ley 27.743: a B voucher to a consumidor final states the IVA its prices contain.
        totales.push(("IVA contenido".to_owned(), m(input.imp_iva)));
    }
    Ok(VoucherPrint {
        letra,
        codigo: row.cbte_tipo,
        titulo,
        numero: format!("{:05}-{:08}", row.pto_vta, row.number),
        fecha: ar(date(&row.cbte_fch)?),
        emisor,
        receptor,
        datos,
        lineas,
        totales,
        cae: cae.clone(),
        cae_vto: ar(date(cae_due)?),
        qr_url: qr_url(&p.qr_base, row, &input, cae),
    })
}

fn concepto(code: i32) -> &'static str {
    match code {
        1 => "Productos",
        2 => "Servicios",
        _ => "Productos y servicios",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ArcaVoucherState;

    fn row(doc: DocTipo, doc_nro: i64) -> (ArcaVoucherRow, VoucherInput) {
        let mut i = VoucherInput::consumidor_final(
            Decimal::new(121_000, 2),
            super::super::model::Alicuota::Veintiuno,
        );
        i.doc_tipo = doc;
        i.doc_nro = doc_nro;
        let row = ArcaVoucherRow {
            key: "mercadopago:1".into(),
            environment: "homologacion".into(),
            cuit: 20_111_111_112,
            pto_vta: 3,
            cbte_tipo: 6,
            number: 7,
            cbte_fch: "2026-12-04".into(),
            input_hash: i.hash(),
            input: serde_json::to_string(&i).expect("json"),
            state: ArcaVoucherState::Authorized,
            sending_until: None,
            sends: 1,
            cae: Some("71000000000001".into()),
            cae_due: Some("2026-12-14".into()),
            recovered: false,
            errors: None,
            observations: None,
            detail: None,
            landing_until: None,
            superseded_by: None,
        };
        (row, i)
    }

    fn decoded(url: &str) -> serde_json::Value {
        let p = url
            .strip_prefix("https://www.afip.gob.ar/fe/qr/?p=")
            .expect("base");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("base64");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[test]
    fn the_qr_carries_rg_4892_s_json() {
        let base = "https://www.afip.gob.ar/fe/qr/";
        let (r, i) = row(DocTipo::Dni, 26_756_539);
        let v = decoded(&qr_url(base, &r, &i, "71000000000001"));
        assert_eq!(
            v,
            serde_json::json!({"ver": 1, "fecha": "2026-12-04", "cuit": 20_111_111_112_i64,
                "ptoVta": 3, "tipoCmp": 6, "nroCmp": 7, "importe": 1210, "moneda": "PES",
                "ctz": 1, "tipoDocRec": 96, "nroDocRec": 26_756_539, "tipoCodAut": "E",
                "codAut": 71_000_000_000_001_i64})
        );
        let (r, i) = row(DocTipo::SinIdentificar, 0);
        let anonymous = decoded(&qr_url(base, &r, &i, "71000000000001"));
        assert!(anonymous.get("tipoDocRec").is_none(), "{anonymous}");
    }

    #[test]
    fn pesos_print_with_dots_and_a_comma() {
        assert_eq!(money("PES", Decimal::new(123_456_750, 2)), "$ 1.234.567,50");
        assert_eq!(money("PES", Decimal::new(99, 2)), "$ 0,99");
        assert_eq!(money("DOL", Decimal::new(100_000, 2)), "DOL 1.000,00");
    }
}
