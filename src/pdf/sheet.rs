//! A printable voucher that is not a CFDI (an ARCA comprobante, `crate::arca::print`): a title,
//! heading lines, sections of labelled fields and a verification QR that is also a link, on the
//! pages, font and QR of the CFDI's representación impresa. Same input, same bytes.

use pdf_writer::Rect;

use super::font::Face;
use super::layout::{MARGIN, Pages};
use super::{Logo, PdfOptions, assemble, draw, page_size};

const BODY: f32 = 8.0;
/// The QR's side with its quiet zone, in points (about 3.9 cm).
const QR: f32 = 110.0;

/// What a sheet shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sheet {
    /// `Factura B`, drawn large at the top right.
    pub title: String,
    /// Lines under the title (number, date).
    pub heading: Vec<String>,
    /// Titled sections of `label: value` lines.
    pub sections: Vec<(String, Vec<(String, String)>)>,
    /// Encoded in the QR, which opens it.
    pub qr_url: String,
    /// Lines beside the QR (the authorization).
    pub beside_qr: Vec<String>,
    /// The footer's legend and the document's identity on every page.
    pub legend: String,
    pub id: String,
}

/// The PDF of `s`.
pub fn render(s: &Sheet, opts: &PdfOptions) -> Vec<u8> {
    let (w, h) = page_size(opts.paper);
    let mut p = Pages::new(w, h, format!("{} (continuación)", s.id));
    header(&mut p, s, opts.logo.as_ref());
    for (title, fields) in &s.sections {
        p.section(title);
        for (k, v) in fields {
            p.paragraph(
                MARGIN,
                p.inner_width(),
                Face::Regular,
                BODY,
                &format!("{k}: {v}"),
            );
        }
    }
    p.section("Autorización");
    p.ensure(QR + 8.0);
    let top = p.y + BODY;
    draw::qr(&mut p, &s.qr_url, MARGIN, top - QR, QR);
    let link = Rect::new(MARGIN, top - QR, MARGIN + QR, top);
    let x = MARGIN + QR + 12.0;
    let width = p.inner_width() - QR - 12.0;
    for l in &s.beside_qr {
        p.paragraph(x, width, Face::Regular, BODY, l);
    }
    // The link is on the first page only: the QR is there unless the sections overflowed.
    let first_page = p.done.is_empty();
    let done = p.finish(&s.legend, &s.id);
    let links = if first_page {
        vec![(link, s.qr_url.clone())]
    } else {
        Vec::new()
    };
    assemble(
        done,
        (w, h),
        &format!("{} {}", s.title, s.id),
        opts.logo.as_ref(),
        &links,
    )
}

fn header(p: &mut Pages, s: &Sheet, logo: Option<&Logo>) {
    let top = p.y + 8.0;
    if let Some(l) = logo {
        draw::draw_logo(p, l, top);
    }
    let right = p.width - MARGIN;
    let mut y = p.y;
    p.text_right(right, y - 6.0, Face::Bold, 14.0, &s.title);
    y -= 22.0;
    for l in &s.heading {
        p.text_right(right, y, Face::Regular, BODY, l);
        y -= BODY * 1.4;
    }
    p.y = y.min(top - 64.0) - 4.0;
}
