//! A payment's detail page and what is done to its documents from there: the XML views and
//! downloads, the acuse, retry (one or many) and the SAT status query.

use std::time::Instant;

use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::Utc;
use serde::Deserialize;

use super::auth::Session;
use super::common::*;
use super::dashboard::AttemptView;
use super::format::{Clock, Deadline, Said, When, local, local_naive, money, serie_folio};
use super::lists::{CancelView, next_run};
use super::{Admin, state_label};
use crate::domain::{DocumentState, PaymentStatus};
use crate::error::AdminError;
use crate::pac::{StatusOutcome, StatusQuery};
use crate::state::AppState;
use crate::store::{ActionRow, AdminPacCall, CancellationRow, DocFull};

pub struct GenerationView {
    pub generation: i32,
    pub stamp_key: String,
    pub reason: String,
    pub actor: String,
    pub at: When,
    pub sealed: bool,
}

/// Why an `unknown` document is unknown: the call whose answer never came, and what the PAC
/// said when asked since (a 503 while asking does not make it unknown; the lost answer did).
pub struct LostCall {
    pub at: When,
    pub operation: String,
    pub message: String,
    /// The latest call, when it came after the lost one: "recover: retryable HTTP 503 …".
    pub since: String,
}

pub struct DocView {
    pub id: i64,
    pub kind: String,
    pub state: String,
    pub label: String,
    pub class: &'static str,
    pub stamp_key: String,
    pub generation: i32,
    pub serie_folio: String,
    pub fecha: String,
    pub uuid: String,
    pub fecha_timbrado: String,
    pub attempts: i32,
    pub next_run: String,
    pub deadline: Deadline,
    pub lease: String,
    pub said: Said,
    pub lost: Option<LostCall>,
    pub flag: String,
    pub pac_route: String,
    pub test_mode: bool,
    pub request_pretty: String,
    pub sealed_xml: Option<String>,
    pub stamped_xml: Option<String>,
    pub attempts_log: Vec<AttemptView>,
    pub history: Vec<GenerationView>,
    pub cancellations: Vec<CancelView>,
    pub actions: Vec<ActionView>,
    pub can_retry: bool,
    pub can_cancel: bool,
    pub can_refreeze: bool,
    pub sat_status: Option<ActionView>,
    pub emails: Vec<super::emails::EmailView>,
    /// Email is on (`[email]`) and the document is stamped.
    pub can_resend: bool,
    pub email_on: bool,
}

#[derive(Template)]
#[template(path = "admin/payment.html")]
pub struct PaymentPage {
    pub l: Layout,
    pub id: i64,
    pub provider: String,
    pub payment_id: String,
    pub event_id: String,
    pub amount: String,
    pub method: String,
    pub forma_pago: String,
    pub paid_at: When,
    pub test: bool,
    /// The invoice's state in words: the documents' when there are any, else the payment's.
    pub status: String,
    pub status_class: &'static str,
    pub said: Said,
    /// It needs attention and has no document: the fix form applies.
    pub fixable: bool,
    pub customer_pretty: String,
    pub docs: Vec<DocView>,
    /// The sale's refunds (each an egreso, a wait, a reduction of its global, …).
    pub refunds: Vec<RefundView>,
    /// What can still be refunded (the amount less what refunds credited), once any was.
    pub refundable: String,
    /// An API invoice's payments (PPD), each with its complemento de pago.
    pub pagos: Vec<PagoView>,
    /// An ARS sale's authorized ARCA voucher: its name and its printable PDF.
    pub arca_voucher: Option<(String, String)>,
    /// An ARS sale held or refused for ARCA: corrected on `/admin/arca`, not by the fix form.
    pub arca_held: bool,
}

/// One payment of a PPD invoice on the invoice's page.
pub struct PagoView {
    /// Its NumParcialidad; `—` once the PAC refused its REP and a later payment took its place
    /// (store::pagos).
    pub parcialidad: String,
    pub fecha_pago: String,
    pub amount: String,
    pub saldo_insoluto: String,
    /// Its REP: the outbox row, its state in words and its UUID once stamped.
    pub outbox_id: i64,
    pub label: String,
    pub uuid: String,
}

