//! The stamped XML and the PDF wherever they are offered: the API (`/v1/invoices/{id}/xml`,
//! `/pdf`, the links), the admin's document pages and `autofactura invoices pdf`: the XML byte
//! for byte as stored from the PAC's answer, the PDF the same bytes everywhere.

use crate::support;

use serde_json::Value;

use crate::api::invoice;
use support::admin::{Browser, PASSWORD};
use support::{Backend, TestApp, spawn_app_with};

/// The app with an admin password and an API key; the API waits `wait_ms` for a stamp.
async fn app(b: Backend, wait_ms: u64) -> Option<(TestApp, String)> {
    let toml = format!(
        "[admin]\npassword = \"{PASSWORD}\"\n[worker]\nidle_poll_ms = 50\n[api]\nwait_for_stamp_ms = {wait_ms}\n"
    );
    let app = spawn_app_with(b, &toml).await?;
    let key = autofactura::api::keys::create_api_key(&app.db, "tests", "EKU9003173C9")
        .await
        .expect("api key");
    Some((app, key.expose().to_owned()))
}

async fn get(app: &TestApp, key: &str, path: &str) -> reqwest::Response {
    app.http
        .get(format!("{}{path}", app.address))
        .bearer_auth(key)
        .send()
        .await
        .expect("GET")
}

async fn post(app: &TestApp, key: &str) -> reqwest::Response {
    app.http
        .post(format!("{}/v1/invoices", app.address))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(invoice().to_string())
        .send()
        .await
        .expect("POST")
}

fn disposition(r: &reqwest::Response) -> String {
    r.headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn an_api_invoice_offers_its_stamped_xml_and_pdf(b: Backend) {
    let Some((app, key)) = app(b, 20000).await else {
        return;
    };
    let (_pool, _s) = app.start_pool().await;
    let r = post(&app, &key).await;
    assert_eq!(r.status(), 201);
    let created: Value = r.json().await.expect("json");
    let id = created["id"].as_str().expect("id");
    let uuid = created["uuid"].as_str().expect("uuid");
    assert_eq!(created["links"]["xml"], format!("/v1/invoices/{id}/xml"));
    let got: Value = get(&app, &key, &format!("/v1/invoices/{id}"))
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(got["links"]["pdf"], format!("/v1/invoices/{id}/pdf"));

    let xml = get(&app, &key, got["links"]["xml"].as_str().expect("link")).await;
    assert_eq!(xml.status(), 200);
    assert_eq!(xml.headers()["content-type"], "application/xml");
    let folio = format!(
        "{}{}",
        created["serie"].as_str().expect("serie"),
        created["folio"].as_str().expect("folio")
    );
    assert_eq!(
        disposition(&xml),
        format!("attachment; filename=\"EKU9003173C9_{folio}_{uuid}.xml\"")
    );
    let xml = xml.bytes().await.expect("body").to_vec();
    let stored = app
        .db
        .document_by_uuid(uuid)
        .await
        .expect("db")
        .expect("doc");
    assert_eq!(
        Some(&xml),
        stored.stamped_xml.as_ref(),
        "byte for byte as stored"
    );

    let pdf = get(&app, &key, &format!("/v1/invoices/{id}/pdf")).await;
    assert_eq!(pdf.status(), 200);
    assert_eq!(pdf.headers()["content-type"], "application/pdf");
    assert!(disposition(&pdf).ends_with(&format!("_{uuid}.pdf\"")));
    let pdf = pdf.bytes().await.expect("body").to_vec();
    assert!(support::pdf::text(&pdf, None).contains(uuid));

    // The admin's document page links both; its PDF is the same bytes.
    let browser = Browser::new(&app);
    browser.login().await;
    let page = browser
        .get(&format!("/admin/payments/{}", stored.payment_id))
        .await;
    let pdf_link = format!("/admin/documents/{}/pdf", stored.id);
    assert!(page.body.contains(&pdf_link), "{}", page.body);
    assert!(page.body.contains(&format!(
        "/admin/documents/{}/xml/stamped?download=1",
        stored.id
    )));
    let (status, headers, admin_pdf) = browser.get_bytes(&format!("{pdf_link}?download=1")).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/pdf");
    assert_eq!(admin_pdf, pdf, "the admin's PDF is the API's");
    let (_, headers, admin_xml) = browser
        .get_bytes(&format!(
            "/admin/documents/{}/xml/stamped?download=1",
            stored.id
        ))
        .await;
    assert_eq!(admin_xml, xml);
    assert!(
        headers["content-disposition"]
            .to_str()
            .expect("ascii")
            .contains(&format!("EKU9003173C9_{folio}_{uuid}.xml"))
    );

    // And the command line's.
    let out = tempfile::tempdir().expect("tempdir");
    let file = out.path().join("f.pdf");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .arg("--config")
        .arg(&app.config_file)
        .args(["invoices", "pdf", uuid, "--out"])
        .arg(&file)
        .output()
        .expect("run autofactura invoices pdf");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        std::fs::read(&file).expect("pdf"),
        pdf,
        "the CLI's PDF is the API's"
    );
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"))
        .arg("--config")
        .arg(&app.config_file)
        .args([
            "invoices",
            "pdf",
            "00000000-0000-0000-0000-000000000000",
            "--out",
        ])
        .arg(&file)
        .output()
        .expect("run");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("invoices list"));
}

async fn files_wait_for_the_stamp_and_stay_with_their_emisor(b: Backend) {
    let Some((app, key)) = app(b, 0).await else {
        return;
    };
    // No worker runs: the invoice stays queued.
    let r = post(&app, &key).await;
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.expect("json");
    let id = v["id"].as_str().expect("id");
    assert!(
        v["links"]["xml"].is_null(),
        "no XML link before the stamp: {v}"
    );
    for file in ["xml", "pdf"] {
        let r = get(&app, &key, &format!("/v1/invoices/{id}/{file}")).await;
        assert_eq!(r.status(), 409, "{file}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], "CONFLICT");
        assert!(
            body["error"]["message"]
                .as_str()
                .expect("msg")
                .contains("pending")
        );
    }
    let other = autofactura::api::keys::create_api_key(&app.db, "other", "XIQB891116QE4")
        .await
        .expect("api key");
    let r = get(&app, other.expose(), &format!("/v1/invoices/{id}/xml")).await;
    assert_eq!(r.status(), 404, "another emisor's key sees nothing");
    let doc: Value = get(&app, &key, "/v1/openapi.json")
        .await
        .json()
        .await
        .expect("json");
    for file in ["xml", "pdf"] {
        let op = &doc["paths"][format!("/v1/invoices/{{id}}/{file}")]["get"];
        assert!(op["responses"]["409"].is_object(), "{file} is documented");
    }
}

on_both_backends!(
    an_api_invoice_offers_its_stamped_xml_and_pdf,
    files_wait_for_the_stamp_and_stay_with_their_emisor,
);
