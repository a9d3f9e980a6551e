//! Reading a PDF the way a person (or an accountant's tool) would: its text with `pdftotext`,
//! its pages as pictures with `pdftoppm` (poppler-utils, installed by scripts/test-env), and the
//! QR codes on those pictures decoded with rqrr.

use std::path::Path;
use std::process::Command;

fn poppler(tool: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool}: {e} (apt-get install poppler-utils; scripts/test does)")
    });
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Renders the pages of `pdf` as images `{prefix}-1.…`, `{prefix}-2.…` with `options`.
fn pdftoppm(pdf: &Path, prefix: &Path, options: &[&str]) {
    let mut args = options.to_vec();
    args.extend([
        pdf.to_str().expect("utf-8"),
        prefix.to_str().expect("utf-8"),
    ]);
    poppler("pdftoppm", &args);
}

/// Writes `pdf` to a temp file and runs `f` on its path.
fn with_file<T>(pdf: &[u8], f: impl FnOnce(&Path) -> T) -> T {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("doc.pdf");
    std::fs::write(&path, pdf).expect("write pdf");
    f(&path)
}

/// The text of page `page` (1-based), or of every page with `None`.
pub fn text(pdf: &[u8], page: Option<usize>) -> String {
    with_file(pdf, |p| {
        let path = p.to_str().expect("utf-8 path");
        let n = page.map(|n| n.to_string());
        let mut args = Vec::new();
        if let Some(n) = &n {
            args.extend(["-f", n.as_str(), "-l", n.as_str()]);
        }
        args.extend([path, "-"]);
        String::from_utf8(poppler("pdftotext", &args)).expect("utf-8 text")
    })
}

/// Text without any whitespace (wrapped Sellos and cadenas join up again).
pub fn squeezed(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Page count and the first page's size in points, from `pdfinfo`.
pub fn info(pdf: &[u8]) -> (usize, String) {
    with_file(pdf, |p| {
        let out =
            String::from_utf8(poppler("pdfinfo", &[p.to_str().expect("utf-8")])).expect("utf-8");
        let field = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|| panic!("pdfinfo has no {k}: {out}"))
        };
        (
            field("Pages:").parse().expect("page count"),
            field("Page size:"),
        )
    })
}

/// Every distinct QR code on every page, decoded (rendered at 200 dpi in gray, without
/// anti-aliasing). rqrr can miss a QR among a whole page of text, so a page where it finds none
/// is looked at again through overlapping bands, as a phone's camera frames the code.
pub fn qr_codes(pdf: &[u8]) -> Vec<String> {
    with_file(pdf, |p| {
        let dir = p.parent().expect("dir");
        let prefix = dir.join("page");
        pdftoppm(
            p,
            &prefix,
            &["-r", "200", "-aa", "no", "-aaVector", "no", "-gray"],
        );
        let mut pages: Vec<_> = std::fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "pgm"))
            .collect();
        pages.sort();
        let mut found: Vec<String> = Vec::new();
        for page in pages {
            let (w, h, pixels) = pgm(&std::fs::read(&page).expect("read pgm"));
            let mut on_page = decode_in(&pixels, w, (0, 0, w, h));
            if on_page.is_empty() {
                on_page = windows(w, h)
                    .into_iter()
                    .flat_map(|win| decode_in(&pixels, w, win))
                    .collect();
            }
            for content in on_page {
                if !found.contains(&content) {
                    found.push(content);
                }
            }
        }
        found
    })
}

/// Bands the page's width wide and 600 pixels (3 inches at 200 dpi) high, every 150 pixels
/// (a QR of up to 2.25 inches lies whole in one).
fn windows(w: usize, h: usize) -> Vec<(usize, usize, usize, usize)> {
    let band = 600.min(h);
    (0..=h - band)
        .step_by(150)
        .chain([h - band])
        .map(|y| (0, y, w, band))
        .collect()
}

/// The QR codes rqrr decodes in window `(x, y, width, height)` of the page.
fn decode_in(
    pixels: &[u8],
    w: usize,
    (x0, y0, ww, wh): (usize, usize, usize, usize),
) -> Vec<String> {
    let mut img =
        rqrr::PreparedImage::prepare_from_greyscale(ww, wh, |x, y| pixels[(y0 + y) * w + x0 + x]);
    img.detect_grids()
        .into_iter()
        .filter_map(|g| g.decode().ok().map(|(_, content)| content))
        .collect()
}

/// Width, height and pixels of a binary PGM (P5, 8-bit).
fn pgm(b: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut fields = Vec::new();
    let mut i = 0;
    while fields.len() < 4 {
        while b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while !b[i].is_ascii_whitespace() {
            i += 1;
        }
        fields.push(String::from_utf8_lossy(&b[start..i]).into_owned());
    }
    assert_eq!(fields[0], "P5", "pdftoppm -gray writes binary PGM");
    let w: usize = fields[1].parse().expect("width");
    let h: usize = fields[2].parse().expect("height");
    let data = b[i + 1..].to_vec();
    assert_eq!(data.len(), w * h, "PGM size");
    (w, h, data)
}

/// Renders every page as `target/screenshots/{name}-{page}.png` (beside the admin screenshots),
/// for a person to look at; returns the first page's path.
pub fn save_png(pdf: &[u8], name: &str) -> std::path::PathBuf {
    let out = super::webdriver::screenshot_dir().join(name);
    with_file(pdf, |p| {
        pdftoppm(p, &out, &["-r", "80", "-png"]);
    });
    super::webdriver::screenshot_dir().join(format!("{name}-1.png"))
}
