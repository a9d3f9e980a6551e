//! The fuzz entry points (`fuzz/entries.rs`, shared with the `cargo fuzz` targets) in the
//! ordinary suite: every saved input (crashes the fuzzer found, kept in `fuzz/regressions/`,
//! and the seed corpus in `fuzz/seeds/`) is replayed, and each parser gets arbitrary and
//! mutated inputs from proptest. Each entry point must return for any input; a panic fails.

#[path = "../../fuzz/entries.rs"]
mod entries;

use std::path::Path;

use proptest::prelude::*;

type Entry = fn(&[u8]);

const TARGETS: &[(&str, Entry)] = &[
    ("stripe_signature_header", entries::stripe_signature_header),
    ("mercadopago_manifest", entries::mercadopago_manifest),
    ("webhook_body", entries::webhook_body),
    ("cfdi_xml", entries::cfdi_xml),
    ("api_invoice_body", entries::api_invoice_body),
];

/// Every file under `fuzz/{dir}/{target}/`.
fn saved_inputs(dir: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(dir)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| {
            let data = std::fs::read(e.path()).expect("read a saved input");
            (e.path().display().to_string(), data)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_saved_crash_and_seed_runs_clean() {
    let mut replayed = 0;
    for (target, entry) in TARGETS {
        let seeds = saved_inputs("seeds", target);
        assert!(!seeds.is_empty(), "no seed corpus for {target}");
        for (name, data) in seeds.iter().chain(&saved_inputs("regressions", target)) {
            eprintln!("{target}: {name}");
            entry(data);
            replayed += 1;
        }
    }
    assert!(replayed >= TARGETS.len());
}

/// The crashes found while fuzzing, each a named regression (their inputs are saved in
/// `fuzz/regressions/` and replayed above too).
mod found {
    use super::entries;
    use autofactura::webhooks::signature::{self, SignatureError};

    /// A genuinely signed timestamp at the end of the range is simply stale.
    #[test]
    fn extreme_signed_timestamps_are_stale_not_a_panic() {
        let body = b"{}";
        let sig = signature::stripe_sign("s", i64::MIN, body);
        let header = format!("t={},v1={sig}", i64::MIN);
        assert_eq!(
            signature::verify_stripe(Some(&header), body, &["s"], 300, 1_700_000_000),
            Err(SignatureError::Stale {
                age: i64::MAX,
                tolerance: 300
            })
        );
        let ts = i64::MIN.to_string();
        let v1 = signature::mp_sign("s", Some("1"), Some("r"), &ts);
        assert!(matches!(
            signature::verify_mercadopago(
                Some(&format!("ts={ts},v1={v1}")),
                Some("r"),
                Some("1"),
                Some("s"),
                60,
                1_700_000_000
            ),
            Err(SignatureError::Stale { .. })
        ));
    }

    /// `Stripe-Signature` with a genuine `v1` and `t` at the end of the i64 range: the age of the
    /// signature overflowed.
    #[test]
    fn stripe_timestamp_at_the_end_of_the_range() {
        at_the_ends_of_the_range(
            entries::stripe_signature_header,
            b"t=-9223372036854775808\n{}",
            b"t=9223372036854775807\n{}",
        );
    }

    /// Feeds `entry` the clock at `i64::MAX` with the lines `at_max`, then at `i64::MIN` with
    /// `at_min`.
    fn at_the_ends_of_the_range(entry: fn(&[u8]), at_max: &[u8], at_min: &[u8]) {
        for (now, lines) in [(i64::MAX, at_max), (i64::MIN, at_min)] {
            let mut input = now.to_le_bytes().to_vec();
            input.extend_from_slice(lines);
            entry(&input);
        }
    }

    /// `cfdi verify` on a traslado whose Base is written with more decimals (91) than a
    /// `Decimal` holds: the Base's rounding unit could not be built.
    #[test]
    fn cfdi_amount_with_more_decimals_than_a_decimal_holds() {
        let xml = super::seed("cfdi_xml", "01-iva16-mxn.xml");
        let xml = String::from_utf8(xml).expect("utf-8");
        let long = format!("Base=\"499.{}\"", "0".repeat(91));
        let bad = xml.replacen("Base=\"499.00\"", &long, 1);
        assert_ne!(bad, xml);
        entries::cfdi_xml(bad.as_bytes());
        let report = autofactura::cfdi::verify::verify(bad.as_bytes(), &Default::default());
        assert!(!report.is_valid(), "the Sello no longer matches");
    }

    /// Amounts far beyond any sale are reported, not multiplied into an overflow.
    #[test]
    fn cfdi_amounts_beyond_any_sale_are_problems() {
        let xml = String::from_utf8(super::seed("cfdi_xml", "01-iva16-mxn.xml")).expect("utf-8");
        let max = "79228162514264337593543950335";
        let bad = xml
            .replacen("Cantidad=\"1\"", &format!("Cantidad=\"{max}\""), 1)
            .replacen(
                "ValorUnitario=\"499.00\"",
                &format!("ValorUnitario=\"{max}\""),
                1,
            );
        assert_ne!(bad, xml);
        let report = autofactura::cfdi::verify::verify(bad.as_bytes(), &Default::default());
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.message.contains("Cantidad") && p.message.contains("out of range")),
            "{:?}",
            report.problems
        );
    }

    /// `POST /v1/invoices` with `cantidad` or `valor_unitario` at `Decimal::MAX`: the line
    /// product or the Total overflowed inside `cfdi::build` and the handler panicked. Now a 422
    /// naming the field.
    #[test]
    fn api_amounts_at_the_end_of_the_decimal_range() {
        for (name, field) in [
            ("cantidad-decimal-max", "conceptos[0].cantidad"),
            ("valor-unitario-decimal-max", "conceptos[0].valor_unitario"),
        ] {
            let body = super::saved("regressions", "api_invoice_body", name);
            entries::api_invoice_body(&body);
            assert_eq!(api_error(&body)["field"], field);
        }
    }

    /// A price at 99999999999999.999 with a discount: the SubTotal rounded to 15 integer
    /// digits while the Total stayed within 14, so the API wrote a request that could never be
    /// sealed. Now refused, naming the SubTotal.
    #[test]
    fn api_subtotal_rounded_past_the_limit() {
        let body = super::saved(
            "regressions",
            "api_invoice_body",
            "subtotal-rounded-past-the-limit",
        );
        entries::api_invoice_body(&body);
        let err = api_error(&body);
        assert!(
            err["message"]
                .as_str()
                .is_some_and(|m| m.contains("SubTotal")),
            "{err}"
        );
    }

    /// The seeds are bodies the API accepts, so the fuzzer starts from inside.
    #[test]
    fn api_seeds_are_accepted() {
        let seeds = super::saved_inputs("seeds", "api_invoice_body");
        assert!(seeds.len() >= 3);
        for (name, data) in seeds {
            assert!(entries::api_invoice_accepted(&data), "{name}");
        }
    }

    /// The 422 the API answers for `body`.
    fn api_error(body: &[u8]) -> serde_json::Value {
        let settings = autofactura::config::Settings::defaults().expect("defaults");
        let read = autofactura::api::read_create_body(body, None).expect("an invoice request");
        let serie = read.input.serie(&settings);
        let err =
            autofactura::api::freeze(&settings, &read.input, &serie, None).expect_err("refused");
        assert_eq!(
            actix_web::ResponseError::status_code(&err).as_u16(),
            422,
            "{err}"
        );
        err.body()["error"].clone()
    }

    /// The same for Mercado Pago's `ts`.
    #[test]
    fn mercadopago_ts_at_the_end_of_the_range() {
        at_the_ends_of_the_range(
            entries::mercadopago_manifest,
            b"ts=-9223372036854775808\nreq\n123",
            b"ts=99999999999\nreq\n123",
        );
    }
}

