//! The merchant's endpoint for the signed outgoing webhooks (`[api] webhook_url`): a real HTTP
//! server on 127.0.0.1 recording every delivery, which checks each one's Standard Webhooks
//! signature when a test looks at it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use autofactura::notify::sign::{decode_secret, sign};
use serde_json::Value;

/// The secret the tests' settings sign with ([`webhook_toml`]).
pub const WEBHOOK_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// One delivery: webhook-id, webhook-timestamp, webhook-signature, body.
pub type Delivery = (String, String, String, Vec<u8>);

/// The merchant's endpoint: records every delivery; answers 500 to the first `fail_first`.
#[derive(Clone, Default)]
pub struct Receiver {
    got: Arc<Mutex<Vec<Delivery>>>,
    fail_first: Arc<Mutex<usize>>,
}

impl Receiver {
    /// On a port of its own; with the URL to configure.
    pub async fn start(fail_first: usize) -> (Self, String) {
        Self::start_on("127.0.0.1:0", fail_first)
    }

    /// On `addr` (a port a test chose before, to bring an endpoint that was down up).
    pub fn start_on(addr: &str, fail_first: usize) -> (Self, String) {
        let r = Receiver::default();
        *r.fail_first.lock().expect("lock") = fail_first;
        let data = web::Data::new(r.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/hook", web::post().to(receive))
        })
        .workers(1)
        .bind(addr)
        .expect("bind");
        let port = server.addrs()[0].port();
        tokio::spawn(server.run());
        (r, format!("http://127.0.0.1:{port}/hook"))
    }

    /// Waits for a delivery of `event`, checks its Standard Webhooks signature, returns its body.
    pub async fn wait_for(&self, event: &str, secs: u64) -> Value {
        self.wait_where(event, secs, |_| true).await.1
    }

    /// Waits for a delivery of `event` whose body satisfies `pred`, checks its signature,
    /// returns its webhook-id and body.
    pub async fn wait_where(
        &self,
        event: &str,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> (String, Value) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let found = self
                .got
                .lock()
                .expect("lock")
                .iter()
                .find(|(_, _, _, body)| {
                    serde_json::from_slice::<Value>(body)
                        .is_ok_and(|v| v["type"] == event && pred(&v))
                })
                .cloned();
            if let Some((id, ts, sig, body)) = found {
                let key = decode_secret(WEBHOOK_SECRET).expect("secret");
                let t: i64 = ts.parse().expect("timestamp");
                assert_eq!(sig, sign(&key, &id, t, &body), "signature of {event}");
                assert!(!id.contains('.'));
                return (id, serde_json::from_slice(&body).expect("json"));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {event} webhook arrived"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The webhook-id of every delivery so far, in order.
    pub fn ids(&self) -> Vec<String> {
        self.got
            .lock()
            .expect("lock")
            .iter()
            .map(|g| g.0.clone())
            .collect()
    }

    /// Every delivery's body so far, as JSON, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.got
            .lock()
            .expect("lock")
            .iter()
            .map(|g| serde_json::from_slice(&g.3).expect("json"))
            .collect()
    }
}

async fn receive(r: web::Data<Receiver>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let h = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    r.got.lock().expect("lock").push((
        h("webhook-id"),
        h("webhook-timestamp"),
        h("webhook-signature"),
        body.to_vec(),
    ));
    let mut fail = r.fail_first.lock().expect("lock");
    if *fail > 0 {
        *fail -= 1;
        return HttpResponse::InternalServerError().finish();
    }
    HttpResponse::Ok().finish()
}

/// The `[api]` table sending merchant webhooks to `url`, retried every second (`retries` times).
pub fn webhook_toml_retrying(url: &str, retries: usize) -> String {
    let every = vec!["1"; retries].join(", ");
    format!(
        "[api]\nwebhook_url = \"{url}\"\nwebhook_secret = \"{WEBHOOK_SECRET}\"\nwebhook_retry_seconds = [{every}]\n"
    )
}

/// The `[api]` table sending merchant webhooks to `url`, retried three times a second apart.
pub fn webhook_toml(url: &str) -> String {
    webhook_toml_retrying(url, 3)
}
