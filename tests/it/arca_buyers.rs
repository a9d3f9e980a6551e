//! Argentina (issue 21): the buyer a voucher names and the notas de crédito of refunds, end to
//! end. Signed Mercado Pago webhooks through the real server, a Mercado Pago stand-in whose
//! payments change as the test goes (identification, refunds), the sandbox ARCA checking what
//! ARCA checks. Both backends; the sandbox's own checks once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use autofactura::arca::model::{CbteAsoc, codes};
use autofactura::arca::wsfe::{Request, Solicit, detail_xml, envelope};
use autofactura::arca::{Auth, CbteTipo, DocTipo, VoucherInput, Wsfe};
use autofactura::arcasim::ArcaSim;
use autofactura::arcasim::server::start;
use rust_decimal::Decimal;

use crate::arca_sales::{CUIT, PTO_VTA, authorized, rig_with, sim_vouchers, sqlx_row};
use crate::support::sales::mp_notify;
use crate::support::{Backend, TestApp};

/// The payments the Mercado Pago stand-in answers, by id: JSON bodies the test rewrites.
pub(crate) type Payments = Arc<Mutex<HashMap<String, String>>>;

pub(crate) fn fake_mp(payments: &Payments) -> String {
    let payments = payments.clone();
    crate::support::sales::serve(move |cfg| {
        let payments = payments.clone();
        cfg.app_data(actix_web::web::Data::new(payments)).route(
            "/v1/payments/{id}",
            actix_web::web::get().to(
                |id: actix_web::web::Path<String>, p: actix_web::web::Data<Payments>| async move {
                    let body = p.lock().expect("payments").get(id.as_str()).cloned();
                    match body {
                        Some(b) => actix_web::HttpResponse::Ok()
                            .content_type("application/json")
                            .body(b),
                        None => actix_web::HttpResponse::NotFound().finish(),
                    }
                },
            ),
        );
    })
}

/// An approved ARS payment of `amount` pesos; `payer` is `payer.identification`, `meta` the
/// metadata, `refunds` each `(id, amount)` approved.
pub(crate) fn payment(
    id: &str,
    amount: &str,
    ident: &str,
    meta: &str,
    refunds: &[(&str, &str)],
) -> String {
    let listed: Vec<String> = refunds
        .iter()
        .map(|(rid, a)| {
            format!(
                r#"{{"id": {rid}, "payment_id": {id}, "amount": {a}, "status": "approved",
                "date_created": "2026-08-20T10:00:00.000-03:00"}}"#
            )
        })
        .collect();
    format!(
        r#"{{"id": {id}, "date_created": "2026-08-19T09:40:03.000-03:00",
 "date_approved": "2026-08-19T09:40:03.000-03:00", "payment_method_id": "visa",
 "payment_type_id": "credit_card", "status": "approved", "status_detail": "accredited",
 "currency_id": "ARS", "site_id": "MLA", "description": "Plan Pro", "live_mode": false,
 "transaction_amount": {amount}, "transaction_amount_refunded": 0,
 "payer": {{"email": "cliente@example.com.ar", "identification": {ident}}},
 "metadata": {meta}, "refunds": [{}]}}"#,
        listed.join(",")
    )
}

/// What the sandbox holds at `key`'s number, read through the appliance's voucher row.
async fn at_arca(app: &TestApp, sim_url: &str, key: &str) -> (i32, VoucherInput) {
    let v = authorized(&app.db, key).await;
    let held = sim_vouchers(sim_url)
        .await
        .into_iter()
        .find(|s| s.cbte_tipo == v.cbte_tipo && s.number == v.number)
        .unwrap_or_else(|| panic!("{key}: no voucher at ARCA"));
    assert_eq!(held.cae, v.cae.unwrap_or_default(), "{key}");
    (v.cbte_tipo, held.input)
}

