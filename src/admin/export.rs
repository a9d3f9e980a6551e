//! CSV export of any invoices list, with the same view, state, search, dates and order as the
//! page it is linked from (`Export CSV`), every page of it up to [`MAX_ROWS`].

use actix_web::{HttpResponse, web};

use super::Admin;
use super::auth::Session;
use super::format::{Clock, local};
use super::lists::{Asked, ListQuery, RowView};
use crate::error::AdminError;
use crate::export::cell;
use crate::state::AppState;

/// The most rows one export holds.
pub const MAX_ROWS: i64 = 10_000;

pub async fn invoices_csv(
    state: web::Data<AppState>,
    admin: web::Data<Admin>,
    _session: Session,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, AdminError> {
    let clock = Clock::of(&admin);
    let Ok(mut asked) = Asked::of(&q, &clock)? else {
        return Err(AdminError::NotFound(
            "that list is a page of its own, with nothing to export".into(),
        ));
    };
    asked.filter.limit = MAX_ROWS;
    asked.filter.offset = 0;
    let (rows, _) = state.db.list_documents(&asked.filter).await?;
    let mut out = String::from(
        "payment_id,provider,amount,currency,paid_at_cdmx,state,serie_folio,rfc,uuid,attempts,sat_window,source,code,message\r\n",
    );
    for r in rows {
        let (amount, currency, paid_at) = (r.amount.clone(), r.currency.clone(), r.paid_at);
        let v = RowView::of(r, &clock);
        let cells = [
            v.payment_id,
            v.provider,
            amount,
            currency,
            local(paid_at),
            v.state.to_owned(),
            v.serie_folio,
            v.rfc,
            v.uuid,
            v.attempts.to_string(),
            v.deadline.text,
            v.said.source.to_owned(),
            v.said.code,
            v.said.message,
        ];
        let line: Vec<String> = cells.iter().map(|c| cell(c)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    let name = format!(
        "invoices-{}-{}.csv",
        asked.view_key,
        clock.now.format("%Y%m%d-%H%M")
    );
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(out))
}

/// `?month=YYYY-MM` of the month export. Optional to the extractor, so that a request
/// without a session is sent to the login before its query is judged.
#[derive(Debug, serde::Deserialize)]
pub struct MonthQuery {
    month: Option<String>,
}

/// `GET /admin/export/month?month=YYYY-MM`: the accountant's ZIP ([`crate::export`]), written
/// to a temporary file page by page and streamed from it, so neither step holds the month in
/// memory. The file is unlinked as soon as it is open: nothing is left behind.
pub async fn month_zip(
    state: web::Data<AppState>,
    _session: Session,
    q: web::Query<MonthQuery>,
) -> Result<HttpResponse, AdminError> {
    let month = q.into_inner().month.unwrap_or_default();
    crate::export::month_range(&month).map_err(AdminError::Invalid)?;
    let path = std::env::temp_dir().join(format!(
        "autofactura-export-{}.zip",
        uuid::Uuid::new_v4().simple()
    ));
    let failed = |e: &dyn std::fmt::Display| {
        tracing::error!(error = %e, month = %month, "month export failed");
        AdminError::Refused(format!(
            "the export of {month} could not be written: {e}; try again, or run `autofactura export \
             --month {month} --out FILE.zip` on the server"
        ))
    };
    let file = std::fs::File::create(&path).map_err(|e| failed(&e))?;
    let written = crate::export::write_month(
        &state.db,
        &month,
        std::io::BufWriter::new(file),
        Some(&state.pdf),
    )
    .await;
    let opened = tokio::fs::File::open(&path).await;
    // Unlinked at once: the open handle keeps the bytes until the download ends.
    let _ = std::fs::remove_file(&path);
    let counts = written.map_err(|e| failed(&e))?;
    let file = opened.map_err(|e| failed(&e))?;
    tracing::info!(month = %month, documents = counts.documents, pdfs = counts.pdfs, acuses = counts.acuses, "month export downloaded");
    Ok(HttpResponse::Ok()
        .content_type("application/zip")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"autofactura-{month}.zip\""),
        ))
        .insert_header(("Cache-Control", "no-store"))
        .streaming(tokio_util::io::ReaderStream::new(file)))
}
