//! A local fake of the Stripe API over real HTTP (127.0.0.1:0), for `[stripe] api_base`: the
//! read endpoints autofactura uses, with Stripe's list shape (`data`, `has_more`, `limit`,
//! `starting_after`), `expand[]` of `data.price.product`, the bearer key check, and a switch
//! that makes it answer 503 as an outage would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

/// The key the fake accepts (`[stripe] api_key` of the tests).
pub const API_KEY: &str = "rk_test_autofactura_fake";

#[derive(Default)]
struct Data {
    products: HashMap<String, Value>,
    /// Checkout Session id → its line items, `price.product` as an id.
    line_items: HashMap<String, Vec<Value>>,
    /// Checkout Sessions, listed by `payment_intent`.
    sessions: Vec<Value>,
    payment_intents: HashMap<String, Value>,
    charges: HashMap<String, Value>,
    balance_transactions: HashMap<String, Value>,
    /// Invoice id → the invoice and its lines.
    invoices: HashMap<String, (Value, Vec<Value>)>,
}

/// The fake; clone it freely (one server behind).
#[derive(Clone)]
pub struct FakeStripe {
    pub base: String,
    up: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
    data: Arc<Mutex<Data>>,
}

impl FakeStripe {
    /// Starts the fake on a free port.
    pub async fn start() -> Self {
        let fake = Self {
            base: String::new(),
            up: Arc::new(AtomicBool::new(true)),
            hits: Arc::new(AtomicUsize::new(0)),
            data: Arc::new(Mutex::new(Data::default())),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let shared = web::Data::new(fake.clone());
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(shared.clone())
                .default_service(web::route().to(route))
        })
        .workers(1)
        .listen(listener)
        .expect("listen")
        .run();
        tokio::spawn(server);
        Self {
            base: format!("http://127.0.0.1:{port}"),
            ..fake
        }
    }

    /// The TOML of a `[stripe]` table pointing at this fake (retries every second).
    pub fn toml(&self) -> String {
        format!(
            "api_key = \"{API_KEY}\"\napi_base = \"{}\"\nretry_interval_seconds = 1\nfetch_timeout_seconds = 2\n",
            self.base
        )
    }

    /// Up (answers) or down (503 to everything).
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    /// Requests answered so far (any status).
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Data) -> T) -> T {
        f(&mut self.data.lock().expect("fake stripe data"))
    }

    pub fn add_product(&self, id: &str, name: &str, metadata: Value, tax_code: Option<&str>) {
        let p = json!({ "id": id, "object": "product", "name": name, "metadata": metadata,
                        "tax_code": tax_code, "active": true, "livemode": false });
        self.with(|d| d.products.insert(id.to_owned(), p));
    }

    /// Checkout Session `session` (its webhook object) with `items` as its line items
    /// (`price.product` an id), found by its `payment_intent`.
    pub fn add_session(&self, session: Value, items: Vec<Value>) {
        let id = session["id"].as_str().expect("session id").to_owned();
        self.with(|d| {
            d.line_items.insert(id, items);
            d.sessions.push(session);
        });
    }

    /// PaymentIntent `pi` paid by charge `ch`, whose balance transaction converted at `rate`
    /// into MXN (`None`: no conversion).
    pub fn add_charge(&self, pi: &str, ch: &str, rate: Option<&str>) {
        let txn = format!("txn_{ch}");
        self.with(|d| {
            d.payment_intents.insert(
                pi.to_owned(),
                json!({ "id": pi, "object": "payment_intent", "latest_charge": ch }),
            );
            d.charges.insert(
                ch.to_owned(),
                json!({ "id": ch, "object": "charge", "payment_intent": pi, "balance_transaction": txn }),
            );
            // The rate as raw JSON number text, as Stripe sends it.
            let body = format!(
                r#"{{"id": "{txn}", "object": "balance_transaction", "currency": "mxn", "exchange_rate": {}}}"#,
                rate.unwrap_or("null")
            );
            d.balance_transactions
                .insert(txn, serde_json::from_str(&body).expect("txn"));
        });
    }

    /// Billing invoice `invoice` (its webhook object, paid by the PaymentIntent it names) with
    /// all its `lines`.
    pub fn add_invoice(&self, invoice: Value, lines: Vec<Value>) {
        let id = invoice["id"].as_str().expect("invoice id").to_owned();
        self.with(|d| d.invoices.insert(id, (invoice, lines)));
    }
}

fn error(status: u16, message: &str) -> HttpResponse {
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("status"))
        .json(json!({ "error": { "type": "invalid_request_error", "message": message } }))
}

