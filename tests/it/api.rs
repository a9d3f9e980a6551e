//! The invoicing API against the sandbox PAC and the real worker pool: every rule of the
//! idempotency keys, checked against the sandbox's own record of what it stamped.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use autofactura::pacsim::faults::FaultSpec;
use autofactura::pacsim::{Sandbox, SandboxHandle};
use autofactura::worker::{Pool, Services};
use serde_json::{Value, json};
use support::receiver::{Receiver, webhook_toml};
use support::rows::api_webhooks_of;
use support::{Backend, TestApp, exec_sql, spawn_app_with};

/// The lease is 30 s: with 2 s, a loaded machine that stalled a slot between its claim and its
/// keepalive let another slot of the pool take the row and ask the PAC about it again (see
/// `worker::FAST_WORKER`). A stopped pool releases its rows; a killed process's are taken
/// after its own lease.
const FAST_WORKER: &str = "[worker]\nconcurrency = 4\nlease_seconds = 30\nidle_poll_ms = 50\n\
     backoff_base_seconds = 1\nbackoff_cap_seconds = 1\nshutdown_grace_seconds = 1\nmax_attempts = 1000\n";

pub(crate) struct Rig {
    pub(crate) app: TestApp,
    pub(crate) sim: SandboxHandle,
    http: reqwest::Client,
    pub(crate) key: String,
    _dir: tempfile::TempDir,
}

pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) replayed: bool,
    retry_after: Option<String>,
    body: Vec<u8>,
}

impl Resp {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    /// Asserts a 201, `replayed` or not, showing the body otherwise.
    pub(crate) fn assert_created(&self, replayed: bool) {
        assert_eq!(
            (self.status, self.replayed),
            (201, replayed),
            "{}",
            self.text()
        );
    }
    /// Asserts the status and error code, showing `why` and the body when they differ.
    pub(crate) fn assert_error(&self, status: u16, code: &str, why: &str) {
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "{why}: {}",
            self.text()
        );
    }
    pub(crate) fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub(crate) async fn rig(b: Backend, faults: &str, extra: &str) -> Option<Rig> {
    rig_with(b, faults, "", extra).await
}

/// `pac_lines` go into `[pac]`, `extra` after the worker settings.
async fn rig_with(b: Backend, faults: &str, pac_lines: &str, extra: &str) -> Option<Rig> {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = FaultSpec::parse(faults).expect("fault spec");
    let (url, sim) = Sandbox::start_in_process(&dir.path().join("sim.jsonl"), spec)
        .await
        .expect("sandbox");
    let toml =
        format!("[pac]\nkind = \"sandbox\"\nurl = \"{url}\"\n{pac_lines}{FAST_WORKER}{extra}");
    let app = spawn_app_with(b, &toml).await?;
    let key = autofactura::api::keys::create_api_key(&app.db, "tests", "EKU9003173C9")
        .await
        .expect("api key");
    Some(Rig {
        app,
        sim,
        http: reqwest::Client::new(),
        key: key.expose().to_owned(),
        _dir: dir,
    })
}

/// A rig whose PAC holds its answers for 30 s (with the faults `more` adds) while our client
/// gives up after `timeout` seconds, the API waiting `wait_ms` for a stamp.
async fn hanging_rig(b: Backend, more: &str, timeout: u64, wait_ms: u64) -> Option<Rig> {
    let faults = format!("lose_response=1:mode=hang:hang=30s{more}");
    let pac = format!("request_timeout = {timeout}\n");
    let api = format!("[api]\nwait_for_stamp_ms = {wait_ms}\n");
    rig_with(b, &faults, &pac, &api).await
}

pub(crate) fn invoice() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/api/invoice.json"
    ))
    .expect("fixture");
    serde_json::from_str(&text).expect("fixture json")
}

fn with_price(price: &str) -> Value {
    let mut v = invoice();
    v["conceptos"][0]["valor_unitario"] = json!(price);
    v
}