/// Header-like text: `key=value` pairs of the kinds the parsers look for, with odd spacing,
/// signs and lengths.
fn header_text(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    let key = prop::sample::select(keys.to_vec());
    let value = prop_oneof![
        "[-+ ]?[0-9]{0,20}",
        "[0-9a-f]{0,64}",
        any::<i64>().prop_map(|n| n.to_string()),
        ".{0,12}",
    ];
    prop::collection::vec((key, " ?", value), 0..6).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(k, s, v)| format!("{k}{s}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// `bytes` with a few bytes replaced, inserted or removed at random places.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8).prop_map(
        move |edits| {
            let mut b = base.clone();
            for (at, byte, op) in edits {
                if b.is_empty() {
                    b.push(byte);
                    continue;
                }
                let i = at.index(b.len());
                match op {
                    0 => b[i] = byte,
                    1 => b.insert(i, byte),
                    _ => {
                        b.remove(i);
                    }
                }
            }
            b
        },
    )
}

/// `mutated` inputs from the seeds `names` of `target`, one picked at random.
fn mutated_seeds(target: &str, names: &[&str]) -> impl Strategy<Value = Vec<u8>> {
    let seeds: Vec<Vec<u8>> = names.iter().map(|n| seed(target, n)).collect();
    prop::sample::select(seeds).prop_flat_map(mutated)
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    saved("seeds", target, name)
}

