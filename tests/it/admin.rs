//! The admin over HTTP, on SQLite and PostgreSQL: sign-in, sessions, CSRF, the login limit,
//! the pages, and every action (retry, bulk retry, cancel, refreeze, SAT status, reconcile,
//! duplicates). Documents are put in the states a worker leaves them in; the sandbox PAC is the
//! one the appliance runs in-process.

use crate::support;

use autofactura::cfdi::{InvoiceRequest, RelacionadosData};
use autofactura::pac::StampOutcome;
use chrono::Utc;
use support::admin::{
    Browser, PASSWORD, admin_app, assert_count, cancellation, count, doc, finish_cancellation,
    hidden, mark_failed, mark_state, mark_unknown, outbox_of, pay, pay_at, rejected, seal,
    send_to_pac, set_request, stamped, stamped_unrecorded,
};
use support::{Backend, spawn_app};

async fn every_admin_route_needs_a_session_and_login_sets_a_strict_cookie(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let anon = Browser::new(&app);
    for path in [
        "/admin",
        "/admin/invoices?view=failed",
        "/admin/payments/1",
        "/admin/documents/1/xml/sealed",
        "/admin/documents/1/cancel",
        "/admin/cancellations",
        "/admin/reconcile",
        "/admin/audit",
    ] {
        let p = anon.get(path).await;
        // Back to the page asked for after signing in (the dashboard is where login goes).
        let login = if path == "/admin" {
            "/admin/login".to_owned()
        } else {
            format!(
                "/admin/login?next={}",
                autofactura::admin::common::percent_encode(path)
            )
        };
        assert_eq!(
            (p.status, p.location.as_deref()),
            (303, Some(login.as_str())),
            "{path}"
        );
    }
    let p = anon
        .post("/admin/documents/1/retry", &[("csrf", "x")])
        .await;
    assert_eq!(p.status, 303, "a POST without a session goes to the login");
    // Assets are embedded and public.
    let css = anon.get("/admin/static/admin.css").await;
    assert_eq!(css.status, 200);
    assert!(css.body.contains("--accent"));
    assert_eq!(anon.get("/admin/static/nope.js").await.status, 404);

    let b1 = Browser::new(&app);
    let wrong = b1.login_as("Ana", "not the password").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("Wrong password"));
    assert!(!b1.has_cookie("af_session"));
    let ok = b1.login_as("Ana", PASSWORD).await;
    assert_eq!((ok.status, ok.location.as_deref()), (303, Some("/admin")));
    let session_cookie = b1
        .set_cookies
        .lock()
        .unwrap()
        .iter()
        .find(|c| c.starts_with("af_session=") && !c.starts_with("af_session=;"))
        .cloned()
        .expect("session cookie");
    assert!(session_cookie.contains("HttpOnly"), "{session_cookie}");
    assert!(
        session_cookie.contains("SameSite=Strict"),
        "{session_cookie}"
    );
    assert!(session_cookie.contains("Path=/admin"), "{session_cookie}");
    assert!(
        !session_cookie.contains("Secure"),
        "plain HTTP: {session_cookie}"
    );
    let dash = b1.get("/admin").await;
    assert_eq!(dash.status, 200);
    assert!(dash.body.contains("Dashboard") && dash.body.contains("Ana"));
    assert_eq!(
        dash.headers
            .get("x-frame-options")
            .map(|v| v.to_str().unwrap()),
        Some("DENY")
    );

    // A peer that is not a trusted proxy cannot claim TLS (tests/internet.rs: one that is can).
    let mut tls = Browser::new(&app);
    tls.forwarded_proto = Some("https".into());
    assert_eq!(tls.login_as("Bo", PASSWORD).await.status, 303);
    assert!(
        !tls.set_cookies
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.starts_with("af_session=") && c.contains("Secure"))
    );

    // Logout needs the CSRF token, then the session is gone for good.
    let csrf = dash.csrf();
    assert_eq!(
        b1.post("/admin/logout", &[("csrf", "forged")]).await.status,
        403
    );
    assert_eq!(b1.get("/admin").await.status, 200, "still signed in");
    let out = b1.post("/admin/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(b1.get("/admin").await.status, 303);
    assert_count(&app, "SELECT COUNT(*) FROM admin_actions WHERE actor = 'Ana' AND action IN ('login', 'logout', 'login_failed')", 3).await;
}