impl Rig {
    pub(crate) async fn pool(&self) -> (Pool, Services) {
        self.app.start_pool().await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Resp {
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let h = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let replayed = h("idempotency-replayed").as_deref() == Some("true");
        let retry_after = h("retry-after");
        let body = r.bytes().await.expect("body").to_vec();
        Resp {
            status,
            replayed,
            retry_after,
            body,
        }
    }

    async fn post_with(&self, body: &Value, key: Option<&str>, bearer: Option<&str>) -> Resp {
        self.post_to("/v1/invoices", body, key, bearer).await
    }

    /// POSTs `body` to `path`, with the idempotency `key` and `bearer` when given.
    pub(crate) async fn post_to(
        &self,
        path: &str,
        body: &Value,
        key: Option<&str>,
        bearer: Option<&str>,
    ) -> Resp {
        let mut req = self
            .http
            .post(format!("{}{path}", self.app.address))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        if let Some(b) = bearer {
            req = req.bearer_auth(b);
        }
        self.send(req).await
    }

    pub(crate) async fn post(&self, body: &Value, key: Option<&str>) -> Resp {
        self.post_with(body, key, Some(&self.key)).await
    }

    pub(crate) async fn get(&self, path: &str) -> Resp {
        self.send(
            self.http
                .get(format!("{}{path}", self.app.address))
                .bearer_auth(&self.key),
        )
        .await
    }

    pub(crate) async fn stamps(&self) -> Vec<Value> {
        support::sim::stamps(&self.http, self.sim.url()).await
    }

    pub(crate) async fn set_faults(&self, spec: &str) {
        support::sim::set_faults(&self.http, self.sim.url(), spec).await;
    }

    /// Purges the idempotency keys as if `later` had passed: how many went.
    async fn purge_after(&self, later: chrono::Duration) -> u64 {
        let when = chrono::Utc::now() + later;
        self.app.db.purge_idempotency(when).await.expect("purge")
    }

    async fn invoice_count(&self) -> usize {
        let r = self.get("/v1/invoices").await;
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["data"].as_array().map_or(0, Vec::len)
    }

    /// Once the PAC answers: the invoice ends stamped with the PAC's one stamp, and a retry under
    /// `key` replays the 201 with it.
    async fn stamped_once_and_replayed(&self, id: &str, key: &str) {
        let stamped = self.wait_status(id, "stamped", 60).await;
        let stamps = self.stamps().await;
        assert_eq!(stamps.len(), 1, "{stamps:?}");
        assert_eq!(stamped["uuid"], stamps[0]["uuid"]);
        let replay = self.post(&invoice(), Some(key)).await;
        replay.assert_created(true);
        assert_eq!(replay.json()["uuid"], stamps[0]["uuid"]);
    }

    /// Polls `GET /v1/invoices/{id}` until its status is `status` (fails after `secs`).
    pub(crate) async fn wait_status(&self, id: &str, status: &str, secs: u64) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let r = self.get(&format!("/v1/invoices/{id}")).await;
            let v = r.json();
            if v["status"] == status {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "invoice {id} never reached {status}: {v}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// 1, 3: created, stamped, read back; a retry replays the first response byte for byte.
async fn a_stamped_invoice_is_replayed_byte_for_byte(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let first = rig.post(&invoice(), Some("order-1001")).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed);
    let v = first.json();
    assert_eq!(v["status"], "stamped");
    let stamps = rig.stamps().await;
    assert_eq!(stamps.len(), 1);
    assert_eq!(v["uuid"], stamps[0]["uuid"]);
    assert_eq!(v["total"], "578.84", "499.00 + IVA 16 %");

    let again = rig.post(&invoice(), Some("order-1001")).await;
    assert_eq!(again.status, 201);
    assert!(again.replayed, "Idempotency-Replayed: true");
    assert_eq!(again.body, first.body, "byte for byte");
    assert_eq!(rig.stamps().await.len(), 1, "the retry stamped nothing");

    let id = v["id"].as_str().expect("id");
    let got = rig.get(&format!("/v1/invoices/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["uuid"], v["uuid"]);
    let serie = v["serie"].as_str().expect("serie");
    let folio = v["folio"].as_str().expect("folio");
    let found = rig
        .get(&format!(
            "/v1/invoices?serie={serie}&folio={folio}&rfc_emisor=EKU9003173C9"
        ))
        .await;
    assert_eq!(found.json()["data"][0]["id"], id);
    let none = rig.get("/v1/invoices?serie=A&folio=999999").await;
    assert_eq!(none.json()["data"], json!([]));
    let other = rig.get("/v1/invoices?rfc_emisor=XIQB891116QE4").await;
    assert_eq!((other.status, other.code().as_str()), (403, "FORBIDDEN"));
    assert_eq!(rig.get("/v1/invoices/inv_nope").await.status, 404);

    let doc = rig.get("/v1/openapi.json").await;
    assert_eq!(doc.status, 200);
    assert!(doc.json()["paths"]["/v1/invoices"]["post"].is_object());
}

// 1, 4: no key or a wrong one is a verdict about the caller: not stored, the retry runs.
async fn caller_verdicts_are_not_replayed(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let none = rig.post_with(&invoice(), Some("k-auth"), None).await;
    assert_eq!((none.status, none.code().as_str()), (401, "UNAUTHORIZED"));
    let wrong = rig
        .post_with(&invoice(), Some("k-auth"), Some("afk_wrong"))
        .await;
    assert_eq!(wrong.status, 401);
    let ok = rig.post(&invoice(), Some("k-auth")).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert!(!ok.replayed, "the 401s were not stored: this one ran");

    let mut other_emisor = invoice();
    other_emisor["rfc_emisor"] = json!("XIQB891116QE4");
    let forbidden = rig.post(&other_emisor, Some("k-403")).await;
    forbidden.assert_error(403, "FORBIDDEN", "");
    let mut own = invoice();
    own["rfc_emisor"] = json!("EKU9003173C9");
    let ok = rig.post(&own, Some("k-403")).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert!(!ok.replayed);
    assert_eq!(rig.stamps().await.len(), 2);
}

// 4: a 5xx (storage unavailable) is not stored: the retry with the same key really runs.
async fn a_server_error_is_not_replayed(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    exec_sql(
        &rig.app.db,
        "ALTER TABLE api_idempotency RENAME TO api_idempotency_away",
    )
    .await;
    let down = rig.post(&invoice(), Some("k-5xx")).await;
    down.assert_error(503, "UNAVAILABLE", "");
    exec_sql(
        &rig.app.db,
        "ALTER TABLE api_idempotency_away RENAME TO api_idempotency",
    )
    .await;
    let up = rig.post(&invoice(), Some("k-5xx")).await;
    assert_eq!(up.status, 201, "{}", up.text());
    assert!(!up.replayed, "the 503 was not stored: this one ran");
    assert_eq!(rig.stamps().await.len(), 1);
}

// 2: header or body field, same effect; both and different → 400 before anything runs.
async fn header_and_body_keys_are_one_key(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let mut in_body = invoice();
    in_body["idempotency_key"] = json!("k-body");
    let first = rig.post(&in_body, None).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let by_header = rig.post(&invoice(), Some("k-body")).await;
    assert!(by_header.replayed);
    assert_eq!(by_header.body, first.body);
    let both_same = rig.post(&in_body, Some("k-body")).await;
    assert!(both_same.replayed);

    let mut other = invoice();
    other["idempotency_key"] = json!("k-two");
    let clash = rig.post(&other, Some("k-one")).await;
    clash.assert_error(400, "VALIDATION_ERROR", "");
    for bad in ["a b".to_owned(), "k".repeat(101), "clave-ñ".to_owned()] {
        let mut v = invoice();
        v["idempotency_key"] = json!(bad);
        let r = rig.post(&v, None).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "VALIDATION_ERROR"),
            "{bad}"
        );
    }
    assert_eq!(rig.invoice_count().await, 1, "nothing ran for the 400s");
    let longest = rig.post(&invoice(), Some(&"k".repeat(100))).await;
    assert_eq!(longest.status, 201, "{}", longest.text());
    assert_eq!(rig.stamps().await.len(), 2);
}

// 3: the same key with another body → 422, nothing executed.
async fn a_key_reused_with_another_body_is_refused(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    assert_eq!(rig.post(&invoice(), Some("k-reuse")).await.status, 201);
    let other = rig.post(&with_price("100.00"), Some("k-reuse")).await;
    other.assert_error(422, "IDEMPOTENCY_KEY_REUSED", "");
    assert_eq!(rig.invoice_count().await, 1);
    assert_eq!(rig.stamps().await.len(), 1);
}

// 3 and the wait deadline: queued past the wait → 202, key taken (409 with Retry-After), then
// the 201 replayed once the worker stamped it.
async fn a_queued_invoice_answers_202_then_409_then_the_201(b: Backend) {
    let Some(rig) = rig(b, "", "[api]\nwait_for_stamp_ms = 200\n").await else {
        return;
    };
    let first = rig.post(&invoice(), Some("k-queued")).await;
    assert_eq!(first.status, 202, "no worker yet: {}", first.text());
    assert_eq!(first.json()["status"], "pending");
    assert_eq!(
        first.json()["folio"],
        Value::Null,
        "the folio is assigned when the worker seals the invoice"
    );
    let id = first.json()["id"].as_str().expect("id").to_owned();
    let dup = rig.post(&invoice(), Some("k-queued")).await;
    dup.assert_error(409, "DUPLICATE_IN_PROGRESS", "");
    assert!(dup.retry_after.is_some(), "Retry-After");
    let other = rig.post(&with_price("1.00"), Some("k-queued")).await;
    assert_eq!(other.code(), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(
        rig.purge_after(chrono::Duration::hours(500)).await,
        0,
        "a key whose outcome is open is never purged"
    );
    let (_pool, _s) = rig.pool().await;
    let stamped = rig.wait_status(&id, "stamped", 30).await;
    let replay = rig.post(&invoice(), Some("k-queued")).await;
    assert_eq!(replay.status, 201, "{}", replay.text());
    assert!(replay.replayed);
    assert_eq!(replay.json()["uuid"], stamped["uuid"]);
    assert_eq!(replay.json()["folio"], "1", "numbered when sealed");
    let again = rig.post(&invoice(), Some("k-queued")).await;
    assert_eq!(again.body, replay.body, "byte for byte from now on");
    assert_eq!(rig.stamps().await.len(), 1);
    assert_eq!(rig.invoice_count().await, 1);
}

// 8: a stamp adopted by reconciliation (the PAC held it, we had not recorded it) reaches the
// merchant as `invoice.stamped` too.
async fn a_stamp_adopted_by_reconciliation_notifies_the_merchant(b: Backend) {
    let Some(rig) = rig(b, "", "[api]\nwait_for_stamp_ms = 200\n").await else {
        return;
    };
    let first = rig.post(&invoice(), Some("k-adopt")).await;
    assert_eq!(first.status, 202, "no worker: {}", first.text());
    let public = first.json()["id"].as_str().expect("id").to_owned();
    let db = &rig.app.db;
    let inv = db
        .api_invoice(&public, "EKU9003173C9")
        .await
        .expect("read")
        .expect("the invoice");
    assert!(api_webhooks_of(db, inv.id).await.is_empty());
    let adopt = || {
        db.adopt_stamp(
            inv.outbox_id,
            "0F8A4B2C-1D3E-4F5A-8B6C-7D8E9F0A1B2C",
            b"<cfdi:Comprobante/>",
            "2026-12-02T10:00:00",
            "adopted by reconciliation",
            "test",
            None,
        )
    };
    assert!(adopt().await.expect("adopt"));
    let events: Vec<String> = api_webhooks_of(db, inv.id)
        .await
        .into_iter()
        .map(|w| w.event_type)
        .collect();
    assert_eq!(events, ["invoice.stamped"]);
    // Adopting again changes nothing and queues nothing more.
    assert!(!adopt().await.expect("adopt again"));
    assert_eq!(api_webhooks_of(db, inv.id).await.len(), 1);
}

// 9: concurrent requests with one key: one invoice, one stamp, every 201 the same bytes.
async fn concurrent_requests_with_one_key_stamp_once(b: Backend) {
    let Some(rig) = rig(b, "latency=300ms", "").await else {
        return;
    };
    let rig = Arc::new(rig);
    let (_pool, _s) = rig.pool().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let rig = rig.clone();
        tasks.push(tokio::spawn(async move {
            rig.post(&invoice(), Some("k-race")).await
        }));
    }
    let mut created = Vec::new();
    for t in tasks {
        let r = t.await.expect("task");
        match r.status {
            201 => created.push(r.body),
            409 => assert_eq!(r.code(), "DUPLICATE_IN_PROGRESS"),
            other => panic!("unexpected {other}: {}", r.text()),
        }
    }
    let last = rig.post(&invoice(), Some("k-race")).await;
    assert_eq!(last.status, 201, "{}", last.text());
    assert!(created.iter().all(|c| *c == last.body), "one response");
    assert_eq!(rig.invoice_count().await, 1);
    assert_eq!(rig.stamps().await.len(), 1);
}

// 6: a folio without a key derives the key; another invoice claiming it gets folio_conflict,
// the same one is replayed; without key and folio every call is a new invoice.
async fn an_explicit_folio_derives_the_key(b: Backend) {
    let Some(rig) = rig(b, "latency=200ms", "").await else {
        return;
    };
    let rig = Arc::new(rig);
    let (_pool, _s) = rig.pool().await;
    let mut a = with_price("10.00");
    a["serie"] = json!("API");
    a["folio"] = json!("77");
    let mut c = with_price("20.00");
    c["serie"] = json!("API");
    c["folio"] = json!("77");
    let (ra, rc) = {
        let (r1, r2) = (rig.clone(), rig.clone());
        let (a2, c2) = (a.clone(), c.clone());
        tokio::join!(
            tokio::spawn(async move { r1.post(&a2, None).await }),
            tokio::spawn(async move { r2.post(&c2, None).await })
        )
    };
    let (ra, rc) = (ra.expect("task"), rc.expect("task"));
    let mut statuses = [ra.status, rc.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409], "{} / {}", ra.text(), rc.text());
    let (won, lost, won_body) = if ra.status == 201 {
        (&ra, &rc, &a)
    } else {
        (&rc, &ra, &c)
    };
    assert_eq!(lost.code(), "folio_conflict");
    assert_eq!(won.json()["folio"], "77");
    let replay = rig.post(won_body, None).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, won.body);

