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
    /// A Mercado Pago notification without `?data.id=`: the part of the manifest it signs.
    #[error(
        "the notification URL has no data.id query parameter; Mercado Pago signs that one (not \
         the body), so the notification cannot be trusted without it"
    )]
    MissingDataId,
    /// The same signed Mercado Pago manifest was already received: a replay.
    #[error(
        "this notification (x-request-id {request_id:?}, ts {ts}) was already received; a replay \
         is not processed again"
    )]
    Replayed { request_id: String, ts: i64 },
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
            Self::MissingDataId => "missing_data_id",
            Self::Replayed { .. } => "replayed",
            Self::Unavailable(_) => "unavailable",
        }
    }
}

impl ResponseError for WebhookError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Signature(_) | Self::Malformed(_) | Self::MissingDataId => {
                StatusCode::BAD_REQUEST
            }
            Self::Replayed { .. } => StatusCode::CONFLICT,
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

/// Why an admin request did not do what it asked. Pages are short HTML with the reason; the
/// cause of a 5xx is logged, never shown.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No live session: the browser is sent to the login page, which brings it back to the
    /// page it asked for after signing in (a GET's path and query, percent-encoded).
    #[error("login required")]
    LoginRequired(Option<String>),
    /// The form's CSRF token is missing or not this session's.
    #[error(
        "the form is stale or did not come from this admin (CSRF token mismatch); reload the page and try again"
    )]
    Csrf,
    #[error("too many login attempts from this address; try again in {} minutes", .0.as_secs().div_ceil(60))]
    TooManyAttempts(std::time::Duration),
    /// Every password-check slot stayed taken (a burst of logins).
    #[error("too many logins are being checked right now; try again in a few seconds")]
    Busy,
    #[error("{0}")]
    NotFound(String),
    /// The action is not allowed in the current state, with the reason.
    #[error("{0}")]
    Refused(String),
    /// The form is not valid.
    #[error("{0}")]
    Invalid(String),
    #[error("storage unavailable")]
    Store(#[from] StoreError),
    #[error("page rendering failed")]
    Render(#[from] askama::Error),
}

impl ResponseError for AdminError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::LoginRequired(_) => StatusCode::SEE_OTHER,
            Self::Csrf => StatusCode::FORBIDDEN,
            Self::TooManyAttempts(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Refused(_) => StatusCode::CONFLICT,
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Render(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        match self {
            Self::LoginRequired(asked) => {
                let location = match asked {
                    Some(next) => format!("/admin/login?next={next}"),
                    None => "/admin/login".to_owned(),
                };
                return HttpResponse::SeeOther()
                    .insert_header(("Location", location))
                    .finish();
            }
            Self::Store(e) => tracing::error!(error = %e, "admin: storage unavailable"),
            Self::Render(e) => tracing::error!(error = %e, "admin: template failed"),
            other => {
                tracing::info!(reason = %other, status = status.as_u16(), "admin request refused")
            }
        }
        let mut r = HttpResponse::build(status);
        match self {
            Self::TooManyAttempts(wait) => {
                r.insert_header(("Retry-After", wait.as_secs().max(1).to_string()));
            }
            Self::Busy => {
                r.insert_header(("Retry-After", "5"));
            }
            _ => {}
        }
        let message = html_escape(&self.to_string());
        r.content_type("text/html; charset=utf-8").body(format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{code} · autofactura admin</title><link rel=\"stylesheet\" href=\"/admin/static/admin.css\"></head>\
             <body class=\"error-page\"><main><h1>{code} {reason}</h1><p class=\"error\" role=\"alert\">{message}</p>\
             <p><a href=\"/admin\">Dashboard</a></p></main></body></html>",
            code = status.as_u16(),
            reason = status.canonical_reason().unwrap_or_default(),
        ))
    }
}