async fn the_login_form_has_its_own_csrf_and_failed_logins_are_limited(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let br = Browser::new(&app);
    let form = br.get("/admin/login").await;
    let csrf = form.csrf();
    // Without the cookie that goes with the token (a cross-site form), refused.
    br.forget_cookie("af_login_csrf");
    let r = br
        .post(
            "/admin/login",
            &[("csrf", &csrf), ("name", "Ana"), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(r.status, 403);
    for i in 0..5 {
        let r = br.login_as("Mallory", &format!("guess {i}")).await;
        assert_eq!(r.status, 401, "attempt {i}");
    }
    // The sixth try is refused before the password is looked at, even the right one.
    let r = br.login_as("Ana", PASSWORD).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.headers.get("retry-after").is_some());
    assert!(!br.has_cookie("af_session"));
}

async fn a_generated_password_is_printed_once_and_kept(b: Backend) {
    // No [admin] password: the first start generates one and stores only its hash.
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let stored = app.db.admin_password_hash().await.unwrap().expect("hash");
    assert!(stored.starts_with("$argon2id$"), "{stored}");
    assert!(
        !app.db
            .store_admin_password_hash("$argon2id$other")
            .await
            .unwrap(),
        "never replaced"
    );
    let r = Browser::new(&app).login_as("Ana", PASSWORD).await;
    assert_eq!(r.status, 401);
}

async fn every_form_checks_the_csrf_token(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let failed = rejected(&app, "csrf1", "CFDI40108", "El TipoDeComprobante …").await;
    let stamped_id = pay(&app, "csrf2").await;
    stamped(&app, stamped_id).await;
    let br = Browser::new(&app);
    br.login().await;
    let forged = [("csrf", "0123")];
    for path in [
        format!("/admin/documents/{failed}/retry"),
        format!("/admin/documents/{failed}/refreeze"),
        format!("/admin/documents/{stamped_id}/cancel"),
        format!("/admin/documents/{stamped_id}/sat-status"),
        "/admin/invoices/retry".to_owned(),
        "/admin/reconcile".to_owned(),
        "/admin/findings/1/resolve".to_owned(),
        "/admin/findings/1/cancel-extra".to_owned(),
        "/admin/logout".to_owned(),
    ] {
        let r = br.post(&path, &forged).await;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        let r = br.post(&path, &[]).await;
        assert_eq!(r.status, 403, "{path} without a token");
    }
    assert_eq!(doc(&app, failed).await.state.as_str(), "failed");
    assert_count(&app, "SELECT COUNT(*) FROM cancellations", 0).await;
    assert_count(
        &app,
        "SELECT COUNT(*) FROM admin_actions WHERE action NOT IN ('login')",
        0,
    )
    .await;
}

async fn the_pages_show_states_codes_and_documents(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let pending = pay(&app, "pages1").await;
    let msg =
        "CFDI40108 - El TipoDeComprobante no contiene un valor del catálogo <c_TipoDeComprobante>.";
    let failed = rejected(&app, "pages2", "CFDI40108", msg).await;
    let st = pay(&app, "pages3").await;
    let uuid = stamped(&app, st).await;
    let br = Browser::new(&app);
    br.login().await;

    let dash = br.get("/admin").await;
    assert!(dash.body.contains(">Failed<"), "{}", dash.body);
    assert!(dash.body.contains("id=\"oldest-pending\""));
    assert!(
        dash.body
            .contains("No worker process has reported a heartbeat")
    );
    assert!(
        dash.body.contains("CFDI40108")
            && dash.body.contains("c_TipoDeComprobante")
            && !dash.body.contains("<c_TipoDeComprobante>"),
        "last errors, verbatim and escaped: {}",
        dash.body
    );

    let list = br.get("/admin/invoices?view=failed").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains("pi_test_pages2") && !list.body.contains("pi_test_pages1"));
    assert!(
        list.body.contains("&#60;c_TipoDeComprobante&#62;")
            || list.body.contains("&lt;c_TipoDeComprobante&gt;")
    );
    assert!(
        list.body
            .contains(&format!("name=\"ids\" value=\"{failed}\""))
    );
    let list = br.get("/admin/invoices?view=pending").await;
    assert!(list.body.contains("pi_test_pages1") && !list.body.contains("pi_test_pages2"));
    // Search by UUID, RFC, serie-folio and payment id, and a date range.
    let by_uuid = br
        .get(&format!(
            "/admin/invoices?view=all&q={}",
            uuid.to_lowercase()
        ))
        .await;
    assert!(by_uuid.body.contains("pi_test_pages3") && !by_uuid.body.contains("pi_test_pages1"));
    let by_rfc = br.get("/admin/invoices?view=all&q=XIQB891116QE4").await;
    assert!(by_rfc.body.contains("3 result(s)"), "{}", by_rfc.body);
    // A pending row has no folio yet (assigned when sealed): shown as —.
    assert_eq!(doc(&app, pending).await.folio, None);
    assert!(list.body.contains("A-—"), "{}", list.body);
    let folio = doc(&app, st).await.folio.expect("numbered when sealed");
    let by_folio = br
        .get(&format!("/admin/invoices?view=all&q=A-{folio}"))
        .await;
    assert!(by_folio.body.contains("pi_test_pages3") && by_folio.body.contains("1 result(s)"));
    let by_id = br.get("/admin/invoices?view=all&q=pi_test_pages2").await;
    assert!(by_id.body.contains("1 result(s)"));
    let past = br
        .get("/admin/invoices?view=all&from=2020-01-01&to=2020-01-31")
        .await;
    assert!(past.body.contains("0 result(s)"));
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let around = br
        .get(&format!(
            "/admin/invoices?view=all&from=2020-01-01&to={today}"
        ))
        .await;
    assert!(around.body.contains("pi_test_pages3"));
    assert_eq!(
        br.get("/admin/invoices?view=all&from=nope").await.status,
        400
    );

    // Detail: the payment, the frozen request, sealed and stamped XML, the actions offered.
    let d = doc(&app, st).await;
    let page = br.get(&format!("/admin/payments/{}", d.payment_id)).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&uuid));
    assert!(page.body.contains("Stamped XML") && page.body.contains("TimbreFiscalDigital"));
    assert!(page.body.contains(&format!("/admin/documents/{st}/cancel")));
    let sealed = br
        .get(&format!("/admin/documents/{st}/xml/sealed?download=1"))
        .await;
    assert_eq!(sealed.status, 200);
    assert!(
        sealed
            .header("content-disposition")
            .starts_with("attachment")
    );
    assert_eq!(sealed.body.as_bytes(), d.sealed_xml.as_deref().unwrap());
    let view = br.get(&format!("/admin/documents/{st}/xml/stamped")).await;
    assert_eq!(view.status, 200);
    assert!(view.header("content-type").starts_with("text/plain"));
    assert_eq!(view.body.as_bytes(), d.stamped_xml.as_deref().unwrap());
    let fpage = br.payment_page(&app, failed).await;
    assert!(fpage.body.contains(&format!("id=\"retry-{failed}\"")));
    assert!(fpage.body.contains(&format!("id=\"refreeze-{failed}\"")));
    assert_eq!(
        br.get(&format!("/admin/documents/{pending}/xml/sealed"))
            .await
            .status,
        404
    );
    assert_eq!(br.get("/admin/payments/999999").await.status, 404);
    assert_eq!(br.get("/admin/audit").await.status, 200);
}

