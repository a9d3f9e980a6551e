//! The invoice as the API shows it: the body of its answers and the `data` of the merchant
//! webhooks ([`crate::notify`]).

use actix_web::HttpResponse;
use actix_web::http::StatusCode;

use crate::cfdi::{self, InvoiceRequest, ReceptorData};
use crate::domain::DocumentState;
use crate::store::api::ApiInvoiceRow;

/// The invoice as the API shows it. `status` overrides the row's (a replayed 201 and a webhook
/// show the invoice as the event saw it).
pub fn invoice_json(inv: &ApiInvoiceRow, status: Option<&str>) -> serde_json::Value {
    let req: Option<InvoiceRequest> = serde_json::from_str(&inv.request_json).ok();
    // A stamped view (the stored 201, invoice.stamped) is the invoice at its stamp: no
    // cancellation yet, whatever happened since.
    let show_cancellation = status.is_none_or(|s| s == "canceled");
    let status = status.unwrap_or_else(|| api_status(inv.state));
    let rfc_receptor = req.as_ref().and_then(|r| match &r.receptor {
        ReceptorData::Nominativo { rfc, .. } => Some(rfc.as_str().to_owned()),
        ReceptorData::PublicoEnGeneral => None,
    });
    let total = req
        .as_ref()
        .and_then(|r| cfdi::build(r, "00000000000000000000").ok())
        .map(|c| c.total.to_string());
    let error = match (status, &inv.last_error_code, &inv.last_error_message) {
        ("failed", code, message) => serde_json::json!({ "code": code, "message": message }),
        _ => serde_json::Value::Null,
    };
    let stamped = matches!(status, "stamped" | "canceled");
    serde_json::json!({
        "id": inv.public_id,
        "status": status,
        "uuid": if stamped { inv.uuid.clone() } else { None },
        "serie": inv.serie,
        "folio": inv.folio,
        "rfc_emisor": inv.rfc_emisor,
        "rfc_receptor": rfc_receptor,
        "fecha": req.as_ref().map(|r| r.fecha.format("%Y-%m-%dT%H:%M:%S").to_string()),
        "moneda": req.as_ref().map(|r| r.moneda.clone()),
        "total": total,
        "created_at": inv.created_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "stamped_at": if stamped { inv.stamped_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) } else { None },
        "error": error,
        "cancellation": if show_cancellation && stamped { inv.cancellation } else { None },
        "links": links(&inv.public_id, stamped),
    })
}

/// Where the invoice and, once stamped, its files are (relative to the API's base URL).
fn links(public_id: &str, stamped: bool) -> serde_json::Value {
    let this = format!("/v1/invoices/{public_id}");
    match stamped {
        true => serde_json::json!({
            "self": this,
            "xml": format!("{this}/xml"),
            "pdf": format!("{this}/pdf"),
        }),
        false => serde_json::json!({ "self": this }),
    }
}

/// Outbox state → API status (`failed` only for a definite non-stamp).
pub fn api_status(state: DocumentState) -> &'static str {
    match state {
        DocumentState::Stamped => "stamped",
        DocumentState::Canceled => "canceled",
        DocumentState::Unknown => "unknown",
        s if s.released() || s == DocumentState::NeedsAttention => "failed",
        _ => "pending",
    }
}

/// A JSON answer; `replayed` marks a stored answer given again (`Idempotency-Replayed`).
pub(super) fn json_response(status: StatusCode, body: String, replayed: bool) -> HttpResponse {
    let mut r = HttpResponse::build(status);
    r.content_type("application/json");
    if replayed {
        r.insert_header(("Idempotency-Replayed", "true"));
    }
    r.body(body)
}
