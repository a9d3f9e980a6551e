//! Webhook signatures: Stripe `Stripe-Signature` and Mercado Pago `x-signature`
//! (`docs/webhooks.md` §1 and §4). HMAC-SHA256, constant-time comparison, several secrets.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a signature was refused. The message is returned to the sender (it names no secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no {0} header was provided")]
    MissingHeader(&'static str),
    #[error("unable to extract timestamp and signatures from the {0} header")]
    MalformedHeader(&'static str),
    #[error("no signatures found with expected scheme v1")]
    NoV1,
    #[error("no signatures found matching the expected signature for the payload")]
    Mismatch,
    #[error("timestamp outside the tolerance zone ({age} s away, tolerance {tolerance} s)")]
    Stale { age: i64, tolerance: i64 },
    #[error("no webhook secret is configured for {0}")]
    NoSecret(&'static str),
}

pub(crate) fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    hex::encode(mac(key, parts).finalize().into_bytes())
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    for p in parts {
        m.update(p);
    }
    m
}

/// Constant-time check of a hex signature against the HMAC of `parts`. Non-hex candidates are
/// simply not matches.
pub(crate) fn matches(key: &[u8], parts: &[&[u8]], candidate_hex: &str) -> bool {
    match hex::decode(candidate_hex) {
        Ok(tag) => mac(key, parts).verify_slice(&tag).is_ok(),
        Err(_) => false,
    }
}

/// The Stripe `v1` signature of `body` at `timestamp` (for tests and `send-test-webhook`).
pub fn stripe_sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    hmac_hex(
        secret.as_bytes(),
        &[timestamp.to_string().as_bytes(), b".", body],
    )
}

/// A full `Stripe-Signature` header for `body`, signed with each secret.
pub fn stripe_header(secrets: &[&str], timestamp: i64, body: &[u8]) -> String {
    let mut h = format!("t={timestamp}");
    for s in secrets {
        h.push_str(",v1=");
        h.push_str(&stripe_sign(s, timestamp, body));
    }
    h
}

/// The timestamp (key `ts_key`; as sent, and as a number) and the `v1` signatures of the
/// signature header `name` (`k=v,k=v,…`). `strict` (Stripe): a part without `=` makes the header
/// malformed and keys are case-sensitive; otherwise (Mercado Pago) such parts are skipped and
/// keys are matched in any case. Other schemes are ignored (Stripe's `v0` is a fake test-mode
/// signature): no downgrade.
fn timestamp_and_v1<'a>(
    header: &'a str,
    name: &'static str,
    ts_key: &str,
    strict: bool,
) -> Result<(&'a str, i64, Vec<&'a str>), SignatureError> {
    let mut ts: Option<&str> = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        let Some((k, v)) = part.split_once('=') else {
            if strict {
                return Err(SignatureError::MalformedHeader(name));
            }
            continue;
        };
        let k = k.trim();
        let is = |want: &str| {
            if strict {
                k == want
            } else {
                k.eq_ignore_ascii_case(want)
            }
        };
        if is(ts_key) {
            ts = Some(v.trim());
        } else if is("v1") {
            v1.push(v.trim());
        }
    }
    let ts = ts.ok_or(SignatureError::MalformedHeader(name))?;
    let n: i64 = ts
        .parse()
        .map_err(|_| SignatureError::MalformedHeader(name))?;
    if v1.is_empty() {
        return Err(SignatureError::NoV1);
    }
    Ok((ts, n, v1))
}

/// Verifies a `Stripe-Signature` header: every `v1` against every secret (rotation), then the
/// timestamp within `tolerance` seconds of `now` either way. Returns the index of the secret
/// that matched.
pub fn verify_stripe(
    header: Option<&str>,
    body: &[u8],
    secrets: &[&str],
    tolerance: i64,
    now: i64,
) -> Result<usize, SignatureError> {
    const H: &str = "Stripe-Signature";
    if secrets.is_empty() {
        return Err(SignatureError::NoSecret("Stripe"));
    }
    let header = header.ok_or(SignatureError::MissingHeader(H))?;
    let (t, ts, v1) = timestamp_and_v1(header, H, "t", true)?;
    let matched = secrets
        .iter()
        .position(|s| {
            v1.iter()
                .any(|sig| matches(s.as_bytes(), &[t.as_bytes(), b".", body], sig))
        })
        .ok_or(SignatureError::Mismatch)?;
    // Saturating: a signed `t` at the end of the i64 range must not overflow
    // (tests/it/fuzz_regressions.rs).
    let age = now.saturating_sub(ts);
    if age.saturating_abs() > tolerance {
        return Err(SignatureError::Stale { age, tolerance });
    }
    Ok(matched)
}

/// The Mercado Pago manifest: `id:{data.id};request-id:{x-request-id};ts:{ts};`, absent pairs
/// left out.
pub fn mp_manifest(data_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
    let mut m = String::new();
    if let Some(id) = data_id.filter(|s| !s.is_empty()) {
        m.push_str(&format!("id:{id};"));
    }
    if let Some(r) = request_id.filter(|s| !s.is_empty()) {
        m.push_str(&format!("request-id:{r};"));
    }
    m.push_str(&format!("ts:{ts};"));
    m
}