async fn retry_sends_a_rejected_document_back_with_the_same_bytes(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let id = pay(&app, "retry1").await;
    let sealed = seal(&app, id).await;
    mark_failed(&app, id, "CFDI40221", "CFDI40221 - …").await;
    let before = doc(&app, id).await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let r = br
        .post(&format!("/admin/documents/{id}/retry"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.location.unwrap().contains("notice=retried"));
    let after = doc(&app, id).await;
    assert_eq!(after.state.as_str(), "pending");
    assert_eq!(after.sealed_xml.as_deref(), Some(sealed.as_slice()));
    assert_eq!(after.stamp_key, before.stamp_key);
    assert_eq!(after.request_json, before.request_json);
    assert_eq!((after.attempts, after.generation), (0, before.generation));
    assert!(after.run_at <= Utc::now());
    let actions = app.db.actions_on("outbox", &id.to_string()).await.unwrap();
    assert_eq!(
        actions
            .iter()
            .map(|a| (a.actor.as_str(), a.action.as_str()))
            .collect::<Vec<_>>(),
        [("Ana", "retry")]
    );
    // Only a failed document is retried.
    let again = br
        .post(&format!("/admin/documents/{id}/retry"), &[("csrf", &csrf)])
        .await;
    assert_eq!(again.status, 409);
    assert!(again.body.contains("only documents the PAC rejected"));
}

/// Every send after an unknown outcome asks the PAC first, the admin's included: a `failed`
/// document whose last PAC call went unanswered goes back as `unknown`, not `pending`, and an
/// `unknown` one is asked for now. The worker then finds the stamp instead of sending again.
async fn retry_asks_the_pac_first_when_the_last_call_went_unanswered(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    // Sent and stamped, the answer never came, and the row was given up as failed (as earlier
    // versions did after max_attempts unanswered questions).
    let id = pay(&app, "asked_first").await;
    let stamp = stamped_unrecorded(&app, id).await;
    mark_unknown(&app, id, Utc::now()).await;
    mark_failed(
        &app,
        id,
        "UNKNOWN",
        "outcome still unknown after 10 attempts",
    )
    .await;
    // Unknown, next asked for in a day.
    let waiting = pay(&app, "asked_now").await;
    seal(&app, waiting).await;
    mark_unknown(&app, waiting, Utc::now() + chrono::Duration::days(1)).await;

    let br = Browser::new(&app);
    let csrf = br.login().await;
    for row in [id, waiting] {
        let r = br
            .post(&format!("/admin/documents/{row}/retry"), &[("csrf", &csrf)])
            .await;
        assert_eq!(r.status, 303, "{}", r.body);
        let d = doc(&app, row).await;
        assert_eq!(
            d.state.as_str(),
            "unknown",
            "asked for before anything is sent"
        );
        assert!(d.run_at <= Utc::now(), "due now");
        assert!(r.location.unwrap_or_default().contains("notice=asked"));
    }
    assert_eq!(doc(&app, id).await.attempts, 0);
    let actions = app.db.actions_on("outbox", &id.to_string()).await.unwrap();
    assert!(
        actions[0]
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("asked before anything is sent"),
        "{actions:?}"
    );

    let pool =
        autofactura::worker::worker_for(&app.settings, app.db.clone(), app.state.pac.clone())
            .expect("worker")
            .start(tokio_util::sync::CancellationToken::new(), None);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while doc(&app, id).await.state.as_str() != "stamped"
        || doc(&app, waiting).await.state.as_str() != "stamped"
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            (doc(&app, id).await, doc(&app, waiting).await)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    pool.shutdown().await;
    assert_eq!(
        doc(&app, id).await.uuid.as_deref(),
        Some(stamp.uuid.as_str())
    );
    for row in [id, waiting] {
        let log: Vec<(String, String)> = app
            .db
            .attempts_of(row)
            .await
            .unwrap()
            .into_iter()
            .map(|a| (a.operation, a.outcome))
            .collect();
        assert_eq!(
            log,
            [
                ("stamp".to_owned(), "unknown".to_owned()),
                ("recover".to_owned(), "found".to_owned())
            ],
            "asked, never sent afresh"
        );
    }
}

async fn bulk_retry_takes_every_selected_rejected_document(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let a = pay(&app, "bulk1").await;
    let c = pay(&app, "bulk2").await;
    let untouched = pay(&app, "bulk3").await;
    for id in [a, c, untouched] {
        seal(&app, id).await;
        mark_failed(&app, id, "CFDI40108", "x").await;
    }
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let list = br.get("/admin/invoices?view=failed").await;
    assert!(list.body.contains("Retry selected"));
    let (a_s, c_s) = (a.to_string(), c.to_string());
    let r = br
        .post(
            "/admin/invoices/retry",
            &[("csrf", &csrf), ("ids", &a_s), ("ids", &c_s)],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(doc(&app, a).await.state.as_str(), "pending");
    assert_eq!(doc(&app, c).await.state.as_str(), "pending");
    assert_eq!(doc(&app, untouched).await.state.as_str(), "failed");
    let none = br
        .post("/admin/invoices/retry", &[("csrf", &csrf), ("ids", &a_s)])
        .await;
    assert_eq!(none.status, 409, "no longer failed");
    // Nothing selected: back to the list with a notice that says so (tests/it/admin_ux.rs).
    assert_eq!(
        br.post("/admin/invoices/retry", &[("csrf", &csrf)])
            .await
            .status,
        303
    );
}

async fn cancel_freezes_a_request_and_enforces_the_motivo_rules(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let id = pay(&app, "cancel1").await;
    let uuid = stamped(&app, id).await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let form = br.get(&format!("/admin/documents/{id}/cancel")).await;
    assert_eq!(form.status, 200);
    // 116.00 MXN, stamped a moment ago: fr. I and IX.
    assert!(
        form.body
            .contains("Cancel now, no receptor approval needed")
    );
    assert!(form.body.contains("fr. I:") && form.body.contains("fr. IX:"));
    let path = format!("/admin/documents/{id}/cancel");
    let r = br.post(&path, &[("csrf", &csrf), ("motivo", "01")]).await;
    assert_eq!(r.status, 400);
    assert!(
        r.body
            .contains("motivo 01 needs the UUID of the replacement")
    );
    // A stamped document that does not relate to it with TipoRelacion 04.
    let other = pay(&app, "cancel2").await;
    let other_uuid = stamped(&app, other).await;
    let r = br
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("motivo", "01"),
                ("folio_sustitucion", &other_uuid),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("does not relate to"), "{}", r.body);
    let r = br
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("motivo", "01"),
                ("folio_sustitucion", "12345678-0000-4000-8000-000000000000"),
            ],
        )
        .await;
    assert!(r.body.contains("not a stamped document of this appliance"));
    let r = br.post(&path, &[("csrf", &csrf), ("motivo", "04")]).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("factura global"));
    let r = br.post(&path, &[("csrf", &csrf), ("motivo", "07")]).await;
    assert_eq!(r.status, 400);
    assert_count(&app, "SELECT COUNT(*) FROM cancellations", 0).await;

    let r = br.post(&path, &[("csrf", &csrf), ("motivo", "02")]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let c = cancellation(&app, &uuid).await;
    assert_eq!(
        (
            c.state.as_str(),
            c.motivo.as_str(),
            c.rfc_emisor.as_str(),
            c.rfc_receptor.as_str(),
            c.total.as_str(),
            c.requires_acceptance,
            c.requested_by.as_str(),
            c.outbox_id
        ),
        (
            "requested",
            "02",
            "EKU9003173C9",
            "XIQB891116QE4",
            "116.00",
            false,
            "Ana",
            Some(id)
        )
    );
    assert!(c.run_at <= Utc::now());
    let page = br.payment_page(&app, id).await;
    assert!(page.body.contains("Cancel requested"));
    assert!(
        !page.body.contains(&format!("id=\"cancel-{id}\"")),
        "not offered twice"
    );
    let r = br.post(&path, &[("csrf", &csrf), ("motivo", "03")]).await;
    assert_eq!(r.status, 409, "already requested");
    let list = br.get("/admin/cancellations").await;
    assert!(list.body.contains(&uuid));
    assert_eq!(
        app.db.actions_on("outbox", &id.to_string()).await.unwrap()[0].action,
        "cancel"
    );
    // A pending document cannot be cancelled.
    let pending = pay(&app, "cancel3").await;
    assert_eq!(
        br.get(&format!("/admin/documents/{pending}/cancel"))
            .await
            .status,
        409
    );
}

