//! What follows a sale's voucher (issue 21), end to end through the real server: a Mercado
//! Pago chargeback credits what refunds left (a nota de crédito for ARCA, an egreso in
//! Mexico), once; a sale ARCA refused or the loop held is corrected in the admin and issued
//! under a new key; an authorized voucher is linked from its sale's page and emailed once
//! (real SMTP). Signed Mercado Pago webhooks, the sandbox ARCA and PAC; both backends.

use std::time::Duration;

use autofactura::arca::DocTipo;
use autofactura::webhooks::mercadopago::sample_payment;
use rust_decimal::Decimal;

use crate::arca_buyers::{Payments, credited, fake_mp, payment, settled};
use crate::arca_sales::{PTO_VTA, authorized, rig_with, sim_vouchers, sqlx_row};
use crate::support::admin::{Browser, PASSWORD};
use crate::support::rows::{Bind, fetch_rows};
use crate::support::sales::mp_notify;
use crate::support::smtp::{Smtp, attachment};
use crate::support::{Backend, TestApp, spawn_app_with};

/// `body` (an approved payment) as Mercado Pago reads it once the buyer's bank took the money
/// back and the merchant lost the chargeback.
fn charged_back(body: &str) -> String {
    body.replacen(
        "\"status\": \"approved\", \"status_detail\": \"accredited\"",
        "\"status\": \"charged_back\", \"status_detail\": \"reimbursed\"",
        1,
    )
}

fn put(payments: &Payments, id: &str, body: String) {
    payments.lock().expect("payments").insert(id.into(), body);
}

/// How many refunds of Mercado Pago payment `id` are recorded.
async fn refunds_of(app: &TestApp, id: &str) -> i64 {
    let rows: Vec<(i64,)> = fetch_rows(
        &app.db,
        "SELECT COUNT(*) FROM refunds WHERE payment_ref = $1",
        &[Bind::Str(id)],
    )
    .await;
    rows[0].0
}

async fn a_charged_back_ars_sale_gets_one_nota_crediting_what_refunds_left(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let payments = Payments::default();
    let (id, dni) = ("7500000001", r#"{"type": "DNI", "number": "26756539"}"#);
    let partly = payment(id, "1210.00", dni, "{}", &[("9100001", "300.00")]);
    put(&payments, id, partly.clone());
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp(&payments), "").await else {
        return;
    };
    mp_notify(&app, "n-cb-1", "payment.created", id).await;
    credited(&app, "9100001").await;
    // The chargeback is lost: the sale's voucher is credited of the rest, once.
    put(&payments, id, charged_back(&partly));
    let ack = mp_notify(&app, "n-cb-2", "payment.updated", id).await;
    assert_eq!(ack["outcome"], "recorded", "{ack}");
    let nota = credited(&app, &format!("{id}-chargeback")).await;
    assert!(nota.contains("Nota de Crédito B 00003-00000002"), "{nota}");
    // Delivered again, and another notification of the same state: nothing more.
    mp_notify(&app, "n-cb-2", "payment.updated", id).await;
    mp_notify(&app, "n-cb-3", "payment.updated", id).await;
    // Rounds run every second: a third nota would have been issued by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(refunds_of(&app, id).await, 2);
    let at = sim_vouchers(sim.url()).await;
    let sale = at.iter().find(|v| v.cbte_tipo == 6).expect("the Factura B");
    let notas: Vec<_> = at.iter().filter(|v| v.cbte_tipo == 8).collect();
    let totals: Vec<String> = notas
        .iter()
        .map(|v| v.input.imp_total.to_string())
        .collect();
    assert_eq!(totals, ["300.00", "910.00"], "{at:?}");
    assert_eq!(notas[1].input.cbtes_asoc[0].nro, sale.number);
    assert_eq!(
        notas[1].input.imp_iva + notas[0].input.imp_iva,
        sale.input.imp_iva,
        "together they credit the whole sale"
    );
    sim.stop().await;
}

