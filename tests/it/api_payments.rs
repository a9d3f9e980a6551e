//! Payments of PPD invoices through the API (`POST /v1/invoices/{id}/payments`), each one CFDI
//! tipo P (Pagos 2.0) stamped by the real worker pool at the sandbox PAC, on both backends.

use autofactura::cfdi::dom::{Element, NS_CFDI, NS_PAGOS20};
use autofactura::domain::DeliveryState;
use serde_json::{Value, json};

use crate::api::{Resp, Rig, invoice, rig};
use crate::deliveries::{all_in, subject_of, wait_for};
use crate::support::Backend;
use crate::support::admin::{Browser, PASSWORD, outbox_of};
use crate::support::receiver::{Receiver, webhook_toml};
use crate::support::rows::{Bind, fetch_rows};
use crate::support::smtp::{Smtp, attachment};

/// The API fixture (499.00 + IVA 16 % = 578.84) as a PPD invoice.
fn ppd() -> Value {
    let mut v = invoice();
    v["forma_pago"] = json!("99");
    v["metodo_pago"] = json!("PPD");
    v
}

fn payment(monto: &str, operacion: &str) -> Value {
    json!({ "forma_pago": "03", "monto": monto, "num_operacion": operacion })
}

/// A stamped PPD invoice: its public id. Some rigs wait only briefly for the stamp (a 202, or a
/// 503 while the PAC call is in flight), so this waits for it here.
async fn stamped_ppd(rig: &Rig, key: &str) -> String {
    let r = rig.post(&ppd(), Some(key)).await;
    assert!(matches!(r.status, 201 | 202 | 503), "{}", r.text());
    let v = r.json();
    let id = v["id"].as_str().or(v["error"]["invoice_id"].as_str());
    let id = id.expect("id").to_owned();
    rig.wait_status(&id, "stamped", 30).await;
    id
}

async fn pay(rig: &Rig, invoice: &str, body: &Value, key: Option<&str>) -> Resp {
    let path = format!("/v1/invoices/{invoice}/payments");
    rig.post_to(&path, body, key, Some(&rig.key)).await
}

/// The stamped REP `uuid` as the sandbox PAC holds it: its one DoctoRelacionado.
fn docto_of(rig: &Rig, uuid: &str) -> (Element, String) {
    let rec = rig
        .sim
        .sim()
        .stamp_by_uuid(uuid)
        .expect("the PAC stamped the REP");
    assert_eq!(rec.tipo, "P");
    let root = Element::parse(rec.xml.as_bytes()).expect("parse");
    let pagos = root
        .children_named(NS_CFDI, "Complemento")
        .flat_map(|c| c.children_named(NS_PAGOS20, "Pagos"))
        .next()
        .expect("pago20:Pagos")
        .clone();
    let docto = pagos.path(NS_PAGOS20, &["Pago", "DoctoRelacionado"])[0].clone();
    (docto, rec.xml)
}