    let one = rig.post(&invoice(), None).await;
    let two = rig.post(&invoice(), None).await;
    assert_eq!((one.status, two.status), (201, 201));
    assert_ne!(
        one.json()["id"],
        two.json()["id"],
        "no key, no folio: new invoices"
    );
    assert_eq!(rig.stamps().await.len(), 3);
}

/// Serie N: `folio` explicit, or numbered by the worker when `None`; a price per call keeps
/// the bodies apart (no key is derived without a folio).
fn in_serie_n(folio: Option<&str>, price: usize) -> Value {
    let mut v = with_price(&format!("{price}.00"));
    v["serie"] = json!("N");
    if let Some(f) = folio {
        v["folio"] = json!(f);
    }
    v
}

// 6: numbering (at sealing) never hands out a folio claimed explicitly, and an explicit folio
// that numbering gave out, or another invoice holds, is a folio_conflict: an explicit numeric
// folio moves the serie's numbering past itself.
async fn numbering_never_hands_out_an_explicit_folio(b: Backend) {
    let Some(rig) = rig(b, "", "").await else {
        return;
    };
    let rig = Arc::new(rig);
    let (_pool, _s) = rig.pool().await;
    let explicit = rig.post(&in_serie_n(Some("3"), 1), None).await;
    explicit.assert_created(false);
    assert_eq!(explicit.json()["folio"], "3");
    let mut numbered = Vec::new();
    for price in 2..5 {
        let r = rig.post(&in_serie_n(None, price), None).await;
        r.assert_created(false);
        numbered.push(r.json()["folio"].as_str().expect("folio").to_owned());
    }
    assert_eq!(numbered, ["4", "5", "6"], "numbering continues past 3");
    rig.post(&in_serie_n(Some("5"), 5), None)
        .await
        .assert_error(409, "folio_conflict", "5 was numbered");
    rig.post(&in_serie_n(Some("3"), 6), None)
        .await
        .assert_error(409, "folio_conflict", "3 is held explicitly");

    // Concurrently, explicit folios at the numbering's edge: each is either taken (201, that
    // folio) or already numbered (409 folio_conflict); no folio is ever given twice.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let rig = rig.clone();
        let folio = (i % 4 == 0).then(|| (8 + i).to_string());
        tasks.spawn(async move {
            let r = rig.post(&in_serie_n(folio.as_deref(), 100 + i), None).await;
            (folio, r)
        });
    }
    let mut created = 4;
    while let Some(done) = tasks.join_next().await {
        let (folio, r) = done.expect("task");
        match folio {
            Some(f) if r.status == 409 => r.assert_error(409, "folio_conflict", &f),
            Some(f) => {
                r.assert_created(false);
                assert_eq!(r.json()["folio"], f.as_str());
                created += 1;
            }
            None => {
                r.assert_created(false);
                created += 1;
            }
        }
    }
    let folios = support::rows::folios_of(&rig.app.db, "N").await;
    let mut distinct = folios.clone();
    distinct.dedup();
    assert_eq!(folios, distinct, "no folio twice");
    assert_eq!(folios.len(), created, "{folios:?}");
    assert_eq!(rig.stamps().await.len(), created, "each stamped once");
}

