//! Admin test helpers: a cookie-keeping HTTP client that signs in like a browser, and fixtures
//! that put documents in the states a worker leaves them in (sealed, rejected, stamped, expired).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use autofactura::cfdi::InvoiceRequest;
use autofactura::domain::StampKey;
use autofactura::pac::{Stamp, StampOutcome};
use autofactura::store::{CancellationRow, Db, DocFull, ListFilter, ListView};
use chrono::Utc;

use super::{TestApp, spawn_app_with};
use autofactura::webhooks::stripe;

pub const PASSWORD: &str = "correct horse battery staple";

/// Spawns the app with a configured admin password.
pub async fn admin_app(b: super::Backend) -> Option<TestApp> {
    spawn_app_with(b, &format!("[admin]\npassword = \"{PASSWORD}\"\n")).await
}

/// A browser stand-in: keeps cookies, never follows redirects (tests look at them).
pub struct Browser {
    pub base: String,
    http: reqwest::Client,
    cookies: Mutex<BTreeMap<String, String>>,
    /// Raw `Set-Cookie` headers seen, for attribute checks.
    pub set_cookies: Mutex<Vec<String>>,
    pub forwarded_proto: Option<String>,
    /// More headers on every request (`Fly-Client-IP`, `X-Forwarded-For`).
    pub headers: Vec<(String, String)>,
}

pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub body: String,
    pub headers: reqwest::header::HeaderMap,
}

impl Page {
    /// The first hidden `csrf` value in the page.
    pub fn csrf(&self) -> String {
        hidden(&self.body, "csrf").unwrap_or_else(|| panic!("no csrf field in:\n{}", self.body))
    }

    /// Header `name` as text (panics when it is missing).
    pub fn header(&self, name: &str) -> &str {
        self.headers[name].to_str().expect("a text header")
    }
}

/// The value of `<input type="hidden" name="{name}" value="…">`.
pub fn hidden(body: &str, name: &str) -> Option<String> {
    let needle = format!("name=\"{name}\" value=\"");
    let start = body.find(&needle)? + needle.len();
    let end = body[start..].find('"')?;
    Some(body[start..start + end].to_owned())
}

impl Browser {
    pub fn new(app: &TestApp) -> Self {
        Browser {
            base: app.admin_address.clone(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: Mutex::new(BTreeMap::new()),
            set_cookies: Mutex::new(Vec::new()),
            forwarded_proto: None,
            headers: Vec::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn finish(&self, r: reqwest::Response) -> Page {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        for sc in headers.get_all("set-cookie") {
            let sc = sc.to_str().unwrap_or_default().to_owned();
            let pair = sc.split(';').next().unwrap_or_default();
            if let Some((k, v)) = pair.split_once('=') {
                let mut jar = self.cookies.lock().unwrap();
                if v.is_empty() || sc.to_ascii_lowercase().contains("max-age=0") {
                    jar.remove(k);
                } else {
                    jar.insert(k.to_owned(), v.to_owned());
                }
            }
            self.set_cookies.lock().unwrap().push(sc);
        }
        let location = headers
            .get("location")
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        let body = r.text().await.unwrap_or_default();
        Page {
            status,
            location,
            body,
            headers,
        }
    }

    fn req(&self, m: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .request(m, format!("{}{path}", self.base))
            .header("Cookie", self.cookie_header());
        if let Some(p) = &self.forwarded_proto {
            b = b.header("X-Forwarded-Proto", p);
        }
        for (k, v) in &self.headers {
            b = b.header(k, v);
        }
        b
    }

    pub async fn get(&self, path: &str) -> Page {
        let r = self
            .req(reqwest::Method::GET, path)
            .send()
            .await
            .expect("GET");
        self.finish(r).await
    }

    /// A GET whose body is a file (a PDF): status, headers and the exact bytes.
    pub async fn get_bytes(&self, path: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
        let r = self
            .req(reqwest::Method::GET, path)
            .send()
            .await
            .expect("GET");
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        (status, headers, r.bytes().await.expect("body").to_vec())
    }

    /// The detail page of the payment document `id` belongs to.
    pub async fn payment_page(&self, app: &TestApp, id: i64) -> Page {
        let payment_id = doc(app, id).await.payment_id;
        self.get(&format!("/admin/payments/{payment_id}")).await
    }

    /// Asks for the cancellation of stamped document `id` (motivo 02) with `csrf`, as the
    /// admin's form does, and checks that it was accepted (a 303 back).
    pub async fn cancel(&self, id: i64, csrf: &str) {
        let path = format!("/admin/documents/{id}/cancel");
        let r = self.post(&path, &[("csrf", csrf), ("motivo", "02")]).await;
        assert_eq!(r.status, 303, "{}", r.body);
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = form_body(form);
        let r = self
            .req(reqwest::Method::POST, path)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("POST");
        self.finish(r).await
    }

    pub fn has_cookie(&self, name: &str) -> bool {
        self.cookies.lock().unwrap().contains_key(name)
    }

    pub fn forget_cookie(&self, name: &str) {
        self.cookies.lock().unwrap().remove(name);
    }

    /// Signs in through the login form; the answer to the POST.
    pub async fn login_as(&self, name: &str, password: &str) -> Page {
        let form = self.get("/admin/login").await;
        assert_eq!(form.status, 200, "{}", form.body);
        let csrf = form.csrf();
        self.post(
            "/admin/login",
            &[("csrf", &csrf), ("name", name), ("password", password)],
        )
        .await
    }

    /// Signs in and returns the session's CSRF token (from the dashboard).
    pub async fn login(&self) -> String {
        let r = self.login_as("Ana", PASSWORD).await;
        assert_eq!(r.status, 303, "login failed: {}", r.body);
        let dash = self.get("/admin").await;
        assert_eq!(dash.status, 200, "{}", dash.body);
        dash.csrf()
    }
}

/// `application/x-www-form-urlencoded` text of `pairs`, as a browser sends a form.
pub fn form_body<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> String {
    let enc = autofactura::admin::common::percent_encode;
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k.as_ref()), enc(v.as_ref())))
        .collect::<Vec<_>>()
        .join("&")
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/// Runs one fixture statement written with `?` placeholders on either backend.
macro_rules! fixture_sql {
    ($db:expr, $sql:expr $(, $bind:expr)* $(,)?) => {{
        let sql: &str = $sql;
        match $db {
            Db::Sqlite { pool, .. } => {
                sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))$(.bind($bind))*.execute(pool).await.expect("fixture");
            }
            Db::Postgres(pool, ..) => {
                let mut n = 0;
                let pg: String = sql.chars().map(|c| if c == '?' { n += 1; format!("${n}") } else { c.to_string() }).collect();
                sqlx::query(sqlx::AssertSqlSafe(pg))$(.bind($bind))*.execute(pool).await.expect("fixture");
            }
        }
    }};
}

