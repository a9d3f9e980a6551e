//! The printable voucher of an Argentine comprobante authorized by ARCA: the class letter in its
//! box with the voucher code, emisor and receptor, the voucher's data, its lines and totals, and
//! the CAE with ARCA's QR (RG 4892). What to print comes ready from `arca::print`; this file
//! only lays it out, with the same pages, font and QR as the CFDI.

use super::PdfOptions;
use super::draw::{BODY, columns, grid, qr_beside, totals};
use super::font::Face;
use super::layout::{MARGIN, Pages};

/// A voucher as printed, every value already formatted.
#[derive(Debug, Clone)]
pub struct VoucherPrint {
    /// `A`, `B` or `C`.
    pub letra: char,
    /// ARCA's voucher type code, printed as `COD. 06`.
    pub codigo: i32,
    /// `FACTURA` or `NOTA DE CRÉDITO`.
    pub titulo: &'static str,
    /// Punto de venta and number, `00003-00000017`.
    pub numero: String,
    /// `dd/mm/yyyy`.
    pub fecha: String,
    /// Lines under "Emisor" (the first one bold: the razón social).
    pub emisor: Vec<String>,
    pub receptor: Vec<String>,
    /// Concepto, currency, service period, associated voucher: label → value.
    pub datos: Vec<(&'static str, String)>,
    pub lineas: Vec<Linea>,
    /// Label → amount with its currency, `Total` last.
    pub totales: Vec<(String, String)>,
    pub cae: String,
    /// `dd/mm/yyyy`.
    pub cae_vto: String,
    /// ARCA's verification URL the QR encodes.
    pub qr_url: String,
}

#[derive(Debug, Clone)]
pub struct Linea {
    pub descripcion: String,
    pub cantidad: String,
    pub precio: String,
    pub importe: String,
}

/// The PDF of `v`.
pub fn render_voucher(v: &VoucherPrint, opts: &PdfOptions) -> Vec<u8> {
    let (w, h) = super::page_size(opts.paper);
    let head = format!("{} {} N° {} (continuación)", v.titulo, v.letra, v.numero);
    let mut p = Pages::new(w, h, head);
    if let Some(l) = &opts.logo {
        let top = p.y + 8.0;
        super::draw::draw_logo(&mut p, l, top);
    }
    header(&mut p, v);
    p.section("Emisor y receptor");
    let bold_first = |lines: &[String]| {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| (if i == 0 { Face::Bold } else { Face::Regular }, l.clone()))
            .collect::<Vec<_>>()
    };
    columns(
        &mut p,
        &[
            ("Emisor", bold_first(&v.emisor)),
            ("Receptor", bold_first(&v.receptor)),
        ],
    );
    p.section("Datos del comprobante");
    grid(&mut p, &v.datos);
    lineas(&mut p, &v.lineas);
    totals(&mut p, &v.totales);
    cae(&mut p, v);
    let footer = super::Footer {
        legend: "Comprobante autorizado por ARCA",
        id: format!("CAE {}", v.cae),
    };
    let title = format!("{} {} {}", v.titulo, v.letra, v.numero);
    super::assemble(p, &footer, &title, opts)
}

/// The class letter boxed in the middle with its code under it; the title, number and date on
/// the right.
fn header(p: &mut Pages, v: &VoucherPrint) {
    const BOX: f32 = 40.0;
    let top = p.y + 8.0;
    let x = p.width / 2.0 - BOX / 2.0;
    p.page
        .set_stroke_gray(0.0)
        .set_line_width(1.0)
        .rect(x, top - BOX, BOX, BOX)
        .stroke();
    let letter = v.letra.to_string();
    let lw = p.fonts.width(Face::Bold, 26.0, &letter);
    p.text(x + (BOX - lw) / 2.0, top - 29.0, Face::Bold, 26.0, &letter);
    let code = format!("COD. {:02}", v.codigo);
    let cw = p.fonts.width(Face::Regular, 6.5, &code);
    p.text(
        x + (BOX - cw) / 2.0,
        top - BOX - 8.0,
        Face::Regular,
        6.5,
        &code,
    );
    let right = p.width - MARGIN;
    let mut y = p.y - 6.0;
    p.text_right(right, y, Face::Bold, 14.0, v.titulo);
    y -= 18.0;
    for l in [
        format!("Punto de venta y número: {}", v.numero),
        format!("Fecha de emisión: {}", v.fecha),
    ] {
        p.text_right(right, y, Face::Regular, BODY, &l);
        y -= BODY * 1.4;
    }
    p.y = y.min(top - BOX - 14.0) - 4.0;
}

fn lineas(p: &mut Pages, lineas: &[Linea]) {
    p.section("Detalle");
    let right = p.width - MARGIN;
    let (qty, price, amount) = (right - 180.0, right - 90.0, right);
    let desc_width = qty - 60.0 - MARGIN;
    let head = |p: &mut Pages| {
        p.text(MARGIN, p.y, Face::Bold, BODY, "Descripción");
        p.text_right(qty, p.y, Face::Bold, BODY, "Cantidad");
        p.text_right(price, p.y, Face::Bold, BODY, "Precio unitario");
        p.text_right(amount, p.y, Face::Bold, BODY, "Importe");
        p.y -= BODY * 1.8;
    };
    head(p);
    for l in lineas {
        let desc = p.wrap(Face::Regular, BODY, desc_width, &l.descripcion);
        if p.ensure(desc.len() as f32 * BODY * 1.3 + 4.0) {
            head(p);
        }
        let top = p.y;
        p.text_right(qty, top, Face::Regular, BODY, &l.cantidad);
        p.text_right(price, top, Face::Regular, BODY, &l.precio);
        p.text_right(amount, top, Face::Regular, BODY, &l.importe);
        for line in &desc {
            p.text(MARGIN, p.y, Face::Regular, BODY, line);
            p.y -= BODY * 1.3;
        }
        p.rule(0.85);
        p.y -= BODY * 1.4;
    }
}

fn cae(p: &mut Pages, v: &VoucherPrint) {
    // RG 4892 asks for the QR at the foot of the voucher, readable: 3.9 cm a side here.
    const QR: f32 = 110.0;
    p.section("Autorización");
    qr_beside(p, &v.qr_url, QR, |p, x, _| {
        for (k, val) in [
            ("CAE N°", v.cae.as_str()),
            ("Fecha de vencimiento del CAE", v.cae_vto.as_str()),
        ] {
            p.text(x, p.y, Face::Bold, 9.0, &format!("{k}: {val}"));
            p.y -= 9.0 * 1.5;
        }
        p.text(
            x,
            p.y,
            Face::Regular,
            BODY,
            "Comprobante autorizado. Verifíquelo escaneando el código QR en el sitio de ARCA.",
        );
    });
}