/// The saved input `name` of `target` under `fuzz/{dir}/`.
fn saved(dir: &str, target: &str, name: &str) -> Vec<u8> {
    saved_inputs(dir, target)
        .into_iter()
        .find(|(n, _)| n.ends_with(name))
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("no {dir} input {name} for {target}"))
}

fn clocked(now: i64, lines: &[&[u8]]) -> Vec<u8> {
    let mut v = now.to_le_bytes().to_vec();
    v.extend_from_slice(&lines.join(&b'\n'));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_any_parser(data in prop::collection::vec(any::<u8>(), 0..512)) {
        for (_, entry) in TARGETS {
            entry(&data);
        }
    }

    #[test]
    fn stripe_headers_never_panic(
        now in any::<i64>(),
        header in header_text(&["t", "v1", "v0", "T", " t"]),
        body in ".{0,40}",
    ) {
        entries::stripe_signature_header(&clocked(now, &[header.as_bytes(), body.as_bytes()]));
    }

    #[test]
    fn mercadopago_manifests_never_panic(
        now in any::<i64>(),
        header in header_text(&["ts", "v1", "TS", "Ts", "x"]),
        request_id in "[-a-f0-9]{0,36}",
        data_id in "[A-Za-z0-9]{0,26}",
    ) {
        entries::mercadopago_manifest(&clocked(
            now,
            &[header.as_bytes(), request_id.as_bytes(), data_id.as_bytes()],
        ));
    }

    #[test]
    fn mutated_webhook_bodies_never_panic(
        body in mutated_seeds(
            "webhook_body",
            &["stripe_payment_intent.json", "mp_payment.json", "mp_notification.json"],
        )
    ) {
        entries::webhook_body(&body);
    }

    #[test]
    fn mutated_api_invoice_bodies_never_panic(
        body in mutated_seeds(
            "api_invoice_body",
            &["invoice.json", "usd-tax-included-three-lines.json"],
        )
    ) {
        entries::api_invoice_body(&body);
    }

    /// The API body with amounts of any size and shape where the seed has its own.
    #[test]
    fn api_invoice_bodies_with_any_amounts_never_panic(
        amounts in prop::collection::vec(
            prop_oneof![
                "[0-9]{1,30}(\\.[0-9]{0,30})?",
                "-?[0-9]{0,3}(\\.[0-9]{0,8})?([eE][-+]?[0-9]{1,3})?",
                any::<f64>().prop_map(|f| f.to_string()),
                Just("79228162514264337593543950335".to_owned()),
            ],
            7,
        ),
        include_tax in any::<bool>(),
        numbers in any::<bool>(),
    ) {
        let mut v: serde_json::Value = serde_json::from_slice(&seed(
            "api_invoice_body",
            "usd-tax-included-three-lines.json",
        ))
        .expect("seed");
        let amount = |a: &str| {
            if numbers {
                a.parse::<f64>().map_or_else(|_| a.into(), serde_json::Value::from)
            } else {
                a.into()
            }
        };
        v["precios_incluyen_impuestos"] = include_tax.into();
        v["tipo_cambio"] = amount(&amounts[0]);
        for (i, c) in v["conceptos"].as_array_mut().expect("conceptos").iter_mut().enumerate() {
            c["cantidad"] = amount(&amounts[1 + 2 * i]);
            c["valor_unitario"] = amount(&amounts[2 + 2 * i]);
        }
        v["conceptos"][0]["descuento"] = amount(&amounts[6]);
        entries::api_invoice_body(v.to_string().as_bytes());
    }

    #[test]
    fn mutated_cfdi_never_panics(
        xml in mutated_seeds("cfdi_xml", &["01-iva16-mxn.xml", "pagos20.xml"])
    ) {
        entries::cfdi_xml(&xml);
    }
}
