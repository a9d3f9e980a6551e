//! The self-invoicing portal through the real server (issue 17, point 2), on SQLite and
//! PostgreSQL: a sale waiting for the factura global becomes one stamped nominative CFDI
//! however many times it is submitted; look-ups say nothing about references without their
//! total and are rate-limited per client; bad input gets an error next to each field.

use crate::support;

use std::time::{Duration, Instant};

use autofactura::cfdi::fiscal;
use autofactura::domain::StampKey;
use autofactura::global::{Planner, Scope, issue};
use autofactura::store::{PortalSubmission, Submitted, normalize_reference};
use support::admin::{assert_count, count};
use support::portal::{
    client, get, link_of, lookup, lookup_with, post, sale_without_rfc, sale_without_rfc_at, submit,
    valid_form,
};
use support::sales;
use support::{Backend, TestApp, spawn_app, spawn_app_with, spawn_app_with_env};

use crate::checkout::wait_document;

async fn payment_status(app: &TestApp, payment_id: &str) -> String {
    app.invoices()
        .await
        .into_iter()
        .find(|r| r.payment_id == payment_id)
        .map(|r| r.status.to_string())
        .expect("the payment")
}

async fn an_awaiting_global_sale_becomes_one_stamped_nominative_cfdi_under_concurrent_submits(
    b: Backend,
) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (pool, _services) = app.start_pool().await;
    let id = sale_without_rfc(&app, "p1").await;
    // Found by the merchant's order reference, typed loosely, and the total as printed.
    let path = link_of(&app, " #ord-p1 ", "$116.00").await;
    let (status, page) = get(&app, &path).await;
    assert_eq!(status, 200);
    assert!(page.contains("id=\"fiscal-form\""), "{page}");
    assert!(page.contains("<option value=\"612\">612 - Personas Físicas con Actividades Empresariales y Profesionales</option>"), "{page}");
    // A double click, a reload and other tabs: eight submissions at once.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let req = post(&app, &path, &valid_form());
        tasks.push(tokio::spawn(async move {
            req.send().await.expect("submit").status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.expect("task"),
            303,
            "each is sent to the sale's page"
        );
    }
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 1).await;
    assert_count(&app, "SELECT COUNT(*) FROM portal_submissions", 1).await;
    let key = StampKey::derive("stripe", &id, "ingreso");
    let d = wait_document(&app, key.as_str(), "stamped").await;
    let xml = String::from_utf8(d.stamped_xml.clone().expect("xml")).expect("utf-8");
    for want in [
        "Rfc=\"XIQB891116QE4\"",
        "Nombre=\"BERENICE XIMO QUEZADA\"",
        "RegimenFiscalReceptor=\"612\"",
        "UsoCFDI=\"D01\"",
        "DomicilioFiscalReceptor=\"26015\"",
        "Total=\"116.00\"",
    ] {
        assert!(xml.contains(want), "{want} missing from {xml}");
    }
    let (_, page) = get(&app, &path).await;
    assert!(page.contains("Su factura está lista"), "{page}");
    assert!(page.contains(d.uuid.as_deref().expect("uuid")), "{page}");
    let r = client()
        .get(format!("{}{path}/xml", app.address))
        .send()
        .await
        .expect("xml");
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .expect("header")
            .contains(".xml")
    );
    assert_eq!(r.bytes().await.expect("body").as_ref(), xml.as_bytes());
    // Its PDF too, linked from the page, the same bytes as the API's and the admin's.
    assert!(page.contains(&format!("{path}/pdf")), "{page}");
    let r = client()
        .get(format!("{}{path}/pdf", app.address))
        .send()
        .await
        .expect("pdf");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/pdf");
    let pdf = r.bytes().await.expect("body").to_vec();
    let expected = autofactura::pdf::render(xml.as_bytes(), &app.state.pdf).expect("render");
    assert_eq!(pdf, expected);
    // Submitting once more, after the stamp, changes nothing.
    assert_eq!(submit(&app, &path, &valid_form()).await.status(), 303);
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 1).await;
    assert_eq!(payment_status(&app, &id).await, "stamped");
    pool.shutdown().await;
}