/// Polls until sale `payment_id` leaves `arca_pending` (60 s at most): its status and reason.
pub(crate) async fn settled(app: &TestApp, payment_id: &str) -> (String, String) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, reason) = sqlx_row(app, payment_id).await;
        if status != "arca_pending" {
            return (status, reason.unwrap_or_default());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{payment_id}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn buyers_are_named_by_cuit_cuil_or_dni_and_their_condition_picks_the_class(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let payments = Payments::default();
    let cuit = r#"{"type": "CUIT", "number": "20-26756539-3"}"#;
    for (id, amount, ident, meta) in [
        (
            "7200000001",
            "1210.00",
            cuit,
            r#"{"condicion_iva": "responsable_inscripto"}"#,
        ),
        ("7200000002", "1210.00", cuit, "{}"),
        (
            "7200000003",
            "1210.00",
            r#"{"type": "CUIL", "number": "20267565393"}"#,
            "{}",
        ),
        (
            "7200000004",
            "1210.00",
            r#"{"type": "DNI", "number": 26756539}"#,
            "{}",
        ),
        ("7200000005", "1210.00", "{}", "{}"),
        ("7200000006", "10000000.00", "{}", "{}"),
        (
            "7200000007",
            "1210.00",
            r#"{"type": "CUIT", "number": "20267565394"}"#,
            "{}",
        ),
    ] {
        payments
            .lock()
            .expect("payments")
            .insert(id.into(), payment(id, amount, ident, meta, &[]));
    }
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp(&payments), "").await else {
        return;
    };
    for n in 1..=7 {
        let id = format!("720000000{n}");
        let ack = mp_notify(&app, &format!("n-buyer-{n}"), "payment.created", &id).await;
        assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    }
    // (key, CbteTipo, DocTipo, DocNro, CondicionIVAReceptorId): an RI emisor gives an RI buyer
    // a Factura A; a CUIT whose condition nobody gave is a consumidor final's Factura B.
    let expected = [
        ("7200000001", 1, 80, 20_267_565_393, 1),
        ("7200000002", 6, 80, 20_267_565_393, 5),
        ("7200000003", 6, 86, 20_267_565_393, 5),
        ("7200000004", 6, 96, 26_756_539, 5),
        ("7200000005", 6, 99, 0, 5),
        ("7200000007", 6, 99, 0, 5),
    ];
    for (id, tipo, doc_tipo, doc_nro, condicion) in expected {
        assert_eq!(settled(&app, id).await.0, "arca_authorized", "{id}");
        let (got_tipo, input) = at_arca(&app, sim.url(), &format!("mercadopago:{id}")).await;
        assert_eq!(
            (
                got_tipo,
                input.doc_tipo.code(),
                input.doc_nro,
                input.condicion_iva_receptor
            ),
            (tipo, doc_tipo, doc_nro, condicion),
            "{id}"
        );
    }
    // The unusable CUIT is said on the sale; the anonymous sale over ARCA's limit is held,
    // saying what to do, and nothing of it reached ARCA.
    let (_, reason) = settled(&app, "7200000007").await;
    assert!(reason.contains("20267565394"), "{reason}");
    let (status, reason) = settled(&app, "7200000006").await;
    assert_eq!(status, "needs_attention", "{reason}");
    assert!(reason.contains("DNI, CUIL or CUIT"), "{reason}");
    let at = sim_vouchers(sim.url()).await;
    let count = |t: i32| at.iter().filter(|v| v.cbte_tipo == t).count();
    assert_eq!((count(1), count(6), at.len()), (1, 5, 6), "{at:?}");
    sim.stop().await;
}