/// A paid Stripe sale created at `created` (Unix seconds), queued as a frozen document; its
/// outbox id.
pub async fn pay_at(app: &TestApp, suffix: &str, created: i64) -> i64 {
    let body = stripe::sample_payment_intent(suffix, created, false);
    let r = app.post_stripe_signed(&body).await;
    assert_eq!(r.status(), 200);
    outbox_of(app, &format!("pi_test_{suffix}")).await.id
}

pub async fn pay(app: &TestApp, suffix: &str) -> i64 {
    pay_at(app, suffix, Utc::now().timestamp()).await
}

pub async fn outbox_of(app: &TestApp, payment_id: &str) -> DocFull {
    let (rows, _) = app
        .db
        .list_documents(&ListFilter {
            query: payment_id.to_owned(),
            ..ListFilter::of(ListView::All)
        })
        .await
        .expect("list");
    // The search finds parts too (`pi_test_a1` in `pi_test_a10`): this one exactly.
    let id = rows
        .iter()
        .filter(|r| r.payment_id == payment_id)
        .find_map(|r| r.outbox_id)
        .expect("an outbox row");
    doc(app, id).await
}

pub async fn doc(app: &TestApp, id: i64) -> DocFull {
    app.db.document(id).await.expect("db").expect("document")
}

/// Numbers the row as a worker does before sealing it, through the worker's own statement
/// (which needs the row leased to the caller: leased for it, then given back): its serie's
/// next folio, unless it has one.
pub async fn number(app: &TestApp, id: i64) -> String {
    let d = doc(app, id).await;
    if let Some(f) = d.folio {
        return f;
    }
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET claimed_from = state, state = 'stamping', lease_owner = 'fixture' WHERE id = ?",
        id
    );
    let serie = d.serie.unwrap_or_default();
    let got = app
        .db
        .assign_folios("fixture", &[(id, serie)])
        .await
        .expect("assign a folio");
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET state = claimed_from, lease_owner = NULL WHERE id = ?",
        id
    );
    got.into_iter().next().expect("numbered").1
}

/// Numbers and seals the frozen request with the sandbox CSD and stores the bytes as a worker
/// does before its first PAC call.
pub async fn seal(app: &TestApp, id: i64) -> Vec<u8> {
    let folio = number(app, id).await;
    let d = doc(app, id).await;
    let mut req: InvoiceRequest = serde_json::from_str(&d.request_json).expect("request");
    req.folio = Some(folio);
    let csd = autofactura::sandbox::csd().expect("csd");
    let xml = autofactura::cfdi::seal(&req, &csd).expect("seal").xml;
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET sealed_xml = ?, sealed_at = ? WHERE id = ?",
        xml.clone(),
        Utc::now(),
        id
    );
    xml
}