async fn two_ppd_payments_give_two_reps_with_their_parcialidad_and_saldo(b: Backend) {
    let admin = format!("[admin]\npassword = \"{PASSWORD}\"\n");
    let Some(rig) = rig(b, "", &admin).await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-1").await;
    let ingreso = rig.get(&format!("/v1/invoices/{id}")).await.json();
    assert_eq!(ingreso["payments"], json!([]));
    assert_eq!(ingreso["saldo_insoluto"], "578.84");

    let expected = [("300.00", "578.84", "278.84"), ("278.84", "278.84", "0.00")];
    let mut uuids = Vec::new();
    for (n, (monto, before, after)) in expected.iter().enumerate() {
        let key = format!("pay-{n}");
        let r = pay(&rig, &id, &payment(monto, &key), Some(&key)).await;
        r.assert_created(false);
        let v = r.json();
        assert_eq!(v["parcialidad"], n + 1, "{v}");
        assert_eq!(
            (v["saldo_anterior"].as_str(), v["saldo_insoluto"].as_str()),
            (Some(*before), Some(*after))
        );
        assert_eq!(v["status"], "stamped");
        let uuid = v["uuid"].as_str().expect("REP uuid").to_owned();
        let (docto, xml) = docto_of(&rig, &uuid);
        assert_eq!(docto.attr("IdDocumento"), ingreso["uuid"].as_str(), "{xml}");
        assert_eq!(
            docto.attr("NumParcialidad"),
            Some((n + 1).to_string().as_str())
        );
        assert_eq!(docto.attr("ImpSaldoAnt"), Some(*before));
        assert_eq!(docto.attr("ImpPagado"), Some(*monto));
        assert_eq!(docto.attr("ImpSaldoInsoluto"), Some(*after));
        assert!(
            xml.contains("UsoCFDI=\"CP01\"") && xml.contains("Moneda=\"XXX\""),
            "{xml}"
        );
        uuids.push(uuid);
    }
    assert_ne!(uuids[0], uuids[1]);
    let shown = rig.get(&format!("/v1/invoices/{id}")).await.json();
    assert_eq!(shown["saldo_insoluto"], "0.00");
    let listed: Vec<&str> = shown["payments"]
        .as_array()
        .expect("payments")
        .iter()
        .map(|p| p["uuid"].as_str().expect("uuid"))
        .collect();
    assert_eq!(listed, uuids);
    assert_eq!(rig.stamps().await.len(), 3, "the ingreso and two REPs");
    // `invoices list --json` names them and the invoice they pay.
    let listed = rig
        .app
        .db
        .list_documents_and_sales(None)
        .await
        .expect("list");
    let pagos: Vec<Value> = listed
        .iter()
        .map(|d| serde_json::to_value(d).expect("json"))
        .filter(|d| d["kind"] == "pago")
        .collect();
    assert_eq!(pagos.len(), 2, "{pagos:?}");
    assert!(
        pagos.iter().all(|d| d["related_uuid"] == ingreso["uuid"]),
        "{pagos:?}"
    );
    // The invoice's page in the admin lists them with their REPs.
    let browser = Browser::new(&rig.app);
    browser.login().await;
    let row = outbox_of(&rig.app, &id).await.payment_id;
    let page = browser.get(&format!("/admin/payments/{row}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("id=\"pagos\""), "{}", page.body);
    assert!(
        page.body.contains("data-parcialidad=\"2\""),
        "{}",
        page.body
    );
    assert!(
        uuids.iter().all(|u| page.body.contains(u.as_str())),
        "{}",
        page.body
    );
    // Paid in full: one centavo more is an overpayment.
    let more = pay(&rig, &id, &payment("0.01", "x"), None).await;
    more.assert_error(422, "VALIDATION_ERROR", "a fully paid invoice");
}

async fn an_overpayment_is_refused_and_writes_nothing(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-2").await;
    let r = pay(&rig, &id, &payment("578.85", "op-1"), Some("over-1")).await;
    r.assert_error(422, "VALIDATION_ERROR", "578.85 over a saldo of 578.84");
    assert!(r.text().contains("overpayment"), "{}", r.text());
    let shown = rig.get(&format!("/v1/invoices/{id}")).await.json();
    assert_eq!(shown["payments"], json!([]), "nothing recorded");
    assert_eq!(shown["saldo_insoluto"], "578.84");
    assert_eq!(rig.stamps().await.len(), 1, "no REP");
    // The key was not taken by the refused payment: a valid one may use it.
    pay(&rig, &id, &payment("578.84", "op-1"), Some("over-1"))
        .await
        .assert_created(false);

    // A PUE invoice takes no payments.
    let pue = rig.post(&invoice(), Some("pue-1")).await;
    pue.assert_created(false);
    let pue_id = pue.json()["id"].as_str().expect("id").to_owned();
    let r = pay(&rig, &pue_id, &payment("1.00", "op-2"), None).await;
    r.assert_error(422, "VALIDATION_ERROR", "a PUE invoice");
    assert!(r.text().contains("PPD"), "{}", r.text());
}

async fn a_repeated_idempotency_key_gives_the_same_payment(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-3").await;
    let body = payment("100.00", "op-7");
    let first = pay(&rig, &id, &body, Some("pay-7")).await;
    first.assert_created(false);
    let again = pay(&rig, &id, &body, Some("pay-7")).await;
    again.assert_created(true);
    assert_eq!(again.json(), first.json(), "the same payment");
    // The key in the body is the same key.
    let mut in_body = body.clone();
    in_body["idempotency_key"] = json!("pay-7");
    pay(&rig, &id, &in_body, None).await.assert_created(true);
    let other = pay(&rig, &id, &payment("50.00", "op-8"), Some("pay-7")).await;
    other.assert_error(422, "IDEMPOTENCY_KEY_REUSED", "another body under the key");
    let shown = rig.get(&format!("/v1/invoices/{id}")).await.json();
    assert_eq!(shown["payments"].as_array().map(Vec::len), Some(1));
    assert_eq!(shown["saldo_insoluto"], "478.84");
    assert_eq!(rig.stamps().await.len(), 2, "the ingreso and one REP");
}

