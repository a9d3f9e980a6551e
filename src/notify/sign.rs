//! The Standard Webhooks signature of the merchant webhooks: the secret's key bytes, the
//! `webhook-signature` value, the stable `webhook-id`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The secret's key bytes: `whsec_` stripped, the rest base64-decoded (unlike Stripe's).
pub fn decode_secret(secret: &str) -> Option<Vec<u8>> {
    crate::config::WebhookSecret::decode(secret)
}

/// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{payload}">`.
pub fn sign(key: &[u8], msg_id: &str, timestamp: i64, payload: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-id` of an outbox row: stable across retries (the receiver's dedup key), no `.`.
pub fn message_id(public_id: &str, row_id: i64) -> String {
    format!("msg_{public_id}_{row_id}")
}

#[cfg(test)]
mod tests {
    use crate::notify::sign::*;

    #[test]
    fn signs_the_standard_webhooks_test_vector() {
        let key = decode_secret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").expect("secret");
        assert_eq!(
            sign(
                &key,
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1_649_367_553,
                br#"{"email":"test@example.com","username":"test_user"}"#
            ),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn secrets_must_be_whsec_and_base64() {
        assert!(decode_secret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").is_some());
        assert!(decode_secret("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").is_none());
        assert!(decode_secret("whsec_not base64!").is_none());
        assert!(!message_id("inv_1", 7).contains('.'));
    }
}
