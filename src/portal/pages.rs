//! The portal's handlers: the look-up (reference + total → a signed link to the sale), the
//! sale's page (its state, or the fiscal form), the submission, the stamped XML and its PDF.
//!
//! The look-up answers "not found" the same way, in the same time, whether the reference
//! exists or only the total is wrong: one statement runs whatever the input, and every
//! look-up's answer waits until [`LOOKUP_FLOOR`] has passed.

use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::Utc;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::Portal;
use super::view::{FiscalForm, FormView, LookupPage, SalePage, SaleView, Stamped, Status};
use crate::cfdi::ReceptorData;
use crate::cfdi::fiscal::{self, FieldError};
use crate::domain::{DocumentState, PaymentStatus};
use crate::error::PortalError;
use crate::ingest::CustomerData;
use crate::state::AppState;
use crate::store::{DocFull, PaymentRow, PortalSubmission, Submitted, normalize_reference};

/// Every look-up answers after at least this long, found or not, so its time tells nothing
/// (and an enumeration goes slowly even within the rate limit).
pub const LOOKUP_FLOOR: Duration = Duration::from_millis(250);

/// How long the link a look-up leads to stays valid.
pub const LOOKUP_LINK_HOURS: i64 = 2;

/// The one answer to a look-up that finds nothing, whatever the reason.
pub const NOT_FOUND: &str = "No encontramos una compra con esa referencia y ese total. Revise \
    que ambos datos sean los de su comprobante (el total con centavos) e intente de nuevo.";

#[derive(Debug, Default, Deserialize)]
pub struct LookupForm {
    #[serde(default)]
    pub reference: String,
    #[serde(default)]
    pub total: String,
}

/// An HTML page answered with `status`, with the security headers.
fn html<T: Template>(t: &T, status: StatusCode) -> Result<HttpResponse, PortalError> {
    let mut r = HttpResponse::build(status);
    r.content_type("text/html; charset=utf-8");
    for h in crate::error::SECURITY_HEADERS {
        r.insert_header(h);
    }
    Ok(r.body(t.render()?))
}

fn see_other(location: String) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header(("Location", location))
        .finish()
}

/// `GET /facturar`.
pub async fn lookup_page(portal: web::Data<Portal>) -> Result<HttpResponse, PortalError> {
    html(&lookup_view(&portal, LookupForm::default()), StatusCode::OK)
}

fn lookup_view(portal: &Portal, f: LookupForm) -> LookupPage {
    LookupPage {
        p: portal.frame("Facture su compra"),
        reference: f.reference.trim().to_owned(),
        total: f.total.trim().to_owned(),
        error: None,
        reference_error: None,
        total_error: None,
    }
}

/// A total as customers write it: `1160`, `1,160.00`, `$1160.5`, `1160.00 MXN`.
pub fn parse_total(s: &str) -> Option<Decimal> {
    let cleaned: String = s
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic() || c.is_whitespace())
        .chars()
        .filter(|c| !matches!(c, '$' | ',' | ' '))
        .collect();
    // Digits and one point only (Decimal would also read `1e5`).
    if cleaned.is_empty() || !cleaned.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    cleaned
        .parse::<Decimal>()
        .ok()
        .filter(|d| *d > Decimal::ZERO && d.scale() <= 6)
}

/// The serie and folio of an API invoice's reference (`A-15`, `A15`, `A 15`): letters, then
/// digits. A reference of digits alone is an operation number, not a folio.
pub fn serie_folio(reference: &str) -> Option<(String, String)> {
    let letters: String = reference
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    let rest = reference[letters.len()..].trim_start_matches(['-', ' ']);
    let valid = !letters.is_empty()
        && letters.len() <= 25
        && !rest.is_empty()
        && rest.len() <= 40
        && rest.bytes().all(|b| b.is_ascii_digit());
    valid.then(|| (letters, rest.to_owned()))
}

