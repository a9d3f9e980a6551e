//! The actions: login and logout, retry (one or many), cancel, refreeze, SAT status, and the
//! reconciliation findings. Each checks the CSRF token first, changes the database in one short
//! transaction that also records who did it, and never holds a transaction across a PAC call.

use std::time::Instant;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde::Deserialize;

use super::auth::{self, Session};
use super::pages::{self, ReceptorForm, html};
use super::{Admin, reconcile};
use crate::cancel::{self, Refusal};
use crate::cfdi::{InvoiceRequest, ReceptorData, Rfc};
use crate::domain::StampKey;
use crate::domain::cancellation::{Motivo, Refused};
use crate::error::AdminError;
use crate::pac::{Recovery, StatusOutcome, StatusQuery};
use crate::startup::AppState;
use crate::store::{AdminPacCall, CancelConflict};

fn see_other(location: String) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header(("Location", location))
        .finish()
}

/// `application/x-www-form-urlencoded` pairs, repeated keys kept (checkbox lists).
pub fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |b: u8| (b as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

// ---------------------------------------------------------------------------------------------
// Login / logout

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub password: String,
}

pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, AdminError> {
    let ip = auth::client(&admin, &req).ip;
    if let Some(wait) = admin.limiter.blocked(ip) {
        return Err(AdminError::TooManyAttempts(wait));
    }
    let cookie = req
        .cookie(auth::LOGIN_CSRF_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    if cookie.is_empty() || !auth::same(&cookie, &form.csrf) {
        return Err(AdminError::Csrf);
    }
    let name = form.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > 64 {
        return pages::login_response(
            &req,
            &admin,
            Some("Give your name (up to 64 characters): every action is recorded with it.".into()),
            None,
            StatusCode::BAD_REQUEST,
        );
    }
    // Counted before argon2 runs: parallel guesses cannot all slip past the check above.
    admin
        .limiter
        .attempt(ip)
        .map_err(AdminError::TooManyAttempts)?;
    let ok = admin
        .password_gate
        .verify(form.password.clone(), admin.password_hash.clone())
        .await?;
    if !ok {
        tracing::warn!(%ip, "admin: failed login");
        state
            .db
            .record_admin_action(&name, "login_failed", "session", &ip.to_string(), None)
            .await?;
        return pages::login_response(
            &req,
            &admin,
            Some("Wrong password.".into()),
            None,
            StatusCode::UNAUTHORIZED,
        );
    }
    admin.limiter.succeeded(ip);
    let token = auth::random_token();
    let csrf = auth::random_token();
    let expires = Utc::now()
        + chrono::Duration::from_std(admin.session_ttl).unwrap_or(chrono::Duration::hours(12));
    state
        .db
        .create_admin_session(&auth::token_hash(&token), &csrf, &name, expires)
        .await?;
    state
        .db
        .record_admin_action(&name, "login", "session", &ip.to_string(), None)
        .await?;
    let secure = auth::secure(&admin, &req);
    let mut resp = see_other("/admin".into());
    let set = |resp: &mut HttpResponse, c| {
        resp.add_cookie(&c)
            .map_err(|e| AdminError::Invalid(e.to_string()))
    };
    set(
        &mut resp,
        auth::cookie(auth::SESSION_COOKIE, token, secure, Some(admin.session_ttl)),
    )?;
    set(
        &mut resp,
        auth::cookie(
            auth::LOGIN_CSRF_COOKIE,
            String::new(),
            secure,
            Some(std::time::Duration::ZERO),
        ),
    )?;
    Ok(resp)
}

pub async fn logout(
    req: HttpRequest,
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    state.db.delete_admin_session(&session.token_hash).await?;
    state
        .db
        .record_admin_action(&session.actor, "logout", "session", "", None)
        .await?;
    let mut resp = see_other("/admin/login?notice=logged_out".into());
    resp.add_cookie(&auth::cookie(
        auth::SESSION_COOKIE,
        String::new(),
        auth::secure(&admin, &req),
        Some(std::time::Duration::ZERO),
    ))
    .map_err(|e| AdminError::Invalid(e.to_string()))?;
    Ok(resp)
}

// ---------------------------------------------------------------------------------------------
// Retry

pub async fn retry(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    let id = id.into_inner();
    let d = state
        .db
        .document(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{id}")))?;
    let Some(done) = state.db.retry_document(id, &session.actor).await? else {
        return Err(AdminError::Refused(format!(
            "document #{id} is {}: only documents the PAC rejected (failed) or whose outcome is unknown are retried",
            d.state
        )));
    };
    tracing::info!(outbox_id = id, actor = %session.actor, what = done, "admin: retry");
    // A failed row with an unanswered last call, or an unknown one, is asked for first.
    let notice = if done.starts_with("failed → pending") {
        "retried"
    } else {
        "asked"
    };
    Ok(see_other(format!(
        "/admin/payments/{}?notice={notice}#doc-{id}",
        d.payment_id
    )))
}

pub async fn bulk_retry(
    state: web::Data<AppState>,
    session: Session,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let pairs = form_pairs(&body);
    let csrf = pairs
        .iter()
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    session.check_csrf(csrf)?;
    let ids: Vec<i64> = pairs
        .iter()
        .filter(|(k, _)| k == "ids")
        .map(|(_, v)| {
            v.parse()
                .map_err(|_| AdminError::Invalid(format!("`{v}` is not a document id")))
        })
        .collect::<Result<_, _>>()?;
    if ids.is_empty() {
        return Err(AdminError::Invalid("select at least one document".into()));
    }
    let mut skipped = Vec::new();
    for id in &ids {
        if state
            .db
            .retry_document(*id, &session.actor)
            .await?
            .is_none()
        {
            skipped.push(id.to_string());
        }
    }
    if !skipped.is_empty() && skipped.len() == ids.len() {
        return Err(AdminError::Refused(format!(
            "none of the selected documents is failed or unknown any more (#{})",
            skipped.join(", #")
        )));
    }
    Ok(see_other(
        "/admin/invoices?view=failed&notice=bulk_retried".into(),
    ))
}

// ---------------------------------------------------------------------------------------------
// Cancel

#[derive(Debug, Deserialize)]
pub struct CancelForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub motivo: String,
    #[serde(default)]
    pub folio_sustitucion: String,
}

pub async fn cancel(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
    form: web::Form<CancelForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    let id = id.into_inner();
    let again = |error: String, status: StatusCode| {
        let state = state.clone();
        let session = session.clone();
        let motivo = form.motivo.clone();
        let folio = form.folio_sustitucion.clone();
        async move {
            let page =
                pages::cancel_page(&state, &session, id, &motivo, &folio, Some(error)).await?;
            let mut resp = html(&page)?;
            *resp.status_mut() = status;
            Ok::<_, AdminError>(resp)
        }
    };
    let (d, facts) = pages::stamped_doc(&state, id).await?;
    let folio = Some(form.folio_sustitucion.as_str());
    let refusal = match cancel::request(
        &state.db,
        d.id,
        &facts,
        &form.motivo,
        folio,
        &session.actor,
    )
    .await?
    {
        Ok(()) => {
            return Ok(see_other(format!(
                "/admin/payments/{}?notice=cancel_requested#doc-{id}",
                d.payment_id
            )));
        }
        Err(r) => r,
    };
    let (error, status) = match refusal {
        Refusal::Request(Refused::NotAMotivo(m)) => (
            format!("`{m}` is not a motivo: choose 01, 02, 03 or 04"),
            StatusCode::BAD_REQUEST,
        ),
        Refusal::Request(Refused::Motivo(e)) => (e.to_string(), StatusCode::BAD_REQUEST),
        // SAT answers `No cancelable` while a live document relates to this one: name them.
        Refusal::Related(related) => (
            format!(
                "No cancelable: these live documents relate to {}; cancel them first: {}",
                facts.uuid,
                related.join(", ")
            ),
            StatusCode::CONFLICT,
        ),
        Refusal::AlreadyRequested(s) => (
            format!(
                "a cancellation of {} was already requested ({s}); follow it on the detail page",
                facts.uuid
            ),
            StatusCode::CONFLICT,
        ),
    };
    again(error, status).await
}

// ---------------------------------------------------------------------------------------------
// Refreeze

#[derive(Debug, Deserialize)]
pub struct RefreezeForm {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub confirm: String,
    #[serde(flatten)]
    pub receptor: ReceptorForm,
}

/// The corrected receptor, validated; `None` when the document has none to correct.
fn corrected_receptor(old: &ReceptorData, f: &ReceptorForm) -> Result<ReceptorData, String> {
    match old {
        ReceptorData::PublicoEnGeneral => Ok(ReceptorData::PublicoEnGeneral),
        ReceptorData::Nominativo { .. } => {
            let rfc = Rfc::parse(f.rfc.trim()).map_err(|e| format!("RFC: {e}"))?;
            let digits = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_digit());
            let nombre = f.nombre.trim().to_uppercase();
            if nombre.is_empty() {
                return Err(
                    "Nombre: write the receptor's name as in its Constancia de Situación Fiscal"
                        .into(),
                );
            }
            let cp = f.domicilio_fiscal.trim();
            if !digits(cp, 5) {
                return Err(format!(
                    "DomicilioFiscalReceptor `{cp}` is not a 5-digit postal code"
                ));
            }
            let regimen = f.regimen_fiscal.trim();
            if !digits(regimen, 3) {
                return Err(format!(
                    "RegimenFiscalReceptor `{regimen}` is not a 3-digit c_RegimenFiscal code"
                ));
            }
            let uso = f.uso_cfdi.trim().to_uppercase();
            if !(3..=4).contains(&uso.len()) || !uso.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(format!("UsoCFDI `{uso}` is not a c_UsoCFDI code"));
            }
            Ok(ReceptorData::Nominativo {
                rfc,
                nombre,
                domicilio_fiscal: cp.to_owned(),
                regimen_fiscal: regimen.to_owned(),
                uso_cfdi: uso,
            })
        }
    }
}

