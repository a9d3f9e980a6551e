//! The representación impresa: every `cfdi sample`, stamped, printed and read back as a person
//! would (pdftotext, pdftoppm, a QR decoder). The pages are kept as PNG under
//! `target/screenshots/pdf-*` beside the admin screenshots.

use autofactura::cfdi::{self, InvoiceRequest, dom::Element};
use autofactura::pac::sat::StatusQuery;
use autofactura::pdf::{self, Logo, Paper, PdfOptions};

use crate::cfdi::stamp;
use crate::support::pdf::{info, qr_codes, save_png, squeezed, text};

pub(crate) fn sample(name: &str) -> InvoiceRequest {
    let json = autofactura::sandbox::SAMPLE_REQUESTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, j)| *j)
        .unwrap_or_else(|| panic!("no sample {name}"));
    serde_json::from_str(json).expect("sample request")
}

pub(crate) fn stamped(req: &InvoiceRequest) -> Vec<u8> {
    let csd = autofactura::sandbox::csd().expect("test CSD");
    stamp(&cfdi::seal(req, &csd).expect("seal").xml)
}

fn tfd_cadena(xml: &[u8]) -> String {
    let root = Element::parse(xml).expect("parse");
    cfdi::cadena::cadena_tfd(cfdi::cadena::find_tfd(&root).expect("tfd"))
}

#[test]
fn every_sample_prints_its_uuid_totals_tfd_cadena_and_a_qr_of_the_verification_url() {
    for (name, _) in autofactura::sandbox::SAMPLE_REQUESTS {
        let xml = stamped(&sample(name));
        let bytes = pdf::render(&xml, &PdfOptions::default()).expect("render");
        let png = save_png(&bytes, &format!("pdf-{name}"));
        assert!(png.exists(), "{} was not written", png.display());
        let root = Element::parse(&xml).expect("parse");
        let all = text(&bytes, None);
        let flat = squeezed(&all);
        let uuid = "5FB2822E-396D-4725-8521-CDC4BDD20CCF";
        assert!(all.contains(uuid), "{name}: no UUID in\n{all}");
        for attr in ["Total", "SubTotal"] {
            let v = root.attr(attr).expect("amount");
            assert!(all.contains(v), "{name}: no {attr} {v} in\n{all}");
        }
        assert!(
            flat.contains(&squeezed(&tfd_cadena(&xml))),
            "{name}: the TFD cadena is not in\n{all}"
        );
        assert!(
            flat.contains(&squeezed(root.attr("Sello").expect("sello"))),
            "{name}: no Sello CFDI"
        );
        assert!(
            all.contains("Este documento es una representación impresa de un CFDI"),
            "{name}: no legend"
        );
        let url = StatusQuery::from_stamped_xml(&xml)
            .expect("query")
            .expression();
        assert!(url.contains("&tt=") && url.contains("&fe="), "{url}");
        assert_eq!(qr_codes(&bytes), vec![url], "{name}: the QR");
    }
}

#[test]
fn the_qr_total_follows_the_sat_tt_format() {
    let mut req = sample("01-iva16-mxn");
    req.lines.truncate(1);
    let xml = stamped(&req);
    let total = Element::parse(&xml)
        .expect("parse")
        .attr("Total")
        .expect("total")
        .to_owned();
    let codes = qr_codes(&pdf::render(&xml, &PdfOptions::default()).expect("render"));
    let tt = codes[0]
        .split('&')
        .find_map(|p| p.strip_prefix("tt="))
        .expect("tt");
    // Trailing zeros removed, one decimal kept: 1160.00 → 1160.0.
    let expected = total.trim_end_matches('0');
    let expected = if expected.ends_with('.') {
        format!("{expected}0")
    } else {
        expected.to_owned()
    };
    assert_eq!(tt, expected, "Total {total}");
}

#[test]
fn a_long_concept_list_spans_pages_with_the_table_header_on_each() {
    let mut req = sample("01-iva16-mxn");
    let line = req.lines[0].clone();
    req.lines = (0..90)
        .map(|i| {
            let mut l = line.clone();
            l.descripcion = format!("Artículo número {i} con una descripción larga de año y señal");
            l
        })
        .collect();
    let xml = stamped(&req);
    let bytes = pdf::render(&xml, &PdfOptions::default()).expect("render");
    let (pages, size) = info(&bytes);
    assert!(pages >= 3, "90 conceptos on {pages} pages");
    assert!(size.starts_with("612 x 792"), "Letter by default: {size}");
    let mut last_page_with_conceptos = 0;
    for p in 1..=pages {
        let t = text(&bytes, Some(p));
        assert!(
            t.contains(&format!("Página {p} de {pages}")),
            "page {p}:\n{t}"
        );
        if t.contains("Artículo número") {
            assert!(
                t.contains("Valor unitario") && t.contains("Descripción"),
                "page {p} has conceptos without the table header:\n{t}"
            );
            last_page_with_conceptos = p;
        }
    }
    assert!(last_page_with_conceptos >= 2);
    let all = text(&bytes, None);
    for i in 0..90 {
        assert!(
            all.contains(&format!("Artículo número {i} con")),
            "concepto {i} is missing"
        );
    }
    save_png(&bytes, "pdf-long");
}

/// A tiny RGB PNG (a red square), made here so no binary fixture is needed.
fn png(w: u32, h: u32) -> Vec<u8> {
    use std::io::Write;
    fn chunk(out: &mut Vec<u8>, kind: &[u8], body: &[u8]) {
        out.extend_from_slice(&u32::try_from(body.len()).expect("len").to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(body);
        out.extend_from_slice(kind);
        out.extend_from_slice(body);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    }
    // Each row: filter type 0, then RGB pixels.
    let row: Vec<u8> = std::iter::once(0)
        .chain((0..w).flat_map(|_| [200, 30, 30]))
        .collect();
    let raw = row.repeat(usize::try_from(h).expect("rows"));
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&raw).expect("deflate");
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z.finish().expect("deflate"));
    chunk(&mut out, b"IEND", &[]);
    out
}

#[test]
fn a4_with_a_logo_prints_the_same_bytes_every_time() {
    let xml = stamped(&sample("02-lines-with-discount"));
    let opts = PdfOptions {
        paper: Paper::A4,
        logo: Some(Logo::from_bytes(&png(40, 20)).expect("png logo")),
    };
    let a = pdf::render(&xml, &opts).expect("render");
    assert_eq!(
        a,
        pdf::render(&xml, &opts).expect("again"),
        "not deterministic"
    );
    let (_, size) = info(&a);
    assert!(size.starts_with("595.28 x 841.89"), "A4: {size}");
    let plain = pdf::render(
        &xml,
        &PdfOptions {
            paper: Paper::A4,
            logo: None,
        },
    )
    .expect("render");
    assert!(a.len() > plain.len());
    assert!(
        a.windows(15).any(|w| w == b"/Subtype /Image"),
        "no image XObject"
    );
    save_png(&a, "pdf-a4-logo");
    let err = Logo::from_bytes(b"GIF89a").expect_err("a GIF is refused");
    assert!(err.contains("JPEG or a PNG"), "{err}");
    let unsigned = cfdi::seal(
        &sample("01-iva16-mxn"),
        &autofactura::sandbox::csd().expect("csd"),
    )
    .expect("seal");
    let err = pdf::render(&unsigned.xml, &PdfOptions::default()).expect_err("not stamped");
    assert!(err.to_string().contains("not stamped"), "{err}");
}