/// Polls until refund `refund_id` of Mercado Pago is `arca_credited` (60 s at most).
pub(crate) async fn credited(app: &TestApp, refund_id: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let row = app
            .db
            .refund_status("mercadopago", refund_id)
            .await
            .expect("read");
        if let Some((status, reason)) = &row
            && status.as_str() == "arca_credited"
        {
            return reason.clone().unwrap_or_default();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{refund_id}: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn refunds_become_notas_de_credito_naming_the_sale_once_each(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let payments = Payments::default();
    let (id, dni) = ("7300000001", r#"{"type": "DNI", "number": "26756539"}"#);
    // The first notification already lists a refund: it waits for the sale's voucher.
    let set = |refunds: &[(&str, &str)]| {
        payments
            .lock()
            .expect("payments")
            .insert(id.into(), payment(id, "1210.00", dni, "{}", refunds));
    };
    set(&[("9000001", "300.00")]);
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp(&payments), "").await else {
        return;
    };
    mp_notify(&app, "n-rf-1", "payment.created", id).await;
    let first = credited(&app, "9000001").await;
    assert!(
        first.contains("Nota de Crédito B 00003-00000001"),
        "{first}"
    );
    // The rest, refunded later; then that notification twice more: no third nota.
    set(&[("9000001", "300.00"), ("9000002", "910.00")]);
    mp_notify(&app, "n-rf-2", "payment.updated", id).await;
    let second = credited(&app, "9000002").await;
    assert!(
        second.contains("Nota de Crédito B 00003-00000002"),
        "{second}"
    );
    mp_notify(&app, "n-rf-2", "payment.updated", id).await;
    mp_notify(&app, "n-rf-3", "payment.updated", id).await;
    // A late delivery of an older state (one refund listed) changes nothing either.
    set(&[("9000001", "300.00")]);
    mp_notify(&app, "n-rf-4", "payment.updated", id).await;
    // Rounds run every second: a second nota would have been issued by now.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let at = sim_vouchers(sim.url()).await;
    let sale = at.iter().find(|v| v.cbte_tipo == 6).expect("the Factura B");
    let notas: Vec<_> = at.iter().filter(|v| v.cbte_tipo == 8).collect();
    assert_eq!(
        notas.iter().map(|v| v.number).collect::<Vec<_>>(),
        [1, 2],
        "{at:?}"
    );
    let asoc = CbteAsoc {
        tipo: 6,
        pto_vta: PTO_VTA,
        nro: sale.number,
        cuit: CUIT,
        cbte_fch: chrono::NaiveDate::parse_from_str(&sale.cbte_fch, "%Y%m%d").expect("date"),
    };
    let totals: Vec<String> = notas
        .iter()
        .map(|v| v.input.imp_total.to_string())
        .collect();
    assert_eq!(totals, ["300.00", "910.00"]);
    for v in &notas {
        assert_eq!(
            v.input.cbtes_asoc,
            std::slice::from_ref(&asoc),
            "names the Factura B"
        );
        assert_eq!(
            (v.input.doc_tipo, v.input.doc_nro),
            (DocTipo::Dni, 26_756_539)
        );
    }
    // Together they credit the sale exactly, field by field.
    let sum = |f: fn(&VoucherInput) -> Decimal| notas.iter().map(|v| f(&v.input)).sum::<Decimal>();
    assert_eq!(sum(|i| i.imp_neto), sale.input.imp_neto);
    assert_eq!(sum(|i| i.imp_iva), sale.input.imp_iva);
    assert_eq!(sum(|i| i.iva[0].base_imp), sale.input.iva[0].base_imp);
    assert_eq!(
        app.db
            .arca_voucher("refund:mercadopago:9000002")
            .await
            .expect("read")
            .map(|v| v.number),
        Some(2)
    );
    // Each nota was frozen in the outbox once its sale's voucher was authorized, on a payment
    // row of its own (as an egreso), and its refund names it.
    let frozen: Vec<(String, String, String, String)> = crate::support::rows::fetch_rows(
        &app.db,
        "SELECT o.stamp_key, o.state, p.provider, p.status FROM refunds r \
         JOIN outbox o ON o.id = r.outbox_id JOIN payments p ON p.id = o.payment_id \
         WHERE o.kind = 'arca' ORDER BY r.id",
        &[],
    )
    .await;
    let authorized = |k: &str| {
        let a = "arca_authorized".to_owned();
        (k.to_owned(), a.clone(), "refund".to_owned(), a)
    };
    assert_eq!(
        frozen,
        [
            authorized("refund:mercadopago:9000001"),
            authorized("refund:mercadopago:9000002")
        ]
    );
    // Every payment row reads back typed, a nota's too, and one whose nota ARCA held (its
    // payment row then carries the voucher's `arca_held`).
    crate::support::rows::exec_sql(
        &app.db,
        "UPDATE payments SET status = 'arca_held' WHERE payment_id = 'mercadopago:9000002'",
    )
    .await;
    let rows: Vec<(i64,)> =
        crate::support::rows::fetch_rows(&app.db, "SELECT id FROM payments ORDER BY id", &[]).await;
    assert_eq!(rows.len(), 3, "the sale and its two notas");
    for (row,) in rows {
        let p = app
            .db
            .payment(row)
            .await
            .expect("reads back")
            .expect("exists");
        assert!(p.payment.status.is_arca(), "{p:?}");
    }
    sim.stop().await;
}

async fn an_authorized_voucher_prints_with_arca_s_qr(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let payments = Payments::default();
    let (id, dni) = ("7400000001", r#"{"type": "DNI", "number": "26756539"}"#);
    payments
        .lock()
        .expect("payments")
        .insert(id.into(), payment(id, "1210.00", dni, "{}", &[]));
    let admin = format!(
        "\n[admin]\npassword = \"{}\"\n",
        crate::support::admin::PASSWORD
    );
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp(&payments), &admin).await else {
        return;
    };
    mp_notify(&app, "n-print-1", "payment.created", id).await;
    let key = format!("mercadopago:{id}");
    let v = authorized(&app.db, &key).await;
    let cae = v.cae.clone().expect("a CAE");
    let browser = crate::support::admin::Browser::new(&app);
    browser.login().await;
    // The admin's list links each authorized voucher to its PDF.
    let list = browser.get("/admin/arca").await.body;
    let href = format!("/admin/arca/print?key=mercadopago%3A{id}");
    assert!(list.contains(&format!("href=\"{href}\"")), "{list}");
    let (status, headers, pdf) = browser.get_bytes(&href).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&pdf));
    assert_eq!(headers["content-type"], "application/pdf");
    let text = crate::support::pdf::text(&pdf, None);
    for needle in [
        "FACTURA",
        "COD. 06",
        "00003-00000001",
        cae.as_str(),
        "DNI: 26756539",
        "$ 1.210,00",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
    // The QR (and its link) is ARCA's URL: RG 4892's JSON in base64.
    use base64::Engine;
    let codes = crate::support::pdf::qr_codes(&pdf);
    assert_eq!(codes.len(), 1, "{codes:?}");
    let p = codes[0]
        .strip_prefix("https://www.afip.gob.ar/fe/qr/?p=")
        .expect("ARCA's QR URL");
    let json: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("base64"),
    )
    .expect("json");
    assert_eq!(
        (
            &json["cuit"],
            &json["ptoVta"],
            &json["tipoCmp"],
            &json["nroCmp"]
        ),
        (
            &serde_json::json!(CUIT),
            &serde_json::json!(PTO_VTA),
            &serde_json::json!(6),
            &serde_json::json!(1)
        )
    );
    assert_eq!(json["codAut"].to_string(), cae);
    assert_eq!(
        (json["importe"].as_i64(), json["tipoDocRec"].as_i64()),
        (Some(1210), Some(96))
    );
    // A key without a voucher is not found.
    let (status, _, _) = browser.get_bytes("/admin/arca/print?key=nothing").await;
    assert_eq!(status, 404);
    sim.stop().await;
}