async fn a_mercado_pago_chargeback_of_an_mxn_sale_gets_one_egreso(b: Backend) {
    let payments = Payments::default();
    let id = "9201";
    let approved = (chrono::Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    let sale = sample_payment(id, &approved);
    put(&payments, id, sale.clone());
    let toml = format!(
        "api_base = \"{}\"\n{}",
        fake_mp(&payments),
        crate::refunds::FAST
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let ack = mp_notify(&app, "n-mx-1", "payment.created", id).await;
    assert_eq!(ack["outcome"], "invoice_queued", "{ack}");
    crate::support::rows::wait_drained(&app.db, 30).await;
    put(&payments, id, charged_back(&sale));
    mp_notify(&app, "n-mx-2", "payment.updated", id).await;
    let e = crate::refunds::wait_egresos(&app, 1).await;
    let xml = e[0].2.as_deref().expect("xml");
    assert_eq!(crate::refunds::total(xml), Decimal::new(11600, 2));
    let ingreso: Vec<(Option<String>,)> = fetch_rows(
        &app.db,
        "SELECT o.uuid FROM outbox o JOIN payments p ON p.id = o.payment_id \
         WHERE p.payment_id = $1 AND o.kind = 'ingreso'",
        &[Bind::Str(id)],
    )
    .await;
    assert_eq!(
        Some(crate::refunds::attr(xml, "cfdi:CfdiRelacionado", "UUID")),
        ingreso[0].0,
        "the egreso credits the sale's ingreso"
    );
    // Delivered again, and read again: still one egreso.
    mp_notify(&app, "n-mx-2", "payment.updated", id).await;
    mp_notify(&app, "n-mx-3", "payment.updated", id).await;
    crate::support::rows::wait_drained(&app.db, 30).await;
    assert_eq!(crate::refunds::wait_egresos(&app, 1).await.len(), 1);
    assert_eq!(crate::refunds::refund_statuses(&app).await, ["egreso"]);
    pool.shutdown().await;
}

/// Polls sale `id` until it is `arca_authorized`: its reason.
async fn authorized_sale(app: &TestApp, id: &str) -> String {
    crate::arca_sales::settled(app, id).await;
    sqlx_row(app, id).await.1.unwrap_or_default()
}

async fn held_and_refused_sales_corrected_in_the_admin_are_issued_under_new_keys(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let payments = Payments::default();
    let (held, refused) = ("7600000001", "7600000002");
    put(
        &payments,
        held,
        payment(held, "10000000.00", "{}", "{}", &[]),
    );
    let dni = r#"{"type": "DNI", "number": "26756539"}"#;
    put(
        &payments,
        refused,
        payment(refused, "1210.00", dni, "{}", &[]),
    );
    let admin = format!("\n[admin]\npassword = \"{PASSWORD}\"\n");
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp(&payments), &admin).await else {
        return;
    };
    // ARCA refuses the first voucher's buyer; the anonymous sale over the limit is held.
    sim.sim().set_faults("refuse_next=1").expect("faults");
    mp_notify(&app, "n-fix-1", "payment.created", refused).await;
    let (status, why) = settled(&app, refused).await;
    assert_eq!(status, "needs_attention", "{why}");
    assert!(why.contains("10015"), "{why}");
    mp_notify(&app, "n-fix-2", "payment.created", held).await;
    let (status, why) = settled(&app, held).await;
    assert_eq!(status, "needs_attention", "{why}");
    let old = format!("mercadopago:{refused}");
    let rejected = app.db.arca_voucher(&old).await.expect("read");
    assert_eq!(
        rejected.as_ref().map(|v| v.state.as_str()),
        Some("rejected")
    );

    let browser = Browser::new(&app);
    let csrf = browser.login().await;
    let page = browser.get("/admin/arca").await.body;
    for id in [held, refused] {
        assert!(
            page.contains(&format!("data-sale=\"mercadopago:{id}\"")),
            "{page}"
        );
    }
    let correct = |id: &'static str, kind: &'static str, number: &'static str, cond| {
        let (browser, csrf) = (&browser, csrf.clone());
        async move {
            browser
                .post(
                    "/admin/arca/correct",
                    &[
                        ("csrf", &csrf),
                        ("provider", "mercadopago"),
                        ("payment_id", id),
                        ("kind", kind),
                        ("number", number),
                        ("condicion_iva", cond),
                    ],
                )
                .await
        }
    };
    // A wrong check digit is refused, saying why; nothing changes.
    let bad = correct(held, "CUIT", "20-26756539-4", "consumidor_final").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("check digit"), "{}", bad.body);
    assert_eq!(sqlx_row(&app, held).await.0, "needs_attention");
    let ok = correct(held, "DNI", "26.756.539", "consumidor_final").await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    let ok = correct(refused, "CUIT", "20-26756539-3", "responsable_inscripto").await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    for id in [held, refused] {
        let reason = authorized_sale(&app, id).await;
        assert!(reason.contains("CAE"), "{reason}");
    }
    // Each under a key of its own; the refused key stays settled as it was.
    let held_v = authorized(&app.db, &format!("mercadopago:{held}#2")).await;
    let fixed = authorized(&app.db, &format!("{old}#2")).await;
    assert_eq!(app.db.arca_voucher(&old).await.expect("read"), rejected);
    assert!(
        app.db
            .arca_voucher(&format!("mercadopago:{held}"))
            .await
            .expect("read")
            .is_none(),
        "the held sale never used its first key"
    );
    let at = sim_vouchers(sim.url()).await;
    let of = |v: &autofactura::store::ArcaVoucherRow| {
        at.iter()
            .find(|s| s.cbte_tipo == v.cbte_tipo && s.number == v.number)
            .map(|s| (s.cbte_tipo, s.input.doc_tipo, s.input.doc_nro))
    };
    assert_eq!(of(&held_v), Some((6, DocTipo::Dni, 26_756_539)));
    assert_eq!(of(&fixed), Some((1, DocTipo::Cuit, 20_267_565_393)));
    assert_eq!(at.len(), 2, "{at:?}");
    // Audited; a sale no longer held is refused.
    let audited: Vec<(String,)> = fetch_rows(
        &app.db,
        "SELECT target_id FROM admin_actions WHERE action = 'arca_correct' ORDER BY id",
        &[],
    )
    .await;
    assert_eq!(audited.len(), 2, "{audited:?}");
    let again = correct(held, "DNI", "26756539", "consumidor_final").await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(PTO_VTA, fixed.pto_vta);
    sim.stop().await;
}

