//! The customer's email through the whole appliance, on both backends, against a real SMTP
//! server on 127.0.0.1 (tests/it/support/smtp.rs): a stamp queues one delivery in its own
//! write, the courier `serve` runs sends it (the XML byte for byte, the PDF, the stable
//! Message-ID), a 550 ends `bounced`, a server down then up gives one message, the admin's
//! Resend sends again, and without `[email]` nothing is queued.

use std::time::Duration;

use autofactura::deliver::{Event, message_id, resent_message_id};
use autofactura::domain::DeliveryState;
use autofactura::store::DeliveryRow;

use crate::support::admin::{Browser, PASSWORD, pay};
use crate::support::rows::{Bind, fetch_rows};
use crate::support::smtp::{Smtp, attachment};
use crate::support::{Backend, TestApp, spawn_app_with};

/// The app with `[email]` sending to `smtp_addr`, retrying every second for five minutes: a
/// loaded machine must not run the retries out while a test holds the server down.
async fn app(b: Backend, smtp_addr: &str) -> Option<TestApp> {
    let retries = ["1"; 300].join(", ");
    let toml = format!(
        "[admin]\npassword = \"{PASSWORD}\"\n[worker]\nidle_poll_ms = 50\n\
         [email]\nsmtp_url = \"smtp://{smtp_addr}\"\nfrom = \"Facturas <facturas@example.mx>\"\n\
         bcc = \"archivo@example.mx\"\ntimeout_seconds = 5\nretry_seconds = [{retries}]\n"
    );
    spawn_app_with(b, &toml).await
}

/// A paid sale with the customer's address (`cliente@example.mx`), stamped: its outbox id.
async fn stamped_sale(app: &TestApp, suffix: &str) -> i64 {
    let id = pay(app, suffix).await;
    app.drain(60).await;
    let d = app.db.document(id).await.expect("db").expect("document");
    assert_eq!(d.state.to_string(), "stamped", "{d:?}");
    id
}