async fn the_cancellation_progress_and_acuse_are_shown_and_a_rejection_can_be_asked_again(
    b: Backend,
) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let id = pay(&app, "progress1").await;
    let uuid = stamped(&app, id).await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let path = format!("/admin/documents/{id}/cancel");
    assert_eq!(
        br.post(&path, &[("csrf", &csrf), ("motivo", "02")])
            .await
            .status,
        303
    );
    // The receptor said no (what the worker records from SAT's answer).
    finish_cancellation(
        &app,
        &uuid,
        "rejected",
        "Solicitud rechazada",
        "<Acuse n=\"1\"/>",
    )
    .await;
    let detail = br.payment_page(&app, id).await;
    assert!(detail.body.contains("Cancellation rejected"));
    assert!(detail.body.contains("Solicitud rechazada (still Vigente)"));
    assert!(
        detail.body.contains(&format!("id=\"cancel-{id}\"")),
        "asked again"
    );
    let in_process = br.get("/admin/cancellations").await;
    assert!(!in_process.body.contains(&uuid));
    let all = br.get("/admin/cancellations?all=1").await;
    assert!(all.body.contains(&uuid) && all.body.contains("/acuse"));
    let c = cancellation(&app, &uuid).await;
    let acuse = br
        .get(&format!("/admin/cancellations/{}/acuse", c.id))
        .await;
    assert_eq!(acuse.status, 200);
    assert_eq!(acuse.body, "<Acuse n=\"1\"/>");
    assert!(
        acuse
            .header("content-disposition")
            .starts_with("attachment")
    );
    // Asked again (motivo 03): the same row goes back to `requested`.
    assert_eq!(
        br.post(&path, &[("csrf", &csrf), ("motivo", "03")])
            .await
            .status,
        303
    );
    let again = cancellation(&app, &uuid).await;
    assert_eq!(
        (again.id, again.state.as_str(), again.motivo.as_str()),
        (c.id, "requested", "03")
    );
    finish_cancellation(
        &app,
        &uuid,
        "canceled",
        "Cancelado sin aceptación",
        "<Acuse n=\"2\"/>",
    )
    .await;
    let detail = br.payment_page(&app, id).await;
    assert!(detail.body.contains("Final: cancelled"));
    assert!(!detail.body.contains(&format!("id=\"cancel-{id}\"")));
    assert_eq!(
        br.post(&path, &[("csrf", &csrf), ("motivo", "02")])
            .await
            .status,
        409,
        "a cancelled UUID is not asked again"
    );
    assert_eq!(br.get("/admin/cancellations/999/acuse").await.status, 404);
}