async fn a_wrong_total_and_an_unknown_reference_get_the_same_answer(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    sale_without_rfc(&app, "p2").await;
    // The reference typed is echoed in the form; everything else must be the same.
    let answer = |body: String, typed: &str| body.replace(typed, "<REF>");
    let mut bodies = Vec::new();
    for (reference, total) in [
        ("pi_test_p2", "117.00"),
        ("pi_test_nope", "116.00"),
        ("ORD-p2", "11.60"),
        ("ORD-nope", "116.00"),
    ] {
        let started = Instant::now();
        let r = lookup(&app, reference, total).await;
        let took = started.elapsed();
        assert_eq!(r.status(), 200, "{reference} {total}");
        assert!(
            took >= Duration::from_millis(250),
            "{reference}: answered in {took:?}"
        );
        let body = r.text().await.expect("body").replace(total, "<TOTAL>");
        assert!(
            body.contains("No encontramos una compra con esa referencia y ese total"),
            "{body}"
        );
        bodies.push(answer(body, reference));
    }
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "the answers differ:\n{}",
        bodies.join("\n-----\n")
    );
    // The right pair opens the sale; nothing was written by the look-ups.
    link_of(&app, "pi_test_p2", "116").await;
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 0).await;
}

async fn lookups_are_rate_limited_per_client_address(b: Backend) {
    let Some(app) = spawn_app_with_env(
        b,
        "[portal]\nlookups_per_window = 3\n",
        &[("AUTOFACTURA__SERVER__TRUSTED_PROXIES", "127.0.0.1/32")],
    )
    .await
    else {
        return;
    };
    sale_without_rfc(&app, "p3").await;
    let from = |ip: &'static str| [("X-Forwarded-For", ip)];
    for _ in 0..3 {
        let r = lookup_with(&app, "ORD-x", "1.00", &from("198.51.100.7")).await;
        assert_eq!(r.status(), 200);
    }
    // The fourth, even with the right pair, is refused before any look-up.
    let r = lookup_with(&app, "ORD-p3", "116.00", &from("198.51.100.7")).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    assert!(
        r.text()
            .await
            .unwrap_or_default()
            .contains("demasiadas búsquedas")
    );
    // Another client behind the same proxy is not affected.
    let r = lookup_with(&app, "ORD-p3", "116.00", &from("203.0.113.9")).await;
    assert_eq!(r.status(), 303);
}

async fn bad_input_gets_an_error_next_to_each_field_in_spanish(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let id = sale_without_rfc(&app, "p4").await;
    let path = link_of(&app, &id, "116.00").await;
    let bad = [
        ("rfc", "NOPE"),
        ("razon_social", "  "),
        ("regimen_fiscal", "612"),
        ("codigo_postal", "17000"),
        ("uso_cfdi", "CP01"),
        ("email", "berenice"),
    ];
    let r = submit(&app, &path, &bad).await;
    assert_eq!(r.status(), 422);
    let page = r.text().await.expect("page");
    for (field, says) in [
        ("rfc", "El RFC «NOPE» no es válido"),
        ("razon_social", "Constancia de Situación Fiscal"),
        (
            "codigo_postal",
            "El código postal 17000 no existe en el catálogo del SAT",
        ),
        ("uso_cfdi", "El uso CP01 no aplica a una factura de venta"),
        ("email", "El correo electrónico «berenice» no es válido"),
    ] {
        let at = page
            .find(&format!("id=\"{field}-error\">"))
            .unwrap_or_else(|| panic!("no error for {field} in {page}"));
        assert!(
            page[at..].starts_with(&format!("id=\"{field}-error\">{says}"))
                || page[at..].contains(says),
            "{field}: {}",
            &page[at..at + 200]
        );
        assert!(page.contains(&format!("aria-describedby=\"{field}-error\"")));
    }
    assert!(
        !page.contains("id=\"regimen_fiscal-error\""),
        "612 was fine"
    );
    // What was typed stays in the form.
    assert!(page.contains("value=\"17000\""), "{page}");
    // A régimen for another kind of person, and a uso its régimen does not allow.
    let mut mixed = valid_form();
    mixed[2] = ("regimen_fiscal", "601");
    let page = submit(&app, &path, &mixed)
        .await
        .text()
        .await
        .expect("page");
    assert!(
        page.contains(
            "El régimen 601 (General de Ley Personas Morales) no aplica a personas físicas"
        ),
        "{page}"
    );
    let mut uso = valid_form();
    uso[2] = ("regimen_fiscal", "616");
    uso[4] = ("uso_cfdi", "G03");
    let page = submit(&app, &path, &uso).await.text().await.expect("page");
    assert!(
        page.contains("no está permitido para el régimen 616"),
        "{page}"
    );
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 0).await;
    assert_eq!(payment_status(&app, &id).await, "awaiting_global");
}