/// The deliveries of `id` once `done` holds of them (within 30 s).
pub(crate) async fn wait_for(
    app: &TestApp,
    id: i64,
    what: &str,
    done: impl Fn(&[DeliveryRow]) -> bool,
) -> Vec<DeliveryRow> {
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rows = app.db.deliveries_of(id).await.expect("deliveries");
        if done(&rows) {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "deliveries never {what}: {rows:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn all_in(state: DeliveryState) -> impl Fn(&[DeliveryRow]) -> bool {
    move |rows| !rows.is_empty() && rows.iter().all(|r| r.state == state)
}

fn header_of(data: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(data)
        .split("\r\n\r\n")
        .next()?
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
}

async fn a_stamped_sale_sends_exactly_one_message_with_its_xml_and_pdf(b: Backend) {
    let smtp = Smtp::start().await;
    let Some(app) = app(b, &smtp.addr).await else {
        return;
    };
    let id = stamped_sale(&app, "mail_one").await;
    let rows = wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    assert_eq!(rows.len(), 1, "one delivery per stamp: {rows:#?}");
    let d = app.db.document(id).await.expect("db").expect("document");
    let uuid = d.uuid.clone().expect("uuid");
    let stored = d.stamped_xml.clone().expect("stamped xml");
    assert_eq!(rows[0].recipient, "cliente@example.mx");
    assert_eq!(rows[0].attempts, 1);
    assert!(
        rows[0]
            .last_reply
            .as_deref()
            .unwrap_or("")
            .contains("queued")
    );
    assert_eq!(
        rows[0].message_id,
        message_id(&uuid, Event::Stamped, "example.mx")
    );
    // The courier keeps polling: still one message a moment later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got = smtp.messages();
    assert_eq!(got.len(), 1, "exactly one message");
    let rcpt = got[0].rcpt.join(" ");
    assert!(
        rcpt.contains("cliente@example.mx") && rcpt.contains("archivo@example.mx"),
        "{rcpt}"
    );
    assert_eq!(
        header_of(&got[0].data, "Message-ID").as_deref(),
        Some(rows[0].message_id.as_str())
    );
    let stem = format!(
        "EKU9003173C9_{}{}_{uuid}",
        d.serie.clone().unwrap_or_default(),
        d.folio.clone().unwrap_or_default()
    );
    let xml = attachment(&got[0].data, &format!("{stem}.xml")).expect("XML attached");
    assert_eq!(xml, stored, "the XML attachment is the stored stamped XML");
    let pdf = attachment(&got[0].data, &format!("{stem}.pdf")).expect("PDF attached");
    assert!(pdf.starts_with(b"%PDF-"), "a PDF");
}

async fn a_550_ends_bounced_with_the_servers_reply(b: Backend) {
    let smtp = Smtp::start().await;
    smtp.reject.store(true, std::sync::atomic::Ordering::SeqCst);
    let Some(app) = app(b, &smtp.addr).await else {
        return;
    };
    let id = stamped_sale(&app, "mail_550").await;
    let rows = wait_for(&app, id, "bounced", all_in(DeliveryState::Bounced)).await;
    assert_eq!(rows.len(), 1);
    let reply = rows[0].last_reply.clone().unwrap_or_default();
    assert!(reply.contains("550"), "{reply}");
    assert_eq!(rows[0].attempts, 1, "a permanent rejection is not retried");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let again = app.db.deliveries_of(id).await.expect("deliveries");
    assert_eq!(again[0].attempts, 1, "{again:#?}");
    assert!(smtp.messages().is_empty());
}

async fn an_smtp_server_down_then_up_gives_one_delivery(b: Backend) {
    // The server is down (a port that refuses), until it comes up on that port.
    let (down, addr) = crate::support::refusing_port();
    let Some(app) = app(b, &addr).await else {
        return;
    };
    let id = stamped_sale(&app, "mail_down").await;
    let rows = wait_for(&app, id, "retried", |r| {
        r.len() == 1 && r[0].state == DeliveryState::Retry && r[0].attempts >= 2
    })
    .await;
    assert!(rows[0].last_reply.is_some(), "{rows:#?}");
    drop(down);
    let smtp = Smtp::start_on(&addr).await;
    let rows = wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    assert_eq!(rows.len(), 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        smtp.messages().len(),
        1,
        "one message once the server is up"
    );
}

async fn a_stamp_recovered_after_a_lost_answer_queues_one_delivery(b: Backend) {
    // Every stamp's answer is lost after the PAC committed it: the row goes `unknown` and is
    // recovered by key, a settle of its own (not the batched one of fresh stamps).
    let smtp = Smtp::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let toml = format!(
        "[pac]\nsandbox_state = \"{}\"\nsandbox_faults = \"lose_response=1:mode=drop\"\n\
         [worker]\nidle_poll_ms = 50\nbackoff_base_seconds = 1\n\
         [email]\nsmtp_url = \"smtp://{}\"\nfrom = \"facturas@example.mx\"\nretry_seconds = [1]\n",
        dir.path().join("pacsim.jsonl").display(),
        smtp.addr
    );
    let Some(app) = spawn_app_with(b, &toml).await else {
        return;
    };
    let id = stamped_sale(&app, "mail_lost").await;
    let ops: Vec<(String,)> = fetch_rows(
        &app.db,
        "SELECT operation FROM pac_attempts WHERE outbox_id = $1 ORDER BY id",
        &[Bind::I64(id)],
    )
    .await;
    assert_eq!(ops.last().map(|o| o.0.as_str()), Some("recover"), "{ops:?}");
    let rows = wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(smtp.messages().len(), 1);
}

async fn a_crash_after_the_server_took_it_resends_the_same_message_id(b: Backend) {
    let smtp = Smtp::start().await;
    let Some(app) = app(b, &smtp.addr).await else {
        return;
    };
    let id = stamped_sale(&app, "mail_crash").await;
    wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    // As if the courier had died after the server's 250 and before its write: the row still
    // claimed by a dead claim whose lease has ended.
    crate::support::exec_sql(
        &app.db,
        "UPDATE deliveries SET state = 'pending', lease_owner = 'courier-dead', sent_at = NULL, \
         run_at = '2000-01-01 00:00:00+00:00'",
    )
    .await;
    let rows = wait_for(&app, id, "sent again", |r| {
        r.len() == 1 && r[0].state == DeliveryState::Sent && r[0].attempts == 2
    })
    .await;
    let got = smtp.messages();
    assert_eq!(got.len(), 2, "sent again after the crash");
    for m in &got {
        assert_eq!(
            header_of(&m.data, "Message-ID").as_deref(),
            Some(rows[0].message_id.as_str()),
            "the same message, never another"
        );
    }
}

async fn a_kill_9_after_the_server_took_it_gives_at_most_the_same_message_id_twice(b: Backend) {
    // The app itself sends nothing (no [email]); `autofactura worker` processes do, with
    // [email] from their environment: stamp, queue, send.
    let smtp = Smtp::start().await;
    smtp.hold_quit
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let Some(app) = spawn_app_with(b, "[worker]\nidle_poll_ms = 50\n").await else {
        return;
    };
    let url = format!("smtp://{}", smtp.addr);
    // QUIT's answer is waited for 30 s: the kill comes within that, however late the test sees
    // the message taken (past it, the courier would record the message sent).
    let env = [
        ("AUTOFACTURA__EMAIL__SMTP_URL", url.as_str()),
        ("AUTOFACTURA__EMAIL__FROM", "facturas@example.mx"),
        ("AUTOFACTURA__EMAIL__TIMEOUT_SECONDS", "30"),
    ];
    let log = app.config_file.with_file_name("worker.log");
    let id = pay(&app, "mail_kill").await;
    let mut first = crate::support::worker_process(&app, &log, &env);
    // The server has taken the message; the courier waits for QUIT's answer, its write not made.
    let until = tokio::time::Instant::now() + Duration::from_secs(60);
    while smtp.messages().is_empty() {
        assert!(
            tokio::time::Instant::now() < until,
            "never sent: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let rows = app.db.deliveries_of(id).await.expect("deliveries");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        rows[0].state,
        DeliveryState::Pending,
        "killed before its write: {rows:#?}"
    );
    // Another worker takes the row once the dead claim's lease ends (ended here: it would last
    // eight timeouts), and sends it again.
    crate::support::exec_sql(
        &app.db,
        "UPDATE deliveries SET run_at = '2000-01-01 00:00:00+00:00'",
    )
    .await;
    smtp.hold_quit
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let mut second = crate::support::worker_process(&app, &log, &env);
    let rows = wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    second.kill().expect("stop");
    let _ = second.wait();
    let got = smtp.messages();
    assert_eq!(got.len(), 2, "once before the kill, once after");
    for m in &got {
        assert_eq!(
            header_of(&m.data, "Message-ID").as_deref(),
            Some(rows[0].message_id.as_str()),
            "the same message, never another"
        );
    }
}

/// A stamped sale whose email was sent (its outbox id), and the admin signed in (its CSRF).
async fn sent_and_signed_in(
    b: Backend,
    suffix: &str,
) -> Option<(Smtp, TestApp, i64, Browser, String)> {
    let smtp = Smtp::start().await;
    let app = app(b, &smtp.addr).await?;
    let id = stamped_sale(&app, suffix).await;
    wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    let browser = Browser::new(&app);
    let csrf = browser.login().await;
    Some((smtp, app, id, browser, csrf))
}

async fn a_cancelled_invoice_emails_the_customer_with_its_own_wording(b: Backend) {
    let Some((smtp, app, id, browser, csrf)) = sent_and_signed_in(b, "mail_cancel").await else {
        return;
    };
    browser.cancel(id, &csrf).await;
    let (pool, _services) = app.start_pool().await;
    let rows = wait_for(&app, id, "canceled and sent", |r| {
        r.len() == 2 && all_in(DeliveryState::Sent)(r)
    })
    .await;
    pool.shutdown().await;
    let uuid = app.db.document(id).await.expect("db").expect("doc").uuid;
    assert_eq!(rows[1].event, "canceled");
    assert_eq!(
        rows[1].message_id,
        message_id(&uuid.expect("uuid"), Event::Canceled, "example.mx")
    );
    let got = smtp.messages();
    assert_eq!(got.len(), 2);
    let subject = subject_of(&got[1].data);
    assert!(
        subject.starts_with("Cancelación") && subject.contains("de su factura A-"),
        "{subject}"
    );
    assert!(subject_of(&got[0].data).starts_with("Su factura"));
}

/// The Subject header, its RFC 2047 words (`=?utf-8?b?…?=`, as lettre writes them) decoded
/// as a mail reader shows them.
pub(crate) fn subject_of(data: &[u8]) -> String {
    use base64::Engine;
    let text = String::from_utf8_lossy(data);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head
        .split("\r\n")
        .skip_while(|l| !l.starts_with("Subject: "));
    let mut raw = lines.next().unwrap_or_default()["Subject: ".len()..].to_owned();
    raw.extend(lines.take_while(|l| l.starts_with(' ')).map(str::to_owned));
    // RFC 2047: the space between two encoded words is not part of the text; any other is.
    let mut out = String::new();
    let mut last_encoded = false;
    for (i, w) in raw.split_whitespace().enumerate() {
        let decoded = w
            .strip_prefix("=?utf-8?b?")
            .or_else(|| w.strip_prefix("=?UTF-8?B?"))
            .and_then(|w| w.strip_suffix("?="))
            .map(|b64| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .expect("base64");
                String::from_utf8(bytes).expect("utf-8")
            });
        if i > 0 && !(last_encoded && decoded.is_some()) {
            out.push(' ');
        }
        last_encoded = decoded.is_some();
        out.push_str(decoded.as_deref().unwrap_or(w));
    }
    out
}

async fn an_egreso_emails_the_customer_of_the_sale_it_credits(b: Backend) {
    let smtp = Smtp::start().await;
    let Some(app) = app(b, &smtp.addr).await else {
        return;
    };
    let sale = stamped_sale(&app, "mail_egreso").await;
    wait_for(&app, sale, "sent", all_in(DeliveryState::Sent)).await;
    let (pool, _services) = app.start_pool().await;
    let (kind, suffix) = ("refund.created", "mail_egreso");
    crate::refunds::refund_event(&app, "mail_egreso_r1", kind, suffix, "mail_egreso_r1", 4999)
        .await;
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let egreso = loop {
        let ids: Vec<(i64,)> =
            fetch_rows(&app.db, "SELECT id FROM outbox WHERE kind = 'egreso'", &[]).await;
        if let Some((id,)) = ids.first() {
            break *id;
        }
        assert!(tokio::time::Instant::now() < until, "no egreso");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rows = wait_for(&app, egreso, "sent", all_in(DeliveryState::Sent)).await;
    pool.shutdown().await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].recipient, "cliente@example.mx");
    let got = smtp.messages();
    assert_eq!(got.len(), 2, "the ingreso's, then the egreso's");
    let subject = subject_of(&got[1].data);
    assert!(subject.contains("nota de crédito"), "{subject}");
}

