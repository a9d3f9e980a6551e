//! The printable voucher of an authorized ARCA comprobante: its fields and ARCA's QR (RG
//! 4892/2020: `https://www.afip.gob.ar/fe/qr/?p=` + the standard base64 of a JSON document
//! in the specification's order), drawn by [`crate::pdf::sheet`]. No I/O.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::model::{CbteTipo, DocTipo, VoucherInput};
use crate::config::{ArcaSettings, CondicionIva};
use crate::pdf::sheet::Sheet;
use crate::store::{ArcaVoucherRow, arca_state};

/// Where ARCA's QR points (RG 4892; the host is still `afip.gob.ar` after the rename).
pub const QR_BASE: &str = "https://www.afip.gob.ar/fe/qr/";

/// Why a voucher cannot be printed.
#[derive(Debug, thiserror::Error)]
pub enum PrintError {
    #[error("voucher {0} is not authorized ({1}): there is no CAE to print")]
    NotAuthorized(String, String),
    #[error("stored voucher {0} cannot be read: {1}")]
    Corrupt(String, String),
}

fn input(v: &ArcaVoucherRow) -> Result<VoucherInput, PrintError> {
    serde_json::from_str(&v.input).map_err(|e| PrintError::Corrupt(v.key.clone(), e.to_string()))
}

/// The QR's URL for authorized voucher `v` (type, number and CAE as stored; the buyer's
/// document left out for a consumidor final without identification, as ARCA's examples do).
pub fn qr_url(v: &ArcaVoucherRow) -> Result<String, PrintError> {
    let i = input(v)?;
    let cae = v.cae.as_deref().unwrap_or_default();
    let receptor = if i.doc_tipo == DocTipo::SinIdentificar {
        String::new()
    } else {
        format!(
            ",\"tipoDocRec\":{},\"nroDocRec\":{}",
            i.doc_tipo.code(),
            i.doc_nro
        )
    };
    let json = format!(
        "{{\"ver\":1,\"fecha\":\"{}\",\"cuit\":{},\"ptoVta\":{},\"tipoCmp\":{},\"nroCmp\":{},\
         \"importe\":{},\"moneda\":\"{}\",\"ctz\":{}{receptor},\"tipoCodAut\":\"E\",\
         \"codAut\":{}}}",
        v.cbte_fch,
        v.cuit,
        v.pto_vta,
        v.cbte_tipo,
        v.number,
        i.imp_total.normalize(),
        i.mon_id,
        i.mon_cotiz.normalize(),
        cae.trim_start_matches('0'),
    );
    Ok(format!("{QR_BASE}?p={}", STANDARD.encode(json)))
}

