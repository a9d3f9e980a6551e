//! The sections of the representación impresa, top to bottom: header (logo, title, folio
//! fiscal), emisor and receptor, the comprobante's data, conceptos (header repeated on every
//! page), totals, pagos, and the timbre (QR, certification data, Sellos, TFD cadena).

use pdf_writer::Name;

use super::doc::{Concepto, Printable};
use super::font::Face;
use super::image::Logo;
use super::layout::{MARGIN, Pages};

pub(super) const BODY: f32 = 7.5;
const SMALL: f32 = 6.5;

pub fn draw(doc: &Printable, width: f32, height: f32, logo: Option<&Logo>) -> Pages {
    let head = format!(
        "{} {} · Folio fiscal {} (continuación)",
        doc.titulo, doc.serie_folio, doc.uuid
    );
    let mut p = Pages::new(width, height, head);
    header(&mut p, doc, logo);
    parties(&mut p, doc);
    datos(&mut p, doc);
    conceptos(&mut p, &doc.conceptos);
    totales(&mut p, doc);
    pagos(&mut p, doc);
    timbre(&mut p, doc);
    p
}

fn header(p: &mut Pages, doc: &Printable, logo: Option<&Logo>) {
    let top = p.y + 8.0;
    if let Some(l) = logo {
        draw_logo(p, l, top);
    }
    let right = p.width - MARGIN;
    let mut y = p.y;
    p.text_right(right, y - 6.0, Face::Bold, 14.0, doc.titulo);
    y -= 22.0;
    let lines = [
        format!("Serie y folio: {}", doc.serie_folio),
        format!("Folio fiscal: {}", doc.uuid),
        format!("Fecha de emisión: {}", doc.fecha),
        format!("Lugar de expedición: {}", doc.lugar_expedicion),
    ];
    for l in lines {
        p.text_right(right, y, Face::Regular, BODY, &l);
        y -= BODY * 1.4;
    }
    p.y = y.min(top - 64.0) - 4.0;
}

/// The logo at the top left, its top at `top`, fit in 160 × 56 points keeping its aspect
/// ratio.
pub(super) fn draw_logo(p: &mut Pages, l: &Logo, top: f32) {
    let scale = (160.0 / l.width as f32).min(56.0 / l.height as f32);
    let (w, h) = (l.width as f32 * scale, l.height as f32 * scale);
    p.page
        .save_state()
        .transform([w, 0.0, 0.0, h, MARGIN, top - h])
        .x_object(Name(b"Logo"))
        .restore_state();
}

fn parties(p: &mut Pages, doc: &Printable) {
    p.section("Emisor y receptor");
    let column = |title: &'static str, party: &super::doc::Party| {
        let mut lines = vec![
            (Face::Bold, party.nombre.clone()),
            (Face::Regular, format!("RFC: {}", party.rfc)),
        ];
        lines.extend(
            party
                .datos
                .iter()
                .map(|(k, v)| (Face::Regular, format!("{k}: {v}"))),
        );
        (title, lines)
    };
    columns(
        p,
        &[
            column("Emisor", &doc.emisor),
            column("Receptor", &doc.receptor),
        ],
    );
}

/// A titled column of wrapped lines, side by side; the cursor ends under the longest.
pub(super) fn columns(p: &mut Pages, cols: &[(&str, Vec<(Face, String)>)]) {
    let col = p.inner_width() / cols.len().max(1) as f32;
    let start = p.y;
    let mut lowest = start;
    for (i, (title, lines)) in cols.iter().enumerate() {
        let x = MARGIN + col * i as f32;
        p.y = start;
        p.text(x, p.y, Face::Bold, BODY, title);
        p.y -= BODY * 1.4;
        for (face, line) in lines {
            p.paragraph(x, col - 10.0, *face, BODY, line);
        }
        lowest = lowest.min(p.y);
    }
    p.y = lowest;
}

fn datos(p: &mut Pages, doc: &Printable) {
    p.section("Datos del comprobante");
    grid(p, &doc.comprobante);
    if let Some(g) = &doc.informacion_global {
        p.paragraph(
            MARGIN,
            p.inner_width(),
            Face::Regular,
            BODY,
            &format!("Información global: {g}"),
        );
    }
    for r in &doc.relacionados {
        p.paragraph(
            MARGIN,
            p.inner_width(),
            Face::Regular,
            BODY,
            &format!("CFDI relacionados: {r}"),
        );
    }
}

