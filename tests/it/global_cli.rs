//! A factura global stamped by the worker (the sandbox PAC), checked against the SAT's own
//! tools (the XSD with xmllint, the cadena XSLT with xsltproc), and what the command line shows
//! of it and of its sales: `invoices list --json` and `invoices xml UUID`; on SQLite and
//! PostgreSQL.

use std::time::{Duration, Instant};

use autofactura::cfdi::dom::{Element, NS_CFDI};
use autofactura::store::DocFull;
use autofactura::webhooks::stripe;
use serde_json::Value;

use crate::cfdi::{autofactura, cfd, sat, sat_cadena, xmllint};
use crate::support::sales::{at, month, sell};
use crate::support::{Backend, TestApp, spawn_app_with};

/// Waits until document `id` is `stamped`.
pub async fn wait_stamped(app: &TestApp, id: i64) -> DocFull {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = app.db.document(id).await.expect("db").expect("document");
        if d.state.as_str() == "stamped" {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "document #{id} is {} ({:?} {:?})",
            d.state,
            d.last_error_code,
            d.last_error_message
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cli(app: &TestApp, args: &[&str]) -> std::process::Output {
    let config = app.config_file.to_str().expect("utf-8 path");
    let args: Vec<&str> = args.iter().copied().chain(["--config", config]).collect();
    let out = autofactura(&args);
    assert!(
        out.status.success(),
        "autofactura {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

async fn a_stamped_global_is_valid_for_the_sat_and_the_command_line_shows_it(b: Backend) {
    let Some(app) = spawn_app_with(b, "[global]\nauto_issue = false\n").await else {
        return;
    };
    let oct = month(1);
    sell(&app, "a", at(oct, 3, 9), 11600).await;
    sell(&app, "b", at(oct, 4, 9), 5799).await;
    sell(&app, "c", at(oct, 5, 9), 100001).await;
    // A sale with the customer's RFC: a nominative ingreso of its own.
    let nominative = stripe::sample_payment_intent("nom", chrono::Utc::now().timestamp(), false);
    assert_eq!(app.post_stripe_signed(&nominative).await.status(), 200);
    let (_pool, _services) = app.start_pool().await;
    // `global issue --wait`: the worker (this test's pool) stamps it before the line is printed.
    let out = cli(&app, &["global", "issue", "--wait", "60"]);
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = printed
        .lines()
        .find(|l| l.starts_with("global "))
        .unwrap_or_else(|| panic!("no global line in {printed:?}"));
    let want = format!(
        "global period={} periodicidad=04 payments=3 total=1174.00 status=stamped uuid=",
        oct.format("%Y-%m")
    );
    assert!(line.starts_with(&want), "{line}\nwant {want}");
    let field = |k: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {line}"))
            .to_owned()
    };
    let id: i64 = field("id=").parse().expect("id");
    let g = wait_stamped(&app, id).await;
    let uuid = g.uuid.clone().expect("uuid");
    assert_eq!(field("uuid="), uuid, "{line}");
    assert_eq!(field("folio="), "G-1", "{line}");
    let stamped = g.stamped_xml.clone().expect("stamped xml");

    // What the SAT asks of a factura global, read from the stamped document.
    let root = Element::parse(&stamped).expect("parse");
    let info = root
        .child(NS_CFDI, "InformacionGlobal")
        .expect("InformacionGlobal");
    assert_eq!(info.attr("Periodicidad"), Some("04"));
    assert_eq!(
        info.attr("Meses"),
        Some(oct.format("%m").to_string().as_str())
    );
    assert_eq!(
        info.attr("Año"),
        Some(oct.format("%Y").to_string().as_str())
    );
    let receptor = root.child(NS_CFDI, "Receptor").expect("Receptor");
    for (k, v) in [
        ("Rfc", "XAXX010101000"),
        ("Nombre", "PUBLICO EN GENERAL"),
        ("DomicilioFiscalReceptor", "42501"),
        ("RegimenFiscalReceptor", "616"),
        ("UsoCFDI", "S01"),
    ] {
        assert_eq!(receptor.attr(k), Some(v), "Receptor {k}");
    }
    assert_eq!(root.attr("LugarExpedicion"), Some("42501"));
    assert_eq!(
        (root.attr("Serie"), root.attr("Folio"), root.attr("Total")),
        (Some("G"), Some("1"), Some("1174.00"))
    );
    let conceptos = root.child(NS_CFDI, "Conceptos").expect("Conceptos");
    let ids: Vec<&str> = conceptos
        .children_named(NS_CFDI, "Concepto")
        .map(|c| {
            assert_eq!(c.attr("ClaveProdServ"), Some("01010101"));
            assert_eq!(c.attr("ClaveUnidad"), Some("ACT"));
            assert!(c.child(NS_CFDI, "Impuestos").is_some(), "its own taxes");
            c.attr("NoIdentificacion").expect("NoIdentificacion")
        })
        .collect();
    assert_eq!(ids, ["pi_test_a", "pi_test_b", "pi_test_c"]);

    // `invoices xml UUID` prints exactly the stamped bytes; the SAT's XSD and XSLT agree.
    let printed = cli(&app, &["invoices", "xml", &uuid.to_lowercase()]).stdout;
    assert_eq!(printed, stamped, "the stored stamped XML, byte for byte");
    let dir = tempfile::tempdir().expect("tempdir");
    let (stamped_path, sealed_path) =
        (dir.path().join("global.xml"), dir.path().join("sealed.xml"));
    std::fs::write(&stamped_path, &printed).expect("write");
    std::fs::write(&sealed_path, g.sealed_xml.as_deref().expect("sealed")).expect("write");
    xmllint(
        &sat().join("schemas/cfdi40-con-complementos.xsd"),
        &stamped_path,
    );
    xmllint(&cfd().join("4/cfdv40.xsd"), &sealed_path);
    for path in [&sealed_path, &stamped_path] {
        let ours = autofactura(&["cfdi", "cadena", path.to_str().expect("utf-8")]);
        assert!(ours.status.success());
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&sat_cadena(path)),
            "cadena of {}",
            path.display()
        );
    }
    let missing = autofactura(&[
        "invoices",
        "xml",
        "00000000-0000-0000-0000-000000000000",
        "--config",
        app.config_file.to_str().expect("utf-8"),
    ]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no stamped document has UUID"));

    // `invoices list --json`: the global, its sales pointing at it, the nominative ingreso.
    let rows: Vec<Value> =
        serde_json::from_slice(&cli(&app, &["invoices", "list", "--json"]).stdout).expect("json");
    assert_eq!(rows.len(), 5, "{rows:#?}");
    let global: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "global").collect();
    assert_eq!(global.len(), 1, "{rows:#?}");
    let gr = global[0];
    assert_eq!(gr["id"], g.id, "{gr}");
    assert_eq!(gr["payment_id"], Value::Null, "{gr}");
    for (k, v) in [
        ("status", "stamped"),
        ("serie", "G"),
        ("folio", "1"),
        ("receptor_rfc", "XAXX010101000"),
        ("total", "1174.00"),
    ] {
        assert_eq!(gr[k], v, "{k} of {gr}");
    }
    assert_eq!(gr["uuid"].as_str(), Some(uuid.as_str()));
    for id in ["pi_test_a", "pi_test_b", "pi_test_c"] {
        let sale = rows
            .iter()
            .find(|r| r["payment_id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {rows:#?}"));
        assert_eq!(
            (&sale["kind"], &sale["status"], &sale["id"]),
            (
                &Value::from("ingreso"),
                &Value::from("in_global"),
                &Value::Null
            ),
            "{sale}"
        );
        assert_eq!(sale["global_uuid"].as_str(), Some(uuid.as_str()), "{sale}");
        assert_eq!(sale["global_id"], g.id, "{sale}");
    }
    let nom = rows
        .iter()
        .find(|r| r["payment_id"] == "pi_test_nom")
        .expect("the nominative sale");
    assert_eq!(nom["kind"], "ingreso");
    assert!(nom["id"].is_i64(), "{nom}");
    assert_eq!(nom["receptor_rfc"], "XIQB891116QE4");
    assert_eq!(nom["total"], "116.00");
    assert_eq!(nom["global_uuid"], Value::Null);
    let only: Vec<Value> = serde_json::from_slice(
        &cli(
            &app,
            &["invoices", "list", "--json", "--status", "in_global"],
        )
        .stdout,
    )
    .expect("json");
    assert_eq!(only.len(), 3, "{only:#?}");
    let table = String::from_utf8_lossy(&cli(&app, &["invoices", "list"]).stdout).into_owned();
    let line = table
        .lines()
        .find(|l| l.starts_with("(global)"))
        .unwrap_or_else(|| panic!("no global line in\n{table}"));
    for part in [
        "global",
        "stamped",
        "G-1",
        "XAXX010101000",
        &uuid,
        "1174.00 MXN",
    ] {
        assert!(line.contains(part), "{part:?} not in {line:?}");
    }
}

on_both_backends!(a_stamped_global_is_valid_for_the_sat_and_the_command_line_shows_it);