/// The sheet of authorized voucher `v` of the emisor configured in `cfg`.
pub fn sheet(v: &ArcaVoucherRow, cfg: &ArcaSettings) -> Result<Sheet, PrintError> {
    if v.state != arca_state::AUTHORIZED {
        return Err(PrintError::NotAuthorized(v.key.clone(), v.state.clone()));
    }
    let i = input(v)?;
    let tipo = CbteTipo::from_code(v.cbte_tipo)
        .ok_or_else(|| PrintError::Corrupt(v.key.clone(), format!("CbteTipo {}", v.cbte_tipo)))?;
    let number = format!("{:05}-{:08}", v.pto_vta, v.number);
    let condicion = match cfg.condicion_iva {
        CondicionIva::ResponsableInscripto => "IVA Responsable Inscripto",
        CondicionIva::Monotributo => "Responsable Monotributo",
        CondicionIva::Exento => "IVA Sujeto Exento",
    };
    let doc = match i.doc_tipo {
        DocTipo::Cuit => format!("CUIT {}", i.doc_nro),
        DocTipo::Cuil => format!("CUIL {}", i.doc_nro),
        DocTipo::Dni => format!("DNI {}", i.doc_nro),
        DocTipo::SinIdentificar => "Consumidor final sin identificar".to_owned(),
    };
    let pair = |k: &str, v: String| (k.to_owned(), v);
    let mut amounts = vec![pair("Importe neto gravado", i.imp_neto.to_string())];
    for a in &i.iva {
        let rate = a.alicuota.rate() * rust_decimal::Decimal::ONE_HUNDRED;
        amounts.push(pair(
            &format!("IVA {}%", rate.normalize()),
            a.importe.to_string(),
        ));
    }
    for (k, x) in [
        ("No gravado", i.imp_tot_conc),
        ("Exento", i.imp_op_ex),
        ("Otros tributos", i.imp_trib),
    ] {
        if !x.is_zero() {
            amounts.push(pair(k, x.to_string()));
        }
    }
    amounts.push(pair(
        "Importe total",
        format!("{} {}", i.mon_id, i.imp_total),
    ));
    let mut sections = vec![
        (
            "Emisor".to_owned(),
            vec![
                pair("CUIT", v.cuit.to_string()),
                pair("Condición frente al IVA", condicion.to_owned()),
                pair("Punto de venta", format!("{:05}", v.pto_vta)),
            ],
        ),
        (
            "Receptor".to_owned(),
            vec![
                pair("Documento", doc),
                pair(
                    "Condición frente al IVA (id)",
                    i.condicion_iva_receptor.to_string(),
                ),
            ],
        ),
    ];
    if !i.cbtes_asoc.is_empty() {
        let credited = i
            .cbtes_asoc
            .iter()
            .map(|a| {
                let name = CbteTipo::from_code(a.tipo)
                    .map_or_else(|| format!("tipo {}", a.tipo), CbteTipo::name);
                format!("{name} {:05}-{:08} del {}", a.pto_vta, a.nro, a.cbte_fch)
            })
            .collect::<Vec<_>>()
            .join("; ");
        sections.push((
            "Comprobante asociado".to_owned(),
            vec![pair("Acredita", credited)],
        ));
    }
    sections.push(("Importes".to_owned(), amounts));
    Ok(Sheet {
        title: tipo.name(),
        heading: vec![
            format!("Código {:03}", v.cbte_tipo),
            format!("Número: {number}"),
            format!("Fecha de emisión: {}", v.cbte_fch),
        ],
        sections,
        qr_url: qr_url(v)?,
        beside_qr: vec![
            format!("CAE: {}", v.cae.as_deref().unwrap_or_default()),
            format!(
                "Vencimiento del CAE: {}",
                v.cae_due.as_deref().unwrap_or_default()
            ),
            "Comprobante autorizado por ARCA".to_owned(),
        ],
        legend: "Comprobante electrónico autorizado por ARCA (RG 4291); verificable con el QR"
            .to_owned(),
        id: format!(
            "{} {number} CAE {}",
            tipo.name(),
            v.cae.as_deref().unwrap_or_default()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(doc: DocTipo, doc_nro: i64) -> ArcaVoucherRow {
        let mut i = VoucherInput::consumidor_final(
            rust_decimal::Decimal::new(121_000, 2),
            super::super::model::Alicuota::Veintiuno,
        );
        i.doc_tipo = doc;
        i.doc_nro = doc_nro;
        ArcaVoucherRow {
            key: "mercadopago:1".into(),
            environment: "homologacion".into(),
            cuit: 20_111_111_112,
            pto_vta: 3,
            cbte_tipo: 6,
            number: 7,
            cbte_fch: "2026-12-04".into(),
            input_hash: i.hash(),
            input: serde_json::to_string(&i).expect("json"),
            state: "authorized".into(),
            sending_until: None,
            sends: 1,
            cae: Some("71000000000001".into()),
            cae_due: Some("2026-12-14".into()),
            recovered: false,
            errors: None,
            observations: None,
            detail: None,
        }
    }

    fn decoded(url: &str) -> serde_json::Value {
        let p = url.strip_prefix(&format!("{QR_BASE}?p=")).expect("base");
        serde_json::from_slice(&STANDARD.decode(p).expect("base64")).expect("json")
    }

    #[test]
    fn the_qr_carries_rg_4892_s_json() {
        let url = qr_url(&row(DocTipo::Dni, 26_756_539)).expect("url");
        let v = decoded(&url);
        assert_eq!(
            v,
            serde_json::json!({"ver": 1, "fecha": "2026-12-04", "cuit": 20_111_111_112_i64,
                "ptoVta": 3, "tipoCmp": 6, "nroCmp": 7, "importe": 1210, "moneda": "PES",
                "ctz": 1, "tipoDocRec": 96, "nroDocRec": 26_756_539, "tipoCodAut": "E",
                "codAut": 71_000_000_000_001_i64})
        );
        let anonymous = decoded(&qr_url(&row(DocTipo::SinIdentificar, 0)).expect("url"));
        assert!(anonymous.get("tipoDocRec").is_none(), "{anonymous}");
    }
}