/// Why a self-invoicing portal request (`/facturar`) did not do what it asked. Pages are short
/// HTML in Spanish, for the customer; the cause of a 5xx is logged, never shown.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    /// Too many look-ups from this client address.
    #[error(
        "Hizo demasiadas búsquedas seguidas desde su conexión. Intente de nuevo en {} minutos.",
        .0.as_secs().div_ceil(60).max(1)
    )]
    TooManyLookups(std::time::Duration),
    /// Not a link of ours (or its sale is gone).
    #[error(
        "Este enlace no es válido. Busque su compra con la referencia y el total que aparecen en su comprobante."
    )]
    BadLink,
    #[error(
        "Este enlace ya venció. Busque su compra con la referencia y el total que aparecen en su comprobante."
    )]
    ExpiredLink,
    /// Nothing to download (yet).
    #[error("{0}")]
    NotFound(String),
    #[error("storage unavailable")]
    Store(#[from] StoreError),
    #[error("page rendering failed")]
    Render(#[from] askama::Error),
}

impl ResponseError for PortalError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::TooManyLookups(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::BadLink | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::ExpiredLink => StatusCode::GONE,
            Self::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Render(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let message = match self {
            Self::Store(e) => {
                tracing::error!(error = %e, "portal: storage unavailable");
                "El servicio no está disponible en este momento. Intente de nuevo en unos minutos."
                    .to_owned()
            }
            Self::Render(e) => {
                tracing::error!(error = %e, "portal: template failed");
                "Ocurrió un error al mostrar la página. Intente de nuevo.".to_owned()
            }
            other => {
                tracing::info!(reason = %other, status = status.as_u16(), "portal request refused");
                other.to_string()
            }
        };
        let mut r = HttpResponse::build(status);
        match self {
            Self::TooManyLookups(wait) => {
                r.insert_header(("Retry-After", wait.as_secs().max(1).to_string()));
            }
            Self::Store(_) => {
                r.insert_header(("Retry-After", "30"));
            }
            _ => {}
        }
        r.content_type("text/html; charset=utf-8").body(format!(
            "<!doctype html><html lang=\"es\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>Facturación en línea</title><link rel=\"stylesheet\" href=\"/facturar/static/portal.css\"></head>\
             <body><main><h1>Facturación en línea</h1><p class=\"error\" role=\"alert\">{}</p>\
             <p><a href=\"/facturar\">Buscar mi compra</a></p></main></body></html>",
            html_escape(&message)
        ))
    }
}

/// The security headers of every page: never cached, never framed, not sniffed, only our own
/// resources. Admin pages set them ([`crate::admin::common::html`]); every other response gets
/// those it lacks from [`security_headers`], so error pages (404, 400, 413, 5xx, from a handler
/// or from actix itself, admin and API alike) carry the same.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("Cache-Control", "no-store"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    (
        "Content-Security-Policy",
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
];

/// Adds [`SECURITY_HEADERS`] to every response that does not set them itself (the embedded
/// assets keep their own `Cache-Control`).
pub fn security_headers() -> actix_web::middleware::DefaultHeaders {
    SECURITY_HEADERS
        .into_iter()
        .fold(actix_web::middleware::DefaultHeaders::new(), |h, pair| {
            h.add(pair)
        })
}

