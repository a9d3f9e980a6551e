//! Pages and the cursor that fills them top to bottom: text runs, wrapped paragraphs, rules,
//! and the page break (a table's header is drawn again on the new page by its caller).

use pdf_writer::{Content, Str};

use super::font::{Face, Fonts};

pub const MARGIN: f32 = 36.0;
/// Room kept at the bottom of every page for the footer.
const FOOTER: f32 = 28.0;

pub struct Pages {
    pub fonts: Fonts,
    pub width: f32,
    pub height: f32,
    pub done: Vec<Content>,
    pub page: Content,
    /// The baseline of the next line, from the bottom of the page.
    pub y: f32,
    /// Drawn at the top of every page after the first (the document's identity).
    pub continuation: String,
}

impl Pages {
    pub fn new(width: f32, height: f32, continuation: String) -> Self {
        Pages {
            fonts: Fonts::new(),
            width,
            height,
            done: Vec::new(),
            page: Content::new(),
            y: height - MARGIN,
            continuation,
        }
    }

    pub fn inner_width(&self) -> f32 {
        self.width - 2.0 * MARGIN
    }

    /// One run of text with its left end at `x` on baseline `y`.
    pub fn text(&mut self, x: f32, y: f32, face: Face, size: f32, s: &str) {
        let glyphs = self.fonts.encode(face, s);
        self.page
            .begin_text()
            .set_font(face.resource(), size)
            .next_line(x, y)
            .show(Str(&glyphs))
            .end_text();
    }

    /// One run of text with its right end at `right`.
    pub fn text_right(&mut self, right: f32, y: f32, face: Face, size: f32, s: &str) {
        let w = self.fonts.width(face, size, s);
        self.text(right - w, y, face, size, s);
    }

    /// Starts a new page when fewer than `needed` points remain above the footer.
    /// Returns whether it did.
    pub fn ensure(&mut self, needed: f32) -> bool {
        if self.y - needed >= MARGIN + FOOTER {
            return false;
        }
        let full = std::mem::replace(&mut self.page, Content::new());
        self.done.push(full);
        self.y = self.height - MARGIN;
        let head = self.continuation.clone();
        self.text(MARGIN, self.y, Face::Bold, 8.0, &head);
        self.y -= 16.0;
        true
    }

    /// A horizontal rule across the inner width at the cursor.
    pub fn rule(&mut self, gray: f32) {
        self.page
            .set_stroke_gray(gray)
            .set_line_width(0.5)
            .move_to(MARGIN, self.y)
            .line_to(self.width - MARGIN, self.y)
            .stroke();
    }

    /// Breaks `s` into lines no wider than `width`: at spaces, and inside a word only when
    /// the word alone is too wide (a Sello or a cadena has no spaces).
    pub fn wrap(&self, face: Face, size: f32, width: f32, s: &str) -> Vec<String> {
        let mut lines = Vec::new();
        let mut line = String::new();
        for word in s.split(' ') {
            let candidate = if line.is_empty() {
                word.to_owned()
            } else {
                format!("{line} {word}")
            };
            if self.fonts.width(face, size, &candidate) <= width {
                line = candidate;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            for c in word.chars() {
                line.push(c);
                if self.fonts.width(face, size, &line) > width {
                    line.pop();
                    lines.push(std::mem::take(&mut line));
                    line.push(c);
                }
            }
        }
        if !line.is_empty() || lines.is_empty() {
            lines.push(line);
        }
        lines
    }

    /// A wrapped paragraph at `x`, `width` wide, moving the cursor down (and across pages).
    pub fn paragraph(&mut self, x: f32, width: f32, face: Face, size: f32, s: &str) {
        let leading = size * 1.3;
        for line in self.wrap(face, size, width, s) {
            self.ensure(leading);
            self.text(x, self.y, face, size, &line);
            self.y -= leading;
        }
    }

    /// A bold section title with a rule under it.
    pub fn section(&mut self, title: &str) {
        self.ensure(40.0);
        self.y -= 6.0;
        self.text(MARGIN, self.y, Face::Bold, 9.0, title);
        self.y -= 4.0;
        self.rule(0.6);
        self.y -= 10.0;
    }

    /// Closes the last page and adds the footer to each: `legend`, the document's `id` (`UUID
    /// …`), page i of n.
    pub fn finish(mut self, legend: &str, id: &str) -> (Fonts, Vec<Content>) {
        let last = std::mem::replace(&mut self.page, Content::new());
        self.done.push(last);
        let n = self.done.len();
        let mut pages = std::mem::take(&mut self.done);
        for (i, page) in pages.iter_mut().enumerate() {
            std::mem::swap(&mut self.page, page);
            self.y = MARGIN;
            self.page
                .set_stroke_gray(0.6)
                .set_line_width(0.5)
                .move_to(MARGIN, MARGIN + 12.0)
                .line_to(self.width - MARGIN, MARGIN + 12.0)
                .stroke();
            self.text(MARGIN, MARGIN, Face::Regular, 7.0, legend);
            let right = format!("{id} · Página {} de {n}", i + 1);
            let w = self.width - MARGIN;
            self.text_right(w, MARGIN, Face::Regular, 7.0, &right);
            std::mem::swap(&mut self.page, page);
        }
        (self.fonts, pages)
    }
}