/// One refund on its sale's page.
pub struct RefundView {
    pub refund_id: String,
    pub amount: String,
    pub status: &'static str,
    pub label: &'static str,
    pub reason: String,
    /// Its egreso's (or cancelled ingreso's) page and state, when it has one.
    pub document: Option<(i64, i64, String, String)>,
}

fn pretty_json(s: &str) -> String {
    serde_json::from_str::<serde_json::Value>(s)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| s.to_owned())
}

/// The frozen request, pretty, with the folio the row was numbered with (a request frozen
/// without an explicit folio has none: the worker assigns it to the row before sealing).
fn request_pretty(s: &str, folio: Option<&str>) -> String {
    let Some(folio) = folio else {
        return pretty_json(s);
    };
    serde_json::from_str::<serde_json::Value>(s)
        .and_then(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.insert("folio".into(), folio.into());
            }
            serde_json::to_string_pretty(&v)
        })
        .unwrap_or_else(|_| s.to_owned())
}

/// The unanswered call that left `attempts` (oldest first) unknown, if the log holds one.
fn lost_call(
    attempts: &[crate::store::AttemptRow],
    now: chrono::DateTime<Utc>,
) -> Option<LostCall> {
    let (i, lost) = attempts.iter().enumerate().rev().find(|(_, a)| {
        matches!(a.operation.as_str(), "stamp" | "recover") && a.outcome == "unknown"
    })?;
    let since = attempts[i + 1..]
        .iter()
        .rev()
        .find(|a| a.operation != "sat_status")
        .map(|a| {
            let status = a
                .http_status
                .map(|s| format!(" HTTP {s}"))
                .unwrap_or_default();
            let said = Said::of(a.code.as_deref(), a.message.as_deref(), true);
            format!(
                "{}: {}{status}{}{}",
                a.operation,
                a.outcome,
                if said.code.is_empty() {
                    String::new()
                } else {
                    format!(" {}", said.code)
                },
                if said.message.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", said.message)
                }
            )
        })
        .unwrap_or_default();
    Some(LostCall {
        at: When::of(lost.at, now),
        operation: lost.operation.clone(),
        message: lost.message.clone().unwrap_or_else(|| "no answer".into()),
        since,
    })
}