pub async fn refreeze(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    id: web::Path<i64>,
    form: web::Form<RefreezeForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    let id = id.into_inner();
    let again = |error: String, status: StatusCode| {
        let state = state.clone();
        let session = session.clone();
        let receptor = form.receptor.clone();
        async move {
            let page =
                pages::refreeze_page(&state, &session, id, Some(&receptor), Some(error)).await?;
            let mut resp = html(&page)?;
            *resp.status_mut() = status;
            Ok::<_, AdminError>(resp)
        }
    };
    let d = state
        .db
        .document(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{id}")))?;
    if !matches!(d.state.as_str(), "failed" | "expired") || d.uuid.is_some() {
        return Err(AdminError::Refused(format!(
            "document #{id} is {}: only expired or rejected documents are refrozen",
            d.state
        )));
    }
    if form.confirm != "yes" {
        return again(
            "Tick the confirmation: a refreeze issues a new comprobante with today's Fecha.".into(),
            StatusCode::BAD_REQUEST,
        )
        .await;
    }
    let old: InvoiceRequest = serde_json::from_str(&d.request_json)
        .map_err(|e| AdminError::Refused(format!("the frozen request is unreadable: {e}")))?;
    let receptor = match corrected_receptor(&old.receptor, &form.receptor) {
        Ok(r) => r,
        Err(e) => return again(e, StatusCode::BAD_REQUEST).await,
    };

    // Only once the PAC confirms the old bytes were never stamped (no transaction held here).
    if let Some(sealed) = &d.sealed_xml {
        let key = StampKey::parse(&d.stamp_key)
            .map_err(|e| AdminError::Refused(format!("stored stamp key: {e}")))?;
        let started = Instant::now();
        let log = crate::worker::DbRouteLog { db: &state.db };
        let recovery = admin.pac.recover_logged(sealed, &key, &log).await;
        let by = format!("admin:{}", session.actor);
        let (outcome, message, uuid) = match &recovery {
            Recovery::Found(s) => ("found", None, Some(s.uuid.as_str())),
            Recovery::NotFound => ("not_found", None, None),
            Recovery::Unresolved { reason } => ("unresolved", Some(reason.as_str()), None),
        };
        state
            .db
            .log_admin_pac_call(&AdminPacCall {
                outbox_id: Some(id),
                operation: "recover",
                pac: "primary",
                outcome,
                code: None,
                message,
                latency_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
                uuid,
                by: &by,
            })
            .await?;
        match recovery {
            Recovery::NotFound => {}
            Recovery::Found(stamp) => {
                let flag = format!(
                    "adopted at refreeze: the PAC held stamp {} of generation {} that was never recorded",
                    stamp.uuid, d.generation
                );
                state
                    .db
                    .adopt_stamp(
                        id,
                        &stamp.uuid,
                        &stamp.xml,
                        &stamp.tfd.fecha_timbrado,
                        &flag,
                        &session.actor,
                    )
                    .await?;
                return Ok(see_other(format!(
                    "/admin/payments/{}?notice=adopted#doc-{id}",
                    d.payment_id
                )));
            }
            Recovery::Unresolved { reason } => {
                return again(
                    format!(
                        "Not refrozen: the PAC could not confirm that the current document was never stamped ({reason}). Try again later."
                    ),
                    StatusCode::CONFLICT,
                )
                .await;
            }
        }
    }

    let generation = d.generation + 1;
    let mut new = old;
    new.receptor = receptor;
    new.fecha = crate::cli::now_in_mexico();
    let json = serde_json::to_string(&new)
        .map_err(|e| AdminError::Invalid(format!("cannot serialize the request: {e}")))?;
    let key = StampKey::derive(
        &d.provider,
        &d.provider_payment_id,
        &format!("{}:g{generation}", d.kind),
    );
    let reason = match (&d.last_error_code, &d.last_error_message) {
        (Some(c), Some(m)) => format!("{} ({c} {m})", d.state),
        (None, Some(m)) => format!("{} ({m})", d.state),
        _ => d.state.clone(),
    };
    if !state
        .db
        .refreeze(
            id,
            d.generation,
            &json,
            key.as_str(),
            new.fecha,
            &reason,
            &session.actor,
        )
        .await?
    {
        return Err(AdminError::Refused(format!(
            "document #{id} changed meanwhile; reload and check it again"
        )));
    }
    Ok(see_other(format!(
        "/admin/payments/{}?notice=refrozen#doc-{id}",
        d.payment_id
    )))
}

// ---------------------------------------------------------------------------------------------
// SAT status

pub async fn sat_status(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    id: web::Path<i64>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    let id = id.into_inner();
    let d = state
        .db
        .document(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{id}")))?;
    let xml = d
        .stamped_xml
        .as_deref()
        .ok_or_else(|| AdminError::Refused("the document is not stamped".into()))?;
    let q = StatusQuery::from_stamped_xml(xml).map_err(AdminError::Refused)?;
    let started = Instant::now();
    let outcome = admin.pac.sat_status(&q).await;
    let (label, detail) = match &outcome {
        StatusOutcome::Found(s) => (
            "found",
            format!(
                "Estado: {}; EsCancelable: {}; EstatusCancelacion: {}; CodigoEstatus: {}",
                s.estado,
                s.es_cancelable,
                if s.estatus_cancelacion.is_empty() {
                    "(none)"
                } else {
                    &s.estatus_cancelacion
                },
                s.codigo_estatus
            ),
        ),
        StatusOutcome::NotFound { codigo_estatus } => (
            "not_found",
            format!("SAT does not know it (yet): {codigo_estatus}"),
        ),
        StatusOutcome::Unavailable { reason } => (
            "unresolved",
            format!("indeterminado: the status service did not answer ({reason})"),
        ),
    };
    let by = format!("admin:{}", session.actor);
    state
        .db
        .log_admin_pac_call(&AdminPacCall {
            outbox_id: Some(id),
            operation: "sat_status",
            pac: "sat",
            outcome: label,
            code: None,
            message: Some(&detail),
            latency_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            uuid: Some(&q.uuid),
            by: &by,
        })
        .await?;
    state
        .db
        .record_admin_action(
            &session.actor,
            "sat_status",
            "outbox",
            &id.to_string(),
            Some(&detail),
        )
        .await?;
    Ok(see_other(format!(
        "/admin/payments/{}?notice=sat_status#doc-{id}",
        d.payment_id
    )))
}

// ---------------------------------------------------------------------------------------------
// Reconciliation

pub async fn reconcile_now(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    reconcile::run(
        &state.db,
        &admin.pac,
        admin.sandbox.as_deref(),
        &admin.reconcile_lock,
        &admin.emisor_rfc,
        &session.actor,
    )
    .await
    .map_err(|e| AdminError::Refused(format!("reconciliation did not finish: {e}")))?;
    Ok(see_other("/admin/reconcile?notice=reconciled".into()))
}

/// One click on a duplicate: cancel the extra UUID with motivo 02, keeping the one recorded on
/// the document (the one the customer received).
pub async fn cancel_extra(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    let id = id.into_inner();
    let f = state
        .db
        .finding(id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no finding #{id}")))?;
    if f.kind != "duplicate" || f.status != "open" {
        return Err(AdminError::Refused(format!(
            "finding #{id} is a {} finding, {}: only open duplicates are cancelled from here",
            f.kind, f.status
        )));
    }
    let outbox_id = f
        .outbox_id
        .ok_or_else(|| AdminError::Refused("the duplicate is not tied to a document".into()))?;
    let doc = state
        .db
        .document(outbox_id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("no document #{outbox_id}")))?;
    if doc
        .uuid
        .as_deref()
        .is_none_or(|u| u.eq_ignore_ascii_case(&f.uuid))
    {
        return Err(AdminError::Refused(
            "this UUID is the one recorded for the sale (the one the customer received); it is kept"
                .into(),
        ));
    }
    let facts = serde_json::from_str::<reconcile::FindingDetail>(&f.detail)
        .ok()
        .and_then(|d| d.facts)
        .ok_or_else(|| {
            AdminError::Refused("the finding does not carry the duplicate's data".into())
        })?;
    let order = facts.order(Motivo::SinRelacion, None, Utc::now());
    match cancel::record(&state.db, outbox_id, order, &session.actor).await? {
        Ok(()) => {
            state
                .db
                .resolve_finding(
                    id,
                    &session.actor,
                    &format!(
                        "cancellation of the extra UUID {} requested (motivo 02); kept {}",
                        facts.uuid,
                        doc.uuid.unwrap_or_default()
                    ),
                )
                .await?;
            Ok(see_other("/admin/reconcile?notice=cancel_requested".into()))
        }
        Err(CancelConflict::AlreadyRequested { state: s }) => Err(AdminError::Refused(format!(
            "a cancellation of {} was already requested ({s})",
            facts.uuid
        ))),
    }
}

pub async fn resolve_finding(
    state: web::Data<AppState>,
    session: Session,
    id: web::Path<i64>,
    form: web::Form<CsrfForm>,
) -> Result<HttpResponse, AdminError> {
    session.check_csrf(&form.csrf)?;
    let id = id.into_inner();
    if !state
        .db
        .resolve_finding(id, &session.actor, "closed by hand")
        .await?
    {
        return Err(AdminError::Refused(format!("finding #{id} is not open")));
    }
    Ok(see_other("/admin/reconcile?notice=resolved".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_pairs_keep_repeated_keys_and_decode() {
        let p = form_pairs(b"csrf=ab%2Bc&ids=1&ids=22&name=Ana+Mar%C3%ADa&x");
        assert_eq!(
            p,
            vec![
                ("csrf".into(), "ab+c".into()),
                ("ids".into(), "1".into()),
                ("ids".into(), "22".into()),
                ("name".into(), "Ana María".into()),
                ("x".into(), String::new()),
            ]
        );
        assert_eq!(form_pairs(b"a=%zz%4")[0].1, "%zz%4");
    }
}