// 4, 8: a PAC rejection and our own validation error release the key; corrected data under the
// same key creates the invoice; invoice.failed reaches the merchant.
async fn an_invoice_that_ends_without_a_stamp_releases_its_key(b: Backend) {
    let (receiver, url) = Receiver::start(0).await;
    let Some(rig) = rig(b, "unregistered_rfc=CACX7605101P8", &webhook_toml(&url)).await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let mut unregistered = invoice();
    unregistered["receptor"]["rfc"] = json!("CACX7605101P8");
    let rejected = rig.post(&unregistered, Some("k-fix")).await;
    rejected.assert_error(422, "PAC_REJECTED", "");
    assert_eq!(rejected.json()["error"]["pac_code"], "CFDI40143");
    let failed_id = rejected.json()["error"]["invoice_id"]
        .as_str()
        .expect("invoice id")
        .to_owned();
    let hook = receiver.wait_for("invoice.failed", 30).await;
    assert_eq!(hook["data"]["id"], failed_id.as_str());
    assert_eq!(hook["data"]["error"]["code"], "CFDI40143");

    let fixed = rig.post(&invoice(), Some("k-fix")).await;
    assert_eq!(
        fixed.status,
        201,
        "the released key takes the corrected data: {}",
        fixed.text()
    );
    assert!(!fixed.replayed);
    assert_ne!(fixed.json()["id"], failed_id.as_str());
    let replay = rig.post(&invoice(), Some("k-fix")).await;
    assert_eq!(replay.body, fixed.body, "now kept: stamped");
    let old = rig.get(&format!("/v1/invoices/{failed_id}")).await;
    assert_eq!(old.json()["status"], "failed");
    assert_eq!(rig.stamps().await.len(), 1);

    let mut invalid = invoice();
    invalid["receptor"]["regimen_fiscal"] = json!("999");
    let ours = rig.post(&invalid, Some("k-ours")).await;
    ours.assert_error(422, "VALIDATION_ERROR", "");
    let corrected = rig.post(&invoice(), Some("k-ours")).await;
    assert_eq!(corrected.status, 201, "{}", corrected.text());
    assert_eq!(rig.stamps().await.len(), 2);
    assert_eq!(rig.invoice_count().await, 3, "failed, fixed, corrected");
}