/// `label: value` pairs, three to a row.
pub(super) fn grid<K: std::fmt::Display>(p: &mut Pages, pairs: &[(K, String)]) {
    let col = p.inner_width() / 3.0;
    for row in pairs.chunks(3) {
        p.ensure(BODY * 1.4);
        for (i, (k, v)) in row.iter().enumerate() {
            let x = MARGIN + col * i as f32;
            p.text(x, p.y, Face::Bold, BODY, &format!("{k}:"));
            let w = p.fonts.width(Face::Bold, BODY, &format!("{k}: "));
            p.text(x + w, p.y, Face::Regular, BODY, v);
        }
        p.y -= BODY * 1.4;
    }
}

/// Column left edges and widths of the conceptos table.
struct Cols {
    x: [f32; 7],
    w: [f32; 7],
}

fn cols(p: &Pages) -> Cols {
    let fixed = [64.0, 42.0, 52.0, 0.0, 64.0, 52.0, 64.0];
    let desc = p.inner_width() - fixed.iter().sum::<f32>();
    let mut w = fixed;
    w[3] = desc;
    let mut x = [MARGIN; 7];
    for i in 1..7 {
        x[i] = x[i - 1] + w[i - 1];
    }
    Cols { x, w }
}

const HEADERS: [&str; 7] = [
    "Clave",
    "Cantidad",
    "Unidad",
    "Descripción",
    "Valor unitario",
    "Descuento",
    "Importe",
];

fn table_header(p: &mut Pages, c: &Cols) {
    let (y, w) = (p.y, p.inner_width());
    p.page
        .set_fill_gray(0.9)
        .rect(MARGIN, y - 3.0, w, BODY + 5.0)
        .fill_nonzero()
        .set_fill_gray(0.0);
    for (i, h) in HEADERS.iter().enumerate() {
        if i >= 4 || i == 1 {
            p.text_right(c.x[i] + c.w[i] - 3.0, p.y, Face::Bold, BODY, h);
        } else {
            p.text(c.x[i] + 2.0, p.y, Face::Bold, BODY, h);
        }
    }
    p.y -= BODY * 1.8;
}

fn conceptos(p: &mut Pages, list: &[Concepto]) {
    p.section("Conceptos");
    let c = cols(p);
    table_header(p, &c);
    for k in list {
        let desc = p.wrap(Face::Regular, BODY, c.w[3] - 4.0, &k.descripcion);
        let tax_width = p.inner_width() - (c.x[3] - MARGIN) - 4.0;
        let taxes: Vec<String> = k
            .impuestos
            .iter()
            .flat_map(|t| p.wrap(Face::Regular, SMALL, tax_width, t))
            .collect();
        let clave = [k.clave.clone(), k.no_identificacion.clone()];
        let lines = desc
            .len()
            .max(if k.no_identificacion.is_empty() { 1 } else { 2 });
        let needed = lines as f32 * BODY * 1.3 + taxes.len() as f32 * SMALL * 1.3 + 4.0;
        if p.ensure(needed) {
            table_header(p, &c);
        }
        let top = p.y;
        lines_at(p, c.x[0] + 2.0, top, &clave);
        let right = |i: usize| c.x[i] + c.w[i] - 3.0;
        p.text_right(right(1), top, Face::Regular, BODY, &k.cantidad);
        p.text(c.x[2] + 2.0, top, Face::Regular, BODY, &k.unidad);
        p.text_right(right(4), top, Face::Regular, BODY, &k.valor_unitario);
        p.text_right(right(5), top, Face::Regular, BODY, &k.descuento);
        p.text_right(right(6), top, Face::Regular, BODY, &k.importe);
        lines_at(p, c.x[3] + 2.0, top, &desc);
        p.y = top - lines as f32 * BODY * 1.3;
        for t in &taxes {
            p.text(c.x[3] + 2.0, p.y, Face::Regular, SMALL, t);
            p.y -= SMALL * 1.3;
        }
        p.y += 2.0;
        p.rule(0.85);
        p.y -= BODY * 1.4;
    }
}

/// `lines` one under the other from baseline `top` at `x`, without moving the cursor.
fn lines_at(p: &mut Pages, x: f32, top: f32, lines: &[String]) {
    for (i, l) in lines.iter().enumerate() {
        p.text(x, top - i as f32 * BODY * 1.3, Face::Regular, BODY, l);
    }
}