async fn doc_view(state: &AppState, d: DocFull, clock: &Clock) -> Result<DocView, AdminError> {
    let db = &state.db;
    let now = clock.now;
    let log = db.attempts_of(d.id).await?;
    let lost = (d.state == DocumentState::Unknown)
        .then(|| lost_call(&log, now))
        .flatten();
    let attempts_log = log.iter().map(|a| AttemptView::of(a, now)).collect();
    let history = db
        .history_of(d.id)
        .await?
        .into_iter()
        .map(|h| GenerationView {
            generation: h.generation,
            stamp_key: h.stamp_key,
            reason: h.reason,
            actor: h.actor,
            at: When::of(h.at, now),
            sealed: h.sealed_xml.is_some(),
        })
        .collect();
    let cancels: Vec<CancellationRow> = db.cancellations_of(d.id).await?;
    let live_cancel = cancels.iter().any(|c| {
        c.uuid
            .eq_ignore_ascii_case(d.uuid.as_deref().unwrap_or_default())
            && !matches!(c.state.as_str(), "rejected" | "failed")
    });
    let actions: Vec<ActionRow> = db.actions_on("outbox", &d.id.to_string()).await?;
    let sat_status = actions
        .iter()
        .rev()
        .find(|a| a.action == "sat_status")
        .map(ActionView::of);
    let (label, class) = state_label(d.state);
    let emails = db
        .deliveries_of(d.id)
        .await?
        .into_iter()
        .map(|e| super::emails::EmailView::of(e, now))
        .collect();
    let email_on = state.settings.email.enabled();
    Ok(DocView {
        can_retry: matches!(d.state, DocumentState::Failed | DocumentState::Unknown),
        can_cancel: d.state == DocumentState::Stamped && d.uuid.is_some() && !live_cancel,
        can_refreeze: matches!(d.state, DocumentState::Failed | DocumentState::Expired)
            && d.uuid.is_none(),
        id: d.id,
        kind: d.kind.to_string(),
        label,
        class,
        stamp_key: d.stamp_key,
        generation: d.generation,
        serie_folio: serie_folio(d.serie.as_deref(), d.folio.as_deref()),
        fecha: local_naive(d.fecha),
        deadline: clock.deadline(Some(d.state), Some(d.fecha)),
        uuid: d.uuid.unwrap_or_default(),
        fecha_timbrado: d
            .fecha_timbrado
            .map(|t| format!("{} {}", t.replace('T', " "), super::format::ZONE))
            .unwrap_or_default(),
        attempts: d.attempts,
        next_run: next_run(Some(d.state), Some(d.run_at), now),
        lease: match (d.lease_owner, d.lease_expires_at) {
            (Some(o), Some(t)) if t > now => format!("{o} until {}", local(t)),
            _ => String::new(),
        },
        // An unknown outcome's banner is the lost call (below), not whatever was said since;
        // a code of the appliance's own (UNRESOLVED) is still said.
        said: if lost.is_some() && d.last_error_code.is_none() {
            Said::default()
        } else {
            Said::of(
                d.last_error_code.as_deref(),
                d.last_error_message.as_deref(),
                d.state != DocumentState::NeedsAttention && !d.state.is_arca(),
            )
        },
        lost,
        flag: d.flag.unwrap_or_default(),
        pac_route: d.pac_route.unwrap_or_default(),
        test_mode: d.test_mode,
        request_pretty: request_pretty(&d.request_json, d.folio.as_deref()),
        sealed_xml: d
            .sealed_xml
            .as_deref()
            .map(|x| String::from_utf8_lossy(x).into_owned()),
        stamped_xml: d
            .stamped_xml
            .as_deref()
            .map(|x| String::from_utf8_lossy(x).into_owned()),
        state: d.state.to_string(),
        attempts_log,
        history,
        cancellations: cancels
            .into_iter()
            .map(|c| CancelView::of(c, Some(d.payment_id)))
            .collect(),
        actions: actions.iter().map(ActionView::of).collect(),
        sat_status,
        emails,
        can_resend: email_on && d.state == DocumentState::Stamped,
        email_on,
    })
}

