//! `POST /v1/invoices/{id}/payments`: a payment of a PPD invoice becomes one complemento de
//! pago (CFDI tipo P, Pagos 2.0), frozen with its parcialidad and saldo in the transaction that
//! records it, and stamped by the worker pool like any outbox row.
//!
//! - Only a stamped PPD ingreso takes payments: a PUE or a cancelled invoice is a 422, one not
//!   stamped yet a 409 (retry once it is: the REP must name the invoice's UUID).
//! - A payment above the saldo insoluto is a 422 and writes nothing.
//! - `Idempotency-Key` (or `idempotency_key`) as for invoices: the same key with the same body
//!   answers with the same payment (`Idempotency-Replayed: true`), with another body 422
//!   `IDEMPOTENCY_KEY_REUSED`. A payment whose REP the PAC refused (422 `PAC_REJECTED`) stops
//!   counting in the saldo and releases its key and its parcialidad, as an invoice that ended
//!   without a stamp does: the next payment (a retry with corrected data under the same key, or
//!   another) is computed without it.

use crate::domain::PaymentStatus;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{NaiveDateTime, Utc};
use rust_decimal::Decimal;
use serde::Deserialize;

use super::invoices::{header_key, invoice_of};
use super::keys::{self, Caller};
use super::request::AmountInput;
use super::view::{api_status, json_response};
use crate::cfdi::pagos::{DocTraslado, DoctoData, PagoData, USO_CFDI_PAGOS};
use crate::cfdi::{self, InvoiceRequest, TipoComprobante, money};
use crate::domain::{DocumentKind, DocumentState, StampKey, time};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::api::ApiInvoiceRow;
use crate::store::{NewPago, NewPayment, OutboxDraft, PagoOutcome, PagoPlan, PagoRow, Paid};

/// The serie of every REP (their folios are that serie's numbering).
pub const SERIE_PAGOS: &str = "P";

/// The body of `POST /v1/invoices/{id}/payments`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentInput {
    #[serde(default)]
    pub idempotency_key: Option<serde_json::Value>,
    /// When the money arrived, `YYYY-MM-DDThh:mm:ss` at the emisor's place (default: now).
    #[serde(default)]
    pub fecha_pago: Option<String>,
    /// c_FormaPago of the payment (not 99).
    pub forma_pago: String,
    pub monto: AmountInput,
    /// Default: the invoice's currency.
    #[serde(default)]
    pub moneda: Option<String>,
    /// Pesos per unit of `moneda`; required unless MXN.
    #[serde(default)]
    pub tipo_cambio: Option<AmountInput>,
    /// Units of the invoice's currency per unit of `moneda`; required when they differ.
    #[serde(default)]
    pub equivalencia: Option<AmountInput>,
    #[serde(default)]
    pub num_operacion: Option<String>,
}

/// The payment as the API shows it.
pub fn pago_json(p: &PagoRow, invoice: &str) -> serde_json::Value {
    let status = api_status(p.state);
    serde_json::json!({
        "id": p.public_id,
        "invoice": invoice,
        // A refused payment gave up its parcialidad to the next one (store::pagos).
        "parcialidad": (p.parcialidad > 0).then_some(p.parcialidad),
        "fecha_pago": p.paid.fecha_pago,
        "forma_pago": p.paid.forma_pago,
        "monto": p.paid.amount,
        "moneda": p.paid.currency,
        "tipo_cambio": p.paid.tipo_cambio,
        "num_operacion": p.paid.num_operacion,
        "saldo_anterior": p.saldo_anterior,
        "saldo_insoluto": p.saldo_insoluto,
        "status": status,
        "uuid": if status == "stamped" { p.uuid.clone() } else { None },
    })
}

