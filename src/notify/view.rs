//! A document that is not an API invoice (a Stripe or Mercado Pago sale, an egreso, a global, a
//! REP) as the `data` of a merchant event; API invoices keep their API view
//! ([`crate::api::view::invoice_json`]).

use serde_json::{Value, json};

use crate::cfdi::{self, InvoiceRequest, ReceptorData};
use crate::store::DocFull;

/// The event's id of a document: `doc_{outbox id}` (an API invoice's is its public id).
pub fn document_id(outbox_id: i64) -> String {
    format!("doc_{outbox_id}")
}

/// Document `d` as event `status` (`stamped`, `failed`, `canceled`) saw it: what was paid
/// (provider and payment id), its amounts from the frozen request, its UUID, serie and folio,
/// and once stamped the admin's links to its XML and PDF (relative to the admin's base URL).
pub fn document_json(d: &DocFull, status: &str) -> Value {
    let req: Option<InvoiceRequest> = serde_json::from_str(&d.request_json).ok();
    let built = req
        .as_ref()
        .and_then(|r| cfdi::build(r, "00000000000000000000").ok());
    let rfc_receptor = req.as_ref().and_then(|r| match &r.receptor {
        ReceptorData::Nominativo { rfc, .. } => Some(rfc.as_str().to_owned()),
        ReceptorData::PublicoEnGeneral => None,
    });
    let stamped = matches!(status, "stamped" | "canceled");
    let error = match status {
        "failed" => json!({ "code": d.last_error_code, "message": d.last_error_message }),
        _ => Value::Null,
    };
    let this = format!("/admin/documents/{}", d.id);
    let links = match stamped {
        true => json!({
            "self": this,
            "xml": format!("{this}/xml/stamped"),
            "pdf": format!("{this}/pdf"),
        }),
        false => json!({ "self": this }),
    };
    json!({
        "id": document_id(d.id),
        "kind": d.kind.as_str(),
        "provider": d.provider,
        "payment_id": d.provider_payment_id,
        "status": status,
        "uuid": if stamped { d.uuid.clone() } else { None },
        "serie": d.serie,
        "folio": d.folio,
        "rfc_emisor": req.as_ref().map(|r| r.emisor.rfc.as_str().to_owned()),
        "rfc_receptor": rfc_receptor,
        "fecha": d.fecha.format("%Y-%m-%dT%H:%M:%S").to_string(),
        "moneda": built.as_ref().map(|c| c.moneda.clone()),
        "subtotal": built.as_ref().map(|c| c.subtotal.to_string()),
        "descuento": built.as_ref().and_then(|c| c.descuento).map(|x| x.to_string()),
        "total": built.as_ref().map(|c| c.total.to_string()),
        "test_mode": d.test_mode,
        "stamped_at": if stamped { d.stamped_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) } else { None },
        "error": error,
        "links": links,
    })
}