pub async fn payment(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    session: Session,
    id: web::Path<i64>,
    q: web::Query<NoticeQuery>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let clock = Clock::of(&admin);
    let row = found(state.db.payment(id).await?, "payment", id)?;
    let p = row.payment;
    let mut docs = Vec::new();
    for d in state.db.documents_of_payment(id).await? {
        docs.push(doc_view(&state, d, &clock).await?);
    }
    // The payment's own status only says something while it has no document.
    let (status, status_class) = match docs.first() {
        Some(d) => (d.label.clone(), d.class),
        None => state_label(p.status),
    };
    let said = if docs.is_empty() {
        Said::of(None, p.reason.as_deref(), false)
    } else {
        Said::default()
    };
    let listed = state.db.refunds_of_sale(id).await?;
    let amount: rust_decimal::Decimal = p.amount.parse().unwrap_or_default();
    let credited: rust_decimal::Decimal = listed
        .iter()
        .filter(|r| r.status.credited())
        .filter_map(|r| r.amount.parse::<rust_decimal::Decimal>().ok())
        .sum();
    let refundable = if listed.is_empty() {
        String::new()
    } else {
        money(&(amount - credited).to_string(), &p.currency)
    };
    let refunds = listed
        .into_iter()
        .map(|r| RefundView {
            amount: money(&r.amount, &r.currency),
            refund_id: r.refund_id,
            status: r.status.as_str(),
            label: r.status.label(),
            reason: r.reason.unwrap_or_default(),
            document: match (r.outbox_id, r.document_payment, r.document_state) {
                (Some(o), Some(p), Some(s)) => Some((
                    p,
                    o,
                    s.label().to_owned(),
                    r.document_uuid.unwrap_or_default(),
                )),
                _ => None,
            },
        })
        .collect();
    let pagos = state
        .db
        .pagos_of_payment_row(id)
        .await?
        .into_iter()
        .map(|g| PagoView {
            parcialidad: if g.parcialidad > 0 {
                g.parcialidad.to_string()
            } else {
                "—".into()
            },
            fecha_pago: g.paid.fecha_pago,
            amount: money(&g.paid.amount, &g.paid.currency),
            saldo_insoluto: money(&g.saldo_insoluto, &p.currency),
            outbox_id: g.outbox_id,
            label: g.state.label().to_owned(),
            uuid: g.uuid.unwrap_or_default(),
        })
        .collect();
    let arca_voucher = match p.status {
        PaymentStatus::ArcaAuthorized => state
            .db
            .arca_sale_voucher(&p.provider, &p.payment_id)
            .await?
            .map(|v| {
                let name = crate::arca::CbteTipo::from_code(v.cbte_tipo)
                    .map_or_else(|| format!("type {}", v.cbte_tipo), |t| t.name());
                (
                    format!(
                        "{name} {:05}-{:08}, CAE {}",
                        v.pto_vta,
                        v.number,
                        v.cae.unwrap_or_default()
                    ),
                    format!(
                        "/admin/arca/print?key={}",
                        super::common::percent_encode(&v.key)
                    ),
                )
            }),
        _ => None,
    };
    let arca_held = p.status == PaymentStatus::NeedsAttention
        && p.currency == "ARS"
        && p.reason.as_deref().is_some_and(|r| r.starts_with("ARCA:"));
    html(&PaymentPage {
        l: Layout::new(
            &session,
            format!("Payment {}", p.payment_id),
            "invoices",
            q.notice.as_deref(),
        ),
        id: row.id,
        provider: p.provider,
        payment_id: p.payment_id,
        event_id: p.event_id,
        amount: money(&p.amount, &p.currency),
        method: p.method,
        forma_pago: p.forma_pago.unwrap_or_default(),
        paid_at: clock.when(p.paid_at),
        test: !p.livemode,
        fixable: docs.is_empty() && p.status == PaymentStatus::NeedsAttention && !arca_held,
        arca_voucher,
        arca_held,
        status,
        status_class,
        said,
        customer_pretty: pretty_json(&p.customer_json),
        docs,
        refunds,
        refundable,
        pagos,
    })
}

/// A document by its id (the PAC calls on the dashboard link here): its place on its
/// payment's page.
pub async fn document_page(
    state: web::Data<AppState>,
    _session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let d = document(&state, id.into_inner()).await?;
    Ok(see_other(format!(
        "/admin/payments/{}#doc-{}",
        d.payment_id, d.id
    )))
}

#[derive(Debug, Deserialize)]
pub struct XmlQuery {
    pub download: Option<String>,
}

/// `sealed` (the frozen bytes) or `stamped`, shown as XML or downloaded as a file.
pub async fn xml(
    state: web::Data<AppState>,
    _session: Session,
    path: web::Path<(i64, String)>,
    q: web::Query<XmlQuery>,
) -> Result<HttpResponse, AdminError> {
    let (id, which) = path.into_inner();
    let d = document(&state, id).await?;
    let (bytes, name) = match which.as_str() {
        "sealed" => (d.sealed_xml, format!("{}-sealed.xml", d.stamp_key)),
        "stamped" => {
            let name = d
                .stamped_xml
                .as_deref()
                .and_then(|x| crate::pdf::file_name(x, "xml").ok())
                .unwrap_or_else(|| format!("{}.xml", d.uuid.as_deref().unwrap_or(&d.stamp_key)));
            (d.stamped_xml, name)
        }
        other => return Err(AdminError::NotFound(format!("no XML `{other}`"))),
    };
    let bytes =
        bytes.ok_or_else(|| AdminError::NotFound(format!("document #{id} has no {which} XML")))?;
    xml_response(bytes, &name, q.download.is_some())
}