/// The payments of a PPD invoice and what it still owes, for `GET /v1/invoices/{id}`; `None`
/// for an invoice that takes no payments.
pub async fn summary(
    state: &AppState,
    inv: &ApiInvoiceRow,
) -> Result<Option<serde_json::Value>, ApiError> {
    let Some((doc, total)) = ppd_document(inv) else {
        return Ok(None);
    };
    let pagos = state.db.pagos_of_invoice(inv.id).await?;
    let saldo = pagos.iter().rev().find(|p| p.counts()).map_or_else(
        || money::fixed(total, dec(&doc)),
        |p| p.saldo_insoluto.clone(),
    );
    let list: Vec<_> = pagos.iter().map(|p| pago_json(p, &inv.public_id)).collect();
    Ok(Some(
        serde_json::json!({ "payments": list, "saldo_insoluto": saldo }),
    ))
}

fn dec(doc: &InvoiceRequest) -> u32 {
    cfdi::catalogs::currency_decimals(&doc.moneda).unwrap_or(2)
}

/// The frozen request of a PPD ingreso and its Total.
fn ppd_document(inv: &ApiInvoiceRow) -> Option<(InvoiceRequest, Decimal)> {
    let doc: InvoiceRequest = serde_json::from_str(&inv.request_json).ok()?;
    if doc.tipo != TipoComprobante::Ingreso || doc.metodo_pago != "PPD" {
        return None;
    }
    let total = cfdi::build(&doc, "00000000000000000000").ok()?.total;
    Some((doc, total))
}

