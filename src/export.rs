//! The accountant's monthly export (`autofactura export --month 2026-11 --out FILE.zip`, and
//! `/admin/export/month` in the admin): one ZIP with
//!
//! - every stamped XML whose Fecha falls in the month (Mexico City), exactly as stamped, under
//!   `{kind}/{RFC emisor}_{serie}{folio}_{UUID}.xml` (`ingreso/`, `egreso/`, `global/`), and its
//!   PDF (the representación impresa, printed from that XML as everywhere else) beside it as
//!   `….pdf`, unless left out (`--without-pdf`: a faster export of a very large month);
//! - `documentos.csv`, one row per document: UUID, serie-folio, fecha, tipo, receptor, subtotal,
//!   descuento, taxes, total, currency, status, related UUIDs (read from the stamped XML itself);
//! - `acuses/{UUID}.xml`: the cancellation acuses of those documents.
//!
//! It is written in passes over the database, a page of [`PAGE`] documents at a time, straight
//! into the ZIP: memory holds one page and the ZIP's directory, whatever the month's size. The
//! directory is `rawzip`'s, about 180 bytes an entry with its name (the `zip` crate's took 377:
//! about 6 of the 10.5 MiB that a month of 10,000 documents and their PDFs added to the peak).
//!
//! Who may import it: `ops` (the command) and `admin` (the download). It imports the store and
//! the document engine's XML reader.

use std::io::Write;

use chrono::{NaiveDate, NaiveDateTime};
use flate2::write::DeflateEncoder;
use rawzip::time::UtcDateTime;
use rawzip::{
    CompressionMethod, DataDescriptorOutput, ZipArchiveWriter, ZipDataWriter, ZipEntryWriter,
};

use crate::cfdi::dom::{Element, NS_CFDI, NS_PAGOS20};
use crate::pdf::PdfOptions;
use crate::store::{Db, ExportDoc, StoreError};

/// Documents read per database round trip. A page is the month's part in memory, held twice
/// (as the driver's rows, then as documents): at 6 KB a stamped XML, 100 hold about 1.2 MB less
/// than 200 did. A month of 10,000 took 85 and 90 s with it, 86.5 s with 200 (BENCHMARKS.md).
pub const PAGE: i64 = 100;

/// The CSV's header (its columns, in order).
pub const CSV_HEADER: &str = "uuid,serie_folio,fecha,tipo,kind,receptor_rfc,receptor_nombre,subtotal,descuento,impuestos_trasladados,impuestos_retenidos,total,moneda,status,uuids_relacionados,uuids_pagados\r\n";

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub documents: usize,
    pub acuses: usize,
    /// PDFs written (one per document unless left out; a document that cannot be printed is
    /// logged and left without one).
    pub pdfs: usize,
}

/// `2026-11` → the first instant of that month and of the next (Mexico City, like Fecha).
pub fn month_range(month: &str) -> Result<(NaiveDateTime, NaiveDateTime), String> {
    let bad = || format!("`{month}` is not a month: write it as YYYY-MM, e.g. 2026-11");
    let first = NaiveDate::parse_from_str(&format!("{month}-01"), "%Y-%m-%d").map_err(|_| bad())?;
    let next = first
        .checked_add_months(chrono::Months::new(1))
        .ok_or_else(bad)?;
    Ok((
        first.and_hms_opt(0, 0, 0).ok_or_else(bad)?,
        next.and_hms_opt(0, 0, 0).ok_or_else(bad)?,
    ))
}

/// Writes the export of `month` to `out`, with each document's PDF printed with `pdf` when
/// given.
pub async fn write_month<W: Write>(
    db: &Db,
    month: &str,
    out: W,
    pdf: Option<&PdfOptions>,
) -> anyhow::Result<Counts> {
    let (from, to) = month_range(month).map_err(|e| anyhow::anyhow!(e))?;
    // The directory's entries, sized once: doubling its vector at the 16,384th entry held both
    // copies at once, the export's peak (2 MiB over a month of 10,000 documents).
    let documents_in_month = db.count_export_documents(from, to).await?;
    let entries = usize::try_from(documents_in_month)
        .unwrap_or(0)
        .saturating_mul(2)
        .saturating_add(1);
    let mut zip = ZipArchiveWriter::builder()
        .with_capacity(entries)
        .build(out);
    let when = UtcDateTime::from_unix(chrono::Utc::now().timestamp());
    let mut counts = Counts::default();

    let documents = async |after| db.export_documents(from, to, after, PAGE).await;
    // Pass 1: the CSV, one row per document, one entry written across the pages.
    {
        let (mut entry, csv) = start(&mut zip, "documentos.csv", when)?;
        let mut csv = deflate(csv, &mut entry);
        csv.write_all(CSV_HEADER.as_bytes())?;
        each_page(
            documents,
            |d| d.id,
            async |d| {
                csv.write_all(csv_row(d).as_bytes())?;
                counts.documents += 1;
                Ok(())
            },
        )
        .await?;
        let descriptor = end(csv)?;
        entry.finish(descriptor)?;
    }
    // Pass 2: the stamped XMLs, byte for byte, each with its PDF (printed one at a time, see
    // `print`: memory stays one page and one PDF).
    each_page(documents, |d| d.id, async |d| {
        let name = xml_name(d);
        add(&mut zip, &name, &d.stamped_xml, when)?;
        let Some(pdf) = pdf else {
            return Ok(());
        };
        match print(&d.stamped_xml, pdf).await {
            Ok(bytes) => {
                let pdf_name = format!("{}.pdf", name.trim_end_matches(".xml"));
                add(&mut zip, &pdf_name, &bytes, when)?;
                counts.pdfs += 1;
            }
            Err(e) => {
                tracing::warn!(uuid = %d.uuid, error = %e, "month export: this document cannot be printed; its XML goes without a PDF");
            }
        }
        Ok(())
    })
    .await?;
    // Pass 3: the cancellation acuses.
    let acuses = async |after| db.export_acuses(from, to, after, PAGE).await;
    each_page(
        acuses,
        |a| a.id,
        async |a| {
            let name = format!("acuses/{}.xml", safe(&a.uuid));
            add(&mut zip, &name, a.acuse_xml.as_bytes(), when)?;
            counts.acuses += 1;
            Ok(())
        },
    )
    .await?;
    zip.finish()?.flush()?;
    Ok(counts)
}