/// Text for HTML element content and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Why an invoicing API request (`/v1`) did not do what it asked. Every body is
/// `{"error":{"code":…,"message":…}}`; the cause of a 5xx is logged, never returned.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No bearer key, or not a live one.
    #[error("a valid API key is required: `Authorization: Bearer <key>`")]
    Unauthorized,
    /// The key is valid but not for this emisor.
    #[error("{0}")]
    Forbidden(String),
    /// Malformed request: bad JSON, bad idempotency key, header and body keys that disagree.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed, but not an invoice we can issue; nothing was written.
    #[error("{0}")]
    Validation(String),
    /// As `Validation`, for one field of the body (`conceptos[0].cantidad`), named in the body.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{0}")]
    NotFound(String),
    /// The idempotency key was used with a different request body; nothing ran.
    #[error(
        "this idempotency key was used with a different request body; use a new key for a new invoice"
    )]
    KeyReused,
    /// The first request with this key has no final answer yet.
    #[error("a request with this idempotency key is still being processed; retry later")]
    InProgress { invoice: Option<String> },
    /// The explicit folio belongs to another invoice (or one is being issued with it).
    #[error("{0}")]
    FolioConflict(String),
    /// The action is not possible in the invoice's state.
    #[error("{0}")]
    Conflict(String),
    /// The PAC refused the document: nothing was stamped; the key is released.
    #[error("the PAC rejected invoice {invoice}: {code}: {message}")]
    PacRejected {
        invoice: String,
        code: String,
        message: String,
    },
    /// The PAC did not answer in time; the worker asks it what happened. The key stays taken.
    #[error(
        "the PAC did not confirm invoice {invoice} in time; it is being asked what happened. Retry with the same idempotency key to get the outcome; do not use a new key"
    )]
    OutcomeUnknown { invoice: String },
    /// No `tipo_cambio` was sent and the configured rate source (`[fx]`) did not answer;
    /// nothing was written.
    #[error("{0}; send tipo_cambio, or retry later with the same idempotency key")]
    RateUnavailable(String),
    #[error("storage unavailable")]
    Store(#[from] StoreError),
    /// Something that should not fail did (a stored stamped XML that cannot be printed).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// A 422 about one field of the body.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden(_) => "FORBIDDEN",
            Self::BadRequest(_) | Self::Validation(_) | Self::Invalid { .. } => "VALIDATION_ERROR",
            Self::NotFound(_) => "NOT_FOUND",
            Self::KeyReused => "IDEMPOTENCY_KEY_REUSED",
            Self::InProgress { .. } => "DUPLICATE_IN_PROGRESS",
            Self::FolioConflict(_) => "folio_conflict",
            Self::Conflict(_) => "CONFLICT",
            Self::PacRejected { .. } => "PAC_REJECTED",
            Self::OutcomeUnknown { .. } => "STAMPING_OUTCOME_UNKNOWN",
            Self::RateUnavailable(_) => "RATE_UNAVAILABLE",
            Self::Store(_) => "UNAVAILABLE",
            Self::Internal(_) => "INTERNAL",
        }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> serde_json::Value {
        let message = match self {
            Self::Store(_) => "storage unavailable, retry later".to_owned(),
            other => other.to_string(),
        };
        let mut err = serde_json::json!({ "code": self.code(), "message": message });
        match self {
            Self::PacRejected { invoice, code, .. } => {
                err["invoice_id"] = invoice.clone().into();
                err["pac_code"] = code.clone().into();
            }
            Self::InProgress {
                invoice: Some(invoice),
            }
            | Self::OutcomeUnknown { invoice } => {
                err["invoice_id"] = invoice.clone().into();
            }
            Self::Invalid { field, .. } => {
                err["field"] = field.clone().into();
            }
            _ => {}
        }
        serde_json::json!({ "error": err })
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Validation(_)
            | Self::Invalid { .. }
            | Self::KeyReused
            | Self::PacRejected { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::InProgress { .. } | Self::FolioConflict(_) | Self::Conflict(_) => {
                StatusCode::CONFLICT
            }
            Self::OutcomeUnknown { .. } | Self::RateUnavailable(_) | Self::Store(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        match self {
            Self::Store(e) => tracing::error!(error = %e, "api: storage unavailable"),
            Self::Internal(e) => tracing::error!(error = %e, "api: internal error"),
            other => tracing::info!(code = other.code(), reason = %other, "api request not done"),
        }
        let mut r = HttpResponse::build(status);
        match self {
            Self::InProgress { .. } | Self::FolioConflict(_) | Self::OutcomeUnknown { .. } => {
                r.insert_header(("Retry-After", "2"));
            }
            Self::RateUnavailable(_) => {
                r.insert_header(("Retry-After", "60"));
            }
            Self::Store(_) => {
                r.insert_header(("Retry-After", "30"));
            }
            Self::Unauthorized => {
                r.insert_header(("WWW-Authenticate", "Bearer"));
            }
            _ => {}
        }
        r.content_type("application/json")
            .body(self.body().to_string())
    }
}