async fn a_sale_taken_by_the_factura_global_or_past_its_period_is_not_invoiced_again(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let id = sale_without_rfc(&app, "p5").await;
    let path = link_of(&app, &id, "116.00").await;
    // The factura global's freeze takes the sale first (the same conditional update).
    support::exec_sql(
        &app.db,
        "UPDATE payments SET status = 'in_global' WHERE payment_id = 'pi_test_p5' AND status = 'awaiting_global'",
    )
    .await;
    assert_eq!(submit(&app, &path, &valid_form()).await.status(), 303);
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 0).await;
    let (_, page) = get(&app, &path).await;
    assert!(page.contains("no puede facturarse en línea"), "{page}");
    // A submission that read the sale just before the freeze committed: its transaction
    // finds the sale gone and writes nothing.
    let p = app
        .db
        .portal_lookup(&normalize_reference(&id), None)
        .await
        .expect("look-up")
        .remove(0);
    let receptor = fiscal::check(
        &fiscal::FiscalInput {
            rfc: Some("XIQB891116QE4"),
            nombre: Some("Berenice Ximo Quezada"),
            regimen_fiscal: Some("612"),
            codigo_postal: Some("26015"),
            uso_cfdi: Some("G03"),
        },
        None,
    )
    .expect("receptor");
    let draft = app
        .state
        .ingestor
        .portal_draft(
            &p,
            receptor,
            autofactura::ingest::fecha_of(chrono::Utc::now()),
        )
        .expect("draft");
    let late = app
        .db
        .portal_submit(&PortalSubmission {
            payment_row: p.id,
            customer_json: "{}".into(),
            email: "berenice@example.mx".into(),
            client_ip: None,
            draft,
        })
        .await
        .expect("submit");
    assert_eq!(late, Submitted::Taken);
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 0).await;
    assert_eq!(payment_status(&app, &id).await, "in_global");
    assert!(!page.contains("fiscal-form"));
    // A sale of an earlier month (the default: no days after the month's end).
    let old = (chrono::Utc::now() - chrono::Duration::days(45)).timestamp();
    let old_id = sale_without_rfc_at(&app, "p5old", old).await;
    let path = link_of(&app, &old_id, "116.00").await;
    let (_, page) = get(&app, &path).await;
    assert!(
        page.contains("El plazo para facturar esta compra terminó"),
        "{page}"
    );
    assert_eq!(submit(&app, &path, &valid_form()).await.status(), 303);
    assert_count(&app, "SELECT COUNT(*) FROM outbox", 0).await;
    assert_eq!(payment_status(&app, &old_id).await, "awaiting_global");
}