/// The `v1` of a Mercado Pago manifest.
pub fn mp_sign(secret: &str, data_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
    hmac_hex(
        secret.as_bytes(),
        &[mp_manifest(data_id, request_id, ts).as_bytes()],
    )
}

/// Verifies an `x-signature` header (`ts=…,v1=…`). `data_id` is the `data.id` query parameter:
/// tried as received, then lowercased (the casing is disputed, §4.2). `ts` may be seconds or
/// milliseconds (§4.3); with `tolerance` > 0 an older `ts` is refused. Returns `ts` in seconds.
pub fn verify_mercadopago(
    header: Option<&str>,
    request_id: Option<&str>,
    data_id: Option<&str>,
    secret: Option<&str>,
    tolerance: i64,
    now: i64,
) -> Result<i64, SignatureError> {
    const H: &str = "x-signature";
    let secret = secret.ok_or(SignatureError::NoSecret("Mercado Pago"))?;
    let header = header.ok_or(SignatureError::MissingHeader(H))?;
    let (ts, ts_num, v1) = timestamp_and_v1(header, H, "ts", false)?;
    let lowered = data_id.map(str::to_ascii_lowercase);
    let mut ids = vec![data_id];
    if lowered.as_deref() != data_id {
        ids.push(lowered.as_deref());
    }
    let ok = ids.iter().any(|id| {
        let manifest = mp_manifest(*id, request_id, ts);
        v1.iter()
            .any(|sig| matches(secret.as_bytes(), &[manifest.as_bytes()], sig))
    });
    if !ok {
        return Err(SignatureError::Mismatch);
    }
    let seconds = if ts_num > 100_000_000_000 {
        ts_num / 1000
    } else {
        ts_num
    };
    let age = now.saturating_sub(seconds);
    if tolerance > 0 && age.saturating_abs() > tolerance {
        return Err(SignatureError::Stale { age, tolerance });
    }
    if age.saturating_abs() > 15 * 60 {
        tracing::warn!(
            age,
            "Mercado Pago signature timestamp is more than 15 minutes away"
        );
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    // By full path: circles.py reads `super` here as webhooks/mod.rs, an edge that is not there.
    use crate::webhooks::signature::*;

    const VECTOR: &[u8] = include_bytes!("../../fixtures/webhooks/stripe_vector_payload.json");
    const VECTOR_HEADER: &str = "t=1533204620,v1=2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7,v0=63f3a72374a733066c4be69ed7f8e5ac85c22c9f0a6a612ab9a025a9e4ee7eef";

    #[test]
    fn stripe_published_vector_verifies() {
        assert_eq!(VECTOR.len(), 484);
        assert_eq!(
            stripe_sign("webhook_secret", 1533204620, VECTOR),
            "2220f87ef101a04665f11cdf770523143f875572008577fa0f20882ddb9cc3c7"
        );
        assert_eq!(
            verify_stripe(
                Some(VECTOR_HEADER),
                VECTOR,
                &["webhook_secret"],
                300,
                1533204620
            ),
            Ok(0)
        );
    }

    #[test]
    fn stripe_body_without_its_final_newline_fails() {
        let body = &VECTOR[..483];
        assert_eq!(
            stripe_sign("webhook_secret", 1533204620, body),
            "8c506d7d19ece69e9a38e398964787dda54eeb2583381ffc7f56070c28d7f119"
        );
        assert_eq!(
            verify_stripe(
                Some(VECTOR_HEADER),
                body,
                &["webhook_secret"],
                300,
                1533204620
            ),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn stripe_rotation_accepts_any_v1_with_any_secret_in_either_order() {
        let body = br#"{"id":"evt_test","object":"event"}"#;
        let old = "9c2d5f5ad2072fce7903a27c91f6475a8847f0304adda5d09c38c16f928c6ae2";
        let new = "eda288c93a678750efe860365b19e94adbcfd31c0b12f5617f37b8e5fa92fefc";
        assert_eq!(stripe_sign("whsec_old", 1700000000, body), old);
        assert_eq!(stripe_sign("whsec_new", 1700000000, body), new);
        for header in [
            format!("t=1700000000,v1={old},v1={new}"),
            format!("t=1700000000,v1={new},v1={old}"),
        ] {
            assert_eq!(
                verify_stripe(Some(&header), body, &["whsec_old"], 300, 1700000000),
                Ok(0)
            );
            assert_eq!(
                verify_stripe(Some(&header), body, &["whsec_new"], 300, 1700000000),
                Ok(0)
            );
            assert_eq!(
                verify_stripe(
                    Some(&header),
                    body,
                    &["whsec_x", "whsec_new"],
                    300,
                    1700000000
                ),
                Ok(1)
            );
            assert_eq!(
                verify_stripe(Some(&header), body, &["whsec_x"], 300, 1700000000),
                Err(SignatureError::Mismatch)
            );
        }
    }

    #[test]
    fn stripe_tolerance_applies_both_ways() {
        let body = b"{}";
        let h = stripe_header(&["s"], 1_000_000, body);
        assert!(verify_stripe(Some(&h), body, &["s"], 300, 1_000_300).is_ok());
        assert!(verify_stripe(Some(&h), body, &["s"], 300, 999_700).is_ok());
        assert_eq!(
            verify_stripe(Some(&h), body, &["s"], 300, 1_000_301),
            Err(SignatureError::Stale {
                age: 301,
                tolerance: 300
            })
        );
        assert_eq!(
            verify_stripe(Some(&h), body, &["s"], 300, 999_699),
            Err(SignatureError::Stale {
                age: -301,
                tolerance: 300
            })
        );
    }

    #[test]
    fn stripe_header_problems_have_reasons() {
        let body = b"{}";
        assert_eq!(
            verify_stripe(None, body, &["s"], 300, 0),
            Err(SignatureError::MissingHeader("Stripe-Signature"))
        );
        assert!(matches!(
            verify_stripe(Some("garbage"), body, &["s"], 300, 0),
            Err(SignatureError::MalformedHeader(_))
        ));
        assert!(matches!(
            verify_stripe(Some("t=abc,v1=00"), body, &["s"], 300, 0),
            Err(SignatureError::MalformedHeader(_))
        ));
        assert_eq!(
            verify_stripe(Some("t=0,v0=abcd"), body, &["s"], 300, 0),
            Err(SignatureError::NoV1)
        );
        assert_eq!(
            verify_stripe(Some("t=0,v1=zz-not-hex"), body, &["s"], 300, 0),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_stripe(Some("t=0,v1=00"), body, &[], 300, 0),
            Err(SignatureError::NoSecret("Stripe"))
        );
    }

    const MP_SECRET: &str = "your_secret_key_here";
    const MP_REQ: &str = "2066ca19-c6f1-498a-be75-1923005edd06";

    #[test]
    fn mercadopago_vectors_verify() {
        let cases = [
            (
                Some("999999999"),
                "688a0d38e33107d4b2d452a85915d494fc120daf7e962608ab6811f80cd7ad22",
            ),
            (
                Some("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"),
                "815b3ea5e260bdae41327deaa103300e16039e53f99362b4ac2811297c56b6d4",
            ),
            (
                Some("ord01jq4s4ky8hwq6na5pxb65b3d3"),
                "4e74230e25428444ea1595a07826d9c4953fcabd32f3cad17c64b7464ffd51d5",
            ),
            (
                None,
                "a2d8b9f2183063522f01ca8d71f1cf68f92eaeeeb2359d29caaf1a7b424f9ee6",
            ),
        ];
        for (id, v1) in cases {
            assert_eq!(
                mp_sign(MP_SECRET, id, Some(MP_REQ), "1704908010"),
                v1,
                "{id:?}"
            );
            let h = format!("ts=1704908010,v1={v1}");
            assert_eq!(
                verify_mercadopago(Some(&h), Some(MP_REQ), id, Some(MP_SECRET), 0, 1704908010),
                Ok(1704908010)
            );
        }
    }

    #[test]
    fn mercadopago_accepts_an_uppercase_id_signed_lowercase() {
        let h = "ts=1704908010,v1=4e74230e25428444ea1595a07826d9c4953fcabd32f3cad17c64b7464ffd51d5";
        let id = Some("ORD01JQ4S4KY8HWQ6NA5PXB65B3D3");
        assert_eq!(
            verify_mercadopago(Some(h), Some(MP_REQ), id, Some(MP_SECRET), 0, 1704908010),
            Ok(1704908010)
        );
        assert_eq!(
            verify_mercadopago(Some(h), Some(MP_REQ), id, Some("other"), 0, 1704908010),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn mercadopago_ts_in_seconds_or_milliseconds_and_tolerance() {
        let ms = "1704908010123";
        let v1 = mp_sign(MP_SECRET, Some("1"), Some(MP_REQ), ms);
        let h = format!("ts={ms},v1={v1}");
        let at = |tolerance, now| {
            verify_mercadopago(
                Some(&h),
                Some(MP_REQ),
                Some("1"),
                Some(MP_SECRET),
                tolerance,
                now,
            )
        };
        assert_eq!(at(60, 1704908030), Ok(1704908010));
        assert!(matches!(
            at(60, 1704908200),
            Err(SignatureError::Stale { .. })
        ));
        assert_eq!(at(0, 1804908200), Ok(1704908010));
        assert_eq!(
            verify_mercadopago(None, Some(MP_REQ), Some("1"), Some(MP_SECRET), 0, 0),
            Err(SignatureError::MissingHeader("x-signature"))
        );
        assert_eq!(
            verify_mercadopago(
                Some("v1=00"),
                Some(MP_REQ),
                Some("1"),
                Some(MP_SECRET),
                0,
                0
            ),
            Err(SignatureError::MalformedHeader("x-signature"))
        );
    }
}
