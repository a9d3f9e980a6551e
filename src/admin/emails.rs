//! A document's emails to its customer: the deliveries on its card (state, recipient,
//! attempts, the server's last reply) and *Resend*, to the same address or another one.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::common::{HasCsrf, Posted, back_to_document, document};
use super::format::When;
use crate::domain::DeliveryState;
use crate::error::AdminError;
use crate::state::AppState;
use crate::store::DeliveryRow;

/// One delivery as the card lists it.
pub struct EmailView {
    pub at: When,
    pub recipient: String,
    pub state: DeliveryState,
    pub class: &'static str,
    pub attempts: i32,
    pub reply: String,
    pub message_id: String,
    /// The admin who asked for it (a resend), else empty.
    pub requested_by: String,
}

impl EmailView {
    pub fn of(d: DeliveryRow, now: DateTime<Utc>) -> Self {
        let class = match d.state {
            DeliveryState::Sent => "ok",
            DeliveryState::Pending => "info",
            DeliveryState::Retry => "warn",
            DeliveryState::Bounced | DeliveryState::Failed => "bad",
        };
        EmailView {
            at: When::of(d.created_at, now),
            recipient: d.recipient,
            state: d.state,
            class,
            attempts: d.attempts,
            reply: d.last_reply.unwrap_or_default(),
            message_id: d.message_id,
            requested_by: d.requested_by.unwrap_or_default(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ResendForm {
    #[serde(default)]
    pub csrf: String,
    /// Another address; empty: the customer's (or the last one sent to).
    #[serde(default)]
    pub to: String,
}

impl HasCsrf for ResendForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /admin/documents/{id}/resend`: a new message of the stamped document (its own
/// Message-ID), queued for the courier and audited.
pub async fn resend(
    state: web::Data<AppState>,
    Posted(session, form): Posted<ResendForm>,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let d = document(&state, id).await?;
    let Some(domain) = state.settings.email.message_domain() else {
        return Err(AdminError::Refused(
            "email is off: set [email] smtp_url and from to send the customer's email".into(),
        ));
    };
    let to = match form.to.trim() {
        "" => None,
        given => Some(
            crate::cfdi::fiscal::check_email(Some(given))
                .map_err(|_| AdminError::Invalid(format!("{given:?} is not an email address")))?,
        ),
    };
    let Some(recipient) = state
        .db
        .resend_delivery(id, to.as_deref(), &domain, &session.actor)
        .await?
    else {
        return Err(AdminError::Refused(format!(
            "document #{id} is {}: only a stamped document is resent, and one whose customer \
             gave no address needs one in the form",
            d.state
        )));
    };
    tracing::info!(outbox_id = id, actor = %session.actor, %recipient, "admin: resend email");
    Ok(back_to_document(&d, "resent"))
}
