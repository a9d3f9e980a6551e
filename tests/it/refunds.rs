//! Refunds → CFDI de egreso through the real server, worker and sandbox PAC: one egreso per
//! succeeded refund, related to the ingreso by TipoRelacion 01, in proportion, never over the
//! sale; redeliveries and reordering change nothing; a refund before its ingreso waits.

use autofactura::webhooks::stripe;
use rust_decimal::Decimal;
use serde_json::{Value, json};

use crate::support::rows::{Bind, fetch_rows};
use crate::support::sales::{at, month, refund as charge_refunded, sell};
use crate::support::{Backend, TestApp, spawn_app_with};

pub(crate) const FAST: &str = "[refunds]\ninterval_seconds = 1\n[global]\nauto_issue = false\n";

/// A paid sale of `minor` centavos with the customer's RFC: `pi_test_{suffix}`.
async fn sale(app: &TestApp, suffix: &str, minor: i64) {
    let mut v: Value = serde_json::from_str(&stripe::sample_payment_intent(
        suffix,
        chrono::Utc::now().timestamp(),
        false,
    ))
    .expect("sample");
    v["data"]["object"]["amount"] = json!(minor);
    v["data"]["object"]["amount_received"] = json!(minor);
    let r = app.post_stripe_signed(&v.to_string()).await;
    assert_eq!(r.status(), 200);
}

/// A signed `refund.created` / `refund.updated` of `re_{id}` for `pi_test_{suffix}`, delivered as
/// event `evt_{event}`.
pub async fn refund_event(
    app: &TestApp,
    event: &str,
    kind: &str,
    suffix: &str,
    id: &str,
    minor: i64,
) -> Value {
    let object = json!({
        "id": format!("re_{id}"), "object": "refund", "amount": minor, "currency": "mxn",
        "payment_intent": format!("pi_test_{suffix}"), "charge": format!("ch_test_{suffix}"),
        "status": "succeeded", "created": chrono::Utc::now().timestamp()
    });
    deliver(app, &format!("evt_{event}"), kind, object).await
}

/// Delivers `object` signed as Stripe event `event` of type `kind`: its answer, a 200.
async fn deliver(app: &TestApp, event: &str, kind: &str, object: Value) -> Value {
    let body = stripe::sample_event(event, kind, chrono::Utc::now().timestamp(), false, object);
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
    r.json().await.expect("json")
}

/// Each egreso: (state, uuid, stamped XML) by id.
async fn egresos(app: &TestApp) -> Vec<(String, Option<String>, Option<Vec<u8>>)> {
    fetch_rows(
        &app.db,
        "SELECT state, uuid, stamped_xml FROM outbox WHERE kind = 'egreso' ORDER BY id",
        &[],
    )
    .await
}

/// The stamped ingreso of `pi_test_{suffix}`: its UUID and XML.
async fn ingreso(app: &TestApp, suffix: &str) -> (String, Vec<u8>) {
    let rows: Vec<(Option<String>, Option<Vec<u8>>)> = fetch_rows(
        &app.db,
        "SELECT o.uuid, o.stamped_xml FROM outbox o JOIN payments p ON p.id = o.payment_id \
         WHERE p.payment_id = $1 AND o.kind = 'ingreso'",
        &[Bind::Str(&format!("pi_test_{suffix}"))],
    )
    .await;
    let (uuid, xml) = rows.into_iter().next().expect("the ingreso");
    (uuid.expect("the ingreso is stamped"), xml.expect("its XML"))
}

async fn ingreso_uuid(app: &TestApp, suffix: &str) -> String {
    ingreso(app, suffix).await.0
}

/// An attribute of the root (`cfdi:Comprobante`) or of the first element named `element`.
pub(crate) fn attr(xml: &[u8], element: &str, name: &str) -> String {
    let text = String::from_utf8_lossy(xml);
    let at = text
        .find(&format!("<{element} "))
        .unwrap_or_else(|| panic!("{element} in {text}"));
    let rest = &text[at..];
    let end = rest.find('>').expect("tag end");
    let tag = &rest[..end];
    let key = format!(" {name}=\"");
    let i = tag.find(&key).unwrap_or_else(|| panic!("{name} in {tag}"));
    let v = &tag[i + key.len()..];
    v[..v.find('"').expect("quote")].to_owned()
}

pub(crate) fn total(xml: &[u8]) -> Decimal {
    attr(xml, "cfdi:Comprobante", "Total")
        .parse()
        .expect("Total")
}

fn trasladados(xml: &[u8]) -> Decimal {
    attr(xml, "cfdi:Impuestos", "TotalImpuestosTrasladados")
        .parse()
        .expect("TotalImpuestosTrasladados")
}