/// `POST /facturar`: the reference and the total → the sale's signed link, or the one
/// not-found answer.
pub async fn lookup(
    req: HttpRequest,
    state: web::Data<AppState>,
    portal: web::Data<Portal>,
    form: web::Form<LookupForm>,
) -> Result<HttpResponse, PortalError> {
    let client = portal.proxies.client(&req);
    portal
        .limiter
        .attempt(client.ip)
        .map_err(PortalError::TooManyLookups)?;
    let started = Instant::now();
    let f = form.into_inner();
    let reference = normalize_reference(&f.reference);
    let total = parse_total(&f.total);
    let mut page = lookup_view(&portal, f);
    if reference.is_empty() || reference.chars().count() > 100 {
        page.reference_error = Some("Escriba la referencia de su compra (hasta 100 caracteres).");
    }
    if total.is_none() {
        page.total_error = Some("Escriba el total pagado, por ejemplo 1160.00.");
    }
    let found = match total {
        Some(total) if page.reference_error.is_none() => {
            let sf = serie_folio(&reference);
            let candidates = state
                .db
                .portal_lookup(
                    &reference,
                    sf.as_ref().map(|(s, f)| (s.as_str(), f.as_str())),
                )
                .await?;
            candidates.into_iter().find(|p| {
                p.payment
                    .amount
                    .parse::<Decimal>()
                    .is_ok_and(|a| a == total)
            })
        }
        _ => None,
    };
    tokio::time::sleep(LOOKUP_FLOOR.saturating_sub(started.elapsed())).await;
    match found {
        Some(p) => {
            let expires = Utc::now() + chrono::Duration::hours(LOOKUP_LINK_HOURS);
            tracing::info!(payment = %p.payment.payment_id, client = %client.ip, "portal: sale found by its reference and total");
            Ok(see_other(portal.path(p.id, expires)))
        }
        None => {
            if page.reference_error.is_none() && page.total_error.is_none() {
                page.error = Some(NOT_FOUND);
            }
            html(&page, StatusCode::OK)
        }
    }
}

/// The payment a link opens.
async fn opened(state: &AppState, portal: &Portal, token: &str) -> Result<PaymentRow, PortalError> {
    let row = portal.open(token)?;
    state.db.payment(row).await?.ok_or(PortalError::BadLink)
}

/// `GET /facturar/{token}`: the sale, where its invoice stands, and the form when the customer
/// can still invoice it.
pub async fn sale(
    state: web::Data<AppState>,
    portal: web::Data<Portal>,
    token: web::Path<String>,
) -> Result<HttpResponse, PortalError> {
    let p = opened(&state, &portal, &token).await?;
    let page = sale_page(&state, &portal, &p, &token, None).await?;
    html(&page, StatusCode::OK)
}

fn sale_view(p: &PaymentRow) -> SaleView {
    SaleView {
        reference: p.payment.payment_id.clone(),
        date: crate::domain::time::to_local(p.payment.paid_at)
            .format("%d/%m/%Y %H:%M")
            .to_string(),
        total: format!("${} {}", p.payment.amount, p.payment.currency),
    }
}

fn status(class: &'static str, heading: &str, text: String) -> Option<Status> {
    Some(Status {
        class,
        heading: heading.to_owned(),
        text,
    })
}