/// One page of `all` as Stripe lists it: `limit` (default 10, at most 100) after
/// `starting_after`.
fn page(all: &[Value], q: &[(String, String)], url: &str) -> HttpResponse {
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let limit: usize = get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let start = match get("starting_after") {
        Some(after) => match all.iter().position(|o| o["id"] == after) {
            Some(i) => i + 1,
            None => return error(400, "No such object for starting_after"),
        },
        None => 0,
    };
    let data: Vec<Value> = all.iter().skip(start).take(limit).cloned().collect();
    HttpResponse::Ok().json(json!({
        "object": "list", "url": url, "has_more": start + data.len() < all.len(), "data": data
    }))
}

async fn route(
    req: HttpRequest,
    q: web::Query<Vec<(String, String)>>,
    fake: web::Data<FakeStripe>,
) -> HttpResponse {
    fake.hits.fetch_add(1, Ordering::SeqCst);
    if !fake.up.load(Ordering::SeqCst) {
        return error(503, "fake Stripe is down");
    }
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|h| h.to_str().ok());
    if auth != Some(&format!("Bearer {API_KEY}")) {
        return error(401, "Invalid API Key provided");
    }
    let path = req.path().to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let expand = q
        .iter()
        .any(|(k, v)| k == "expand[]" && v == "data.price.product");
    let d = fake.data.lock().expect("fake stripe data");
    let one = |m: &HashMap<String, Value>, id: &str| match m.get(id) {
        Some(v) => HttpResponse::Ok().json(v),
        None => error(404, &format!("No such object: '{id}'")),
    };
    match parts.as_slice() {
        ["v1", "checkout", "sessions", id, "line_items"] => {
            let Some(items) = d.line_items.get(*id) else {
                return error(404, &format!("No such checkout.session: '{id}'"));
            };
            let items: Vec<Value> = items
                .iter()
                .map(|i| {
                    let mut i = i.clone();
                    let pid = i["price"]["product"].as_str().unwrap_or("").to_owned();
                    if expand && let Some(p) = d.products.get(&pid) {
                        i["price"]["product"] = p.clone();
                    }
                    i
                })
                .collect();
            page(&items, &q, &path)
        }
        ["v1", "checkout", "sessions"] => {
            let pi = q
                .iter()
                .find(|(k, _)| k == "payment_intent")
                .map(|(_, v)| v);
            let found: Vec<Value> = d
                .sessions
                .iter()
                .filter(|s| pi.is_none_or(|pi| s["payment_intent"] == pi.as_str()))
                .cloned()
                .collect();
            page(&found, &q, &path)
        }
        ["v1", "products", id] => one(&d.products, id),
        ["v1", "payment_intents", id] => one(&d.payment_intents, id),
        ["v1", "charges", id] => one(&d.charges, id),
        ["v1", "balance_transactions", id] => one(&d.balance_transactions, id),
        ["v1", "invoices", id, "lines"] => match d.invoices.get(*id) {
            Some((_, lines)) => page(lines, &q, &path),
            None => error(404, &format!("No such invoice: '{id}'")),
        },
        ["v1", "invoices", id] => match d.invoices.get(*id) {
            Some((invoice, _)) => HttpResponse::Ok().json(invoice),
            None => error(404, &format!("No such invoice: '{id}'")),
        },
        ["v1", "invoice_payments"] => {
            let pi = q
                .iter()
                .find(|(k, _)| k == "payment[payment_intent]")
                .map(|(_, v)| v);
            let found: Vec<Value> = d
                .invoices
                .values()
                .filter(|(i, _)| {
                    pi.is_some_and(|pi| {
                        autofactura::webhooks::stripe::invoice_payment_intent(i).as_ref() == Some(pi)
                    })
                })
                .map(|(i, _)| json!({ "id": format!("inpay_{}", i["id"].as_str().unwrap_or("")),
                                      "object": "invoice_payment", "invoice": i["id"],
                                      "payment": { "type": "payment_intent", "payment_intent": pi } }))
                .collect();
            page(&found, &q, &path)
        }
        _ => error(404, &format!("Unrecognized request URL (GET: {path})")),
    }
}

/// A Checkout line item as Stripe lists it, `price.product` an id: `quantity` × `unit` minor
/// units, `discount` minor units off.
pub fn line_item(
    id: &str,
    product: &str,
    name: &str,
    quantity: i64,
    unit: i64,
    discount: i64,
) -> Value {
    json!({
        "id": id, "object": "item", "currency": "mxn", "description": name, "quantity": quantity,
        "amount_subtotal": quantity * unit, "amount_discount": discount, "amount_tax": 0,
        "amount_total": quantity * unit - discount,
        "price": { "id": format!("price_{product}"), "object": "price", "unit_amount": unit,
                   "currency": "mxn", "tax_behavior": "unspecified", "product": product }
    })
}