async fn concurrent_payments_of_one_invoice_get_consecutive_parcialidades(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-4").await;
    let bodies = [
        payment("100.00", "a"),
        payment("100.00", "b"),
        payment("100.00", "c"),
    ];
    let (x, y, z) = tokio::join!(
        pay(&rig, &id, &bodies[0], Some("c-1")),
        pay(&rig, &id, &bodies[1], Some("c-2")),
        pay(&rig, &id, &bodies[2], Some("c-3")),
    );
    let mut seen: Vec<(i64, String, String)> = [x, y, z]
        .iter()
        .map(|r| {
            r.assert_created(false);
            let v = r.json();
            let s = |k: &str| v[k].as_str().expect("saldo").to_owned();
            (
                v["parcialidad"].as_i64().expect("n"),
                s("saldo_anterior"),
                s("saldo_insoluto"),
            )
        })
        .collect();
    seen.sort();
    let want = |n, a: &str, b: &str| (n, a.to_owned(), b.to_owned());
    assert_eq!(
        seen,
        vec![
            want(1, "578.84", "478.84"),
            want(2, "478.84", "378.84"),
            want(3, "378.84", "278.84"),
        ]
    );
}

async fn a_payment_waits_for_its_invoice_stamp_409_then_201(b: Backend) {
    let Some(rig) = rig(b, "", "[api]\nwait_for_stamp_ms = 100\n").await else {
        return;
    };
    // No worker yet: the invoice stays queued.
    let queued = rig.post(&ppd(), Some("ppd-5")).await;
    assert_eq!(queued.status, 202, "{}", queued.text());
    let id = queued.json()["id"].as_str().expect("id").to_owned();
    let early = pay(&rig, &id, &payment("100.00", "e"), Some("early")).await;
    early.assert_error(409, "CONFLICT", "a payment of an invoice not stamped yet");
    assert!(early.text().contains("not stamped yet"), "{}", early.text());
    let (_pool, _s) = rig.pool().await;
    rig.wait_status(&id, "stamped", 60).await;
    // The same key, now that the invoice is stamped: nothing was taken by the 409. This rig
    // waits only 100 ms for the REP's stamp: under load the answer may be 202 (queued) or 503
    // (in flight) first, so the payment is then read back until stamped.
    let r = pay(&rig, &id, &payment("100.00", "e"), Some("early")).await;
    assert!(matches!(r.status, 201 | 202 | 503), "{}", r.text());
    assert!(!r.replayed, "a new payment");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let v = rig.get(&format!("/v1/invoices/{id}")).await.json();
        if v["payments"][0]["status"] == "stamped" {
            assert_eq!(v["payments"][0]["parcialidad"], 1, "{v}");
            assert_eq!(v["payments"].as_array().map(Vec::len), Some(1), "{v}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never stamped: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The PAC stamps a REP but its answer is lost: the worker asks the PAC by the stamp key, and
/// the payment ends with that one UUID; retries under the key say so and never stamp again.
async fn a_rep_whose_answer_is_lost_is_recovered_with_its_one_uuid(b: Backend) {
    let admin = format!("[admin]\npassword = \"{PASSWORD}\"\n");
    let Some(rig) = rig(b, "", &admin).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-6").await;
    rig.set_faults("lose_response=1:mode=drop,recover_unavailable=1")
        .await;
    let body = payment("200.00", "lost");
    let first = pay(&rig, &id, &body, Some("lost-1")).await;
    first.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "the REP's answer was lost");
    assert_eq!(rig.stamps().await.len(), 2, "the PAC did stamp the REP");
    // The pool stops before the retry: it asks the PAC again a second later, and while a
    // question is in flight the REP is `stamping` and a retry replays a 202. Stopped, it
    // leaves the REP `unknown` (a question cut short is released as such).
    pool.shutdown().await;
    pay(&rig, &id, &body, Some("lost-1")).await.assert_error(
        503,
        "STAMPING_OUTCOME_UNKNOWN",
        "still unknown",
    );
    // Meanwhile the dashboard counts its REP against the 5th of next month.
    let browser = Browser::new(&rig.app);
    browser.login().await;
    let pay_id = first.json()["error"]["invoice_id"]
        .as_str()
        .expect("the payment's id")
        .to_owned();
    let dash = browser.get("/admin").await.body;
    let listed = |page: &str| page.contains(&format!("data-payment=\"{pay_id}\""));
    assert!(dash.contains("id=\"reps-due\"") && listed(&dash), "{dash}");
    // The new pool's question takes 6 s: a retry meanwhile gets the same 503, not a 202.
    rig.set_faults("latency=6s").await;
    let (_pool, _s) = rig.pool().await;
    let asking = || async {
        let rows: Vec<(String, Option<String>)> = fetch_rows(
            &rig.app.db,
            "SELECT o.state, o.claimed_from FROM outbox o JOIN api_pagos p ON p.outbox_id = o.id \
             WHERE p.public_id = $1",
            &[Bind::Str(&pay_id)],
        )
        .await;
        rows.first().cloned() == Some(("stamping".into(), Some("unknown".into())))
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !asking().await {
        assert!(tokio::time::Instant::now() < deadline, "never asked");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let retry = pay(&rig, &id, &body, Some("lost-1")).await;
    assert!(asking().await, "the question ended before the retry");
    retry.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "still unknown while asked");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let shown = loop {
        let v = rig.get(&format!("/v1/invoices/{id}")).await.json();
        if v["payments"][0]["status"] == "stamped" {
            break v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never recovered: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let stamps = rig.stamps().await;
    assert_eq!(stamps.len(), 2, "recovered, not stamped again: {stamps:?}");
    let uuid = &shown["payments"][0]["uuid"];
    assert!(stamps.iter().any(|s| &s["uuid"] == uuid), "{stamps:?}");
    let replay = pay(&rig, &id, &body, Some("lost-1")).await;
    replay.assert_created(true);
    assert_eq!(&replay.json()["uuid"], uuid);
    assert_eq!(shown["saldo_insoluto"], "378.84");
    let dash = browser.get("/admin").await.body;
    assert!(!listed(&dash), "stamped: no longer due\n{dash}");
}

/// A REP whose worker process is killed (SIGKILL) after the PAC stamped it and before the
/// database heard back: the restarted worker asks the PAC first and records that one UUID.
async fn a_rep_whose_worker_is_killed_between_the_pacs_answer_and_the_write_has_one_uuid(
    b: Backend,
) {
    let api = "[api]\nwait_for_stamp_ms = 200\n";
    let Some(rig) = rig(b, "", api).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-kill").await;
    pool.shutdown().await;
    // The PAC stamps the REP and holds its answer: the worker waits on it when killed.
    rig.set_faults("lose_response=1:mode=hang:hang=120s").await;
    let r = pay(&rig, &id, &payment("100.00", "killed"), Some("kill-1")).await;
    assert_eq!(r.status, 202, "queued, no worker running: {}", r.text());
    let (key,): (String,) = crate::support::rows::fetch_rows(
        &rig.app.db,
        "SELECT stamp_key FROM outbox WHERE kind = 'pago'",
        &[],
    )
    .await
    .remove(0);
    let log = rig.app.config_file.with_extension("worker.log");
    let stamps_of = |key: String| {
        let sim = rig.sim.sim();
        move || {
            sim.stamps()
                .iter()
                .filter(|s| s.customid.as_deref() == Some(key.as_str()))
                .count()
        }
    };
    let stamped = stamps_of(key.clone());
    // A 2 s lease (the rig's is 30 s), so that the restarted worker takes the row soon after.
    let short = [("AUTOFACTURA__WORKER__LEASE_SECONDS", "2")];
    let mut worker = crate::support::worker_process(&rig.app, &log, &short);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while stamped() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never reached the PAC"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    worker.kill().expect("SIGKILL");
    worker.wait().expect("wait");
    let row = outbox_of(&rig.app, &pay_id(&rig).await).await;
    assert_eq!(
        (row.state.as_str(), row.uuid.as_deref()),
        ("stamping", None)
    );
    rig.set_faults("").await;
    // The restarted worker takes the row once the killed one's 2 s lease lapses. Its own lease
    // is 30 s: with 2 s, a loaded machine let it lapse mid-recovery, and the worker asked the
    // PAC a second time (found again, still one stamp, but not the one question checked here).
    let lease = [("AUTOFACTURA__WORKER__LEASE_SECONDS", "30")];
    let mut restarted = crate::support::worker_process(&rig.app, &log, &lease);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let row = loop {
        let row = outbox_of(&rig.app, &pay_id(&rig).await).await;
        if row.state.as_str() == "stamped" {
            break row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never stamped: {row:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    restarted.kill().expect("stop");
    let _ = restarted.wait();
    assert_eq!(stamped(), 1, "one stamp at the PAC");
    let stamp = rig
        .sim
        .sim()
        .stamps()
        .into_iter()
        .find(|s| s.customid.as_deref() == Some(key.as_str()));
    assert_eq!(
        row.uuid,
        stamp.map(|s| s.uuid),
        "the PAC's one UUID recorded"
    );
    let log = rig.app.db.attempts_of(row.id).await.expect("attempts");
    assert_eq!(
        log.iter()
            .map(|a| (a.operation.as_str(), a.outcome.as_str()))
            .collect::<Vec<_>>(),
        vec![("recover", "found")],
        "the restarted worker asked the PAC first"
    );
}

/// The PAC refuses a REP (its receptor unregistered): the payment stops counting in the saldo
/// and releases its key; a retry under the key with the PAC fixed records the payment again as
/// parcialidad 1 of the whole saldo, and a later payment is parcialidad 2.
async fn a_rep_the_pac_refuses_releases_its_payment_and_key(b: Backend) {
    let admin = format!("[admin]\npassword = \"{PASSWORD}\"\n");
    let Some(rig) = rig(b, "", &admin).await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let id = stamped_ppd(&rig, "ppd-refused").await;
    rig.set_faults("unregistered_rfc=XIQB891116QE4").await;
    let body = payment("300.00", "refused");
    let first = pay(&rig, &id, &body, Some("refused-1")).await;
    // 422 once the PAC's refusal is in within the answer's wait, else 202 and it comes later.
    let refused_id = match first.status {
        422 => {
            first.assert_error(422, "PAC_REJECTED", "the REP's receptor is unregistered");
            assert_eq!(first.json()["error"]["pac_code"], "CFDI40143");
            first.json()["error"]["invoice_id"]
                .as_str()
                .map(str::to_owned)
        }
        _ => {
            assert_eq!(first.status, 202, "{}", first.text());
            first.json()["id"].as_str().map(str::to_owned)
        }
    }
    .expect("the payment's id");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let shown = loop {
        let v = rig.get(&format!("/v1/invoices/{id}")).await.json();
        if v["payments"][0]["status"] == "failed" {
            break v;
        }
        assert!(tokio::time::Instant::now() < deadline, "never refused: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(shown["payments"][0]["id"], refused_id.as_str());
    assert_eq!(
        shown["saldo_insoluto"], "578.84",
        "the refused payment does not count"
    );
    assert_eq!(rig.stamps().await.len(), 1, "no REP stamped");

    rig.set_faults("").await;
    let again = pay(&rig, &id, &body, Some("refused-1")).await;
    again.assert_created(false);
    let v = again.json();
    assert_ne!(
        v["id"],
        refused_id.as_str(),
        "a new payment under the released key"
    );
    assert_eq!(v["parcialidad"], 1, "{v}");
    assert_eq!(v["saldo_anterior"], "578.84");
    assert_eq!(v["saldo_insoluto"], "278.84");
    let uuid = v["uuid"].as_str().expect("REP uuid").to_owned();
    let (docto, xml) = docto_of(&rig, &uuid);
    assert_eq!(docto.attr("NumParcialidad"), Some("1"), "{xml}");
    assert_eq!(docto.attr("ImpSaldoAnt"), Some("578.84"), "{xml}");
    // The key now belongs to the stamped payment: a retry replays it.
    let replay = pay(&rig, &id, &body, Some("refused-1")).await;
    replay.assert_created(true);
    assert_eq!(replay.json(), v);
    let next = pay(&rig, &id, &payment("78.84", "next"), Some("refused-2")).await;
    next.assert_created(false);
    assert_eq!(next.json()["parcialidad"], 2);
    assert_eq!(next.json()["saldo_insoluto"], "200.00");

    let shown = rig.get(&format!("/v1/invoices/{id}")).await.json();
    assert_eq!(shown["saldo_insoluto"], "200.00");
    let listed: Vec<(Value, Value)> = shown["payments"]
        .as_array()
        .expect("payments")
        .iter()
        .map(|p| (p["id"].clone(), p["parcialidad"].clone()))
        .collect();
    assert_eq!(listed.len(), 3, "{shown}");
    assert!(
        listed.contains(&(json!(refused_id), Value::Null)),
        "the refused payment gave up its parcialidad: {shown}"
    );
    assert_eq!(rig.stamps().await.len(), 3, "the ingreso and two REPs");
    // The invoice's page in the admin lists it without a parcialidad.
    let browser = Browser::new(&rig.app);
    browser.login().await;
    let row = outbox_of(&rig.app, &id).await.payment_id;
    let page = browser.get(&format!("/admin/payments/{row}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for n in ["—", "1", "2"] {
        let shown = format!("data-parcialidad=\"{n}\"");
        assert!(page.body.contains(&shown), "{shown}: {}", page.body);
    }
}

/// The payment row's id of the one REP (as the admin searches it).
async fn pay_id(rig: &Rig) -> String {
    let (p,): (String,) = crate::support::rows::fetch_rows(
        &rig.app.db,
        "SELECT p.payment_id FROM payments p JOIN outbox o ON o.payment_id = p.id WHERE o.kind = 'pago'",
        &[],
    )
    .await
    .remove(0);
    p
}

// Issue 20: the REP reaches the customer of the invoice it pays by email, and the merchant as
// an event, like any other document.
async fn a_stamped_rep_emails_the_invoices_customer_and_tells_the_merchant(b: Backend) {
    let smtp = Smtp::start().await;
    let (receiver, url) = Receiver::start(0).await;
    let extra = format!(
        "[email]\nsmtp_url = \"smtp://{}\"\nfrom = \"Facturas <facturas@example.mx>\"\n\
         timeout_seconds = 5\nretry_seconds = [1, 1, 1, 1, 1]\n{}",
        smtp.addr,
        webhook_toml(&url)
    );
    let Some(rig) = rig(b, "", &extra).await else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let mut body = ppd();
    body["receptor"]["email"] = json!("receptor@example.org");
    let r = rig.post(&body, Some("ppd-mail")).await;
    assert!(matches!(r.status, 201 | 202 | 503), "{}", r.text());
    let v = r.json();
    let id = v["id"].as_str().or(v["error"]["invoice_id"].as_str());
    let id = id.expect("id").to_owned();
    rig.wait_status(&id, "stamped", 30).await;
    let r = pay(&rig, &id, &payment("300.00", "op-mail"), Some("pay-mail")).await;
    assert!(matches!(r.status, 201 | 202 | 503), "{}", r.text());
    let (rep, pago): (i64, String) = fetch_rows(
        &rig.app.db,
        "SELECT outbox_id, public_id FROM api_pagos",
        &[],
    )
    .await
    .into_iter()
    .next()
    .expect("the payment");
    let rows = wait_for(&rig.app, rep, "sent", all_in(DeliveryState::Sent)).await;
    let (_, event) = receiver
        .wait_where("invoice.stamped", 60, |v| v["data"]["kind"] == "pago")
        .await;
    pool.shutdown().await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0].recipient, "receptor@example.org");
    let d = rig.app.db.document(rep).await.expect("db").expect("REP");
    let uuid = d.uuid.clone().expect("uuid");
    let got = smtp.messages();
    assert_eq!(got.len(), 2, "the invoice's, then the REP's");
    let subject = subject_of(&got[1].data);
    assert!(subject.contains("recibo electrónico de pago"), "{subject}");
    // Its amount is the payment's (the REP's own Total is 0 XXX).
    let text = String::from_utf8_lossy(&got[1].data);
    assert!(text.contains("por un total de 300.00 MXN"), "{text}");
    let stored = d.stamped_xml.expect("stamped XML");
    let name = autofactura::pdf::file_name(&stored, "xml").expect("name");
    assert!(name.contains(&uuid), "{name}");
    let xml = attachment(&got[1].data, &name).expect("XML attached");
    assert_eq!(xml, stored, "the REP's stored stamped XML");
    assert_eq!(event["data"]["uuid"], uuid.as_str(), "{event}");
    assert_eq!(event["data"]["payment_id"], pago.as_str(), "{event}");
}

on_both_backends!(
    a_stamped_rep_emails_the_invoices_customer_and_tells_the_merchant,
    a_rep_whose_worker_is_killed_between_the_pacs_answer_and_the_write_has_one_uuid,
    two_ppd_payments_give_two_reps_with_their_parcialidad_and_saldo,
    an_overpayment_is_refused_and_writes_nothing,
    a_repeated_idempotency_key_gives_the_same_payment,
    concurrent_payments_of_one_invoice_get_consecutive_parcialidades,
    a_payment_waits_for_its_invoice_stamp_409_then_201,
    a_rep_whose_answer_is_lost_is_recovered_with_its_one_uuid,
    a_rep_the_pac_refuses_releases_its_payment_and_key,
);
