//! What the sandbox install stands on besides the sandbox PAC ([`crate::pacsim`]): the SAT test
//! CSD that seals when `[emisor]` names none, the sample invoice requests behind `cfdi sample`,
//! and the stand-in for Mercado Pago's payments API that `send-test-webhook` relies on.
//!
//! Embedded data and pure functions: it imports only the document engine and the Mercado Pago
//! sample, so the worker, the admin, the CLI, startup and tests may all import it.

use actix_web::{HttpResponse, web};

use crate::cfdi::{CfdiError, Csd};

/// The SAT test CSD shipped in `fixtures/csd` (EKU9003173C9), used by the embedded defaults.
pub const CSD_CER: &[u8] = include_bytes!("../fixtures/csd/EKU9003173C9.cer");
pub const CSD_KEY: &[u8] = include_bytes!("../fixtures/csd/EKU9003173C9.key");
pub const CSD_PASSWORD: &str = "12345678a";

/// The SAT test CSD, ready to seal.
pub fn csd() -> Result<Csd, CfdiError> {
    Csd::from_bytes(CSD_CER, CSD_KEY, CSD_PASSWORD)
}

/// The invoice requests behind `cfdi sample`, embedded so the binary needs no files.
pub const SAMPLE_REQUESTS: &[(&str, &str)] = &[
    (
        "01-iva16-mxn",
        include_str!("../fixtures/requests/01-iva16-mxn.json"),
    ),
    (
        "02-lines-with-discount",
        include_str!("../fixtures/requests/02-lines-with-discount.json"),
    ),
    (
        "03-tax-included-centavos",
        include_str!("../fixtures/requests/03-tax-included-centavos.json"),
    ),
    (
        "04-usd-tipo-cambio",
        include_str!("../fixtures/requests/04-usd-tipo-cambio.json"),
    ),
    (
        "05-exento-and-zero",
        include_str!("../fixtures/requests/05-exento-and-zero.json"),
    ),
    (
        "06-factura-global",
        include_str!("../fixtures/requests/06-factura-global.json"),
    ),
    (
        "07-egreso-nota-de-credito",
        include_str!("../fixtures/requests/07-egreso-nota-de-credito.json"),
    ),
    (
        "08-escaping-and-spaces",
        include_str!("../fixtures/requests/08-escaping-and-spaces.json"),
    ),
    (
        "09-egreso-reembolso-parcial",
        include_str!("../fixtures/requests/09-egreso-reembolso-parcial.json"),
    ),
    (
        "10-egreso-publico-en-general",
        include_str!("../fixtures/requests/10-egreso-publico-en-general.json"),
    ),
    // Zero decimals (c_Moneda JPY), issued in Baja California (Tiempo del Noroeste).
    (
        "11-jpy-tijuana",
        include_str!("../fixtures/requests/11-jpy-tijuana.json"),
    ),
    (
        // A Checkout basket as ingest freezes it (tests/it/line_items.rs): products with their
        // own keys, line and order discounts prorated to the centavo, shipping as a Concepto.
        "12-basket-shipping",
        include_str!("../fixtures/requests/12-basket-shipping.json"),
    ),
    // A PPD document paid in two parcialidades (Pagos 2.0): the first in pesos, the second in
    // dollars, so its DoctoRelacionado carries an EquivalenciaDR.
    (
        "13-pago-parcialidad-1",
        include_str!("../fixtures/requests/13-pago-parcialidad-1.json"),
    ),
    (
        "14-pago-parcialidad-2-usd",
        include_str!("../fixtures/requests/14-pago-parcialidad-2-usd.json"),
    ),
];

/// The sandbox's stand-in for `GET /v1/payments/{id}`: an approved MXN debit-card payment with
/// an RFC, approved at the time encoded in the id (Unix seconds followed by three digits), so
/// the same id always describes the same payment.
pub fn mp_payment(id: &str) -> Option<String> {
    let n: i64 = id.parse().ok()?;
    let secs = n / 1000;
    let at = chrono::DateTime::from_timestamp(secs, 0)?
        .with_timezone(&chrono_tz::America::Mexico_City)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Some(crate::webhooks::mercadopago::sample_payment(id, &at))
}

/// Mounts the stand-in ([`mp_payment`]) at `/sandbox/mercadopago/v1/payments/{id}`.
pub fn mp_routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/sandbox/mercadopago/v1/payments/{id}",
        web::get().to(mp_payment_route),
    );
}

async fn mp_payment_route(id: web::Path<String>) -> HttpResponse {
    match mp_payment(&id) {
        Some(body) => HttpResponse::Ok()
            .content_type("application/json")
            .body(body),
        None => {
            HttpResponse::NotFound().json(serde_json::json!({ "message": "Payment not found" }))
        }
    }
}
