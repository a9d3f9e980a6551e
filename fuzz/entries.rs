//! The fuzz entry points, shared by the `cargo fuzz` targets (`fuzz_targets/`) and by
//! `tests/it/fuzz_regressions.rs`, which replays saved inputs and arbitrary bytes through the very
//! same functions. Each must return for any input; a panic is the bug being looked for.
#![allow(dead_code)]

use std::sync::OnceLock;

use autofactura::api;
use autofactura::cfdi::dom::Element;
use autofactura::cfdi::validate::check_amounts;
use autofactura::cfdi::verify::{VerifyOptions, verify};
use autofactura::cfdi::{self, Certificate, InvoiceRequest};
use autofactura::config::Settings;
use autofactura::ingest::Ingestor;
use autofactura::webhooks::{mercadopago, signature, stripe};

const SECRET: &str = "whsec_fuzz_secret";

/// Splits `data` into `n` lines (the last one takes the rest) and an `i64` read from the first
/// eight bytes, so one input chooses the clock as well as the header text.
fn clock_and_lines(data: &[u8], n: usize) -> (i64, Vec<&[u8]>) {
    let (now, rest) = match data.split_first_chunk::<8>() {
        Some((head, rest)) => (i64::from_le_bytes(*head), rest),
        None => (0, data),
    };
    let mut lines: Vec<&[u8]> = rest.splitn(n, |b| *b == b'\n').collect();
    lines.resize(n, &[]);
    (now, lines)
}

/// `Stripe-Signature` header parsing and checking. The first line is the header, the rest the
/// body. The header is also tried with a genuine `v1` appended for the `t=` it carries, so the
/// timestamp arithmetic behind a valid signature is reached too.
pub fn stripe_signature_header(data: &[u8]) {
    let (now, lines) = clock_and_lines(data, 2);
    let header = String::from_utf8_lossy(lines[0]);
    let body = lines[1];
    let tolerance = now.rem_euclid(1000);
    let _ = signature::verify_stripe(Some(&header), body, &[SECRET], tolerance, now);
    let _ = signature::verify_stripe(Some(&header), body, &[], tolerance, now);
    let t = header
        .split(',')
        .filter_map(|p| p.split_once('='))
        .fold(
            None,
            |t, (k, v)| {
                if k.trim() == "t" { Some(v.trim()) } else { t }
            },
        );
    if let Some(ts) = t.and_then(|t| t.parse::<i64>().ok()) {
        let signed = format!("{header},v1={}", signature::stripe_sign(SECRET, ts, body));
        let _ = signature::verify_stripe(Some(&signed), body, &["other", SECRET], tolerance, now);
    }
}

/// Mercado Pago `x-signature` / `x-request-id` / `data.id` manifest parsing and checking. Lines:
/// header, request id, data id. As for Stripe, the header is also tried with a genuine `v1` for
/// the `ts=` it carries.
pub fn mercadopago_manifest(data: &[u8]) {
    let (now, lines) = clock_and_lines(data, 3);
    let text: Vec<String> = lines
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    let (header, request_id, data_id) = (&text[0], text[1].as_str(), text[2].as_str());
    let request_id = Some(request_id).filter(|r| !r.is_empty());
    let data_id = Some(data_id).filter(|d| !d.is_empty());
    let tolerance = now.rem_euclid(1000);
    let _ = signature::mp_manifest(data_id, request_id, header);
    let _ = signature::verify_mercadopago(
        Some(header),
        request_id,
        data_id,
        Some(SECRET),
        tolerance,
        now,
    );
    let ts = header
        .split(',')
        .filter_map(|p| p.split_once('='))
        .fold(None, |ts, (k, v)| {
            if k.trim().eq_ignore_ascii_case("ts") {
                Some(v.trim())
            } else {
                ts
            }
        });
    if let Some(ts) = ts {
        for id in [
            data_id.map(str::to_owned),
            data_id.map(str::to_ascii_lowercase),
        ] {
            let v1 = signature::mp_sign(SECRET, id.as_deref(), request_id, ts);
            let signed = format!("{header},v1={v1}");
            for tol in [0, tolerance] {
                let _ = signature::verify_mercadopago(
                    Some(&signed),
                    request_id,
                    data_id,
                    Some(SECRET),
                    tol,
                    now,
                );
            }
        }
    }
}

