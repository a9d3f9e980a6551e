//! The facturas globales in the admin (the list, one global with its sales) and a global
//! cancelled with motivo 01: the replacement first (same sales, TipoRelacion 04), then the
//! cancellation with FolioSustitucion once the worker stamped it; on SQLite and PostgreSQL.

use std::time::{Duration, Instant};

use autofactura::cfdi::dom::{Element, NS_CFDI};
use autofactura::global::{Planner, Scope, issue, request_substitution_cancels};

use crate::global_cli::wait_stamped;
use crate::support::admin::{Browser, PASSWORD};
use crate::support::sales::{at, memberships, month, month_end, sell};
use crate::support::{Backend, spawn_app_with};

async fn the_admin_shows_each_global_and_motivo_01_replaces_it_before_cancelling(b: Backend) {
    let config = format!("[admin]\npassword = \"{PASSWORD}\"\n[global]\nauto_issue = false\n");
    let Some(app) = spawn_app_with(b, &config).await else {
        return;
    };
    let oct = month(1);
    sell(&app, "adm1", at(oct, 6, 11), 11600).await;
    sell(&app, "adm2", at(oct, 7, 11), 23200).await;
    let (_pool, _services) = app.start_pool().await;
    let planner = Planner::new(&app.settings).expect("planner");
    let r = issue(&app.db, &planner, Scope::now_through(None), "test")
        .await
        .expect("issue");
    let old = r.issued[0].outbox_id;
    let old_uuid = wait_stamped(&app, old).await.uuid.expect("uuid");

    let browser = Browser::new(&app);
    let csrf = browser.login().await;
    let list = browser.get("/admin/globals").await;
    assert_eq!(list.status, 200, "{}", list.body);
    let period = format!("{oct} – {}", month_end(oct));
    for part in [
        period.as_str(),
        "Stamped",
        old_uuid.as_str(),
        "348.00",
        &format!("href=\"/admin/globals/{old}\""),
    ] {
        assert!(
            list.body.contains(part),
            "{part:?} not in the list:\n{}",
            list.body
        );
    }
    let page = browser.get(&format!("/admin/globals/{old}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for part in [
        "pi_test_adm1",
        "pi_test_adm2",
        "Replace and cancel (motivo 01)",
    ] {
        assert!(page.body.contains(part), "{part:?} not in:\n{}", page.body);
    }

    // The ordinary cancel form, motivo 01 without a FolioSustitucion: the replacement first.
    let cancel = [
        ("csrf", csrf.as_str()),
        ("motivo", "01"),
        ("folio_sustitucion", ""),
    ];
    let done = browser
        .post(&format!("/admin/documents/{old}/cancel"), &cancel)
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let location = done.location.clone().expect("location");
    let new: i64 = location
        .trim_start_matches("/admin/globals/")
        .split('?')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a global's page: {location}"));
    assert_ne!(new, old);
    let again = browser
        .post(&format!("/admin/documents/{old}/cancel"), &cancel)
        .await;
    assert_eq!(again.status, 409, "one replacement: {}", again.body);
    assert!(
        again.body.contains("already has a replacement"),
        "{}",
        again.body
    );
    assert!(
        memberships(&app).await.iter().all(|(g, _, _)| *g == new),
        "the sales moved to the replacement: {:?}",
        memberships(&app).await
    );
    assert!(
        app.db
            .cancellation_by_uuid(&old_uuid)
            .await
            .expect("db")
            .is_none(),
        "nothing is cancelled before the replacement is stamped"
    );

    let replacement = wait_stamped(&app, new).await;
    let new_uuid = replacement.uuid.clone().expect("uuid");
    let root = Element::parse(replacement.stamped_xml.as_deref().expect("xml")).expect("parse");
    let rel = root
        .child(NS_CFDI, "CfdiRelacionados")
        .expect("CfdiRelacionados");
    assert_eq!(rel.attr("TipoRelacion"), Some("04"));
    let related: Vec<&str> = rel
        .children_named(NS_CFDI, "CfdiRelacionado")
        .filter_map(|r| r.attr("UUID"))
        .collect();
    assert_eq!(related, [old_uuid.as_str()]);
    assert_eq!(root.attr("Total"), Some("348.00"));

    // What `serve`'s loop and `global issue` do after each round: asked for once.
    assert_eq!(
        request_substitution_cancels(&app.db).await.expect("ask"),
        [old]
    );
    assert!(
        request_substitution_cancels(&app.db)
            .await
            .expect("again")
            .is_empty()
    );
    let c = app
        .db
        .cancellation_by_uuid(&old_uuid)
        .await
        .expect("db")
        .expect("the cancellation");
    assert_eq!(c.motivo, "01");
    assert_eq!(c.folio_sustitucion.as_deref(), Some(new_uuid.as_str()));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = app.db.document(old).await.expect("db").expect("doc");
        if d.state.as_str() == "canceled" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replaced global is {}",
            d.state
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let old_page = browser.get(&format!("/admin/globals/{old}")).await;
    for part in [
        "Cancelled",
        &format!("href=\"/admin/globals/{new}\""),
        "No sales",
    ] {
        assert!(
            old_page.body.contains(part),
            "{part:?} not in:\n{}",
            old_page.body
        );
    }
    assert!(
        !old_page.body.contains("Replace and cancel"),
        "{}",
        old_page.body
    );
}

on_both_backends!(the_admin_shows_each_global_and_motivo_01_replaces_it_before_cancelling);
