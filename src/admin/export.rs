//! CSV export of any invoices list, with the same view, state, search, dates and order as the
//! page it is linked from (`Export CSV`), every page of it up to [`MAX_ROWS`].

use actix_web::{HttpResponse, web};

use super::Admin;
use super::auth::Session;
use super::format::{Clock, local};
use super::lists::{Asked, ListQuery, RowView};
use crate::error::AdminError;
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
            v.state,
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

/// One CSV field, quoted; a text a spreadsheet would run as a formula (`=`, `+`, `-`, `@`,
/// tab, CR) starts with `'` so it is shown, not run.
fn cell(s: &str) -> String {
    let risky = s.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let s = if risky { format!("'{s}") } else { s.to_owned() };
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn cells_are_quoted_and_formulas_defused() {
        assert_eq!(cell("a\"b"), "\"a\"\"b\"");
        assert_eq!(cell("=HYPERLINK(1)"), "\"'=HYPERLINK(1)\"");
        assert_eq!(cell("-1"), "\"'-1\"");
        assert_eq!(cell("116.00"), "\"116.00\"");
    }
}