fn ingestor() -> &'static Ingestor {
    static INGESTOR: OnceLock<Ingestor> = OnceLock::new();
    INGESTOR.get_or_init(|| {
        let settings = Settings::from_parts(None, &[]).expect("default settings");
        Ingestor::new(&settings).expect("default ingestor")
    })
}

/// A webhook body as the routes read it: a Stripe event, a Mercado Pago notification and a
/// Mercado Pago payment, each parsed and, when it means a paid sale, planned into the payment
/// row and the frozen invoice request.
pub fn webhook_body(data: &[u8]) {
    if let Ok(ev) = stripe::parse(data)
        && let stripe::Meaning::Paid(facts) = stripe::classify(&ev)
    {
        let _ = ingestor().plan(&facts);
    }
    if let Ok(n) = mercadopago::Notification::parse(data) {
        let _ = n.kind();
        let id = n.data_id();
        let _ = n.event_key(id.as_deref(), Some("request-id"));
    }
    if let Ok(p) = mercadopago::Payment::parse(data) {
        let _ = p.id_text();
        for live in [None, Some(true), Some(false)] {
            if let mercadopago::Meaning::Paid(facts) = p.meaning("evt", live) {
                let _ = ingestor().plan(&facts);
            }
        }
    }
}

fn tfd_certs() -> &'static [Certificate] {
    static CERTS: OnceLock<Vec<Certificate>> = OnceLock::new();
    CERTS.get_or_init(autofactura::cli::known_tfd_certificates)
}

/// `autofactura cfdi verify` on arbitrary bytes: parse, structure, amounts, cadena, Sello, TFD.
pub fn cfdi_xml(data: &[u8]) {
    let report = verify(
        data,
        &VerifyOptions {
            tfd_certs: tfd_certs(),
        },
    );
    let _ = report.is_valid();
}

/// Settings for the API body: the default emisor, and currencies with 2, 0 and 3 decimals.
fn api_settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        Settings::from_parts(
            Some("[invoice]\ncurrencies = [\"MXN\", \"USD\", \"JPY\", \"BHD\"]\n"),
            &[],
        )
        .expect("fuzz settings")
    })
}

/// A `POST /v1/invoices` body as the route reads it (JSON, idempotency key, the typed request,
/// the amount limits) into the frozen request and `cfdi::build`. Whatever the API accepts must
/// survive the outbox's JSON unchanged, build again to the same total, and pass the local
/// validator: otherwise it would be written and then fail to seal.
pub fn api_invoice_body(data: &[u8]) {
    api_invoice_accepted(data);
}

/// [`api_invoice_body`], saying whether the API accepted the body.
pub fn api_invoice_accepted(data: &[u8]) -> bool {
    let Ok(body) = api::read_create_body(data, None) else {
        return false;
    };
    let settings = api_settings();
    let serie = body.input.serie(settings);
    let Ok((request, total)) = api::freeze(settings, &body.input, &serie, None) else {
        return false;
    };
    let json = serde_json::to_string(&request).expect("a frozen request is JSON");
    let back: InvoiceRequest = serde_json::from_str(&json).expect("a frozen request reads back");
    assert_eq!(back, request, "the frozen request changed through JSON");
    let c = cfdi::build(&back, "30001000000500003416").expect("a frozen request builds again");
    assert_eq!(c.total, total);
    let root = Element::parse(&cfdi::xml::to_xml(&c)).expect("our XML parses");
    let problems = check_amounts(&root);
    assert!(
        problems.is_empty(),
        "accepted by the API, rejected by the validator: {problems:?}"
    );
    true
}