// Amounts beyond the CFDI limits (14 integer digits, 6 decimals): 422 naming the field, nothing
// written, the key free for the corrected request. Before, `cantidad: "79228162514264337593543950335"`
// panicked the handler on a `Decimal` overflow and the connection closed without an answer.
async fn amounts_beyond_the_cfdi_limits_are_refused_naming_the_field(b: Backend) {
    let Some(rig) = rig(b, "", "[invoice]\ncurrencies = [\"MXN\", \"USD\"]\n").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let max = "79228162514264337593543950335";
    let beyond_decimal = format!("1{}", "0".repeat(39));
    let usd = |tc: Value| {
        let mut v = invoice();
        v["moneda"] = json!("USD");
        v["tipo_cambio"] = tc;
        v
    };
    let line = |field: &str, value: Value| {
        let mut v = invoice();
        v["conceptos"][0][field] = value;
        v
    };
    let mut second_line = invoice();
    let mut other = second_line["conceptos"][0].clone();
    other["cantidad"] = json!(max);
    second_line["conceptos"]
        .as_array_mut()
        .expect("conceptos")
        .push(other);
    let cases: Vec<(&str, Value)> = vec![
        ("conceptos[0].cantidad", line("cantidad", json!(max))),
        (
            "conceptos[0].valor_unitario",
            line("valor_unitario", json!(max)),
        ),
        ("conceptos[0].descuento", line("descuento", json!(max))),
        ("tipo_cambio", usd(json!(max))),
        ("conceptos[1].cantidad", second_line),
        // Beyond what a Decimal holds at all, and as JSON numbers.
        (
            "conceptos[0].cantidad",
            line("cantidad", json!(beyond_decimal)),
        ),
        (
            "conceptos[0].valor_unitario",
            line("valor_unitario", json!(1e300)),
        ),
        ("tipo_cambio", usd(json!(1e40))),
        // One digit over, one decimal over.
        (
            "conceptos[0].cantidad",
            line("cantidad", json!("100000000000000")),
        ),
        (
            "conceptos[0].valor_unitario",
            line("valor_unitario", json!("1.1234567")),
        ),
        ("conceptos[0].cantidad", line("cantidad", json!("12abc"))),
    ];
    for (field, body) in &cases {
        let r = rig.post(body, Some("k-huge")).await;
        r.assert_error(422, "VALIDATION_ERROR", field);
        let err = &r.json()["error"];
        assert_eq!(err["field"], *field, "{}", r.text());
        let message = err["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(field), "{message}");
    }
    // Each factor within the limit, the line's importe not; each line within, the sum not.
    let product = {
        let mut v = line("cantidad", json!("10000000000000"));
        v["conceptos"][0]["valor_unitario"] = json!("10000000000000");
        v
    };
    let mut sum = line("valor_unitario", json!("90000000000000"));
    let copy = sum["conceptos"][0].clone();
    sum["conceptos"]
        .as_array_mut()
        .expect("conceptos")
        .push(copy);
    for (field, body, says) in [
        (json!("conceptos[0]"), product, "cantidad × valor_unitario"),
        (Value::Null, sum, "SubTotal"),
    ] {
        let r = rig.post(&body, Some("k-huge")).await;
        r.assert_error(422, "VALIDATION_ERROR", &field.to_string());
        assert_eq!(r.json()["error"]["field"], field, "{}", r.text());
        assert!(r.text().contains(says), "{}", r.text());
    }
    assert_eq!(rig.invoice_count().await, 0, "nothing was written");
    assert!(rig.app.invoices().await.is_empty(), "no payment row either");
    assert!(rig.stamps().await.is_empty());
    // The largest amounts allowed go through, under the same key: it was never taken.
    let mut largest = line("cantidad", json!("1"));
    largest["conceptos"][0]["valor_unitario"] = json!("86206896551724.13");
    let ok = rig.post(&largest, Some("k-huge")).await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert_eq!(ok.json()["total"], "99999999999999.99");
    assert_eq!(rig.stamps().await.len(), 1);
    // The limits are in the OpenAPI document.
    let doc = rig.get("/v1/openapi.json").await.json();
    let concepto = &doc["components"]["schemas"]["CreateInvoice"]["properties"]["conceptos"]["items"]
        ["properties"];
    for p in [
        &concepto["cantidad"],
        &concepto["valor_unitario"],
        &concepto["descuento"],
        &doc["components"]["schemas"]["CreateInvoice"]["properties"]["tipo_cambio"],
    ] {
        assert_eq!(p["pattern"], "^[0-9]{1,14}(\\.[0-9]{1,6})?$", "{p}");
    }
}

// 5, 8: the PAC stamped but its answer was lost: 503, the key stays taken (a retry gets the
// same 503), the worker asks the PAC, then the original 201 is replayed and invoice.stamped
// reaches the merchant.
async fn a_pac_timeout_is_resolved_later_and_replayed(b: Backend) {
    let (receiver, url) = Receiver::start(1).await;
    let Some(rig) = rig(
        b,
        "lose_response=1:mode=drop,recover_unavailable=1",
        &webhook_toml(&url),
    )
    .await
    else {
        return;
    };
    let (pool, _s) = rig.pool().await;
    let first = rig.post(&invoice(), Some("k-lost")).await;
    first.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "");
    let id = first.json()["error"]["invoice_id"]
        .as_str()
        .expect("invoice id")
        .to_owned();
    assert_eq!(rig.stamps().await.len(), 1, "the PAC did stamp it");
    // The pool stops before the retries: it asks the PAC again a second later, and while a
    // question is in flight the row is `stamping` and a retry gets 409 DUPLICATE_IN_PROGRESS.
    // Stopped, it leaves the row `unknown` (a question cut short is released as such).
    pool.shutdown().await;
    let retry = rig.post(&invoice(), Some("k-lost")).await;
    retry.assert_error(
        503,
        "STAMPING_OUTCOME_UNKNOWN",
        "the outcome is what is unknown",
    );
    assert_eq!(retry.json()["error"]["invoice_id"], id.as_str());
    assert!(retry.retry_after.is_some());
    let different = rig.post(&with_price("1.00"), Some("k-lost")).await;
    assert_eq!(
        different.code(),
        "IDEMPOTENCY_KEY_REUSED",
        "never stamped with other data"
    );

    rig.set_faults("").await;
    let (_pool, _s) = rig.pool().await;
    let stamped = rig.wait_status(&id, "stamped", 30).await;
    let stamps = rig.stamps().await;
    assert_eq!(stamps.len(), 1, "recovered, not stamped again");
    assert_eq!(stamped["uuid"], stamps[0]["uuid"]);
    let replay = rig.post(&invoice(), Some("k-lost")).await;
    assert_eq!(replay.status, 201, "{}", replay.text());
    assert!(replay.replayed);
    assert_eq!(replay.json()["uuid"], stamps[0]["uuid"]);
    let again = rig.post(&invoice(), Some("k-lost")).await;
    assert_eq!(again.body, replay.body);

    // The first delivery got a 500; the retry with backoff carries the same webhook-id.
    let hook = receiver.wait_for("invoice.stamped", 30).await;
    assert_eq!(hook["data"]["uuid"], stamps[0]["uuid"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while receiver.ids().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "never retried");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ids = receiver.ids();
    assert_eq!(ids[0], ids[1], "webhook-id is stable across retries");
    let inv = rig
        .app
        .db
        .find_api_invoices("EKU9003173C9", None, None)
        .await
        .expect("list");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rows = api_webhooks_of(&rig.app.db, inv[0].id).await;
        if rows.iter().any(|r| r.state == "delivered") {
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].attempts, 2);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// 5: the answer was lost, and the worker is asking the PAC what happened (the row is
// `stamping` again, claimed from `unknown`): a retry gets the same 503 meanwhile, not 409.
async fn a_retry_while_the_worker_asks_the_pac_gets_the_same_503(b: Backend) {
    // Every PAC answer takes 6 s: the worker's question about the lost stamp is in flight long
    // enough for a retry, on a loaded machine too.
    let Some(rig) = rig(b, "lose_response=1:mode=drop,latency=6s", "").await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let first = rig.post(&invoice(), Some("k-asking")).await;
    first.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "");
    let id = first.json()["error"]["invoice_id"]
        .as_str()
        .expect("invoice id")
        .to_owned();
    let asking = || async {
        let rows: Vec<(String, Option<String>)> = support::rows::fetch_rows(
            &rig.app.db,
            "SELECT o.state, o.claimed_from FROM outbox o JOIN api_invoices a ON a.outbox_id = o.id \
             WHERE a.public_id = $1",
            &[support::rows::Bind::Str(&id)],
        )
        .await;
        rows.first().cloned() == Some(("stamping".into(), Some("unknown".into())))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !asking().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never asked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let retry = rig.post(&invoice(), Some("k-asking")).await;
    assert!(
        asking().await,
        "the question ended before the retry: nothing was shown"
    );
    retry.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "still unknown while asked");
    assert_eq!(retry.json()["error"]["invoice_id"], id.as_str());
    let status = rig.get(&format!("/v1/invoices/{id}")).await;
    assert_eq!(status.json()["status"], "unknown", "{}", status.text());

    rig.stamped_once_and_replayed(&id, "k-asking").await;
}