/// `POST /v1/invoices/{id}/payments`.
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Bytes,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let mut value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))?;
    let explicit = keys::explicit_key(header_key(&req)?, value.get("idempotency_key"))?;
    let input: PaymentInput = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::BadRequest(format!("the body is not a payment: {e}")))?;
    let inv = invoice_of(&state, &caller, &id).await?;
    // The same body for another invoice is another request.
    if let Some(o) = value.as_object_mut() {
        o.insert("invoice".into(), inv.public_id.clone().into());
    }
    let hash = keys::request_hash(&value);
    // A key whose REP the PAC refused is released: recorded again below, it takes it over.
    if let Some(k) = &explicit
        && let Some(p) = state.db.pago_by_key(&caller.rfc_emisor, k.as_str()).await?
        && !p.state.released()
    {
        return replay(&p, &hash, &inv);
    }
    let Some((doc, total)) = ppd_document(&inv) else {
        return Err(ApiError::Validation(format!(
            "invoice {} is not a PPD ingreso: only an invoice issued with metodo_pago PPD receives payments (complemento de pago)",
            inv.public_id
        )));
    };
    let uuid = match inv.state {
        DocumentState::Stamped => inv.uuid.clone().unwrap_or_default(),
        DocumentState::Canceled => {
            return Err(ApiError::Validation(format!(
                "invoice {} is cancelled: it takes no payments",
                inv.public_id
            )));
        }
        s if s.released() => {
            return Err(ApiError::Validation(format!(
                "invoice {} was never stamped: it takes no payments",
                inv.public_id
            )));
        }
        _ => {
            return Err(ApiError::Conflict(format!(
                "invoice {} is not stamped yet; retry once it is (its complemento de pago must name its UUID)",
                inv.public_id
            )));
        }
    };
    let lugar = doc.emisor.lugar_expedicion.clone();
    let fecha_pago = match &input.fecha_pago {
        Some(f) => NaiveDateTime::parse_from_str(f, "%Y-%m-%dT%H:%M:%S").map_err(|_| {
            ApiError::invalid("fecha_pago", format!("{f:?} is not YYYY-MM-DDThh:mm:ss"))
        })?,
        None => time::now_at(&lugar),
    };
    let monto = input.monto.parse("monto")?;
    let tipo_cambio = input
        .tipo_cambio
        .as_ref()
        .map(|t| t.parse("tipo_cambio"))
        .transpose()?;
    let equivalencia = input
        .equivalencia
        .as_ref()
        .map(|t| t.parse("equivalencia"))
        .transpose()?;
    let moneda = input.moneda.clone().unwrap_or_else(|| doc.moneda.clone());
    let public_id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    let new = NewPago {
        public_id: public_id.clone(),
        invoice_id: inv.id,
        rfc_emisor: caller.rfc_emisor.clone(),
        idem_key: explicit.as_ref().map(|k| k.as_str().to_owned()),
        request_hash: hash.clone(),
        paid: Paid {
            fecha_pago: fecha_pago.format("%Y-%m-%dT%H:%M:%S").to_string(),
            forma_pago: input.forma_pago.clone(),
            amount: monto.to_string(),
            currency: moneda.clone(),
            tipo_cambio: tipo_cambio.map(|t| t.to_string()),
            num_operacion: input.num_operacion.clone(),
        },
    };
    let dec_doc = dec(&doc);
    let built = cfdi::build(&doc, "00000000000000000000")
        .map_err(|e| ApiError::Internal(format!("the invoice's request no longer builds: {e}")))?;
    if built
        .impuestos
        .as_ref()
        .is_some_and(|i| !i.retenciones.is_empty())
    {
        // Its REP would need RetencionesDR, which the engine does not write yet.
        return Err(ApiError::Validation(format!(
            "invoice {} carries retenciones: its payments cannot be recorded here yet",
            inv.public_id
        )));
    }
    let traslados = DocTraslado::of(&built);
    let plan = |parcialidad: u32, last: Option<&str>| -> Result<PagoPlan, String> {
        let saldo_anterior = match last {
            Some(s) => s.parse::<Decimal>().map_err(|e| e.to_string())?,
            None => total,
        };
        if saldo_anterior <= Decimal::ZERO {
            return Err(format!("invoice {} is fully paid", inv.public_id));
        }
        let pago = PagoData {
            fecha_pago,
            forma_pago: input.forma_pago.clone(),
            moneda: moneda.clone(),
            tipo_cambio,
            monto,
            num_operacion: input.num_operacion.clone(),
            documento: DoctoData {
                uuid: uuid.clone(),
                serie: inv.serie.clone(),
                folio: inv.folio.clone(),
                moneda: doc.moneda.clone(),
                equivalencia,
                num_parcialidad: parcialidad,
                saldo_anterior,
                total,
                traslados: traslados.clone(),
            },
        };
        let computed = cfdi::pagos::build_pagos(&pago).map_err(|e| e.to_string())?;
        let request = rep_request(&doc, pago, &lugar);
        let mut check = request.clone();
        check.folio = Some("1".into());
        cfdi::build(&check, "00000000000000000000").map_err(|e| e.to_string())?;
        let d = &computed.pago.docto;
        Ok(PagoPlan {
            saldo_anterior: money::fixed(d.saldo_anterior, dec_doc),
            saldo_insoluto: money::fixed(d.saldo_insoluto, dec_doc),
            payment: NewPayment {
                provider: "pago".into(),
                payment_id: public_id.clone(),
                event_id: public_id.clone(),
                amount: monto.to_string(),
                currency: moneda.clone(),
                method: format!("api:{}", caller.name),
                forma_pago: Some(input.forma_pago.clone()),
                customer_json: serde_json::json!({ "invoice": inv.public_id }).to_string(),
                paid_at: Utc::now(),
                livemode: true,
                status: PaymentStatus::InvoicePending,
                reason: None,
                references: Vec::new(),
                lines_json: None,
                tipo_cambio: tipo_cambio.map(|t| t.to_string()),
                arca: None,
            },
            draft: OutboxDraft {
                kind: DocumentKind::Pago,
                stamp_key: StampKey::derive("api", &public_id, DocumentKind::Pago.as_str()),
                request,
                state: DocumentState::Pending,
                error_code: None,
                error_message: None,
                test_mode: false,
            },
        })
    };
    let pago_id = match state.db.record_pago(&new, plan).await? {
        PagoOutcome::Recorded { id } => id,
        PagoOutcome::Refused(why) => {
            return Err(ApiError::Validation(format!(
                "the payment cannot be recorded: {why}"
            )));
        }
        PagoOutcome::KeyTaken => {
            let k = explicit.as_ref().map(|k| k.as_str()).unwrap_or_default();
            return match state.db.pago_by_key(&caller.rfc_emisor, k).await? {
                Some(p) if !p.state.released() => replay(&p, &hash, &inv),
                _ => Err(ApiError::InProgress { invoice: None }),
            };
        }
    };
    tracing::info!(payment = %public_id, invoice = %inv.public_id, "payment recorded, REP queued");
    wait_and_answer(&state, pago_id, &inv).await
}