async fn a_stamp_adopted_by_reconciliation_emails_the_customer(b: Backend) {
    use crate::support::admin::{mark_state, seal, send_to_pac};
    let smtp = Smtp::start().await;
    let Some(app) = app(b, &smtp.addr).await else {
        return;
    };
    // The PAC stamped, we recorded nothing: the row is `unknown` until reconciliation adopts it.
    let id = pay(&app, "mail_adopt").await;
    seal(&app, id).await;
    let uuid = match send_to_pac(&app, id).await {
        autofactura::pac::StampOutcome::Stamped(s) => s.uuid,
        other => panic!("{other:?}"),
    };
    mark_state(&app, id, "unknown").await;
    let browser = Browser::new(&app);
    let csrf = browser.login().await;
    let r = browser.post("/admin/reconcile", &[("csrf", &csrf)]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rows = wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].message_id,
        message_id(&uuid, Event::Stamped, "example.mx")
    );
    assert_eq!(smtp.messages().len(), 1);
}

async fn an_api_invoice_emails_its_receptors_address(b: Backend) {
    let smtp = Smtp::start().await;
    let Some(app) = app(b, &smtp.addr).await else {
        return;
    };
    let key = autofactura::api::keys::create_api_key(&app.db, "tests", "EKU9003173C9")
        .await
        .expect("api key");
    let post = |body: serde_json::Value| {
        app.http
            .post(format!("{}/v1/invoices", app.address))
            .bearer_auth(key.expose())
            .json(&body)
            .send()
    };
    let mut body = crate::api::invoice();
    body["receptor"]["email"] = "no es un correo".into();
    let r = post(body.clone()).await.expect("POST");
    assert_eq!(r.status(), 422, "{}", r.text().await.unwrap_or_default());
    body["receptor"]["email"] = "receptor@example.org".into();
    let r = post(body).await.expect("POST");
    assert!(r.status().is_success(), "{}", r.status());
    app.drain(60).await;
    let (id,): (i64,) = fetch_rows(&app.db, "SELECT outbox_id FROM api_invoices", &[])
        .await
        .into_iter()
        .next()
        .expect("the invoice");
    let rows = wait_for(&app, id, "sent", all_in(DeliveryState::Sent)).await;
    assert_eq!(rows[0].recipient, "receptor@example.org");
    assert_eq!(smtp.messages().len(), 1);
}