/// Starts a deflated entry dated `when` (the export's own time), with the usual file mode
/// `rw-r--r--` of a regular file: without a mode, an unzip tool makes up its own from the
/// reader's umask.
fn start<'z, W: Write>(
    zip: &'z mut ZipArchiveWriter<W>,
    name: &str,
    when: UtcDateTime,
) -> anyhow::Result<(ZipEntryWriter<'z, W>, rawzip::ZipDataWriterConfig)> {
    Ok(zip
        .new_file(name)
        .compression_method(CompressionMethod::Deflate)
        .last_modified(when)
        .unix_permissions(0o100_644)
        .start()?)
}

/// Writes one whole entry, deflated.
fn add<W: Write>(
    zip: &mut ZipArchiveWriter<W>,
    name: &str,
    bytes: &[u8],
    when: UtcDateTime,
) -> anyhow::Result<()> {
    let (mut entry, data) = start(zip, name, when)?;
    let mut data = deflate(data, &mut entry);
    data.write_all(bytes)?;
    let descriptor = end(data)?;
    entry.finish(descriptor)?;
    Ok(())
}

/// The writer of an entry's data, deflating into `entry`.
fn deflate<E: Write>(
    data: rawzip::ZipDataWriterConfig,
    entry: E,
) -> ZipDataWriter<DeflateEncoder<E>> {
    data.wrap(DeflateEncoder::new(entry, flate2::Compression::default()))
}

/// Ends an entry's data: the last deflated bytes, and the descriptor the entry ends with.
fn end<E: Write>(data: ZipDataWriter<DeflateEncoder<E>>) -> anyhow::Result<DataDescriptorOutput> {
    let (deflate, descriptor) = data.finish()?;
    deflate.finish()?;
    Ok(descriptor)
}

/// Prints one document's PDF. `autofactura export` runs alone on a multi-threaded runtime, so
/// it prints on the thread it runs on: handing each document to the blocking pool kept a second
/// thread's heap and stack resident, 3–5 MiB of the month's peak of 36–40 MiB (BENCHMARKS.md).
/// In the server (the admin's export, on an HTTP worker's own single-threaded runtime) the
/// blocking pool prints, so the worker's other requests go on meanwhile.
async fn print(xml: &[u8], opts: &PdfOptions) -> Result<Vec<u8>, crate::pdf::PrintError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| crate::pdf::render(xml, opts))
    } else {
        crate::pdf::render_blocking(xml.to_vec(), opts.clone()).await
    }
}

/// Calls `each` on every row `fetch` gives, a page at a time: `fetch(after)` answers the page
/// after the id `after` (keyset), and an empty page ends it.
async fn each_page<T>(
    fetch: impl AsyncFn(i64) -> Result<Vec<T>, StoreError>,
    id: impl Fn(&T) -> i64,
    mut each: impl AsyncFnMut(&T) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut after = 0;
    loop {
        let page = fetch(after).await?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = id(last);
        for t in &page {
            each(t).await?;
        }
    }
}

/// `{kind}/{RFC emisor}_{serie}{folio}_{UUID}.xml`, the name accountants' tools expect.
pub fn xml_name(d: &ExportDoc) -> String {
    let root = Element::parse(&d.stamped_xml).ok();
    let attr = |name: &str| root.as_ref().and_then(|r| r.attr(name)).unwrap_or("");
    let rfc = root
        .as_ref()
        .and_then(|r| r.child_attr(NS_CFDI, "Emisor", "Rfc"))
        .unwrap_or("");
    format!(
        "{}/{}_{}{}_{}.xml",
        safe(&d.kind),
        safe(rfc),
        safe(attr("Serie")),
        safe(attr("Folio")),
        safe(&d.uuid)
    )
}

/// Only what is safe in a file name inside the ZIP (UUIDs, RFCs, series and folios are).
fn safe(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '&' | '_'))
        .collect()
}