// 5: the PAC holds its answer past our wait: 503 at the wait's end and to a retry while the
// call is still in flight, and the 201 once the worker's timeout made it ask the PAC by key.
async fn a_pac_call_in_flight_past_the_wait_is_an_unknown_outcome(b: Backend) {
    // The API waits 10 s (time for a loaded machine's worker to claim the invoice and send it)
    // and our client 20 s: the call is still in flight when the wait ends and at the retry.
    let Some(rig) = hanging_rig(b, "", 20, 10_000).await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let first = rig.post(&invoice(), Some("k-hang")).await;
    first.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "");
    assert!(first.retry_after.is_some());
    let id = first.json()["error"]["invoice_id"]
        .as_str()
        .expect("invoice id")
        .to_owned();
    // The first request has its answer: a retry while the call is still in flight gets it too.
    let retry = rig.post(&invoice(), Some("k-hang")).await;
    retry.assert_error(
        503,
        "STAMPING_OUTCOME_UNKNOWN",
        "the same answer as the first",
    );
    assert_eq!(retry.json()["error"]["invoice_id"], id.as_str());
    rig.set_faults("").await;
    rig.stamped_once_and_replayed(&id, "k-hang").await;
}

// 7: a key whose invoice was stamped is never purged: a retry long after the retention
// replays the 201 (422 with another body), never a second CFDI. Released keys (the invoice
// ended without a stamp) are purged after the retention, and are free again.
async fn a_stamped_key_is_kept_and_only_released_keys_are_purged(b: Backend) {
    let Some(rig) = rig(
        b,
        "unregistered_rfc=CACX7605101P8",
        "[api]\nkey_retention_hours = 1\n",
    )
    .await
    else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let first = rig.post(&invoice(), Some("k-old")).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let mut unregistered = invoice();
    unregistered["receptor"]["rfc"] = json!("CACX7605101P8");
    let rejected = rig.post(&unregistered, Some("k-rejected")).await;
    assert_eq!(rejected.code(), "PAC_REJECTED", "{}", rejected.text());

    let now = chrono::Utc::now();
    let db = &rig.app.db;
    assert_eq!(db.purge_idempotency(now).await.expect("purge"), 0);
    let years_later = now + chrono::Duration::days(3650);
    assert_eq!(
        db.purge_idempotency(years_later).await.expect("purge"),
        1,
        "only the rejected invoice's key"
    );
    assert!(
        db.idempotency_record("EKU9003173C9", "k-rejected")
            .await
            .expect("read")
            .is_none()
    );
    let kept = db
        .idempotency_record("EKU9003173C9", "k-old")
        .await
        .expect("read")
        .expect("the stamped invoice's key is kept");
    assert_eq!(kept.state, "completed");
    assert_eq!(
        kept.response_body.as_deref().map(str::as_bytes),
        Some(&first.body[..])
    );

    let replay = rig.post(&invoice(), Some("k-old")).await;
    replay.assert_created(true);
    assert_eq!(replay.body, first.body, "byte for byte, years later");
    let other = rig.post(&with_price("1.00"), Some("k-old")).await;
    other.assert_error(422, "IDEMPOTENCY_KEY_REUSED", "");
    // The purged key is free: the corrected request creates its invoice.
    let fixed = rig.post(&invoice(), Some("k-rejected")).await;
    fixed.assert_created(false);
    assert_eq!(rig.stamps().await.len(), 2);
    assert_eq!(rig.invoice_count().await, 3);
}

