//! The invoicing API (`/v1`): ERPs, POS systems and scripts ask for an invoice directly, on the
//! same outbox and worker pool as the webhook payments, with idempotency keys that make every
//! retry safe.
//!
//! # Idempotency
//!
//! - A request is keyed by its `Idempotency-Key` header or `idempotency_key` field (same
//!   effect; both with different values → 400), else by its explicit folio (RFC emisor + tipo +
//!   serie + folio), else not at all (every call is a new invoice).
//! - The invoice, its frozen outbox row and the key are written in one transaction; the worker
//!   pool stamps it; the request waits (bounded) for the outcome:
//!   stamped → 201, stored and replayed byte for byte to every retry (`Idempotency-Replayed:
//!   true`); PAC rejection → 422, the key is released; PAC timeout (or a PAC call still in
//!   flight when the wait ends) → 503 `STAMPING_OUTCOME_UNKNOWN`, the key stays taken while the
//!   worker asks the PAC (however long that takes: the window closing changes nothing),
//!   retries get the same 503 until then and the 201 after; still queued at the deadline →
//!   202, the key stays taken.
//! - A key is released only when the PAC definitely did not stamp its invoice (a rejection, or
//!   the PAC confirming no stamp). A key whose invoice was stamped is never released nor
//!   purged: a retry, however late, replays the 201 (or 422 with another body).
//! - The same key with another body → 422 `IDEMPOTENCY_KEY_REUSED`; while the first is running →
//!   409 `DUPLICATE_IN_PROGRESS`. Nothing else (401, 403, any other 5xx) is stored, so those
//!   retries really run.
//!
//! # What lives here
//!
//! - `mod.rs`: the routes of `/v1` and the OpenAPI document.
//! - [`request`]: the body of `POST /v1/invoices`, read (400) and validated into the frozen
//!   comprobante (422).
//! - [`idempotency`]: what a key says about a new request, the stored 201 replayed to every
//!   retry, the purge of expired keys.
//! - [`invoices`]: create (and wait for the outcome), get, list.
//! - [`cancel`]: the cancel request of an invoice.
//! - [`payments`]: the payments of a PPD invoice, each its complemento de pago (CFDI tipo P).
//! - [`files`]: the stamped XML (byte for byte as the PAC returned it) and the PDF.
//! - [`view`]: the invoice as the API shows it (also the `data` of the merchant webhooks).
//! - [`keys`]: API keys (create, authenticate, the [`keys::Caller`] extractor every handler
//!   takes) and idempotency keys (explicit or by folio).
//!
//! Who may import it: `startup` (to mount [`routes`] and run the purge), `ops` (`api-key`),
//! [`crate::notify`] (the invoice's view), the fuzz targets and tests. It uses the store, the
//! ingest's folio date, the cancel path, the document engine and the PDF.

pub mod cancel;
pub mod files;
pub mod idempotency;
pub mod invoices;
pub mod keys;
pub mod payments;
pub mod request;
pub mod view;

use actix_web::{HttpResponse, web};

pub use request::{CreateBody, CreateInvoice, freeze, read_create_body};

/// The OpenAPI document served at `/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

pub fn routes(cfg: &mut web::ServiceConfig, body_limit: usize) {
    cfg.service(
        web::scope("/v1")
            .app_data(web::PayloadConfig::new(body_limit))
            .route("/openapi.json", web::get().to(openapi))
            .route("/invoices", web::post().to(invoices::create))
            .route("/invoices", web::get().to(invoices::list))
            .route("/invoices/{id}", web::get().to(invoices::get))
            .route("/invoices/{id}/xml", web::get().to(files::xml))
            .route("/invoices/{id}/pdf", web::get().to(files::pdf))
            .route("/invoices/{id}/cancel", web::post().to(cancel::cancel))
            .route("/invoices/{id}/payments", web::post().to(payments::create)),
    );
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(OPENAPI)
}

#[cfg(test)]
mod tests {
    use crate::config::Settings;

    #[test]
    fn api_settings_default_to_96_hour_keys_and_keep_the_webhook_secret_out_of_logs() {
        let s = Settings::defaults().expect("defaults");
        assert_eq!(s.api.key_retention_hours, 96);
        let text = "[api]\nkey_retention_hours = 24\nwebhook_url = \"https://erp.example/hooks\"\n\
                    webhook_secret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"\n";
        let s = Settings::from_parts(Some(text), &[]).expect("settings");
        assert_eq!(s.api.key_retention_hours, 24);
        let dump = format!("{s:?}");
        assert!(!dump.contains("C2FVsBQIhrscChlQIMV"), "{dump}");
        let err = Settings::from_parts(
            Some("[api]\nwebhook_url = \"https://erp.example/hooks\"\n"),
            &[],
        )
        .expect_err("a webhook URL needs its secret");
        assert!(err.to_string().contains("webhook_secret"), "{err}");
    }
}