/// Waits until `n` egresos exist and none waits for a worker (the pool is running).
pub(crate) async fn wait_egresos(
    app: &TestApp,
    n: usize,
) -> Vec<(String, Option<String>, Option<Vec<u8>>)> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let e = egresos(app).await;
        if e.len() == n && e.iter().all(|(s, _, _)| s == "stamped") {
            return e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "egresos: {:?}",
            e.iter().map(|x| &x.0).collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn a_partial_refund_then_the_rest_give_two_egresos_summing_to_the_sale(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    sale(&app, "pr", 11600).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    let (uuid, original) = ingreso(&app, "pr").await;
    let forma_pago = attr(&original, "cfdi:Comprobante", "FormaPago");
    let sale_total = total(&original);
    refund_event(&app, "pr1", "refund.created", "pr", "pr1", 4999).await;
    let first = wait_egresos(&app, 1).await;
    refund_event(&app, "pr2", "refund.updated", "pr", "pr2", 6601).await;
    let both = wait_egresos(&app, 2).await;
    assert_eq!(
        first[0].1, both[0].1,
        "the first egreso is the same document"
    );
    let mut sum = Decimal::ZERO;
    for (_, _, xml) in &both {
        let xml = xml.as_deref().expect("stamped XML");
        assert_eq!(attr(xml, "cfdi:Comprobante", "TipoDeComprobante"), "E");
        assert_eq!(attr(xml, "cfdi:Comprobante", "MetodoPago"), "PUE");
        assert_eq!(attr(xml, "cfdi:Comprobante", "FormaPago"), forma_pago);
        assert_eq!(attr(xml, "cfdi:CfdiRelacionados", "TipoRelacion"), "01");
        assert_eq!(attr(xml, "cfdi:CfdiRelacionado", "UUID"), uuid);
        assert_eq!(attr(xml, "cfdi:Receptor", "UsoCFDI"), "G02");
        sum += total(xml);
    }
    assert_eq!(
        total(both[0].2.as_deref().expect("xml")),
        Decimal::new(4999, 2)
    );
    assert_eq!(sum, sale_total, "the egresos credit exactly the sale");
    // `invoices list --json` names them and what they credit.
    let listed = app.db.list_documents_and_sales(None).await.expect("list");
    let listed: Vec<Value> = listed
        .iter()
        .map(|d| serde_json::to_value(d).expect("json"))
        .collect();
    let credit_notes: Vec<&Value> = listed.iter().filter(|d| d["kind"] == "egreso").collect();
    assert_eq!(credit_notes.len(), 2, "{listed:?}");
    assert!(
        credit_notes
            .iter()
            .all(|d| d["related_uuid"] == json!(uuid)),
        "{credit_notes:?}"
    );
    // Nothing more can be credited: a third refund is over the sale.
    let over = refund_event(&app, "pr3", "refund.created", "pr", "pr3", 1).await;
    assert_eq!(over["refunds"], json!(["needs_attention"]), "{over}");
    pool.shutdown().await;
}

async fn a_centavo_of_iva_one_egreso_cannot_carry_is_carried_by_the_next(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    // 115.99 with IVA 16 % included (16.00), refunded 1.49, 0.14 and the rest: the second
    // egreso cannot carry its 0.01 of IVA within tolerance of its Base and carries 0.02, so the
    // third, told by the store what the first two credited, carries a centavo less than its
    // own share (refund::tests::a_centavo_an_egreso_cannot_carry_is_carried_by_the_next).
    sale(&app, "cc", 11599).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    let (_, original) = ingreso(&app, "cc").await;
    for (n, (id, minor)) in [("cc1", 149), ("cc2", 14), ("cc3", 11436)]
        .into_iter()
        .enumerate()
    {
        refund_event(&app, id, "refund.created", "cc", id, minor).await;
        wait_egresos(&app, n + 1).await;
    }
    let all = wait_egresos(&app, 3).await;
    let xmls: Vec<&[u8]> = all
        .iter()
        .map(|(_, _, x)| x.as_deref().expect("stamped XML"))
        .collect();
    let totals: Vec<Decimal> = xmls.iter().map(|x| total(x)).collect();
    let iva: Vec<Decimal> = xmls.iter().map(|x| trasladados(x)).collect();
    assert_eq!(totals, [149, 14, 11436].map(|c| Decimal::new(c, 2)));
    assert_eq!(iva, [21, 2, 1577].map(|c| Decimal::new(c, 2)));
    assert_eq!(totals.iter().sum::<Decimal>(), total(&original));
    assert_eq!(
        iva.iter().sum::<Decimal>(),
        trasladados(&original),
        "the egresos credit exactly the sale's IVA"
    );
    pool.shutdown().await;
}

async fn redeliveries_and_reordering_give_one_egreso_per_refund(b: Backend) {
    let admin = format!(
        "{FAST}[admin]\npassword = \"{}\"\n",
        crate::support::admin::PASSWORD
    );
    let Some(app) = spawn_app_with(b, &admin).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    sale(&app, "rd", 20000).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    // The same refund three times: as refund.created, its redelivery, and refund.updated.
    let a = refund_event(&app, "rd1", "refund.created", "rd", "rd1", 5000).await;
    let again = refund_event(&app, "rd1", "refund.created", "rd", "rd1", 5000).await;
    let updated = refund_event(&app, "rd1u", "refund.updated", "rd", "rd1", 5000).await;
    assert_eq!(a["refunds"], json!(["egreso"]), "{a}");
    assert_eq!(again["outcome"], "duplicate", "{again}");
    assert_eq!(updated["refunds"], json!(["duplicate"]), "{updated}");
    // Two refunds whose events arrive in reverse order (the later one first).
    refund_event(&app, "rd3", "refund.created", "rd", "rd3", 3000).await;
    refund_event(&app, "rd2", "refund.created", "rd", "rd2", 2000).await;
    let e = wait_egresos(&app, 3).await;
    let totals: Vec<Decimal> = e
        .iter()
        .map(|(_, _, x)| total(x.as_deref().expect("xml")))
        .collect();
    assert_eq!(
        totals,
        [
            Decimal::new(5000, 2),
            Decimal::new(3000, 2),
            Decimal::new(2000, 2)
        ]
    );
    let uuids: std::collections::HashSet<_> = e.iter().map(|(_, u, _)| u.clone()).collect();
    assert_eq!(uuids.len(), 3, "three distinct egresos");
    let refunds: Vec<(String, String)> = fetch_rows(
        &app.db,
        "SELECT refund_id, status FROM refunds ORDER BY id",
        &[],
    )
    .await;
    assert_eq!(refunds.len(), 3, "{refunds:?}");
    // The sale's admin page: its ingreso, its three egresos and what remains refundable.
    let row: Vec<(i64,)> = fetch_rows(
        &app.db,
        "SELECT id FROM payments WHERE payment_id = 'pi_test_rd'",
        &[],
    )
    .await;
    let browser = crate::support::admin::Browser::new(&app);
    browser.login().await;
    let page = browser.get(&format!("/admin/payments/{}", row[0].0)).await;
    assert_eq!(page.status, 200);
    for id in ["re_rd1", "re_rd2", "re_rd3"] {
        assert!(page.body.contains(id), "{id} on the sale's page");
    }
    assert_eq!(page.body.matches("class=\"refund\"").count(), 3);
    // Each says what it became in words, its stored status kept for scripts.
    assert_eq!(
        page.body
            .matches("<tr class=\"refund\" data-status=\"egreso\">")
            .count(),
        3
    );
    assert_eq!(page.body.matches("Credited by an egreso").count(), 3);
    let refundable = &page.body[page.body.find("id=\"refundable\"").expect("refundable")..];
    assert!(refundable[..40].contains("100.00"), "{}", &refundable[..40]);
    for (_, uuid, _) in &e {
        assert!(
            page.body.contains(uuid.as_deref().expect("uuid")),
            "each egreso's UUID"
        );
    }
    pool.shutdown().await;
}

async fn a_refund_before_the_ingreso_is_stamped_waits_then_is_stamped(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    // The refund arrives before the sale's own webhook, then the sale before any worker runs.
    let early = refund_event(&app, "ea1", "refund.created", "ea", "ea1", 1600).await;
    assert_eq!(early["refunds"], json!(["awaiting_original"]), "{early}");
    sale(&app, "ea", 11600).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(
        egresos(&app).await.is_empty(),
        "no egreso before the ingreso is stamped"
    );
    let (pool, _services) = app.start_pool().await;
    let e = wait_egresos(&app, 1).await;
    let uuid = ingreso_uuid(&app, "ea").await;
    let xml = e[0].2.as_deref().expect("xml");
    assert_eq!(attr(xml, "cfdi:CfdiRelacionado", "UUID"), uuid);
    assert_eq!(total(xml), Decimal::new(1600, 2));
    pool.shutdown().await;
}

async fn a_refund_of_a_sale_awaiting_the_global_reduces_it_without_an_egreso(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    let oct = month(2);
    sell(&app, "ag", at(oct, 9, 12), 8000).await;
    let out = refund_event(&app, "ag1", "refund.created", "ag", "ag1", 3000).await;
    assert_eq!(out["refunds"], json!(["global_reduced"]), "{out}");
    // A charge.refunded listing no refunds credits nothing more (its refund.* events do).
    charge_refunded(&app, "ag", 8000, 3000).await;
    assert!(egresos(&app).await.is_empty());
    let refunds: Vec<(String,)> = fetch_rows(&app.db, "SELECT status FROM refunds", &[]).await;
    assert_eq!(refunds, [("global_reduced".to_owned(),)]);
    // Another sale of the month, refunded in full by two refunds: left out of the global.
    sell(&app, "ag2", at(oct, 10, 12), 1000).await;
    refund_event(&app, "ag2a", "refund.created", "ag2", "ag2a", 400).await;
    refund_event(&app, "ag2b", "refund.created", "ag2", "ag2b", 600).await;
    let (global, _) = issue_global(&app).await;
    let xml = global.as_deref().expect("the global is stamped");
    assert_eq!(
        total(xml),
        Decimal::new(5000, 2),
        "the global carries 80.00 − 30.00"
    );
    assert_eq!(
        attr(xml, "cfdi:Concepto", "NoIdentificacion"),
        "pi_test_ag",
        "one concepto"
    );
    assert!(
        egresos(&app).await.is_empty(),
        "no egreso for a sale refunded before its global"
    );
    assert_eq!(
        crate::support::sales::payment_status(&app, "pi_test_ag2")
            .await
            .0,
        "refunded"
    );
}

/// Issues the globals of every closed period and stamps them: the last global's XML and UUID.
async fn issue_global(app: &TestApp) -> (Option<Vec<u8>>, String) {
    let planner = autofactura::global::Planner::new(&app.settings).expect("planner");
    autofactura::global::issue(
        &app.db,
        &planner,
        autofactura::global::Scope::now_through(None),
        "test",
    )
    .await
    .expect("issue");
    app.drain(30).await;
    let rows: Vec<(Option<Vec<u8>>, Option<String>)> = fetch_rows(
        &app.db,
        "SELECT stamped_xml, uuid FROM outbox WHERE kind = 'global' ORDER BY id DESC",
        &[],
    )
    .await;
    let (xml, uuid) = rows.into_iter().next().expect("a global");
    (xml, uuid.expect("stamped"))
}

async fn a_refund_of_a_sale_in_a_stamped_global_is_an_egreso_to_publico_en_general(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    let oct = month(2);
    sell(&app, "gl", at(oct, 9, 12), 8000).await;
    sell(&app, "gl2", at(oct, 10, 12), 2000).await;
    let (_, global_uuid) = issue_global(&app).await;
    let (pool, _services) = app.start_pool().await;
    let out = refund_event(&app, "gl1", "refund.created", "gl", "gl1", 2000).await;
    assert_eq!(out["refunds"], json!(["egreso"]), "{out}");
    let e = wait_egresos(&app, 1).await;
    let xml = e[0].2.as_deref().expect("xml");
    assert_eq!(attr(xml, "cfdi:Comprobante", "TipoDeComprobante"), "E");
    assert_eq!(attr(xml, "cfdi:Receptor", "Rfc"), "XAXX010101000");
    assert_eq!(attr(xml, "cfdi:Receptor", "UsoCFDI"), "S01");
    assert_eq!(attr(xml, "cfdi:CfdiRelacionado", "UUID"), global_uuid);
    assert_eq!(attr(xml, "cfdi:Concepto", "NoIdentificacion"), "pi_test_gl");
    assert_eq!(total(xml), Decimal::new(2000, 2));
    pool.shutdown().await;
}

/// A sale refunded in part while it waited for its global, then twice more once the global
/// (carrying the rest) is stamped: each egreso credits exactly its refund, measured against
/// the concepto the global carries, and together they credit exactly that concepto.
async fn refunds_after_a_reduced_global_credit_exactly_its_concepto(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    let oct = month(2);
    sell(&app, "gr", at(oct, 9, 12), 8000).await;
    let out = refund_event(&app, "gr1", "refund.created", "gr", "gr1", 3000).await;
    assert_eq!(out["refunds"], json!(["global_reduced"]), "{out}");
    let (global, global_uuid) = issue_global(&app).await;
    let global = global.expect("the global is stamped");
    assert_eq!(total(&global), Decimal::new(5000, 2));
    let (pool, _services) = app.start_pool().await;
    let out = refund_event(&app, "gr2", "refund.created", "gr", "gr2", 2000).await;
    assert_eq!(out["refunds"], json!(["egreso"]), "{out}");
    let out = refund_event(&app, "gr3", "refund.created", "gr", "gr3", 3000).await;
    assert_eq!(out["refunds"], json!(["egreso"]), "{out}");
    let e = wait_egresos(&app, 2).await;
    pool.shutdown().await;
    let xmls: Vec<&[u8]> = e.iter().map(|x| x.2.as_deref().expect("xml")).collect();
    for x in &xmls {
        assert_eq!(attr(x, "cfdi:CfdiRelacionado", "UUID"), global_uuid);
    }
    assert_eq!(
        (total(xmls[0]), total(xmls[1])),
        (Decimal::new(2000, 2), Decimal::new(3000, 2)),
        "each egreso is its refund"
    );
    assert_eq!(
        trasladados(xmls[0]) + trasladados(xmls[1]),
        trasladados(&global),
        "together they credit the concepto's IVA"
    );
}

/// The refund rows' statuses, oldest first.
/// A refund recorded between the global's read of its sales and its freeze: the freeze rolls
/// back (the global would carry the sale unreduced), and the next plan carries what was kept.
async fn a_refund_recorded_while_the_global_is_planned_rolls_its_freeze_back(b: Backend) {
    use autofactura::store::Frozen;
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    sell(&app, "rg", at(month(2), 9, 12), 8000).await;
    let g = crate::support::sales::planned_global(&app).await;
    let out = refund_event(&app, "rg1", "refund.created", "rg", "rg1", 3000).await;
    assert_eq!(out["refunds"], json!(["global_reduced"]), "{out}");
    match app.db.freeze_global(&g).await.expect("freeze") {
        Frozen::Changed(why) => assert!(why.contains("recorded meanwhile"), "{why}"),
        other => panic!("froze 80.00 over a sale refunded 30.00 meanwhile: {other:?}"),
    }
    let (global, _) = issue_global(&app).await;
    let xml = global.as_deref().expect("the global is stamped");
    assert_eq!(total(xml), Decimal::new(5000, 2), "80.00 − 30.00");
    assert!(egresos(&app).await.is_empty());
}

/// Waits (30 s at most) until `sql`'s single text column reads `want`.
async fn wait_for(app: &TestApp, sql: &str, want: &str) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let rows: Vec<(String,)> = fetch_rows(&app.db, sql, &[]).await;
        if rows.first().is_some_and(|r| r.0 == want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sql}: {rows:?}, not {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Under `full = "cancel"`, a full refund whose cancellation the receptor must accept, and
/// rejects: the ingreso stays vigente and the refund is credited by an egreso instead.
async fn a_cancellation_the_receptor_rejects_falls_back_to_an_egreso(b: Backend) {
    use autofactura::pacsim::Sandbox;
    use autofactura::pacsim::faults::FaultSpec;
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, _sim) = Sandbox::start_in_process(
        &dir.path().join("sim.jsonl"),
        FaultSpec::parse("").expect("faults"),
    )
    .await
    .expect("sandbox");
    let toml = format!(
        "[pac]\nkind = \"sandbox\"\nurl = \"{url}\"\n[worker]\nlease_seconds = 2\n\
         idle_poll_ms = 50\nbackoff_base_seconds = 1\nbackoff_cap_seconds = 1\n\
         [refunds]\ninterval_seconds = 1\nfull = \"cancel\"\n[global]\nauto_issue = false\n"
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    sale(&app, "rj", 250_000).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    // Five days later, 2,500.00 MXN: the SAT asks the receptor.
    crate::support::sim::advance_clock(&app.http, &url, 5 * 86_400).await;
    let full = refund_event(&app, "rj1", "refund.created", "rj", "rj1", 250_000).await;
    assert_eq!(full["refunds"], json!(["canceling"]), "{full}");
    wait_for(&app, "SELECT state FROM cancellations", "pending_receiver").await;
    let (uuid,): (String,) = fetch_rows(
        &app.db,
        "SELECT uuid FROM outbox WHERE kind = 'ingreso'",
        &[],
    )
    .await
    .remove(0);
    let r = app
        .http
        .post(format!("{url}/_sim/cancellations/{uuid}/reject"))
        .send()
        .await
        .expect("sim");
    assert!(r.status().is_success(), "{}", r.status());
    // The egreso is frozen and sent. (The sandbox's clock, moved five days on to need the
    // receptor, then finds its Fecha past the 72 hours: it ends `expired` rather than stamped,
    // which the test accepts; a real clock does not jump.)
    wait_for(
        &app,
        "SELECT CASE WHEN state IN ('stamped', 'expired') THEN 'sent' ELSE state END \
         FROM outbox WHERE kind = 'egreso'",
        "sent",
    )
    .await;
    assert_eq!(refund_statuses(&app).await, ["egreso"]);
    wait_for(&app, "SELECT state FROM cancellations", "rejected").await;
    wait_for(
        &app,
        "SELECT state FROM outbox WHERE kind = 'ingreso'",
        "stamped",
    )
    .await;
    let (request, amount): (String, String) = fetch_rows(
        &app.db,
        "SELECT o.request_json, p.amount FROM outbox o JOIN payments p ON p.id = o.payment_id \
         WHERE o.kind = 'egreso'",
        &[],
    )
    .await
    .remove(0);
    assert!(
        request.contains(&uuid),
        "the egreso relates the ingreso it credits"
    );
    assert_eq!(amount, "2500.00", "the whole sale");
    pool.shutdown().await;
}

/// A Mercado Pago API over HTTP answering payment `id` (116.00 MXN, the sample) with the
/// refunds in `refunds` so far.
fn fake_mp(refunds: Refunds) -> String {
    crate::support::sales::serve(move |cfg| {
        let refunds = refunds.clone();
        cfg.route(
            "/v1/payments/{id}",
            actix_web::web::get().to(move |id: actix_web::web::Path<String>| {
                let refunds = refunds.lock().expect("refunds").clone();
                async move {
                    let approved = (chrono::Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
                    let mut p: Value = serde_json::from_str(
                        &autofactura::webhooks::mercadopago::sample_payment(&id, &approved),
                    )
                    .expect("sample");
                    let refunded: Decimal = refunds
                        .iter()
                        .map(|r| r["amount"].to_string().parse::<Decimal>().expect("amount"))
                        .sum();
                    p["transaction_amount_refunded"] =
                        serde_json::from_str(&refunded.to_string()).expect("number");
                    if refunded == Decimal::new(11600, 2) {
                        p["status"] = json!("refunded");
                    }
                    p["refunds"] = json!(refunds);
                    actix_web::HttpResponse::Ok().json(p)
                }
            }),
        );
    })
}

/// The app with a Mercado Pago API over HTTP whose payments list `refunds` (more may be pushed
/// later), and that list.
async fn mp_app(b: Backend, refunds: Vec<Value>) -> Option<(TestApp, Refunds)> {
    let refunds = std::sync::Arc::new(std::sync::Mutex::new(refunds));
    let mp = fake_mp(refunds.clone());
    let app = spawn_app_with(b, &format!("api_base = \"{mp}\"\n{FAST}")).await?;
    Some((app, refunds))
}

type Refunds = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;

/// Mercado Pago notification `n` that payment `data_id` changed; the answer.
async fn mp_notify(app: &TestApp, n: &str, data_id: &str) -> Value {
    crate::support::sales::mp_notify(app, n, "payment.updated", data_id).await
}

/// A Mercado Pago sale refunded in two parts, through the server and its API: one egreso per
/// approved refund, the two summing to the sale; a notification delivered again credits
/// nothing more.
async fn a_mercado_pago_sale_refunded_in_two_parts_gives_two_egresos(b: Backend) {
    let Some((app, refunds)) = mp_app(b, Vec::new()).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let ack = mp_notify(&app, "n-1", "9101").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    crate::support::rows::wait_drained(&app.db, 30).await;
    let refund = |id: i64, amount: &str| {
        json!({ "id": id, "amount": serde_json::from_str::<Value>(amount).expect("n"),
                "status": "approved", "date_created": chrono::Utc::now().to_rfc3339() })
    };
    refunds.lock().expect("refunds").push(refund(5101, "16.00"));
    mp_notify(&app, "n-2", "9101").await;
    wait_egresos(&app, 1).await;
    // Delivered again: nothing more is credited.
    mp_notify(&app, "n-2", "9101").await;
    mp_notify(&app, "n-3", "9101").await;
    refunds
        .lock()
        .expect("refunds")
        .push(refund(5102, "100.00"));
    mp_notify(&app, "n-4", "9101").await;
    let e = wait_egresos(&app, 2).await;
    let sum: Decimal = e.iter().map(|x| total(x.2.as_deref().expect("xml"))).sum();
    assert_eq!(
        sum,
        Decimal::new(11600, 2),
        "the egresos credit the whole sale"
    );
    assert_eq!(refund_statuses(&app).await, ["egreso", "egreso"]);
    pool.shutdown().await;
}

/// A Mercado Pago payment seen for the first time already refunded, with the process gone
/// between the sale's commit and its refunds' record (here the refunds' insert fails then,
/// as a kill would leave it): the notification stays to be fetched again, not done, and the
/// next delivery records the refund once, the sale being a duplicate by then.
async fn a_refund_lost_after_its_sales_commit_is_recorded_by_the_next_delivery(b: Backend) {
    let refund = json!({ "id": 5201, "amount": 16.00, "status": "approved",
        "date_created": chrono::Utc::now().to_rfc3339() });
    let Some((app, _)) = mp_app(b, vec![refund]).await else {
        return;
    };
    deliver_across_a_failed_refund_insert(&app, b, "n-1", "9201").await;
    let count = |sql: &'static str| crate::support::rows::count(&app.db, sql);
    assert_eq!(
        count("SELECT COUNT(*) FROM payments WHERE payment_id = '9201'").await,
        1,
        "the sale was recorded"
    );
    let (pool, _services) = app.start_pool().await;
    wait_egresos(&app, 1).await;
    assert_eq!(refund_statuses(&app).await, ["egreso"]);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_events WHERE status = 'pending_fetch'").await,
        0
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM outbox o JOIN payments p ON p.id = o.payment_id \
             WHERE p.payment_id = '9201' AND o.kind = 'ingreso' AND o.state = 'stamped'"
        )
        .await,
        1,
        "the sale is invoiced once"
    );
    pool.shutdown().await;
}

/// Delivers Mercado Pago notification `n` of payment `data_id` while every insert into
/// `refunds` fails (as a process killed right before it would leave things): the answer is a
/// 5xx, no refund is recorded and the notification stays to be fetched again. Then, the
/// inserts working again, delivers it again as Mercado Pago does after a 5xx: a 200.
async fn deliver_across_a_failed_refund_insert(app: &TestApp, b: Backend, n: &str, data_id: &str) {
    let (fail, heal) = match b {
        Backend::Sqlite => (
            "CREATE TRIGGER refunds_fail BEFORE INSERT ON refunds \
             BEGIN SELECT RAISE(ABORT, 'refunds unavailable'); END",
            "DROP TRIGGER refunds_fail",
        ),
        Backend::Postgres => (
            "CREATE FUNCTION refunds_fail() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refunds unavailable'; END $$; \
             CREATE TRIGGER refunds_fail BEFORE INSERT ON refunds \
             FOR EACH ROW EXECUTE FUNCTION refunds_fail()",
            "DROP TRIGGER refunds_fail ON refunds; DROP FUNCTION refunds_fail()",
        ),
    };
    crate::support::rows::exec_sql(&app.db, fail).await;
    let body = json!({ "id": n, "live_mode": false, "type": "payment",
        "action": "payment.updated", "data": { "id": data_id } })
    .to_string();
    let r = app.post_mp_signed(data_id, &body).await;
    assert!(r.status().is_server_error(), "{}", r.status());
    assert_eq!(
        crate::support::rows::count(&app.db, "SELECT COUNT(*) FROM refunds").await,
        0
    );
    assert_eq!(
        crate::support::rows::count(
            &app.db,
            "SELECT COUNT(*) FROM webhook_events WHERE status = 'pending_fetch'"
        )
        .await,
        1,
        "the notification is not done while its refund is unrecorded"
    );
    crate::support::rows::exec_sql(&app.db, heal).await;
    let r = app.post_mp_signed(data_id, &body).await;
    assert_eq!(r.status(), 200);
}

/// The same window for a payment refunded in full, which Mercado Pago reports as `refunded`
/// (its notification records the refund, no sale): the notification is done only once the
/// refund is recorded.
async fn a_full_refund_lost_before_its_record_is_recorded_by_the_next_delivery(b: Backend) {
    let Some((app, refunds)) = mp_app(b, Vec::new()).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let ack = mp_notify(&app, "n-1", "9301").await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    crate::support::rows::wait_drained(&app.db, 30).await;
    refunds.lock().expect("refunds").push(json!({
        "id": 5301, "amount": 116.00, "status": "approved",
        "date_created": chrono::Utc::now().to_rfc3339() }));
    deliver_across_a_failed_refund_insert(&app, b, "n-2", "9301").await;
    let count = |sql: &'static str| crate::support::rows::count(&app.db, sql);
    wait_egresos(&app, 1).await;
    assert_eq!(refund_statuses(&app).await, ["egreso"]);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_events WHERE status = 'recorded'").await,
        1,
        "the notification ends as what it meant"
    );
    pool.shutdown().await;
}