async fn motivo_01_accepts_a_stamped_replacement_related_by_04(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let id = pay(&app, "subst1").await;
    let uuid = stamped(&app, id).await;
    // The replacement: another sale's document relating to the first with TipoRelacion 04.
    let rep = pay(&app, "subst2").await;
    let mut req: InvoiceRequest = serde_json::from_str(&doc(&app, rep).await.request_json).unwrap();
    req.relacionados = vec![RelacionadosData {
        tipo_relacion: "04".into(),
        uuids: vec![uuid.clone()],
    }];
    set_request(&app, rep, &req).await;
    let rep_uuid = stamped(&app, rep).await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    // While the replacement lives, motivo 02 is "No cancelable" (a live document relates to it).
    let r = br
        .post(
            &format!("/admin/documents/{id}/cancel"),
            &[("csrf", &csrf), ("motivo", "02")],
        )
        .await;
    assert_eq!(r.status, 409);
    assert!(r.body.contains("No cancelable") && r.body.contains(&rep_uuid));
    let r = br
        .post(
            &format!("/admin/documents/{id}/cancel"),
            &[
                ("csrf", &csrf),
                ("motivo", "01"),
                ("folio_sustitucion", &rep_uuid.to_lowercase()),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let c = cancellation(&app, &uuid).await;
    assert_eq!(
        (c.motivo.as_str(), c.folio_sustitucion.as_deref()),
        ("01", Some(rep_uuid.as_str()))
    );
}

async fn refreeze_starts_a_new_generation_once_the_pac_confirms_no_stamp(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    // Paid four days ago: the PAC refuses its Fecha (401) — a definite non-stamp.
    let old = Utc::now().timestamp() - 4 * 86_400;
    let id = pay_at(&app, "refreeze1", old).await;
    seal(&app, id).await;
    let code = match send_to_pac(&app, id).await {
        StampOutcome::Rejected { code, message, .. } => {
            mark_failed(&app, id, &code, &message).await;
            code
        }
        other => panic!("expected a rejection, got {other:?}"),
    };
    assert_eq!(code, "401");
    let before = doc(&app, id).await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let form = br.get(&format!("/admin/documents/{id}/refreeze")).await;
    assert_eq!(form.status, 200);
    assert_eq!(hidden(&form.body, "csrf").as_deref(), Some(csrf.as_str()));
    let path = format!("/admin/documents/{id}/refreeze");
    let fields = |confirm: &'static str, rfc: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("confirm", confirm.to_owned()),
            ("rfc", rfc.to_owned()),
            ("nombre", "Berenice Xochitl Ibarra".to_owned()),
            ("domicilio_fiscal", "26015".to_owned()),
            ("regimen_fiscal", "612".to_owned()),
            ("uso_cfdi", "G03".to_owned()),
        ]
    };
    let post = |f: Vec<(&'static str, String)>| {
        let br = &br;
        let path = path.clone();
        async move {
            let pairs: Vec<(&str, &str)> = f.iter().map(|(k, v)| (*k, v.as_str())).collect();
            br.post(&path, &pairs).await
        }
    };
    let r = post(fields("", "XIQB891116QE4")).await;
    assert_eq!(r.status, 400, "needs the confirmation");
    let r = post(fields("yes", "NOT-AN-RFC")).await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("RFC"));
    assert_eq!(doc(&app, id).await.generation, 0);

    let r = post(fields("yes", "XIQB891116QE4")).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.location.unwrap().contains("notice=refrozen"));
    let after = doc(&app, id).await;
    assert_eq!(
        (after.state.as_str(), after.generation, after.attempts),
        ("pending", 1, 0)
    );
    assert!(after.sealed_xml.is_none() && after.last_error_code.is_none());
    assert_eq!(
        after.stamp_key,
        autofactura::domain::StampKey::derive("stripe", "pi_test_refreeze1", "ingreso:g1").as_str()
    );
    let req: InvoiceRequest = serde_json::from_str(&after.request_json).unwrap();
    let drift = (autofactura::domain::time::now_in_mexico() - req.fecha).num_seconds();
    assert!((0..120).contains(&drift), "Fecha is now: {}", req.fecha);
    assert_eq!(after.fecha, req.fecha);
    match req.receptor {
        autofactura::cfdi::ReceptorData::Nominativo { nombre, .. } => {
            assert_eq!(nombre, "BERENICE XOCHITL IBARRA")
        }
        other => panic!("{other:?}"),
    }
    let history = app.db.history_of(id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (
            history[0].generation,
            history[0].stamp_key.as_str(),
            history[0].actor.as_str()
        ),
        (0, before.stamp_key.as_str(), "Ana")
    );
    assert_eq!(history[0].sealed_xml, before.sealed_xml);
    assert!(history[0].reason.contains("401"));
    // The PAC was asked first; the question is in the timeline.
    assert_count(&app, &format!("SELECT COUNT(*) FROM pac_attempts WHERE outbox_id = {id} AND operation = 'recover' AND outcome = 'not_found'"), 1).await;
    // The new generation seals and the PAC takes it.
    seal(&app, id).await;
    assert!(matches!(
        send_to_pac(&app, id).await,
        StampOutcome::Stamped(_)
    ));
    // Not for a pending or stamped document.
    assert_eq!(
        br.get(&format!("/admin/documents/{id}/refreeze"))
            .await
            .status,
        409
    );
}

