//! OpenTelemetry traces (issue 22, cargo feature `otel`, which the suite builds with): the real
//! `autofactura serve` exports its spans over OTLP/HTTP to a collector here, and a sale's
//! webhook span and the worker's span that stamped it are in one trace, whose id is derived
//! from the stamp key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::Value;

use crate::cli_e2e::{run, send_test_webhook, start_with};

type Bodies = Arc<Mutex<Vec<Value>>>;

async fn collect(body: web::Bytes, got: web::Data<Bodies>) -> HttpResponse {
    match serde_json::from_slice::<Value>(&body) {
        Ok(v) => {
            got.lock().expect("lock").push(v);
            HttpResponse::Ok().json(serde_json::json!({}))
        }
        Err(e) => HttpResponse::BadRequest().body(format!("not OTLP/JSON: {e}")),
    }
}

/// An OTLP/HTTP collector on 127.0.0.1:0: what it received, and its traces URL.
fn collector() -> (Bodies, String) {
    let got = Bodies::default();
    let data = web::Data::new(got.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/v1/traces", web::post().to(collect))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .expect("bind");
    let port = server.addrs()[0].port();
    tokio::spawn(server.run());
    (got, format!("http://127.0.0.1:{port}/v1/traces"))
}

/// One exported span: name, trace id, parent span id, attributes as strings.
#[derive(Debug)]
struct Span {
    name: String,
    trace: String,
    parent: String,
    attrs: Vec<(String, String)>,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every span of every export request, with its resource's `service.name` checked.
fn spans(bodies: &[Value]) -> Vec<Span> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = Vec::new();
    for body in bodies {
        for rs in body["resourceSpans"].as_array().into_iter().flatten() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["key"] == "service.name")
                .map(|a| s(&a["value"]["stringValue"]));
            assert_eq!(service.as_deref(), Some("autofactura"), "{rs}");
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in ss["spans"].as_array().into_iter().flatten() {
                    let attrs = sp["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let v = &a["value"];
                            let text = v["stringValue"]
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| v.to_string());
                            (s(&a["key"]), text)
                        })
                        .collect();
                    out.push(Span {
                        name: s(&sp["name"]),
                        trace: s(&sp["traceId"]).to_lowercase(),
                        parent: s(&sp["parentSpanId"]).to_lowercase(),
                        attrs,
                    });
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sales_webhook_and_its_stamp_are_one_trace_at_the_collector() {
    let (got, url) = collector();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().to_owned();
    let db = format!("sqlite://{}", path.join("data/autofactura.db").display());
    let extra = format!("[log]\nformat = \"json\"\notlp_endpoint = \"{url}\"\n");
    let (mut server, config, port) = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || start_with(&path, &db, &extra))
            .await
            .expect("start")
    };
    let config = config.to_str().expect("utf-8").to_owned();
    let base = format!("http://127.0.0.1:{port}");
    let uuid = {
        let (path, config) = (path.clone(), config.clone());
        tokio::task::spawn_blocking(move || {
            let out = send_test_webhook(&path, &config, "stripe", &base);
            assert!(out.status.success(), "{out:?}");
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                let out = run(&path, &["invoices", "list", "--json", "--config", &config]);
                let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
                if let Some(u) = rows.first().and_then(|r| r["uuid"].as_str()) {
                    break u.to_owned();
                }
                assert!(std::time::Instant::now() < deadline, "never stamped");
                std::thread::sleep(Duration::from_millis(200));
            }
        })
        .await
        .expect("stamp")
    };
    // SIGTERM: `serve` stops and sends the spans still batched before it exits.
    let pid = server.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let exited = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().expect("wait");
        (status, server.log())
    })
    .await
    .expect("wait");
    assert!(exited.0.success(), "serve stopped cleanly: {}", exited.1);

    let spans = spans(&got.lock().expect("lock"));
    let webhook = spans
        .iter()
        .find(|s| s.name == "webhook.record")
        .unwrap_or_else(|| panic!("no webhook span among {spans:#?}\n{}", exited.1));
    let key = webhook
        .attr("stamp_key")
        .expect("the webhook span's stamp_key");
    assert!(!key.is_empty(), "{webhook:?}");
    let stamp = spans
        .iter()
        .find(|s| s.name == "invoice" && s.attr("stamp_key") == Some(key))
        .unwrap_or_else(|| panic!("no worker span for {key} among {spans:#?}"));
    assert_eq!(stamp.attr("uuid"), Some(uuid.as_str()), "{stamp:?}");
    let (trace, parent) = autofactura::telemetry::document_trace(key);
    for s in [webhook, stamp] {
        assert_eq!(s.trace, hex::encode(trace), "{s:?} in the document's trace");
        assert_eq!(s.parent, hex::encode(parent), "{s:?}");
    }
}