/// The representación impresa of a stamped document, shown or downloaded.
pub async fn pdf(
    state: web::Data<AppState>,
    _session: Session,
    id: web::Path<i64>,
    q: web::Query<XmlQuery>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let d = document(&state, id).await?;
    let xml = d.stamped_xml.ok_or_else(|| {
        AdminError::NotFound(format!("document #{id} is not stamped: no PDF yet"))
    })?;
    let name = crate::pdf::file_name(&xml, "pdf")
        .map_err(|e| AdminError::Refused(format!("the PDF cannot be made: {e}")))?;
    let bytes = crate::pdf::render_blocking(xml, state.pdf.clone())
        .await
        .map_err(|e| AdminError::Refused(format!("the PDF cannot be made: {e}")))?;
    let how = if q.download.is_some() {
        "attachment"
    } else {
        "inline"
    };
    Ok(HttpResponse::Ok()
        .content_type("application/pdf")
        .insert_header(("Content-Disposition", format!("{how}; filename=\"{name}\"")))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-store"))
        .body(bytes))
}

fn xml_response(bytes: Vec<u8>, name: &str, download: bool) -> Result<HttpResponse, AdminError> {
    let disposition = if download {
        format!("attachment; filename=\"{name}\"")
    } else {
        format!("inline; filename=\"{name}\"")
    };
    Ok(HttpResponse::Ok()
        // Shown as text so a browser never runs anything embedded in it.
        .content_type(if download {
            "application/xml"
        } else {
            "text/plain; charset=utf-8"
        })
        .insert_header(("Content-Disposition", disposition))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-store"))
        .body(bytes))
}

/// The acuse of a cancellation, as a download.
pub async fn acuse(
    state: web::Data<AppState>,
    _session: Session,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let c = found(state.db.cancellation(id).await?, "cancellation", id)?;
    let acuse = c
        .acuse_xml
        .ok_or_else(|| AdminError::NotFound("no acuse stored yet".into()))?;
    xml_response(acuse.into_bytes(), &format!("acuse-{}.xml", c.uuid), true)
}

// ---------------------------------------------------------------------------------------------
// Retry

pub async fn retry(
    state: web::Data<AppState>,
    Posted(session, _): Posted,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let d = document(&state, id).await?;
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
    Ok(back_to_document(&d, notice))
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
    // Back to the list the form was on (only an invoices list).
    let back = pairs
        .iter()
        .find(|(k, _)| k == "back")
        .map(|(_, v)| v.as_str())
        .filter(|b| b.starts_with("/admin/invoices?") && super::login::safe_next(b).is_some())
        .unwrap_or("/admin/invoices?view=failed")
        .to_owned();
    let with_notice = |notice: &str| {
        let (path, anchor) = back.split_once('#').unwrap_or((&back, ""));
        let sep = if path.contains('?') { '&' } else { '?' };
        let anchor = if anchor.is_empty() {
            String::new()
        } else {
            format!("#{anchor}")
        };
        see_other(format!("{path}{sep}notice={notice}{anchor}"))
    };
    if ids.is_empty() {
        return Ok(with_notice("none_selected"));
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
    Ok(with_notice("bulk_retried"))
}

// ---------------------------------------------------------------------------------------------
// SAT status

pub async fn sat_status(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    Posted(session, _): Posted,
    id: web::Path<i64>,
) -> Result<HttpResponse, AdminError> {
    let id = id.into_inner();
    let d = document(&state, id).await?;
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
        StatusOutcome::Unavailable { reason, .. } => (
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
    Ok(back_to_document(&d, "sat_status"))
}