async fn refreeze_adopts_the_stamp_when_the_pac_had_stamped_the_old_document(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    // The worker sent it, the answer was lost, and the row ended expired.
    let id = pay(&app, "adopt1").await;
    let stamp = stamped_unrecorded(&app, id).await;
    mark_state(&app, id, "expired").await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let r = br
        .post(
            &format!("/admin/documents/{id}/refreeze"),
            &[
                ("csrf", &csrf),
                ("confirm", "yes"),
                ("rfc", "XIQB891116QE4"),
                ("nombre", "X"),
                ("domicilio_fiscal", "26015"),
                ("regimen_fiscal", "612"),
                ("uso_cfdi", "G03"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(r.location.unwrap().contains("notice=adopted"));
    let d = doc(&app, id).await;
    assert_eq!(
        (d.state.as_str(), d.uuid.as_deref(), d.generation),
        ("stamped", Some(stamp.uuid.as_str()), 0)
    );
    assert!(d.flag.unwrap().contains("adopted at refreeze"));
    assert!(app.db.history_of(id).await.unwrap().is_empty());
}

async fn sat_status_is_asked_and_recorded(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let id = pay(&app, "sat1").await;
    stamped(&app, id).await;
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let r = br
        .post(
            &format!("/admin/documents/{id}/sat-status"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let page = br.payment_page(&app, id).await;
    assert!(
        page.body.contains("Estado: Vigente") && page.body.contains("Cancelable sin aceptación"),
        "{}",
        page.body
    );
    assert_count(
        &app,
        "SELECT COUNT(*) FROM pac_attempts WHERE operation = 'sat_status'",
        1,
    )
    .await;
}

async fn reconciliation_adopts_unrecorded_stamps_and_lists_duplicates(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    // 1. A lost response: the PAC stamped, we recorded nothing; the row is `unknown`.
    let lost = pay(&app, "recon1").await;
    let lost_stamp = stamped_unrecorded(&app, lost).await;
    mark_state(&app, lost, "unknown").await;
    // 2. A duplicate: generation 0 was stamped, then refrozen by hand as generation 1 and
    //    stamped again (two live UUIDs for one sale).
    let dup = pay(&app, "recon2").await;
    let first = stamped_unrecorded(&app, dup).await;
    let d = doc(&app, dup).await;
    mark_state(&app, dup, "expired").await;
    let mut req: InvoiceRequest = serde_json::from_str(&d.request_json).unwrap();
    req.fecha -= chrono::Duration::seconds(60);
    assert!(
        app.db
            .refreeze(
                dup,
                0,
                &serde_json::to_string(&req).unwrap(),
                autofactura::domain::StampKey::derive("stripe", "pi_test_recon2", "ingreso:g1")
                    .as_str(),
                req.fecha,
                "test",
                "Bo",
            )
            .await
            .unwrap()
    );
    let kept = stamped(&app, dup).await;
    // 3. Nothing wrong: a recorded stamp.
    let fine = pay(&app, "recon3").await;
    stamped(&app, fine).await;

    let br = Browser::new(&app);
    let csrf = br.login().await;
    let r = br.post("/admin/reconcile", &[("csrf", &csrf)]).await;
    assert_eq!(r.status, 303, "{}", r.body);
    let l = doc(&app, lost).await;
    assert_eq!(
        (l.state.as_str(), l.uuid.as_deref()),
        ("stamped", Some(lost_stamp.uuid.as_str()))
    );
    assert!(l.flag.unwrap().contains("adopted by reconciliation"));
    let dups = app
        .db
        .findings(Some("duplicate"), Some("open"))
        .await
        .unwrap();
    assert_eq!(dups.len(), 1, "{dups:?}");
    assert_eq!(
        (dups[0].uuid.as_str(), dups[0].outbox_id),
        (first.uuid.as_str(), Some(dup))
    );
    // Running again finds nothing new.
    br.post("/admin/reconcile", &[("csrf", &csrf)]).await;
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM reconciliation_findings").await,
        2,
        "one orphan (adopted), one duplicate"
    );
    let page = br.get("/admin/reconcile?kind=duplicate").await;
    assert!(page.body.contains(&first.uuid) && page.body.contains(&kept));
    assert!(page.body.contains("Cancel the extra (02)"));
    assert!(page.body.contains("no acceptance needed"));
    assert!(
        br.get("/admin/invoices?view=flagged")
            .await
            .body
            .contains("pi_test_recon1")
    );

    // One click cancels the extra with motivo 02 and keeps the recorded one.
    let r = br
        .post(
            &format!("/admin/findings/{}/cancel-extra", dups[0].id),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let c = cancellation(&app, &first.uuid).await;
    assert_eq!(
        (c.motivo.as_str(), c.state.as_str(), c.outbox_id),
        ("02", "requested", Some(dup))
    );
    assert!(app.db.cancellation_by_uuid(&kept).await.unwrap().is_none());
    assert_eq!(
        app.db
            .findings(Some("duplicate"), Some("open"))
            .await
            .unwrap()
            .len(),
        0
    );
    let r = br
        .post(
            &format!("/admin/findings/{}/cancel-extra", dups[0].id),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status, 409);
}

async fn the_reconcile_command_reports_and_adopts(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let lost = pay(&app, "cmd1").await;
    let stamp = stamped_unrecorded(&app, lost).await;
    mark_state(&app, lost, "unknown").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .arg("--config")
        .arg(&app.config_file)
        .arg("reconcile")
        .output()
        .expect("run autofactura reconcile");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 adopted"), "{stdout}");
    assert!(stdout.contains(&stamp.uuid), "{stdout}");
    let d = doc(&app, lost).await;
    assert_eq!(d.uuid.as_deref(), Some(stamp.uuid.as_str()));
    assert_eq!(
        app.db.actions_on("reconciliation", "run").await.unwrap()[0].actor,
        "reconcile (command)"
    );
    let _ = outbox_of(&app, "pi_test_cmd1").await;
}

// `?page=` is whatever was typed: huge (past an i64, or where `(page - 1) × 50` overflowed),
// zero, negative or not a number, the lists answer normally; past the end is the last page.
async fn list_pages_take_any_page_number(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    pay(&app, "paging").await;
    let br = Browser::new(&app);
    br.login().await;
    for page in [
        "9223372036854775807",
        "184467440737095516",
        "99999999999999999999999999",
        "0",
        "-1",
        "-9223372036854775808",
        "abc",
        "",
        "1.5",
        "%201%20",
    ] {
        let list = br
            .get(&format!("/admin/invoices?view=all&page={page}"))
            .await;
        assert_eq!(list.status, 200, "page={page}: {}", list.body);
        assert!(
            list.body.contains("pi_test_paging"),
            "page={page} shows the only page: {}",
            list.body
        );
        let cancellations = br.get(&format!("/admin/cancellations?page={page}")).await;
        assert_eq!(
            cancellations.status, 200,
            "page={page}: {}",
            cancellations.body
        );
        let all = br
            .get(&format!("/admin/cancellations?all=1&page={page}"))
            .await;
        assert_eq!(all.status, 200, "page={page}: {}", all.body);
    }
}

on_both_backends!(
    every_admin_route_needs_a_session_and_login_sets_a_strict_cookie,
    the_login_form_has_its_own_csrf_and_failed_logins_are_limited,
    a_generated_password_is_printed_once_and_kept,
    every_form_checks_the_csrf_token,
    the_pages_show_states_codes_and_documents,
    retry_sends_a_rejected_document_back_with_the_same_bytes,
    retry_asks_the_pac_first_when_the_last_call_went_unanswered,
    bulk_retry_takes_every_selected_rejected_document,
    cancel_freezes_a_request_and_enforces_the_motivo_rules,
    motivo_01_accepts_a_stamped_replacement_related_by_04,
    the_cancellation_progress_and_acuse_are_shown_and_a_rejection_can_be_asked_again,
    refreeze_starts_a_new_generation_once_the_pac_confirms_no_stamp,
    refreeze_adopts_the_stamp_when_the_pac_had_stamped_the_old_document,
    sat_status_is_asked_and_recorded,
    reconciliation_adopts_unrecorded_stamps_and_lists_duplicates,
    the_reconcile_command_reports_and_adopts,
    list_pages_take_any_page_number,
);