/// The row id of Mercado Pago payment `id`.
async fn payment_row(app: &TestApp, id: &str) -> i64 {
    let rows: Vec<(i64,)> = fetch_rows(
        &app.db,
        "SELECT id FROM payments WHERE payment_id = $1",
        &[Bind::Str(id)],
    )
    .await;
    rows[0].0
}

/// Polls until `smtp` took `n` messages (60 s at most).
async fn messages(smtp: &Smtp, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while smtp.messages().len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} messages never came"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn an_authorized_voucher_is_linked_from_its_sale_and_emailed_once(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let smtp = Smtp::start().await;
    let payments = Payments::default();
    let (id, dni) = ("7700000001", r#"{"type": "DNI", "number": "26756539"}"#);
    put(&payments, id, payment(id, "1210.00", dni, "{}", &[]));
    let extra = format!(
        "\n[admin]\npassword = \"{PASSWORD}\"\n[email]\nsmtp_url = \"smtp://{}\"\n\
         from = \"Facturas <facturas@example.com.ar>\"\ntimeout_seconds = 5\n\
         retry_seconds = [1, 1, 1, 1, 1]\n",
        smtp.addr
    );
    let Some((app, sim)) = rig_with(b, &dir, true, &fake_mp(&payments), &extra).await else {
        return;
    };
    mp_notify(&app, "n-mail-1", "payment.created", id).await;
    mp_notify(&app, "n-mail-1", "payment.created", id).await;
    mp_notify(&app, "n-mail-2", "payment.updated", id).await;
    let key = format!("mercadopago:{id}");
    let v = authorized(&app.db, &key).await;
    let cae = v.cae.clone().expect("a CAE");
    authorized_sale(&app, id).await;

    // The sale's page links its voucher's PDF.
    let row = payment_row(&app, id).await;
    let browser = Browser::new(&app);
    browser.login().await;
    let page = browser.get(&format!("/admin/payments/{row}")).await.body;
    let href = format!("/admin/arca/print?key=mercadopago%3A{id}");
    assert!(page.contains(&format!("href=\"{href}\"")), "{page}");
    assert!(page.contains(&cae), "{page}");
    let (status, _, pdf) = browser.get_bytes(&href).await;
    assert_eq!(status, 200);
    assert!(pdf.starts_with(b"%PDF"));

    // The buyer gets one message with the voucher's PDF.
    messages(&smtp, 1).await;
    // The courier and the loop keep going: still one message a moment later.
    mp_notify(&app, "n-mail-3", "payment.updated", id).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = smtp.messages();
    assert_eq!(got.len(), 1, "exactly one message");
    assert!(got[0].rcpt.join(" ").contains("cliente@example.com.ar"));
    let attached = attachment(&got[0].data, &format!("ARCA_006_{PTO_VTA:05}-00000001.pdf"))
        .expect("the voucher's PDF attached");
    assert!(attached.starts_with(b"%PDF"));
    let text = crate::support::pdf::text(&attached, None);
    assert!(text.contains(&cae), "{text}");
    let sent: Vec<(String, String)> = fetch_rows(
        &app.db,
        "SELECT state, message_id FROM deliveries WHERE arca_key = $1",
        &[Bind::Str(&key)],
    )
    .await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "sent");
    assert!(String::from_utf8_lossy(&got[0].data).contains(&sent[0].1));

    // A refund: its nota de crédito is mailed too, once.
    let refunded = payment(id, "1210.00", dni, "{}", &[("9300001", "210.00")]);
    put(&payments, id, refunded);
    mp_notify(&app, "n-mail-4", "payment.updated", id).await;
    credited(&app, "9300001").await;
    messages(&smtp, 2).await;
    mp_notify(&app, "n-mail-4", "payment.updated", id).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = smtp.messages();
    assert_eq!(got.len(), 2, "one message per voucher");
    let nota = attachment(&got[1].data, &format!("ARCA_008_{PTO_VTA:05}-00000001.pdf"))
        .expect("the nota's PDF attached");
    assert!(crate::support::pdf::text(&nota, None).contains("NOTA DE CR"));
    sim.stop().await;
}