crate::on_both_backends!(
    buyers_are_named_by_cuit_cuil_or_dni_and_their_condition_picks_the_class,
    refunds_become_notas_de_credito_naming_the_sale_once_each,
    an_authorized_voucher_prints_with_arca_s_qr,
);

/// The codes of a rejected answer (errors and observations).
fn codes_of(answer: Solicit) -> Vec<i32> {
    match answer {
        Solicit::Rejected {
            errors,
            observations,
        } => errors.iter().chain(&observations).map(|m| m.code).collect(),
        Solicit::Approved { cae, .. } => panic!("approved with CAE {}", cae.code),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_checks_the_buyer_and_the_credited_voucher_as_arca_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = ArcaSim::open(&dir.path().join("arcasim.json")).expect("sim");
    let sim = start(Arc::new(sim), "127.0.0.1:0").expect("start the sandbox ARCA");
    let auth = Auth {
        token: "t".into(),
        sign: "s".into(),
        cuit: CUIT,
    };
    let w = Wsfe::new(&sim.wsfe_url(), auth, Duration::from_secs(10)).expect("client");
    let today = (chrono::Utc::now() - chrono::Duration::hours(3)).date_naive();
    let request = |tipo: CbteTipo, number: i64, edit: &dyn Fn(&mut VoucherInput)| {
        let mut input = VoucherInput::consumidor_final(
            Decimal::new(121_000, 2),
            autofactura::arca::Alicuota::Veintiuno,
        );
        edit(&mut input);
        Request {
            pto_vta: PTO_VTA,
            cbte_tipo: tipo,
            number,
            cbte_fch: today,
            input,
        }
    };
    let b = CbteTipo::FacturaB;
    let cases: [(Request, i32); 6] = [
        (
            request(b, 1, &|i| {
                i.doc_tipo = DocTipo::Cuit;
                i.doc_nro = 20_267_565_394;
            }),
            codes::DOCUMENT,
        ),
        (
            request(b, 1, &|i| {
                i.doc_tipo = DocTipo::Cuil;
                i.doc_nro = 2_026_756_539;
            }),
            codes::DOCUMENT,
        ),
        (
            request(b, 1, &|i| i.condicion_iva_receptor = 2),
            codes::CONDICION_IVA_INVALID,
        ),
        (
            request(b, 1, &|i| i.condicion_iva_receptor = 1),
            codes::CONDICION_IVA,
        ),
        (
            request(CbteTipo::FacturaA, 1, &|i| {
                i.doc_tipo = DocTipo::Cuit;
                i.doc_nro = 20_267_565_393;
            }),
            codes::CONDICION_IVA,
        ),
        (
            request(CbteTipo::NotaCreditoB, 1, &|_| {}),
            codes::CBTES_ASOC_MISSING,
        ),
    ];
    for (req, code) in cases {
        let answer = w.solicit(&req).await.expect("an answer");
        assert_eq!(codes_of(answer), [code], "{req:?}");
    }
    // Without CondicionIVAReceptorId at all (mandatory under RG 5616).
    let req = request(b, 1, &|_| {});
    let detail = detail_xml(&req).replace("<CondicionIVAReceptorId>5</CondicionIVAReceptorId>", "");
    let body = format!(
        "<Auth><Token>t</Token><Sign>s</Sign><Cuit>{CUIT}</Cuit></Auth><FeCAEReq><FeCabReq>\
         <CantReg>1</CantReg><PtoVta>{PTO_VTA}</PtoVta><CbteTipo>6</CbteTipo></FeCabReq>\
         <FeDetReq>{detail}</FeDetReq></FeCAEReq>"
    );
    let text = reqwest::Client::new()
        .post(sim.wsfe_url())
        .header("content-type", "text/xml; charset=utf-8")
        .body(envelope("FECAESolicitar", &body))
        .send()
        .await
        .expect("post")
        .text()
        .await
        .expect("body");
    assert!(
        text.contains(&format!("<Code>{}</Code>", codes::CONDICION_IVA_MISSING)),
        "{text}"
    );

    // A CUIL buyer's Factura B is authorized; a nota de crédito must name it exactly.
    let sale = request(b, 1, &|i| {
        i.doc_tipo = DocTipo::Cuil;
        i.doc_nro = 20_267_565_393;
    });
    assert!(matches!(
        w.solicit(&sale).await,
        Ok(Solicit::Approved { .. })
    ));
    let asoc = |nro: i64| CbteAsoc {
        tipo: 6,
        pto_vta: PTO_VTA,
        nro,
        cuit: CUIT,
        cbte_fch: today,
    };
    let nc = |a: CbteAsoc| {
        request(CbteTipo::NotaCreditoB, 1, &move |i| {
            i.cbtes_asoc = vec![a.clone()]
        })
    };
    let wrong = w.solicit(&nc(asoc(2))).await.expect("an answer");
    assert_eq!(codes_of(wrong), [codes::CBTE_ASOC_NOT_FOUND]);
    let other_class = CbteAsoc { tipo: 1, ..asoc(1) };
    let wrong = w.solicit(&nc(other_class)).await.expect("an answer");
    assert_eq!(codes_of(wrong), [codes::CBTE_ASOC_NOT_FOUND]);
    assert!(matches!(
        w.solicit(&nc(asoc(1))).await,
        Ok(Solicit::Approved { .. })
    ));
    let at = sim_vouchers(sim.url()).await;
    assert_eq!(
        at.iter()
            .map(|v| (v.cbte_tipo, v.number))
            .collect::<Vec<_>>(),
        [(6, 1), (8, 1)]
    );
    sim.stop().await;
}
