//! Sales are routed by currency: a Stripe sale in ARS becomes an ARCA voucher too, to the buyer
//! its `ar_cuit` tax id (or its metadata) names, and its refund a nota de crédito.

use std::time::Duration;

use autofactura::arca::VoucherInput;
use autofactura::webhooks::stripe;
use serde_json::{Value, json};

use crate::arca_sales::{authorized, fake_mp_ars, rig_with, sim_vouchers};
use crate::support::rows::{Bind, fetch_rows};
use crate::support::{Backend, TestApp};

/// Posts a signed Stripe event of `kind` about `object`; Stripe must get a 200.
async fn post(app: &TestApp, id: &str, kind: &str, object: Value) {
    let body = stripe::sample_event(id, kind, chrono::Utc::now().timestamp(), false, object);
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

/// The status of Stripe's refunds of `payment_ref`, polled until none is waiting (60 s).
async fn refunds_settled(app: &TestApp, payment_ref: &str) -> Vec<(String, Option<String>)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows: Vec<(String, Option<String>)> = fetch_rows(
            &app.db,
            "SELECT status, reason FROM refunds WHERE provider = 'stripe' AND payment_ref = $1",
            &[Bind::Str(payment_ref)],
        )
        .await;
        if !rows.is_empty() && rows.iter().all(|(s, _)| s != "arca_pending") {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refund of {payment_ref} was never credited: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn a_stripe_sale_in_ars_becomes_an_arca_voucher_to_the_buyer_it_names(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp_ars(), "").await else {
        return;
    };
    // Checkout collected the buyer's CUIT; the metadata says a responsable inscripto.
    post(
        &app,
        "evt_ar_cs",
        "checkout.session.completed",
        json!({
            "id": "cs_test_ar1", "object": "checkout.session", "payment_intent": "pi_ar1",
            "payment_status": "paid", "amount_total": 121_000, "currency": "ars",
            "payment_method_types": ["card"],
            "customer_details": {
                "email": "compras@example.com.ar", "name": "Almacén Ñandú S.R.L.",
                "tax_ids": [{ "type": "ar_cuit", "value": "20-26756539-3" }]
            },
            "metadata": { "condicion_iva": "responsable_inscripto" }
        }),
    )
    .await;
    // A PaymentIntent with nothing about its buyer: an anonymous consumidor final.
    post(
        &app,
        "evt_ar_pi",
        "payment_intent.succeeded",
        json!({
            "id": "pi_ar2", "object": "payment_intent", "amount": 60_500,
            "amount_received": 60_500, "currency": "ars", "metadata": {},
            "payment_method_types": ["card"]
        }),
    )
    .await;
    // (key, CbteTipo, DocTipo, DocNro, CondicionIVAReceptorId, ImpTotal)
    for (key, tipo, doc_tipo, doc_nro, condicion, total) in [
        ("stripe:pi_ar1", 1, 80, 20_267_565_393, 1, "1210.00"),
        ("stripe:pi_ar2", 6, 99, 0, 5, "605.00"),
    ] {
        let v = authorized(&app.db, key).await;
        let input: VoucherInput = serde_json::from_str(&v.input).expect("input");
        assert_eq!(
            (
                v.cbte_tipo,
                input.doc_tipo.code(),
                input.doc_nro,
                input.condicion_iva_receptor,
                input.imp_total.to_string()
            ),
            (tipo, doc_tipo, doc_nro, condicion, total.to_owned()),
            "{key}"
        );
    }
    // No CFDI was planned for either, and no exchange rate was asked for: the outbox holds
    // their two vouchers, frozen at ingest, now authorized.
    // (The lane settles a sale right after its voucher's CAE is recorded.)
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows: Vec<(String, String, i64)> = fetch_rows(
            &app.db,
            "SELECT kind, state, COUNT(*) FROM outbox GROUP BY kind, state",
            &[],
        )
        .await;
        if rows == [("arca".into(), "arca_authorized".into(), 2)] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // A partial refund of the Factura A: one Nota de Crédito A naming it, once, however often
    // Stripe tells it.
    let refund = json!({
        "id": "re_ar1", "object": "refund", "amount": 24_200, "currency": "ars",
        "payment_intent": "pi_ar1", "status": "succeeded"
    });
    post(&app, "evt_ar_re1", "refund.created", refund.clone()).await;
    post(&app, "evt_ar_re1", "refund.created", refund.clone()).await;
    post(&app, "evt_ar_re2", "refund.updated", refund).await;
    let rows = refunds_settled(&app, "pi_ar1").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "arca_credited", "{rows:?}");
    let at = sim_vouchers(sim.url()).await;
    let notas: Vec<_> = at.iter().filter(|v| v.cbte_tipo == 3).collect();
    assert_eq!(notas.len(), 1, "{at:?}");
    assert_eq!(at.len(), 3, "{at:?}");
    sim.stop().await;
}

crate::on_both_backends!(a_stripe_sale_in_ars_becomes_an_arca_voucher_to_the_buyer_it_names,);
