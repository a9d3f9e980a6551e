//! The accountant's monthly export (issue 22): from the real binary (`autofactura export`) and
//! from the admin (`/admin/export/month`), the same ZIP: every stamped XML of the month
//! byte-exact under its kind, a CSV row per document read from the stamped XML, and the
//! cancellation acuses; nothing of another month.

use std::collections::BTreeMap;
use std::io::Read;

use autofactura::domain::time::now_in_mexico;

use crate::support::admin::{Browser, admin_app, finish_cancellation, pay};
use crate::support::rows::fetch_rows;
use crate::support::{Backend, TestApp};

/// Name → bytes of every entry of a ZIP, each checked to unzip as a file the accountant can
/// read and others cannot change, dated the day it was exported (not 1980).
fn entries(zip: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).expect("a ZIP");
    let today = chrono::Utc::now().date_naive();
    (0..archive.len())
        .map(|i| {
            let mut f = archive.by_index(i).expect("entry");
            assert_eq!(
                f.unix_mode(),
                Some(0o100_644),
                "{:?} unzips as rw-r--r--",
                f.name()
            );
            let d = f.last_modified().expect("a modification time");
            let dated = chrono::NaiveDate::from_ymd_opt(
                i32::from(d.year()),
                u32::from(d.month()),
                u32::from(d.day()),
            )
            .expect("a valid date");
            assert!(
                (0..=1).contains(&(today - dated).num_days()),
                "{:?} is dated {dated}, not the day of the export ({today})",
                f.name()
            );
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).expect("read entry");
            (f.name().expect("entry name").into_owned(), bytes)
        })
        .collect()
}

/// Every stamped document: UUID → stamped XML.
async fn stamped(app: &TestApp) -> BTreeMap<String, Vec<u8>> {
    let rows: Vec<(String, Vec<u8>)> = fetch_rows(
        &app.db,
        "SELECT uuid, stamped_xml FROM outbox WHERE uuid IS NOT NULL",
        &[],
    )
    .await;
    rows.into_iter().collect()
}

fn check(zip: &[u8], docs: &BTreeMap<String, Vec<u8>>, canceled: &str, acuse: &str) {
    let files = entries(zip);
    let xmls: BTreeMap<&str, &Vec<u8>> = files
        .iter()
        .filter(|(n, _)| n.starts_with("ingreso/") && n.ends_with(".xml"))
        .map(|(n, b)| (n.as_str(), b))
        .collect();
    assert_eq!(xmls.len(), docs.len(), "{:?}", files.keys());
    for (uuid, xml) in docs {
        let (name, bytes) = xmls
            .iter()
            .find(|(n, _)| n.ends_with(&format!("_{uuid}.xml")))
            .unwrap_or_else(|| panic!("{uuid} missing: {:?}", files.keys()));
        assert!(name.starts_with("ingreso/EKU9003173C9_A"), "{name}");
        assert_eq!(*bytes, xml, "{name} byte-exact");
        // Its PDF beside it, printed from that XML: the same bytes the admin offers.
        let pdf = &files[&name.replace(".xml", ".pdf")];
        let opts = autofactura::pdf::PdfOptions::default();
        assert_eq!(
            pdf,
            &autofactura::pdf::render(xml, &opts).expect("printable"),
            "{name}'s PDF"
        );
    }
    let csv = String::from_utf8(files["documentos.csv"].clone()).expect("UTF-8");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), docs.len() + 1, "{csv}");
    assert!(lines[0].starts_with("uuid,serie_folio,fecha"), "{csv}");
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').map(|c| c.trim_matches('"')).collect();
        assert!(docs.contains_key(cells[0]), "{line}");
        assert!(cells[1].starts_with("A-"), "{line}");
        assert_eq!(cells[3], "I", "{line}");
        assert_eq!(cells[5], "XIQB891116QE4", "{line}");
        assert_eq!(cells[11], "116.00", "{line}");
        assert_eq!(cells[12], "MXN", "{line}");
        let status = if cells[0] == canceled {
            "canceled"
        } else {
            "stamped"
        };
        assert_eq!(cells[13], status, "{line}");
    }
    assert_eq!(
        files
            .get(&format!("acuses/{canceled}.xml"))
            .map(Vec::as_slice),
        Some(acuse.as_bytes())
    );
}

async fn the_month_export_has_every_stamped_xml_a_csv_row_each_and_the_acuses(b: Backend) {
    let Some(app) = admin_app(b).await else {
        return;
    };
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(pay(&app, &format!("export{i}")).await);
    }
    app.drain(30).await;
    let docs = stamped(&app).await;
    assert_eq!(docs.len(), 12);

    // One of them cancelled, with SAT's acuse.
    let br = Browser::new(&app);
    let csrf = br.login().await;
    let path = format!("/admin/documents/{}/cancel", ids[0]);
    let posted = br.post(&path, &[("csrf", &csrf), ("motivo", "02")]).await;
    assert_eq!(posted.status, 303);
    let canceled: Vec<(String,)> = fetch_rows(
        &app.db,
        "SELECT uuid FROM outbox WHERE id = $1",
        &[crate::support::rows::Bind::I64(ids[0])],
    )
    .await;
    let canceled = canceled[0].0.clone();
    let acuse = "<Acuse Fecha=\"2026-12-01T10:00:00\" RfcEmisor=\"EKU9003173C9\"/>";
    finish_cancellation(
        &app,
        &canceled,
        "canceled",
        "Cancelado sin aceptación",
        acuse,
    )
    .await;
    crate::support::admin::mark_state(&app, ids[0], "canceled").await;

    let month = now_in_mexico().format("%Y-%m").to_string();
    // The invoices page offers it.
    let page = br.get("/admin/invoices").await;
    assert!(
        page.body.contains("action=\"/admin/export/month\""),
        "{}",
        page.body
    );
    // The admin's download.
    let (status, ct, zip) = br
        .get_bytes(&format!("/admin/export/month?month={month}"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(ct["content-type"], "application/zip");
    check(&zip, &docs, &canceled, acuse);
    let (status, _, _) = br.get_bytes("/admin/export/month?month=2026-13").await;
    assert_eq!(status, 400);

    // The command, on the same settings.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = app.config_file.display().to_string();
    let export = |month: &str, name: &str| {
        let out = dir.path().join(name);
        let run = crate::cli_e2e::run(
            dir.path(),
            &[
                "export",
                "--config",
                &config,
                "--month",
                month,
                "--out",
                &out.display().to_string(),
            ],
        );
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        (String::from_utf8_lossy(&run.stdout).into_owned(), out)
    };
    let (said, out) = export(&month, "month.zip");
    assert!(
        said.contains("12 stamped documents (12 with their PDF), 1 cancellation acuses"),
        "{said}"
    );
    check(&std::fs::read(&out).expect("zip"), &docs, &canceled, acuse);
    // Another month holds none of them.
    let (_, other) = export("2020-01", "other.zip");
    let files = entries(&std::fs::read(&other).expect("zip"));
    assert_eq!(files.len(), 1, "only the CSV: {:?}", files.keys());
}

on_both_backends!(the_month_export_has_every_stamped_xml_a_csv_row_each_and_the_acuses);