async fn without_email_settings_nothing_is_queued(b: Backend) {
    let Some(app) = spawn_app_with(b, "[worker]\nidle_poll_ms = 50\n").await else {
        return;
    };
    let id = stamped_sale(&app, "mail_off").await;
    assert!(
        app.db
            .deliveries_of(id)
            .await
            .expect("deliveries")
            .is_empty(),
        "no SMTP, no delivery"
    );
}

/// The admin's Resend form of document `id`, sent with `csrf` and another address `to`.
async fn resend(browser: &Browser, id: i64, csrf: &str, to: &str) -> crate::support::admin::Page {
    let path = format!("/admin/documents/{id}/resend");
    browser.post(&path, &[("csrf", csrf), ("to", to)]).await
}

async fn the_admin_resends_to_another_address(b: Backend) {
    let Some((smtp, app, id, browser, csrf)) = sent_and_signed_in(b, "mail_resend").await else {
        return;
    };
    let d = app.db.document(id).await.expect("db").expect("document");
    let page = browser
        .get(&format!("/admin/payments/{}", d.payment_id))
        .await;
    assert!(page.body.contains("Emails"), "{}", page.body);
    assert!(page.body.contains("cliente@example.mx"), "{}", page.body);
    let r = resend(&browser, id, &csrf, "contador@example.org").await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rows = wait_for(&app, id, "resent", |r| {
        r.len() == 2 && all_in(DeliveryState::Sent)(r)
    })
    .await;
    let uuid = d.uuid.clone().expect("uuid");
    assert_eq!(rows[1].recipient, "contador@example.org");
    assert_eq!(rows[1].requested_by.as_deref(), Some("Ana"));
    assert_eq!(
        rows[1].message_id,
        resent_message_id(&uuid, Event::Stamped, 1, "example.mx")
    );
    let got = smtp.messages();
    assert_eq!(got.len(), 2);
    assert!(got[1].rcpt.join(" ").contains("contador@example.org"));
    let page = browser
        .get(&format!("/admin/payments/{}", d.payment_id))
        .await;
    assert!(page.body.contains("contador@example.org"), "{}", page.body);
    assert!(page.body.contains("resend by Ana"), "{}", page.body);
    // Audited like every admin action.
    let audit = browser.get("/admin/audit").await;
    assert!(audit.body.contains("resend_email"), "{}", audit.body);
    // Without another address: to the customer again; a malformed one is refused.
    let r = resend(&browser, id, &csrf, "").await;
    assert_eq!(r.status, 303, "{}", r.body);
    let rows = wait_for(&app, id, "resent twice", |r| {
        r.len() == 3 && all_in(DeliveryState::Sent)(r)
    })
    .await;
    assert_eq!(rows[2].recipient, "cliente@example.mx");
    let r = resend(&browser, id, &csrf, "no es un correo").await;
    assert_eq!(r.status, 400, "{}", r.body);
    // A CSRF token that is not the session's is refused, and nothing is queued.
    let r = resend(&browser, id, "forged", "").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(app.db.deliveries_of(id).await.expect("rows").len(), 3);
}

on_both_backends!(
    a_stamped_sale_sends_exactly_one_message_with_its_xml_and_pdf,
    a_550_ends_bounced_with_the_servers_reply,
    an_smtp_server_down_then_up_gives_one_delivery,
    without_email_settings_nothing_is_queued,
    a_stamp_recovered_after_a_lost_answer_queues_one_delivery,
    a_crash_after_the_server_took_it_resends_the_same_message_id,
    the_admin_resends_to_another_address,
    a_cancelled_invoice_emails_the_customer_with_its_own_wording,
    an_egreso_emails_the_customer_of_the_sale_it_credits,
    a_stamp_adopted_by_reconciliation_emails_the_customer,
    an_api_invoice_emails_its_receptors_address,
    a_kill_9_after_the_server_took_it_gives_at_most_the_same_message_id_twice,
);