/// Rewrites the frozen Fecha of an invoice not sealed yet, as if it had been asked for long
/// ago; its outbox id.
async fn date_invoice(rig: &Rig, public_id: &str, fecha: chrono::NaiveDateTime) -> i64 {
    let inv = rig
        .app
        .db
        .api_invoice(public_id, "EKU9003173C9")
        .await
        .expect("read")
        .expect("the invoice");
    let mut req: autofactura::cfdi::InvoiceRequest =
        serde_json::from_str(&inv.request_json).expect("request");
    req.fecha = fecha;
    support::admin::set_request(&rig.app, inv.outbox_id, &req).await;
    inv.outbox_id
}

// 5: the PAC stamped, the answer was lost, and the SAT window closed while the PAC could not
// be asked. The outcome is still unknown: the key stays taken (a retry gets the 503, the purge
// leaves it) instead of being released for a second CFDI; once the PAC answers, the original
// 201 is replayed.
async fn a_key_stays_taken_when_the_window_closes_on_an_unknown_outcome(b: Backend) {
    // The PAC cannot be asked from the start: the worker's first question, however soon it
    // comes after the client's timeout, goes unanswered.
    let Some(rig) = hanging_rig(b, ",recover_unavailable=1", 2, 200).await else {
        return;
    };
    let first = rig.post(&invoice(), Some("k-window")).await;
    assert_eq!(first.status, 202, "no worker yet: {}", first.text());
    let id = first.json()["id"].as_str().expect("id").to_owned();
    // Asked for 72 hours ago, less 75 s: the worker stops sending 60 s before the SAT's limit,
    // so its window closes 15 s from now (time for a loaded machine to make the first call);
    // the PAC's own a minute later.
    let fecha = autofactura::domain::time::now_in_mexico() - chrono::Duration::hours(72)
        + chrono::Duration::seconds(75);
    let outbox_id = date_invoice(&rig, &id, fecha).await;
    let closes = chrono::Utc::now() + chrono::Duration::seconds(15);
    let (pool, _s) = rig.pool().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while rig.stamps().await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never stamped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The answer is held past the client's timeout, and the PAC cannot be asked.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = rig.app.db.attempts_of(outbox_id).await.expect("attempts");
        let after = log
            .iter()
            .filter(|a| a.at > closes && a.outcome == "unresolved")
            .count();
        let row = rig
            .app
            .db
            .document(outbox_id)
            .await
            .expect("db")
            .expect("row");
        if after >= 2 && row.state.as_str() != "stamping" {
            assert_eq!(
                row.state.as_str(),
                "unknown",
                "not expired: the PAC may hold it: {log:?}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{row:?} {log:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The pool stops before the retry: it asks again every second, and while a question is in
    // flight the row is `stamping` (a retry gets 409, the invoice reads `pending`). Stopped,
    // it leaves the row `unknown` (a question cut short is released as such).
    pool.shutdown().await;
    let retry = rig.post(&invoice(), Some("k-window")).await;
    retry.assert_error(503, "STAMPING_OUTCOME_UNKNOWN", "");
    assert_eq!(retry.json()["error"]["invoice_id"], id.as_str());
    assert_eq!(rig.invoice_count().await, 1, "no second invoice");
    assert_eq!(rig.purge_after(chrono::Duration::days(3650)).await, 0);
    assert_eq!(
        rig.get(&format!("/v1/invoices/{id}")).await.json()["status"],
        "unknown"
    );

    rig.set_faults("").await;
    let (_pool, _s) = rig.pool().await;
    rig.stamped_once_and_replayed(&id, "k-window").await;
}

// 1, 8: cancellation through the API; invoice.canceled reaches the merchant.
async fn a_cancelled_invoice_notifies_the_merchant(b: Backend) {
    let (receiver, url) = Receiver::start(0).await;
    let Some(rig) = rig(b, "", &webhook_toml(&url)).await else {
        return;
    };
    let (_pool, _s) = rig.pool().await;
    let created = rig.post(&invoice(), Some("k-cancel")).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().expect("id").to_owned();
    // Asks to cancel the invoice for the SAT `motivo`.
    let cancel = |motivo: &str| {
        rig.send(
            rig.http
                .post(format!("{}/v1/invoices/{id}/cancel", rig.app.address))
                .bearer_auth(&rig.key)
                .body(format!(r#"{{"motivo":"{motivo}"}}"#)),
        )
    };
    let bad = cancel("07").await;
    assert_eq!((bad.status, bad.code().as_str()), (422, "VALIDATION_ERROR"));
    let asked = cancel("02").await;
    assert_eq!(asked.status, 202, "{}", asked.text());
    assert_eq!(asked.json()["cancellation"], "requested");
    rig.wait_status(&id, "canceled", 30).await;
    let hook = receiver.wait_for("invoice.canceled", 30).await;
    assert_eq!(hook["data"]["status"], "canceled");
    receiver.wait_for("invoice.stamped", 30).await;
    let replay = rig.post(&invoice(), Some("k-cancel")).await;
    assert_eq!(replay.body, created.body, "the stored 201 does not change");
}

/// 1: `autofactura api-key create` prints the key as its last line; `serve` takes it for the
/// fixture request body; the key never appears in the server's output, even at debug level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_key_and_the_fixture_issue_an_invoice_the_key_is_never_logged_and_revoking_it_works()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("autofactura.toml");
    // Port 0: `serve` binds a free port and logs which one.
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"sqlite://{}\"\n",
            dir.path().join("af.db").display()
        ),
    )
    .expect("settings");
    let bin = |args: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_autofactura"));
        c.current_dir(dir.path())
            .args(args)
            .arg("--config")
            .arg(&config);
        for (k, _) in std::env::vars() {
            if k.starts_with("AUTOFACTURA__") {
                c.env_remove(k);
            }
        }
        c
    };
    let out = bin(&["api-key", "create", "--name", "ci"])
        .output()
        .expect("api-key create");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let key = stdout.lines().last().expect("a line").trim().to_owned();
    assert!(key.starts_with("afk_"), "{stdout}");

    let log = dir.path().join("serve.log");
    let file = std::fs::File::create(&log).expect("log");
    let mut child = bin(&["serve"])
        .env("RUST_LOG", "debug")
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .expect("serve");
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let port = loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(port) = logged
            .lines()
            .filter(|l| l.contains("autofactura serving"))
            .find_map(serving_port)
        {
            break port;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "serve never started: {logged}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let base = format!("http://127.0.0.1:{port}");
    http.get(format!("{base}/healthz"))
        .send()
        .await
        .expect("serve answers on the port it logged");
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/api/invoice.json"
    ))
    .expect("fixture");
    let r = http
        .post(format!("{base}/v1/invoices"))
        .bearer_auth(&key)
        .header("Idempotency-Key", "cli-1")
        .body(body)
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();

    // The operator lists the keys (never the key itself) and revokes this one: it stops
    // working at once, on the running server.
    let out = bin(&["api-key", "list"]).output().expect("api-key list");
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{listed}");
    let line = listed
        .lines()
        .find(|l| l.contains(" ci "))
        .unwrap_or_else(|| panic!("the key is listed:\n{listed}"));
    assert!(line.contains(&key[..12]), "its first characters: {listed}");
    assert!(line.trim_end().ends_with('-'), "not revoked yet: {listed}");
    assert!(!listed.contains(&key), "the whole key is never listed");
    let id = line.split_whitespace().next().expect("an id").to_owned();
    let out = bin(&["api-key", "revoke", &id]).output().expect("revoke");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = http
        .get(format!("{base}/v1/invoices"))
        .bearer_auth(&key)
        .send()
        .await
        .expect("get")
        .status()
        .as_u16();
    let again = bin(&["api-key", "revoke", &id])
        .output()
        .expect("revoke again");
    let listed = String::from_utf8_lossy(&bin(&["api-key", "list"]).output().expect("list").stdout)
        .into_owned();
    let _ = child.kill();
    let _ = child.wait();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status, 201, "{text}\n{logged}");
    assert_eq!(after, 401, "a revoked key is refused");
    assert_eq!(again.status.code(), Some(1), "a key is revoked once");
    assert!(
        listed
            .lines()
            .any(|l| l.contains(" ci ") && l.contains("UTC") && !l.trim_end().ends_with('-')),
        "the list shows when it was revoked:\n{listed}"
    );
    assert!(
        logged.contains("api invoice queued"),
        "the request was logged:\n{logged}"
    );
    assert!(!logged.contains(&key), "the API key leaked into the log");
    assert!(
        !logged.contains(&key[4..20]),
        "part of the API key leaked into the log"
    );
}

