//! API keys (bearer credentials) and idempotency keys, valid by construction.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use actix_web::{FromRequest, HttpRequest, dev::Payload, web};
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::AppState;
use crate::store::Db;
use crate::store::api::ApiKeyRow;

/// Prefix of every API key, so a leaked one is recognisable in code and logs scanners.
pub const API_KEY_PREFIX: &str = "afk_";

/// A new API key: random, shown once; only [`hash_api_key`] of it is stored.
pub struct NewApiKey(String);

impl NewApiKey {
    pub fn generate() -> Self {
        Self(format!(
            "{API_KEY_PREFIX}{}",
            hex::encode(rand::random::<[u8; 32]>())
        ))
    }

    /// The key itself, to print once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What lists show to tell keys apart: the prefix and 8 characters.
    pub fn display_prefix(&self) -> &str {
        &self.0[..API_KEY_PREFIX.len() + 8]
    }
}

impl fmt::Debug for NewApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NewApiKey([redacted])")
    }
}

/// SHA-256 (hex) of a key: the keys are 256 random bits, so a fast hash is enough.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Creates a key named `name` for `rfc_emisor`; returns it (the only time it is visible).
pub async fn create_api_key(
    db: &Db,
    name: &str,
    rfc_emisor: &str,
) -> Result<NewApiKey, crate::store::StoreError> {
    let key = NewApiKey::generate();
    db.create_api_key(
        name,
        &hash_api_key(key.expose()),
        key.display_prefix(),
        rfc_emisor,
    )
    .await?;
    Ok(key)
}

/// The caller of a request, from `Authorization: Bearer <key>`.
pub async fn authenticate(db: &Db, req: &HttpRequest) -> Result<ApiKeyRow, ApiError> {
    let token = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized)?;
    db.api_key_by_hash(&hash_api_key(token))
        .await?
        .ok_or(ApiError::Unauthorized)
}

/// The authenticated caller of an API handler, as an extractor: the handler runs only with a
/// live key ([`authenticate`]; a 401 otherwise). Handlers take it last, so the request's other
/// parts are read (and refused) first, as before.
pub struct Caller(pub ApiKeyRow);

impl std::ops::Deref for Caller {
    type Target = ApiKeyRow;

    fn deref(&self) -> &ApiKeyRow {
        &self.0
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Caller, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let state = req.app_data::<web::Data<AppState>>().ok_or_else(|| {
                ApiError::Store(crate::store::StoreError::Other(
                    "the API routes are mounted without the app state".into(),
                ))
            })?;
            authenticate(&state.db, &req).await.map(Caller)
        })
    }
}

/// A caller's idempotency key: 1 to 100 printable ASCII characters, no spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 100;

    pub fn parse(s: &str) -> Result<Self, ApiError> {
        if s.is_empty() || s.len() > Self::MAX_LEN {
            return Err(ApiError::BadRequest(format!(
                "the idempotency key must be 1 to {} characters, not {}",
                Self::MAX_LEN,
                s.len()
            )));
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ApiError::BadRequest(
                "the idempotency key must be printable ASCII without spaces".into(),
            ));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The key a request is deduplicated under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestKey {
    /// Given by the caller (`Idempotency-Key` header or `idempotency_key` field).
    Explicit(IdempotencyKey),
    /// Derived from the explicit folio: RFC emisor (the scope) + tipo + serie + folio. It holds
    /// spaces, which a caller's key cannot, so the two never collide.
    Derived(String),
}

impl RequestKey {
    pub fn derived(tipo: &str, serie: &str, folio: &str) -> Self {
        Self::Derived(format!("folio {tipo} {serie} {folio}"))
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Explicit(k) => k.as_str(),
            Self::Derived(k) => k,
        }
    }
}

/// The caller's key from the header and the body: the same effect; both with different values
/// is an error.
pub fn explicit_key(
    header: Option<&str>,
    body: Option<&serde_json::Value>,
) -> Result<Option<IdempotencyKey>, ApiError> {
    let body = match body {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "`idempotency_key` must be a string".into(),
            ));
        }
    };
    match (header, body) {
        (Some(h), Some(b)) if h != b => Err(ApiError::BadRequest(
            "the Idempotency-Key header and the idempotency_key field differ; send one, or the same value in both".into(),
        )),
        (Some(k), _) | (None, Some(k)) => IdempotencyKey::parse(k).map(Some),
        (None, None) => Ok(None),
    }
}

/// SHA-256 of the request as JSON with sorted keys and without the idempotency key: the same
/// invoice asked for twice hashes the same however the JSON was spaced or ordered.
pub fn request_hash(body: &serde_json::Value) -> String {
    let mut v = body.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("idempotency_key");
    }
    hex::encode(Sha256::digest(v.to_string().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_printable_ascii_up_to_100() {
        assert!(IdempotencyKey::parse("order-123_ABC:x/y").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(100)).is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(101)).is_err());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("has space").is_err());
        assert!(IdempotencyKey::parse("tab\there").is_err());
        assert!(IdempotencyKey::parse("ñandú").is_err());
    }

    #[test]
    fn header_and_body_keys_have_the_same_effect_and_must_agree() {
        let b = serde_json::json!("k1");
        assert_eq!(
            explicit_key(Some("k1"), None).expect("ok"),
            explicit_key(None, Some(&b)).expect("ok")
        );
        assert!(explicit_key(Some("k1"), Some(&b)).expect("same").is_some());
        let err = explicit_key(Some("k2"), Some(&b)).expect_err("differ");
        assert_eq!(err.code(), "VALIDATION_ERROR");
        assert!(explicit_key(None, None).expect("none").is_none());
    }

    #[test]
    fn the_hash_ignores_spacing_order_and_the_key_field() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"a":1,"b":[1,2],"idempotency_key":"x"}"#).expect("json");
        let b: serde_json::Value = serde_json::from_str(r#"{ "b" : [1,2], "a":1 }"#).expect("json");
        let c: serde_json::Value = serde_json::from_str(r#"{"a":2,"b":[1,2]}"#).expect("json");
        assert_eq!(request_hash(&a), request_hash(&b));
        assert_ne!(request_hash(&a), request_hash(&c));
    }

    #[test]
    fn derived_keys_cannot_collide_with_caller_keys() {
        let d = RequestKey::derived("I", "A", "7");
        assert!(IdempotencyKey::parse(d.as_str()).is_err());
    }

    #[test]
    fn api_keys_are_random_and_stored_hashed() {
        let (a, b) = (NewApiKey::generate(), NewApiKey::generate());
        assert_ne!(a.expose(), b.expose());
        assert!(a.expose().starts_with(API_KEY_PREFIX));
        assert_eq!(hash_api_key(a.expose()).len(), 64);
        assert!(!format!("{a:?}").contains(a.expose()));
    }
}