async fn a_worker_killed_while_arca_authorizes_still_mails_the_voucher_once(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let smtp = Smtp::start().await;
    let payments = Payments::default();
    let (id, dni) = ("7800000001", r#"{"type": "DNI", "number": "26756539"}"#);
    put(&payments, id, payment(id, "1210.00", dni, "{}", &[]));
    let extra = format!(
        "\n[email]\nsmtp_url = \"smtp://{}\"\nfrom = \"facturas@example.com.ar\"\n\
         timeout_seconds = 5\nretry_seconds = [1, 1, 1, 1, 1]\n",
        smtp.addr
    );
    // Only `worker` processes issue (and mail).
    let Some((app, sim)) = rig_with(b, &dir, false, &fake_mp(&payments), &extra).await else {
        return;
    };
    // ARCA authorizes the voucher and holds its answer: the worker is killed waiting, between
    // the CAE and the sale's settle (where its email is queued).
    sim.sim().set_faults("hang_next=1").expect("faults");
    mp_notify(&app, "n-kill-1", "payment.created", id).await;
    let log = app.config_file.with_extension("worker.log");
    let mut worker = crate::support::worker_process(&app, &log, &[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while sim.sim().vouchers().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never reached ARCA");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.kill().expect("SIGKILL");
    worker.wait().expect("wait");
    sim.sim().set_faults("none").expect("faults");
    assert!(
        smtp.messages().is_empty(),
        "nothing mailed before the settle"
    );
    // A new worker recovers the CAE by consulting the number, settles the sale, mails it.
    let mut restarted = crate::support::worker_process(&app, &log, &[]);
    authorized_sale(&app, id).await;
    messages(&smtp, 1).await;
    mp_notify(&app, "n-kill-2", "payment.updated", id).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    restarted.kill().expect("stop");
    let _ = restarted.wait();
    assert_eq!(smtp.messages().len(), 1, "exactly one message");
    assert!(
        authorized(&app.db, &format!("mercadopago:{id}"))
            .await
            .recovered
    );
    sim.stop().await;
}

/// In a real headless Chromium: the held sale's form on `/admin/arca`, then the sale's page
/// linking its voucher (SQLite, as the other browser tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_a_browser_a_held_sale_is_corrected_and_its_page_links_the_voucher() {
    use crate::support::webdriver::{Driver, browser_paths};
    let Some((driver, chromium)) = browser_paths() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let payments = Payments::default();
    let id = "7900000001";
    put(&payments, id, payment(id, "10000000.00", "{}", "{}", &[]));
    let admin = format!("\n[admin]\npassword = \"{PASSWORD}\"\n");
    let mp = fake_mp(&payments);
    let Some((app, sim)) = rig_with(Backend::Sqlite, &dir, true, &mp, &admin).await else {
        return;
    };
    mp_notify(&app, "n-web-1", "payment.created", id).await;
    assert_eq!(settled(&app, id).await.0, "needs_attention");
    let d = Driver::start(&driver, &chromium).await;
    crate::admin_ux_e2e::sign_in_at(&d, &app, "/admin/arca").await;
    d.wait_text("Sales waiting for a human").await;
    let row = format!("#arca-held tr[data-sale=\"mercadopago:{id}\"]");
    d.script(&format!(
        "document.querySelector('{row} select[name=kind]').value = 'DNI'; return 1;"
    ))
    .await;
    d.type_into(
        &d.find(&format!("{row} input[name=number]")).await,
        "26756539",
    )
    .await;
    d.click(&d.find(&format!("{row} button")).await).await;
    d.wait_text("The buyer was corrected").await;
    let v = authorized(&app.db, &format!("mercadopago:{id}#2")).await;
    authorized_sale(&app, id).await;
    let row = payment_row(&app, id).await;
    d.goto(&format!("{}/admin/payments/{row}", app.address))
        .await;
    let text = d.wait_text("ARCA voucher").await;
    assert!(
        text.contains(v.cae.as_deref().unwrap_or("no CAE")),
        "{text}"
    );
    let link = d.find("#arca-voucher a").await;
    let href = d.attribute(&link, "href").await.unwrap_or_default();
    assert!(
        href.ends_with(&format!("/admin/arca/print?key=mercadopago%3A{id}%232")),
        "{href}"
    );
    sim.stop().await;
}

crate::on_both_backends!(
    a_worker_killed_while_arca_authorizes_still_mails_the_voucher_once,
    a_charged_back_ars_sale_gets_one_nota_crediting_what_refunds_left,
    a_mercado_pago_chargeback_of_an_mxn_sale_gets_one_egreso,
    held_and_refused_sales_corrected_in_the_admin_are_issued_under_new_keys,
    an_authorized_voucher_is_linked_from_its_sale_and_emailed_once,
);