pub(crate) async fn refund_statuses(app: &TestApp) -> Vec<String> {
    let rows: Vec<(String,)> =
        fetch_rows(&app.db, "SELECT status FROM refunds ORDER BY id", &[]).await;
    rows.into_iter().map(|r| r.0).collect()
}

async fn under_the_cancel_policy_a_full_refund_cancels_the_ingreso_and_a_partial_one_is_credited(
    b: Backend,
) {
    let cancel =
        "[refunds]\ninterval_seconds = 1\nfull = \"cancel\"\n[global]\nauto_issue = false\n";
    let Some(app) = spawn_app_with(b, cancel).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    sale(&app, "cx", 11600).await;
    sale(&app, "cp", 11600).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    let full = refund_event(&app, "cx1", "refund.created", "cx", "cx1", 11600).await;
    assert_eq!(full["refunds"], json!(["canceling"]), "{full}");
    let part = refund_event(&app, "cp1", "refund.created", "cp", "cp1", 1000).await;
    assert_eq!(part["refunds"], json!(["egreso"]), "{part}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while refund_statuses(&app).await[0] != "canceled" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "refunds: {:?}",
            refund_statuses(&app).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let states: Vec<(String, String)> = fetch_rows(
        &app.db,
        "SELECT p.payment_id, o.state FROM outbox o JOIN payments p ON p.id = o.payment_id \
         WHERE o.kind = 'ingreso' ORDER BY p.payment_id",
        &[],
    )
    .await;
    assert_eq!(
        states,
        [
            ("pi_test_cp".to_owned(), "stamped".to_owned()),
            ("pi_test_cx".to_owned(), "canceled".to_owned())
        ]
    );
    let motivo: Vec<(String,)> = fetch_rows(&app.db, "SELECT motivo FROM cancellations", &[]).await;
    assert_eq!(motivo, [("02".to_owned(),)]);
    let e = wait_egresos(&app, 1).await;
    assert_eq!(
        total(e[0].2.as_deref().expect("xml")),
        Decimal::new(1000, 2)
    );
    pool.shutdown().await;
}

/// A signed `charge.dispute.closed` of `pi_test_{suffix}` with `status`.
async fn dispute_closed(app: &TestApp, suffix: &str, status: &str, minor: i64) -> Value {
    let object = json!({
        "id": format!("dp_{suffix}_{status}"), "object": "dispute", "amount": minor,
        "currency": "mxn", "payment_intent": format!("pi_test_{suffix}"),
        "charge": format!("ch_test_{suffix}"), "status": status, "reason": "fraudulent"
    });
    let event = format!("evt_dp_{suffix}_{status}");
    deliver(app, &event, "charge.dispute.closed", object).await
}

async fn a_lost_dispute_is_a_full_refund_and_a_won_one_changes_nothing(b: Backend) {
    let Some(app) = spawn_app_with(b, FAST).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    sale(&app, "dw", 11600).await;
    sale(&app, "dl", 11600).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    let won = dispute_closed(&app, "dw", "won", 11600).await;
    assert_eq!(won["outcome"], "recorded", "{won}");
    let lost = dispute_closed(&app, "dl", "lost", 11600).await;
    assert_eq!(lost["refunds"], json!(["egreso"]), "{lost}");
    let e = wait_egresos(&app, 1).await;
    let xml = e[0].2.as_deref().expect("xml");
    assert_eq!(total(xml), Decimal::new(11600, 2));
    assert_eq!(
        attr(xml, "cfdi:CfdiRelacionado", "UUID"),
        ingreso_uuid(&app, "dl").await
    );
    assert_eq!(refund_statuses(&app).await, ["egreso"]);
    pool.shutdown().await;
}

on_both_backends!(
    a_lost_dispute_is_a_full_refund_and_a_won_one_changes_nothing,
    under_the_cancel_policy_a_full_refund_cancels_the_ingreso_and_a_partial_one_is_credited,
    a_partial_refund_then_the_rest_give_two_egresos_summing_to_the_sale,
    a_centavo_of_iva_one_egreso_cannot_carry_is_carried_by_the_next,
    redeliveries_and_reordering_give_one_egreso_per_refund,
    a_refund_before_the_ingreso_is_stamped_waits_then_is_stamped,
    a_refund_of_a_sale_awaiting_the_global_reduces_it_without_an_egreso,
    a_refund_of_a_sale_in_a_stamped_global_is_an_egreso_to_publico_en_general,
    refunds_after_a_reduced_global_credit_exactly_its_concepto,
    a_refund_recorded_while_the_global_is_planned_rolls_its_freeze_back,
    a_cancellation_the_receptor_rejects_falls_back_to_an_egreso,
    a_mercado_pago_sale_refunded_in_two_parts_gives_two_egresos,
    a_refund_lost_after_its_sales_commit_is_recorded_by_the_next_delivery,
    a_full_refund_lost_before_its_record_is_recorded_by_the_next_delivery,
);
