//! What an ARS sale's voucher is frozen as in the outbox (kind `arca`): its type and its input,
//! decided once, in the transaction that records the payment, from the sale and `[arca]` as
//! they were then. The number and `CbteFch` are not part of it: ARCA's numbers are strictly
//! consecutive per sequence, so they are given when the worker pool's ARCA lane reserves the
//! voucher (`arca_vouchers`), as a CFDI's folio is given when a worker seals it.
//!
//! A human's correction of a held or refused sale (`/admin/arca`) freezes a new order under a
//! new attempt key; nothing else rewrites one. No I/O.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::buyer::{Given, buyer};
use super::model::{CbteTipo, VoucherInput};
use crate::config::ArcaSettings;

/// A sale's frozen voucher: the `request_json` of its outbox row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The voucher type's code (`CbteTipo`): its sequence.
    pub tipo: i32,
    /// The input sent to ARCA, `CbteDesde`/`CbteHasta` and `CbteFch` aside.
    pub input: VoucherInput,
    /// What of the buyer's data was not used, said with the settled voucher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Order {
    /// Its voucher type; `Err` names a code this version does not know.
    pub fn cbte_tipo(&self) -> Result<CbteTipo, String> {
        CbteTipo::from_code(self.tipo).ok_or_else(|| format!("voucher type {}", self.tipo))
    }

    /// As stored in the outbox.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an order serializes")
    }

    /// As read back from the outbox.
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("a frozen ARCA order: {e}"))
    }
}

/// The buyer a human gave for a held sale (`/admin/arca`), in place of the sale's own.
#[derive(Debug, Clone, Copy)]
pub struct Correction<'a> {
    /// `CUIT`, `CUIL`, `DNI`, or empty (no identification).
    pub doc_kind: &'a str,
    pub doc_number: &'a str,
    /// A [`crate::config::Receptor`]'s name.
    pub condicion_iva: &'a str,
}

/// The voucher of an ARS sale of `total` pesos of type `tipo`, to an anonymous consumidor
/// final until the caller names the buyer: IVA at `cfg`'s rate in classes A and B, none in
/// class C.
pub fn sale_input(cfg: &ArcaSettings, tipo: CbteTipo, total: Decimal) -> VoucherInput {
    let alicuota = cfg.alicuota().unwrap_or(super::Alicuota::Veintiuno);
    let mut input = VoucherInput::consumidor_final(total, alicuota);
    if tipo.class() == 'C' {
        input.imp_neto = total;
        input.imp_iva = Decimal::ZERO;
        input.iva.clear();
    }
    input
}

/// The order of a sale of `amount` (decimal text, pesos) whose buyer's data is `customer_json`
/// (`crate::ingest::CustomerData`: its `identification`), or the buyer `fix` a human gave.
/// `Err` says why the sale cannot be issued as it is (it is held for a human).
pub fn freeze(
    cfg: &ArcaSettings,
    amount: &str,
    customer_json: &str,
    fix: Option<Correction<'_>>,
) -> Result<Order, String> {
    let total: Decimal = amount
        .parse()
        .map_err(|_| format!("amount {amount:?} is not a number"))?;
    let customer: serde_json::Value = serde_json::from_str(customer_json).unwrap_or_default();
    let ident = customer.get("identification");
    let field = |k: &str| {
        ident
            .and_then(|i| i.get(k))
            .and_then(serde_json::Value::as_str)
    };
    let given = match fix {
        Some(c) => Given {
            kind: Some(c.doc_kind).filter(|k| !k.is_empty()),
            number: Some(c.doc_number).filter(|n| !n.is_empty()),
            condicion_iva: Some(c.condicion_iva),
        },
        None => Given {
            kind: field("kind"),
            number: field("number"),
            condicion_iva: field("condicion_iva"),
        },
    };
    let b = buyer(given, total, cfg)?;
    let tipo = cfg.factura_for(b.receptor);
    let mut input = sale_input(cfg, tipo, total);
    input.doc_tipo = b.doc_tipo;
    input.doc_nro = b.doc_nro;
    input.condicion_iva_receptor = b.receptor.id();
    Ok(Order {
        tipo: tipo.code(),
        input,
        note: b.note,
    })
}