/// The REP's request: the invoice's emisor and receptor (UsoCFDI CP01), issued now.
fn rep_request(doc: &InvoiceRequest, pago: PagoData, lugar: &str) -> InvoiceRequest {
    let receptor = doc.receptor.with_uso(USO_CFDI_PAGOS);
    InvoiceRequest {
        tipo: TipoComprobante::Pago,
        serie: Some(SERIE_PAGOS.to_owned()),
        folio: None,
        fecha: time::now_at(lugar),
        moneda: "XXX".into(),
        tipo_cambio: None,
        forma_pago: String::new(),
        metodo_pago: String::new(),
        condiciones_de_pago: None,
        exportacion: "01".into(),
        prices_include_tax: false,
        emisor: doc.emisor.clone(),
        receptor,
        informacion_global: None,
        relacionados: Vec::new(),
        lines: Vec::new(),
        pago: Some(pago),
    }
}

/// A retry under a key already used: the same payment (503 while its REP's outcome is
/// unknown), or 422 for another body.
fn replay(p: &PagoRow, hash: &str, inv: &ApiInvoiceRow) -> Result<HttpResponse, ApiError> {
    if p.request_hash != hash {
        return Err(ApiError::KeyReused);
    }
    if p.state == DocumentState::Unknown {
        // As for invoices: the REP's outcome at the PAC is what is unknown, until the worker
        // has asked.
        return Err(ApiError::OutcomeUnknown {
            invoice: p.public_id.clone(),
        });
    }
    let status = if p.state == DocumentState::Stamped {
        StatusCode::CREATED
    } else {
        StatusCode::ACCEPTED
    };
    Ok(json_response(
        status,
        pago_json(p, &inv.public_id).to_string(),
        true,
    ))
}

/// Waits (bounded) for the REP's stamp: 201 stamped, 422 refused by the PAC (the payment is
/// released), 503 outcome unknown, 202 still queued.
async fn wait_and_answer(
    state: &AppState,
    pago_id: i64,
    inv: &ApiInvoiceRow,
) -> Result<HttpResponse, ApiError> {
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(state.settings.api.wait_for_stamp_ms);
    let mut pause = Duration::from_millis(20);
    loop {
        let p = state
            .db
            .pago_by_id(pago_id)
            .await?
            .ok_or_else(|| ApiError::NotFound("the payment is gone".into()))?;
        let body = || pago_json(&p, &inv.public_id).to_string();
        match p.state {
            DocumentState::Stamped => return Ok(json_response(StatusCode::CREATED, body(), false)),
            DocumentState::Unknown => {
                return Err(ApiError::OutcomeUnknown {
                    invoice: p.public_id,
                });
            }
            s if s.released() => {
                return Err(ApiError::PacRejected {
                    invoice: p.public_id,
                    code: p.last_error_code.unwrap_or_else(|| "FAILED".into()),
                    message: p.last_error_message.unwrap_or_default(),
                });
            }
            _ if tokio::time::Instant::now() >= deadline => {
                return Ok(json_response(StatusCode::ACCEPTED, body(), false));
            }
            _ => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}