on_both_backends!(
    a_stamp_adopted_by_reconciliation_notifies_the_merchant,
    a_stamped_invoice_is_replayed_byte_for_byte,
    caller_verdicts_are_not_replayed,
    a_server_error_is_not_replayed,
    header_and_body_keys_are_one_key,
    a_key_reused_with_another_body_is_refused,
    a_queued_invoice_answers_202_then_409_then_the_201,
    concurrent_requests_with_one_key_stamp_once,
    an_explicit_folio_derives_the_key,
    numbering_never_hands_out_an_explicit_folio,
    an_invoice_that_ends_without_a_stamp_releases_its_key,
    amounts_beyond_the_cfdi_limits_are_refused_naming_the_field,
    a_pac_timeout_is_resolved_later_and_replayed,
    a_pac_call_in_flight_past_the_wait_is_an_unknown_outcome,
    a_retry_while_the_worker_asks_the_pac_gets_the_same_503,
    a_stamped_key_is_kept_and_only_released_keys_are_purged,
    a_key_stays_taken_when_the_window_closes_on_an_unknown_outcome,
    a_cancelled_invoice_notifies_the_merchant,
);

/// The port in `serve`'s "autofactura serving" log line (`port=N`, or `"port":N` in JSON).
fn serving_port(line: &str) -> Option<u16> {
    let at = line
        .find("port=")
        .map(|i| i + "port=".len())
        .or_else(|| line.find("\"port\":").map(|i| i + "\"port\":".len()))?;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