/// Sends the sealed bytes to the sandbox PAC under the row's key, as a worker would.
pub async fn send_to_pac(app: &TestApp, id: i64) -> StampOutcome {
    let d = doc(app, id).await;
    let key = StampKey::parse(&d.stamp_key).expect("key");
    app.state
        .pac
        .stamp(d.sealed_xml.as_deref().expect("sealed"), &key)
        .await
}

/// Seals document `id` and has the sandbox PAC stamp it, recording nothing: the stamp of a
/// call whose answer was lost, which the test then marks the row for.
pub async fn stamped_unrecorded(app: &TestApp, id: i64) -> Stamp {
    seal(app, id).await;
    match send_to_pac(app, id).await {
        StampOutcome::Stamped(s) => s,
        other => panic!("the sandbox did not stamp: {other:?}"),
    }
}

/// What a worker writes after a PAC rejection.
pub async fn mark_failed(app: &TestApp, id: i64, code: &str, message: &str) {
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET state = 'failed', attempts = 1, last_error_code = ?, last_error_message = ? WHERE id = ?",
        code.to_owned(),
        message.to_owned(),
        id
    );
}

/// A paid document with valid sealed bytes that the PAC refused with `code`: what retry is for.
pub async fn rejected(app: &TestApp, suffix: &str, code: &str, message: &str) -> i64 {
    let id = pay(app, suffix).await;
    seal(app, id).await;
    mark_failed(app, id, code, message).await;
    id
}

/// The cancellation recorded for `uuid`; there must be one.
pub async fn cancellation(app: &TestApp, uuid: &str) -> CancellationRow {
    app.db
        .cancellation_by_uuid(uuid)
        .await
        .expect("read the cancellation")
        .unwrap_or_else(|| panic!("no cancellation recorded for {uuid}"))
}

pub async fn mark_state(app: &TestApp, id: i64, state: &str) {
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET state = ? WHERE id = ?",
        state.to_owned(),
        id
    );
}

/// What a worker leaves after a send whose answer never came: the call in the attempt log as
/// unanswered, the row `unknown`, due at `run_at`.
pub async fn mark_unknown(app: &TestApp, id: i64, run_at: chrono::DateTime<Utc>) {
    app.db
        .log_attempt(&autofactura::store::Attempt {
            outbox_id: Some(id),
            cancellation_id: None,
            operation: "stamp",
            pac: "sandbox",
            outcome: "unknown",
            http_status: None,
            code: None,
            message: Some("operation timed out"),
            latency_ms: 60_000,
            uuid: None,
            worker: "test",
        })
        .await
        .expect("log the unanswered call");
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET state = 'unknown', run_at = ?, last_error_message = 'operation timed out' WHERE id = ?",
        run_at,
        id
    );
}

/// Seals, stamps at the sandbox and records the stamp as a worker does; the UUID.
pub async fn stamped(app: &TestApp, id: i64) -> String {
    seal(app, id).await;
    let stamp = match send_to_pac(app, id).await {
        StampOutcome::Stamped(s) => s,
        other => panic!("the sandbox did not stamp: {other:?}"),
    };
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET state = 'stamped', uuid = ?, stamped_xml = ?, fecha_timbrado = ?, stamped_at = ? WHERE id = ?",
        stamp.uuid.clone(),
        stamp.xml.clone(),
        stamp.tfd.fecha_timbrado.clone(),
        Utc::now(),
        id
    );
    stamp.uuid
}

/// Replaces the frozen request of a not yet sealed row (e.g. to relate it to another UUID).
pub async fn set_request(app: &TestApp, id: i64, req: &InvoiceRequest) {
    fixture_sql!(
        &app.db,
        "UPDATE outbox SET request_json = ? WHERE id = ?",
        serde_json::to_string(req).expect("json"),
        id
    );
}

pub async fn count(app: &TestApp, sql: &str) -> i64 {
    super::rows::count(&app.db, sql).await
}

/// Checks that document `d` is stamped; the message is its last error when it is not.
pub fn assert_stamped(d: &DocFull) {
    assert_eq!(d.state.as_str(), "stamped", "{:?}", d.last_error_message);
}

/// Checks that `SELECT COUNT(*) …` `sql` answers `expected`.
pub async fn assert_count(app: &TestApp, sql: &str, expected: i64) {
    assert_eq!(count(app, sql).await, expected, "{sql}");
}

/// What the cancellation worker writes when SAT's answer is final.
pub async fn finish_cancellation(
    app: &TestApp,
    uuid: &str,
    state: &str,
    estatus: &str,
    acuse: &str,
) {
    fixture_sql!(
        &app.db,
        "UPDATE cancellations SET state = ?, estatus_cancelacion = ?, sat_estado = ?, acuse_xml = ?, attempts = 2 WHERE uuid = ?",
        state.to_owned(),
        estatus.to_owned(),
        if state == "canceled" {
            "Cancelado"
        } else {
            "Vigente"
        }
        .to_owned(),
        acuse.to_owned(),
        uuid.to_owned()
    );
}