async fn a_sale_in_a_stamped_factura_global_is_refused_with_the_globals_folio(b: Backend) {
    // The portal stays open 40 days past the month's end, so only the global stands in the way.
    let Some(app) = spawn_app_with(
        b,
        "[global]\nauto_issue = false\n[portal]\ndays_after_month_end = 40\n",
    )
    .await
    else {
        return;
    };
    let last_month = sales::month(1);
    sales::sell(&app, "p7", sales::at(last_month, 10, 12), 11600).await;
    let path = link_of(&app, "ORD-p7", "116.00").await;
    assert!(get(&app, &path).await.1.contains("fiscal-form"));
    let planner = Planner::new(&app.settings).expect("planner");
    let report = issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("global issue");
    assert_eq!(report.issued.len(), 1, "{report:?}");
    let (pool, _services) = app.start_pool().await;
    let row = app.db.portal_lookup("ORD-P7", None).await.expect("look-up")[0].id;
    let mut global = None;
    for _ in 0..300 {
        global = app.db.global_of(row).await.expect("global_of");
        if global.as_ref().is_some_and(|g| g.state == "stamped") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let global = global.expect("the sale is in a global");
    assert_eq!(global.state, "stamped", "{global:?}");
    let folio = format!(
        "{}-{}",
        global.serie.as_deref().unwrap_or(""),
        global.folio.as_deref().expect("folio")
    );
    // The page says so with the global's folio; a submission writes nothing.
    let page = get(&app, &path).await.1;
    assert!(
        page.contains("Esta compra ya está en la factura global"),
        "{page}"
    );
    assert!(page.contains(&format!("factura global {folio} ")), "{page}");
    assert!(!page.contains("fiscal-form"), "{page}");
    let documents = count(&app, "SELECT COUNT(*) FROM outbox").await;
    assert_eq!(submit(&app, &path, &valid_form()).await.status(), 303);
    assert_eq!(count(&app, "SELECT COUNT(*) FROM outbox").await, documents);
    assert_count(&app, "SELECT COUNT(*) FROM portal_submissions", 0).await;
    assert_eq!(payment_status(&app, "pi_test_p7").await, "in_global");
    pool.shutdown().await;
}

async fn links_are_signed_expire_and_are_printed_by_the_command_line(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let id = sale_without_rfc(&app, "p6").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .arg("--config")
        .arg(&app.config_file)
        .args(["portal", "link", &id])
        .output()
        .expect("run autofactura portal link");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = stdout
        .split_once("/facturar/")
        .map(|(_, t)| format!("/facturar/{t}"))
        .unwrap_or_else(|| panic!("no link in {stdout:?}"));
    let (status, page) = get(&app, &path).await;
    assert_eq!(status, 200);
    assert!(page.contains(&id) && page.contains("fiscal-form"), "{page}");
    // Another payment row or a later expiry under the same signature: refused.
    let mut parts: Vec<String> = path["/facturar/".len()..]
        .split('.')
        .map(str::to_owned)
        .collect();
    parts[1] = (parts[1].parse::<i64>().expect("expiry") + 1).to_string();
    assert_eq!(
        get(&app, &format!("/facturar/{}", parts.join("."))).await.0,
        404
    );
    // A link the server signed that has expired.
    let key = autofactura::portal::link_key(&app.settings, &app.db)
        .await
        .expect("key");
    let row: i64 = path["/facturar/".len()..]
        .split('.')
        .next()
        .and_then(|r| r.parse().ok())
        .expect("row");
    let stale = autofactura::portal::link::sign(&key, row, chrono::Utc::now().timestamp() - 1);
    let (status, page) = get(&app, &format!("/facturar/{stale}")).await;
    assert_eq!(status, 410);
    assert!(page.contains("Este enlace ya venció"), "{page}");
    let unknown = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .arg("--config")
        .arg(&app.config_file)
        .args(["portal", "link", "pi_nobody"])
        .output()
        .expect("run");
    assert_eq!(unknown.status.code(), Some(1));
}

async fn the_portal_can_be_switched_off_and_its_bodies_are_capped(b: Backend) {
    let Some(off) = spawn_app_with(b, "[portal]\nenabled = false\n").await else {
        return;
    };
    assert_eq!(get(&off, "/facturar").await.0, 404);
    assert_eq!(lookup(&off, "x", "1").await.status(), 404);
    drop(off);
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (status, page) = get(&app, "/facturar").await;
    assert_eq!(status, 200);
    // The merchant's name, no admin chrome.
    assert!(
        page.contains("ESCUELA KEMPER URGATE") && !page.contains("/admin"),
        "{page}"
    );
    let huge = "a".repeat(64 * 1024);
    let r = post(
        &app,
        "/facturar",
        &[("reference", huge.as_str()), ("total", "1")],
    )
    .send()
    .await
    .expect("post");
    assert_eq!(r.status(), 413);
}

on_both_backends!(
    an_awaiting_global_sale_becomes_one_stamped_nominative_cfdi_under_concurrent_submits,
    a_wrong_total_and_an_unknown_reference_get_the_same_answer,
    lookups_are_rate_limited_per_client_address,
    bad_input_gets_an_error_next_to_each_field_in_spanish,
    a_sale_taken_by_the_factura_global_or_past_its_period_is_not_invoiced_again,
    a_sale_in_a_stamped_factura_global_is_refused_with_the_globals_folio,
    links_are_signed_expire_and_are_printed_by_the_command_line,
    the_portal_can_be_switched_off_and_its_bodies_are_capped,
);