fn totales(p: &mut Pages, doc: &Printable) {
    let rows: Vec<(String, String)> = doc
        .totales
        .iter()
        .map(|(label, value)| (label.clone(), format!("{value} {}", doc.moneda)))
        .collect();
    totals(p, &rows);
}

/// Right-aligned `label value` rows; the one labelled `Total` larger and bold.
pub(super) fn totals(p: &mut Pages, rows: &[(String, String)]) {
    let right = p.width - MARGIN;
    p.ensure(rows.len() as f32 * BODY * 1.5 + 8.0);
    p.y -= 4.0;
    for (label, value) in rows {
        let total = label == "Total";
        let face = if total { Face::Bold } else { Face::Regular };
        let size = if total { 9.0 } else { BODY };
        p.text_right(right - 90.0, p.y, face, size, label);
        p.text_right(right, p.y, face, size, value);
        p.y -= size * 1.5;
    }
}

fn pagos(p: &mut Pages, doc: &Printable) {
    if doc.pagos.is_empty() {
        return;
    }
    p.section("Pagos (complemento para recepción de pagos 2.0)");
    let w = p.inner_width();
    for pago in &doc.pagos {
        p.paragraph(MARGIN, w, Face::Bold, BODY, &pago.linea);
        for d in &pago.documentos {
            p.paragraph(MARGIN + 10.0, w - 10.0, Face::Regular, BODY, d);
        }
    }
}

fn timbre(p: &mut Pages, doc: &Printable) {
    // SAT asks for at least 2.75 cm a side; this is 3.9 cm with the quiet zone.
    const QR: f32 = 110.0;
    p.section("Timbre fiscal digital");
    qr_beside(p, &doc.qr_url, QR, |p, x, w| {
        for (k, v) in &doc.timbre {
            p.paragraph(x, w, Face::Regular, BODY, &format!("{k}: {v}"));
        }
    });
    let full = p.inner_width();
    for (title, text) in [
        ("Sello digital del CFDI", &doc.sello_cfd),
        ("Sello digital del SAT", &doc.sello_sat),
        (
            "Cadena original del complemento de certificación digital del SAT",
            &doc.cadena_tfd,
        ),
    ] {
        // A Sello or the cadena is never split across pages: it is read (and copied) whole.
        let lines = p.wrap(Face::Regular, SMALL, full, text).len();
        p.ensure(BODY * 1.3 + lines as f32 * SMALL * 1.3 + 3.0);
        p.text(MARGIN, p.y, Face::Bold, BODY, title);
        p.y -= BODY * 1.3;
        p.paragraph(MARGIN, full, Face::Regular, SMALL, text);
        p.y -= 3.0;
    }
}

/// The QR of `url`, `size` points wide, at the left margin, and beside it what `text` writes
/// (given the left edge and width it has); the cursor ends under both.
pub(super) fn qr_beside(
    p: &mut Pages,
    url: &str,
    size: f32,
    text: impl FnOnce(&mut Pages, f32, f32),
) {
    p.ensure(size + 8.0);
    let top = p.y + BODY;
    qr(p, url, MARGIN, top - size, size);
    let x = MARGIN + size + 12.0;
    let w = p.inner_width() - size - 12.0;
    text(p, x, w);
    p.y = p.y.min(top - size - 12.0);
}

/// The QR of `url` as filled squares, `size` points wide with the quiet zone, lower-left at
/// (`x`, `y`).
pub(super) fn qr(p: &mut Pages, url: &str, x: f32, y: f32, size: f32) {
    let Ok(code) = qrcode::QrCode::with_error_correction_level(url, qrcode::EcLevel::M) else {
        return;
    };
    let n = code.width();
    let colors = code.to_colors();
    let module = size / (n + 8) as f32;
    p.page.set_fill_gray(0.0);
    for row in 0..n {
        let mut col = 0;
        while col < n {
            if colors[row * n + col] != qrcode::Color::Dark {
                col += 1;
                continue;
            }
            let start = col;
            while col < n && colors[row * n + col] == qrcode::Color::Dark {
                col += 1;
            }
            let top = y + size - (row + 4) as f32 * module;
            p.page.rect(
                x + (start + 4) as f32 * module,
                top - module,
                (col - start) as f32 * module,
                module,
            );
        }
    }
    p.page.fill_nonzero();
}