/// One CSV line of a document, read from its stamped XML.
fn csv_row(d: &ExportDoc) -> String {
    let root = Element::parse(&d.stamped_xml).ok();
    let attr = |name: &str| root.as_ref().and_then(|r| r.attr(name)).unwrap_or("");
    let child = |el: &str, name: &str| {
        root.as_ref()
            .and_then(|r| r.child_attr(NS_CFDI, el, name))
            .unwrap_or("")
    };
    let related: Vec<&str> = root
        .as_ref()
        .map(|r| {
            r.path(NS_CFDI, &["CfdiRelacionados", "CfdiRelacionado"])
                .into_iter()
                .filter_map(|e| e.attr("UUID"))
                .collect()
        })
        .unwrap_or_default();
    // A REP's (tipo P) invoices paid, with the parcialidad: what the contador matches it to.
    let paid: Vec<String> = root
        .as_ref()
        .map(|r| {
            r.children_named(NS_CFDI, "Complemento")
                .flat_map(|c| c.path(NS_PAGOS20, &["Pagos", "Pago", "DoctoRelacionado"]))
                .filter_map(|d| {
                    let id = d.attr("IdDocumento")?;
                    Some(match d.attr("NumParcialidad") {
                        Some(n) => format!("{id}#{n}"),
                        None => id.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let serie_folio = match (attr("Serie"), attr("Folio")) {
        ("", f) => f.to_owned(),
        (s, f) => format!("{s}-{f}"),
    };
    let cells = [
        d.uuid.as_str(),
        &serie_folio,
        attr("Fecha"),
        attr("TipoDeComprobante"),
        &d.kind,
        child("Receptor", "Rfc"),
        child("Receptor", "Nombre"),
        attr("SubTotal"),
        attr("Descuento"),
        child("Impuestos", "TotalImpuestosTrasladados"),
        child("Impuestos", "TotalImpuestosRetenidos"),
        attr("Total"),
        attr("Moneda"),
        &d.state,
        &related.join(";"),
        &paid.join(";"),
    ];
    let mut line = cells.iter().map(|c| cell(c)).collect::<Vec<_>>().join(",");
    line.push_str("\r\n");
    line
}

/// One CSV field, quoted; a text a spreadsheet would run as a formula (`=`, `+`, `-`, `@`,
/// tab, CR) starts with `'` so it is shown, not run. (The admin's list export uses it too.)
pub fn cell(s: &str) -> String {
    let risky = s.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let s = if risky { format!("'{s}") } else { s.to_owned() };
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::{CSV_HEADER, cell, csv_row, month_range};
    use crate::store::ExportDoc;

    #[test]
    fn cells_are_quoted_and_formulas_defused() {
        assert_eq!(cell("a\"b"), "\"a\"\"b\"");
        assert_eq!(cell("=HYPERLINK(1)"), "\"'=HYPERLINK(1)\"");
        assert_eq!(cell("-1"), "\"'-1\"");
        assert_eq!(cell("116.00"), "\"116.00\"");
    }

    #[test]
    fn a_reps_row_names_the_invoices_it_pays_with_their_parcialidad() {
        let xml = r#"<cfdi:Comprobante xmlns:cfdi="http://www.sat.gob.mx/cfd/4" xmlns:pago20="http://www.sat.gob.mx/Pagos20" Serie="P" Folio="7" TipoDeComprobante="P" Total="0" Moneda="XXX"><cfdi:Receptor Rfc="XIQB891116QE4" Nombre="X"/><cfdi:Complemento><pago20:Pagos Version="2.0"><pago20:Pago><pago20:DoctoRelacionado IdDocumento="AAAA" NumParcialidad="2"/><pago20:DoctoRelacionado IdDocumento="BBBB" NumParcialidad="1"/></pago20:Pago></pago20:Pagos></cfdi:Complemento></cfdi:Comprobante>"#;
        let doc = ExportDoc {
            id: 1,
            kind: "pago".into(),
            state: "stamped".into(),
            uuid: "CCCC".into(),
            stamped_xml: xml.as_bytes().to_vec(),
        };
        let row = csv_row(&doc);
        let cells: Vec<&str> = row.trim_end().split(',').collect();
        let header: Vec<&str> = CSV_HEADER.trim_end().split(',').collect();
        assert_eq!(cells.len(), header.len(), "{row}");
        assert_eq!(header.last(), Some(&"uuids_pagados"));
        assert_eq!(cells.last(), Some(&"\"AAAA#2;BBBB#1\""), "{row}");
        assert_eq!(cells[1], "\"P-7\"");
        assert_eq!(cells[14], "\"\"", "no CfdiRelacionados");
    }

    #[test]
    fn a_month_is_its_first_instant_to_the_next_months() {
        let (from, to) = month_range("2026-12").expect("a month");
        assert_eq!(from.to_string(), "2026-12-01 00:00:00");
        assert_eq!(to.to_string(), "2027-01-01 00:00:00");
        assert!(month_range("2026-13").is_err());
        assert!(month_range("november").is_err());
    }
}
