//! The representación impresa of a stamped CFDI: a PDF built from the stamped XML alone
//! (Anexo 20's printed fields, the SAT verification QR, the Sellos and the TFD cadena), with
//! real text in an embedded font (DejaVu Sans) and an optional merchant logo. The same XML and
//! options give the same bytes (no dates, no random ids), so a stored CFDI prints identically
//! wherever the PDF is offered (API, admin, CLI, email).
//!
//! - [`doc`]: the printable fields read from the XML.
//! - [`sheet`]: a voucher that is not a CFDI (an ARCA comprobante): labelled fields and a
//!   verification QR, drawn with the same pages, font and QR.
//! - `layout`: pages and the cursor that fills them; `font`: the embedded font; `draw`: the
//!   sections of the page; `image`: the merchant logo (JPEG or PNG).
//!
//! Who may import it: `startup`, `api`, `admin`, `ops`, `arca` (its printable voucher), the
//! email deliveries and tests. It uses the document engine's XML tree and cadena, the SAT
//! status query's expresión impresa and `[pdf]`.

pub mod doc;
mod draw;
mod font;
mod image;
mod layout;
pub mod sheet;

use std::io::Write;

use pdf_writer::{Filter, Finish, Name, Pdf, Rect, Ref};

pub use doc::{PrintError, Printable};
pub use image::Logo;

pub use crate::config::Paper;

/// Width and height of `paper` in points.
fn page_size(paper: Paper) -> (f32, f32) {
    match paper {
        Paper::Letter => (612.0, 792.0),
        Paper::A4 => (595.28, 841.89),
    }
}

/// How the PDF is made: paper and the optional logo.
#[derive(Debug, Clone, Default)]
pub struct PdfOptions {
    pub paper: Paper,
    pub logo: Option<Logo>,
}

impl PdfOptions {
    /// From `[pdf]`, reading the logo file (once, at start).
    pub fn from_settings(s: &crate::config::PdfSettings) -> anyhow::Result<PdfOptions> {
        let logo = match &s.logo {
            None => None,
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|e| {
                    anyhow::anyhow!("[pdf] logo: cannot read {}: {e}", path.display())
                })?;
                Some(
                    Logo::from_bytes(&bytes)
                        .map_err(|e| anyhow::anyhow!("[pdf] logo {}: {e}", path.display()))?,
                )
            }
        };
        Ok(PdfOptions {
            paper: s.paper,
            logo,
        })
    }
}

/// The PDF of the stamped CFDI `xml`.
pub fn render(xml: &[u8], opts: &PdfOptions) -> Result<Vec<u8>, PrintError> {
    let doc = Printable::from_xml(xml)?;
    let (w, h) = page_size(opts.paper);
    let pages = draw::draw(&doc, w, h, opts.logo.as_ref());
    let done = pages.finish(
        "Este documento es una representación impresa de un CFDI",
        &format!("UUID {}", doc.uuid),
    );
    let title = format!("CFDI {} {}", doc.serie_folio, doc.uuid);
    Ok(assemble(
        done,
        (w, h),
        title.trim(),
        opts.logo.as_ref(),
        &[],
    ))
}

/// The PDF of drawn pages `done` (`w` × `h` points), titled `title`, with `links` (an area
/// of the first page and the URL it opens).
fn assemble(
    (fonts, contents): (font::Fonts, Vec<pdf_writer::Content>),
    (w, h): (f32, f32),
    title: &str,
    logo_image: Option<&Logo>,
    links: &[(Rect, String)],
) -> Vec<u8> {
    let mut ids = Ids(0);
    let catalog = ids.next();
    let tree = ids.next();
    let info = ids.next();
    let regular = ids.next();
    let bold = ids.next();
    let logo = logo_image.map(|_| ids.next());
    let page_ids: Vec<(Ref, Ref)> = contents.iter().map(|_| (ids.next(), ids.next())).collect();
    let link_ids: Vec<Ref> = links.iter().map(|_| ids.next()).collect();

    let mut pdf = Pdf::new();
    pdf.catalog(catalog).pages(tree);
    pdf.pages(tree)
        .kids(page_ids.iter().map(|p| p.0))
        .count(i32::try_from(page_ids.len()).unwrap_or(i32::MAX));
    pdf.document_info(info)
        .title(pdf_writer::TextStr(title))
        .producer(pdf_writer::TextStr("autofactura"));
    for (i, ((page_id, content_id), content)) in page_ids.iter().zip(contents).enumerate() {
        let mut page = pdf.page(*page_id);
        page.media_box(Rect::new(0.0, 0.0, w, h))
            .parent(tree)
            .contents(*content_id);
        if i == 0 && !link_ids.is_empty() {
            page.annotations(link_ids.iter().copied());
        }
        let mut res = page.resources();
        res.fonts()
            .pair(font::Face::Regular.resource(), regular)
            .pair(font::Face::Bold.resource(), bold);
        if let Some(l) = logo {
            res.x_objects().pair(Name(b"Logo"), l);
        }
        res.finish();
        page.finish();
        pdf.stream(*content_id, &deflate(&content.finish()))
            .filter(Filter::FlateDecode);
    }
    for (id, (rect, url)) in link_ids.iter().zip(links) {
        let mut a = pdf.annotation(*id);
        a.subtype(pdf_writer::types::AnnotationType::Link)
            .rect(*rect)
            .border(0.0, 0.0, 0.0, None);
        a.action()
            .action_type(pdf_writer::types::ActionType::Uri)
            .uri(pdf_writer::Str(url.as_bytes()));
    }
    if let (Some(id), Some(l)) = (logo, logo_image) {
        l.write(&mut pdf, id);
    }
    fonts.write(&mut pdf, regular, bold, &mut || ids.next());
    pdf.finish()
}

/// [`render`] off the async threads (a page of text and a font subset is milliseconds of CPU).
pub async fn render_blocking(xml: Vec<u8>, opts: PdfOptions) -> Result<Vec<u8>, PrintError> {
    tokio::task::spawn_blocking(move || render(&xml, &opts))
        .await
        .map_err(|e| PrintError::Xml(format!("the PDF renderer stopped: {e}")))?
}

/// The conventional file name of a stamped CFDI's XML or PDF: `{RFC}_{Serie}{Folio}_{UUID}.ext`
/// (RFC of the emisor; serie and folio left out when absent).
pub fn file_name(xml: &[u8], ext: &str) -> Result<String, PrintError> {
    use crate::cfdi::dom::{Element, NS_CFDI};
    let root = Element::parse(xml).map_err(|e| PrintError::Xml(e.to_string()))?;
    let tfd = crate::cfdi::Tfd::from_comprobante(&root).ok_or(PrintError::NotStamped)?;
    let rfc = root.child_attr(NS_CFDI, "Emisor", "Rfc").unwrap_or("CFDI");
    let serie_folio = format!(
        "{}{}",
        root.attr("Serie").unwrap_or_default(),
        root.attr("Folio").unwrap_or_default()
    );
    // Only what is safe in a file name and a Content-Disposition header.
    let safe = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect()
    };
    Ok(match serie_folio.is_empty() {
        true => format!("{}_{}.{ext}", safe(rfc), safe(&tfd.uuid)),
        false => format!(
            "{}_{}_{}.{ext}",
            safe(rfc),
            safe(&serie_folio),
            safe(&tfd.uuid)
        ),
    })
}

struct Ids(i32);

impl Ids {
    fn next(&mut self) -> Ref {
        self.0 += 1;
        Ref::new(self.0)
    }
}

/// zlib-compressed `data` (PDF's FlateDecode).
pub(crate) fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}