/// The page of sale `p`; `form` is what the customer just posted, with its errors.
async fn sale_page(
    state: &AppState,
    portal: &Portal,
    p: &PaymentRow,
    token: &str,
    form: Option<(&FiscalForm, &[FieldError])>,
) -> Result<SalePage, PortalError> {
    let merchant = portal.merchant.clone();
    let mut page = SalePage {
        p: portal.frame("Su factura"),
        sale: sale_view(p),
        status: None,
        stamped: None,
        form: None,
        refresh: false,
        action: format!("/facturar/{token}"),
    };
    if let Some(id) = state.db.ingreso_of(p.id).await? {
        let d = state.db.document(id).await?.ok_or(PortalError::BadLink)?;
        document_status(&mut page, &d, &merchant, token);
        return Ok(page);
    }
    if let Some(g) = state.db.global_of(p.id).await? {
        let folio = [g.serie.as_deref(), g.folio.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("-");
        page.status = status(
            "warn",
            "Esta compra ya está en la factura global",
            format!(
                "Se incluyó en la factura global {folio} (ventas al público en general), así que ya no puede facturarse aquí. Pida a {merchant} que la facture a su nombre."
            ),
        );
        return Ok(page);
    }
    let waiting = matches!(
        p.payment.status,
        PaymentStatus::AwaitingGlobal | PaymentStatus::NeedsAttention
    );
    let amount = p.payment.amount.parse::<Decimal>().unwrap_or_default();
    if !waiting
        || state
            .ingestor
            .invoiceable(amount, &p.payment.currency, None)
            .is_err()
    {
        page.status = status(
            "warn",
            "Esta compra no puede facturarse en línea",
            format!("Comuníquese con {merchant} para obtener su factura."),
        );
        return Ok(page);
    }
    let last = super::last_day(p.payment.paid_at, portal.days_after_month_end);
    if crate::domain::time::now_in_mexico().date() > last {
        page.status = status(
            "warn",
            "El plazo para facturar esta compra terminó",
            format!(
                "Podía facturarse aquí hasta el {}. Comuníquese con {merchant}.",
                last.format("%d/%m/%Y")
            ),
        );
        return Ok(page);
    }
    let (prefilled, checkout_errors);
    let (f, errors) = match form {
        Some(f) => f,
        None => {
            let customer: CustomerData =
                serde_json::from_str(&p.payment.customer_json).unwrap_or_default();
            prefilled = FiscalForm::from_customer(&customer);
            // Data given at checkout that broke a rule: shown with its errors from the start.
            checkout_errors = match p.payment.status.as_str() {
                "needs_attention" if customer.rfc.is_some() => {
                    fiscal::check(&prefilled.fiscal_input(), None)
                        .err()
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            };
            if !checkout_errors.is_empty() {
                page.status = status(
                    "warn",
                    "Los datos fiscales que dio al pagar no sirven para la factura",
                    format!(
                        "Corríjalos abajo; puede hacerlo hasta el {}.",
                        last.format("%d/%m/%Y")
                    ),
                );
            }
            (&prefilled, &checkout_errors[..])
        }
    };
    if page.status.is_none() && errors.is_empty() {
        page.status = status(
            "info",
            "Esta compra aún no tiene factura a su nombre",
            format!(
                "Puede facturarla aquí hasta el {}.",
                last.format("%d/%m/%Y")
            ),
        );
    }
    page.form = Some(FormView::new(f, errors));
    Ok(page)
}

/// Where the sale's ingreso stands, in the customer's words.
fn document_status(page: &mut SalePage, d: &DocFull, merchant: &str, token: &str) {
    use DocumentState as S;
    match d.state {
        S::Stamped => {
            let receptor = serde_json::from_str::<crate::cfdi::InvoiceRequest>(&d.request_json)
                .ok()
                .and_then(|r| match r.receptor {
                    ReceptorData::Nominativo { rfc, nombre, .. } => {
                        Some(format!("{nombre} ({rfc})"))
                    }
                    ReceptorData::PublicoEnGeneral => None,
                })
                .unwrap_or_default();
            page.status = status(
                "ok",
                "Su factura está lista",
                "Descargue el XML y guárdelo: es su comprobante fiscal.".into(),
            );
            page.stamped = Some(Stamped {
                serie_folio: format!(
                    "{}-{}",
                    d.serie.as_deref().unwrap_or(""),
                    d.folio.as_deref().unwrap_or("")
                ),
                uuid: d.uuid.clone().unwrap_or_default(),
                receptor,
                xml_url: format!("/facturar/{token}/xml"),
                pdf_url: format!("/facturar/{token}/pdf"),
            });
        }
        S::Pending | S::Stamping | S::RetryScheduled | S::Unknown => {
            page.refresh = true;
            page.status = status(
                "info",
                "Su factura se está timbrando",
                "Esto suele tardar unos segundos; esta página se actualiza sola.".into(),
            );
        }
        S::Canceled => {
            page.status = status(
                "warn",
                "La factura de esta compra fue cancelada",
                format!("Comuníquese con {merchant} si necesita una nueva."),
            );
        }
        // An ARCA voucher is not a CFDI: the portal never finds one (it reads a sale's
        // ingreso), and would say no more than this of it.
        S::Failed
        | S::Expired
        | S::Superseded
        | S::NeedsAttention
        | S::ArcaPending
        | S::Authorized
        | S::ArcaHeld => {
            page.status = status(
                "warn",
                "Su factura no pudo timbrarse todavía",
                format!(
                    "{merchant} ya puede verlo en su panel. Vuelva más tarde o comuníquese con {merchant}."
                ),
            );
        }
    }
}

/// `POST /facturar/{token}`: the customer's fiscal data. Valid: in one transaction the sale
/// leaves the factura global's queue with its frozen ingreso, and the browser is sent to the
/// sale's page (a reload or a second click only shows it again). Not valid: the form again,
/// each error next to its field.
pub async fn submit(
    req: HttpRequest,
    state: web::Data<AppState>,
    portal: web::Data<Portal>,
    token: web::Path<String>,
    form: web::Form<FiscalForm>,
) -> Result<HttpResponse, PortalError> {
    let p = opened(&state, &portal, &token).await?;
    let f = form.into_inner();
    let checked = fiscal::check(&f.fiscal_input(), None);
    let email = fiscal::check_email(Some(&f.email));
    let receptor = match (checked, email) {
        (Ok(r), Ok(_)) => r,
        (r, e) => {
            let mut errors = r.err().unwrap_or_default();
            errors.extend(e.err());
            let page = sale_page(&state, &portal, &p, &token, Some((&f, &errors))).await?;
            // Only a page still showing the form is an answer to bad input.
            let code = if page.form.is_some() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::OK
            };
            return html(&page, code);
        }
    };
    let back = see_other(format!("/facturar/{token}"));
    // The sale as the page would show it: only a sale still waiting for its invoice, within
    // its period, takes a submission; anything else (another tab won) just shows the state.
    let page = sale_page(&state, &portal, &p, &token, None).await?;
    if page.form.is_none() {
        return Ok(back);
    }
    let draft = match state.ingestor.portal_draft(
        &p,
        receptor.clone(),
        state.ingestor.fecha(Utc::now()),
    ) {
        Ok(d) => d,
        Err(reason) => {
            tracing::warn!(payment = %p.payment.payment_id, %reason, "portal: the sale cannot be invoiced as the customer asked");
            let mut page = page;
            page.form = None;
            page.status = status(
                "warn",
                "Esta compra no puede facturarse en línea",
                format!(
                    "Comuníquese con {} para obtener su factura.",
                    portal.merchant
                ),
            );
            return html(&page, StatusCode::OK);
        }
    };
    let mut customer: CustomerData =
        serde_json::from_str(&p.payment.customer_json).unwrap_or_default();
    if let ReceptorData::Nominativo {
        rfc,
        nombre,
        domicilio_fiscal,
        regimen_fiscal,
        uso_cfdi,
    } = &receptor
    {
        customer.rfc = Some(rfc.to_string());
        customer.nombre = Some(nombre.clone());
        customer.codigo_postal = Some(domicilio_fiscal.clone());
        customer.regimen_fiscal = Some(regimen_fiscal.clone());
        customer.uso_cfdi = Some(uso_cfdi.clone());
    }
    customer.email = Some(f.email.trim().to_owned());
    let client = portal.proxies.client(&req);
    let outcome = state
        .db
        .portal_submit(&PortalSubmission {
            payment_row: p.id,
            customer_json: serde_json::to_string(&customer).unwrap_or_else(|_| "{}".into()),
            email: f.email.trim().to_owned(),
            client_ip: Some(client.ip.to_string()),
            draft,
        })
        .await?;
    match outcome {
        Submitted::Queued { outbox_id } => tracing::info!(
            payment = %p.payment.payment_id, outbox_id, client = %client.ip,
            "portal: the customer asked for a nominative invoice; frozen and queued"
        ),
        Submitted::Taken => tracing::info!(
            payment = %p.payment.payment_id,
            "portal: the sale was no longer waiting (another submission or the factura global won); nothing written"
        ),
    }
    Ok(back)
}

/// The sale's stamped CFDI, or a 404 in Spanish while it has none.
async fn stamped_xml(
    state: &AppState,
    portal: &Portal,
    token: &str,
) -> Result<Vec<u8>, PortalError> {
    let p = opened(state, portal, token).await?;
    let none = || PortalError::NotFound("Esta compra aún no tiene una factura timbrada.".into());
    let id = state.db.ingreso_of(p.id).await?.ok_or_else(none)?;
    let d = state.db.document(id).await?.ok_or_else(none)?;
    match (d.stamped_xml, d.state) {
        (Some(xml), DocumentState::Stamped) => Ok(xml),
        _ => Err(none()),
    }
}

/// A download named the conventional way (`{RFC}_{Serie}{Folio}_{UUID}.ext`).
fn download(bytes: Vec<u8>, content_type: &str, name: &str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .insert_header(("Cache-Control", "no-store"))
        .body(bytes)
}

fn unprintable(e: crate::pdf::PrintError) -> PortalError {
    tracing::error!(error = %e, "portal: a stamped CFDI cannot be printed");
    PortalError::NotFound("La factura no se puede mostrar ahora; intente más tarde.".into())
}

/// `GET /facturar/{token}/xml`: the stamped CFDI.
pub async fn xml(
    state: web::Data<AppState>,
    portal: web::Data<Portal>,
    token: web::Path<String>,
) -> Result<HttpResponse, PortalError> {
    let xml = stamped_xml(&state, &portal, &token).await?;
    let name = crate::pdf::file_name(&xml, "xml").map_err(unprintable)?;
    Ok(download(xml, "application/xml; charset=utf-8", &name))
}

/// `GET /facturar/{token}/pdf`: its representación impresa.
pub async fn pdf(
    state: web::Data<AppState>,
    portal: web::Data<Portal>,
    token: web::Path<String>,
) -> Result<HttpResponse, PortalError> {
    let xml = stamped_xml(&state, &portal, &token).await?;
    let name = crate::pdf::file_name(&xml, "pdf").map_err(unprintable)?;
    let bytes = crate::pdf::render_blocking(xml, state.pdf.clone())
        .await
        .map_err(unprintable)?;
    Ok(download(bytes, "application/pdf", &name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_read_as_customers_write_them() {
        for (text, want) in [
            ("1160", "1160"),
            ("1,160.00", "1160.00"),
            ("$1160.5", "1160.5"),
            (" 1160.00 MXN ", "1160.00"),
            ("$ 116.00", "116.00"),
        ] {
            assert_eq!(
                parse_total(text).map(|d| d.to_string()).as_deref(),
                Some(want),
                "{text}"
            );
        }
        for bad in ["", "abc", "0", "-5", "1.2.3", "1e5"] {
            assert_eq!(parse_total(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_folio_is_letters_then_digits() {
        let sf = |s| serie_folio(s).map(|(a, b)| format!("{a}/{b}"));
        assert_eq!(sf("A-15").as_deref(), Some("A/15"));
        assert_eq!(sf("A15").as_deref(), Some("A/15"));
        assert_eq!(sf("FAC 0007").as_deref(), Some("FAC/0007"));
        for none in ["15", "PI_3QX7", "A-", "A-1B", "ORD-2026-000123", ""] {
            assert_eq!(sf(none), None, "{none}");
        }
    }
}
