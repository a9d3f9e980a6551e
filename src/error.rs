//! The one place errors become HTTP responses.
//!
//! Webhook senders retry any non-2xx, so the status says what we want them to do: 400 = do
//! not bother (bad signature, stale, malformed: retrying cannot help), 503 = try again later
//! (nothing was stored). Bodies are short JSON with a machine code and a reason; internal
//! causes are logged, never returned.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::store::StoreError;
use crate::webhooks::signature::SignatureError;

#[derive(thiserror::Error)]
pub enum WebhookError {
    #[error("{0}")]
    Signature(#[from] SignatureError),
    /// Signed, but not something we can read; the body is kept for audit.
    #[error("malformed payload: {0}")]
    Malformed(String),
    /// The database cannot take the delivery now; nothing was written.
    #[error("storage unavailable")]
    Unavailable(#[source] StoreError),
}

impl From<StoreError> for WebhookError {
    fn from(e: StoreError) -> Self {
        Self::Unavailable(e)
    }
}

impl std::fmt::Debug for WebhookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut cur = std::error::Error::source(self);
        while let Some(c) = cur {
            write!(f, "\n  caused by: {c}")?;
            cur = c.source();
        }
        Ok(())
    }
}

impl WebhookError {
    fn code(&self) -> &'static str {
        match self {
            Self::Signature(SignatureError::Stale { .. }) => "stale_timestamp",
            Self::Signature(_) => "bad_signature",
            Self::Malformed(_) => "malformed_payload",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

impl ResponseError for WebhookError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Signature(_) | Self::Malformed(_) => StatusCode::BAD_REQUEST,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() {
            tracing::error!(error.cause_chain = ?self, "webhook not stored; the sender will retry");
        } else {
            tracing::warn!(reason = %self, "webhook refused");
        }
        let reason = match self {
            Self::Unavailable(_) => "storage unavailable, retry later".to_owned(),
            other => other.to_string(),
        };
        let mut r = HttpResponse::build(status);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            r.insert_header(("Retry-After", "30"));
        }
        r.json(serde_json::json!({ "error": self.code(), "reason": reason }))
    }
}
