//! The embedded font (DejaVu Sans, regular and bold, `fixtures/fonts`): measuring text, encoding
//! it as glyph ids, and writing each face into the PDF as a subset with a `ToUnicode` map so
//! the text stays selectable and extractable.

use std::collections::BTreeMap;

use pdf_writer::types::{CidFontType, FontFlags, SystemInfo, UnicodeCmap};
use pdf_writer::{Filter, Finish, Name, Pdf, Rect, Ref, Str};

const REGULAR: &[u8] = include_bytes!("../../fixtures/fonts/DejaVuSans.ttf");
const BOLD: &[u8] = include_bytes!("../../fixtures/fonts/DejaVuSans-Bold.ttf");

/// Which face a run of text uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    Regular,
    Bold,
}

impl Face {
    /// The resource name in every page's `/Font` dictionary.
    pub fn resource(self) -> Name<'static> {
        match self {
            Face::Regular => Name(b"F1"),
            Face::Bold => Name(b"F2"),
        }
    }
}

/// One face: its parsed tables and the glyphs used so far (glyph id → the character it shows).
struct Loaded {
    data: &'static [u8],
    face: ttf_parser::Face<'static>,
    used: BTreeMap<u16, char>,
}

impl Loaded {
    fn new(data: &'static [u8]) -> Self {
        // The shipped fonts are parsed in tests; failing here is a broken build, not input.
        let face = ttf_parser::Face::parse(data, 0).expect("the embedded DejaVu font parses");
        Loaded {
            data,
            face,
            used: BTreeMap::new(),
        }
    }

    fn glyph(&self, c: char) -> u16 {
        self.face.glyph_index(c).map_or(0, |g| g.0)
    }

    /// Advance of glyph `gid` in thousandths of the font size (PDF glyph space).
    fn advance(&self, gid: u16) -> f32 {
        let upem = f32::from(self.face.units_per_em());
        let adv = self
            .face
            .glyph_hor_advance(ttf_parser::GlyphId(gid))
            .unwrap_or(0);
        f32::from(adv) * 1000.0 / upem
    }

    fn scaled(&self, v: i16) -> f32 {
        f32::from(v) * 1000.0 / f32::from(self.face.units_per_em())
    }
}

/// Both faces, shared by every page of one document.
pub struct Fonts {
    regular: Loaded,
    bold: Loaded,
}

impl Default for Fonts {
    fn default() -> Self {
        Self::new()
    }
}

impl Fonts {
    pub fn new() -> Self {
        Fonts {
            regular: Loaded::new(REGULAR),
            bold: Loaded::new(BOLD),
        }
    }

    fn get(&self, f: Face) -> &Loaded {
        match f {
            Face::Regular => &self.regular,
            Face::Bold => &self.bold,
        }
    }

    /// Width of `text` at `size` points.
    pub fn width(&self, f: Face, size: f32, text: &str) -> f32 {
        let l = self.get(f);
        text.chars().map(|c| l.advance(l.glyph(c))).sum::<f32>() * size / 1000.0
    }

    /// `text` as the 2-byte glyph ids an Identity-H font shows, remembering the glyphs used.
    pub fn encode(&mut self, f: Face, text: &str) -> Vec<u8> {
        let l = match f {
            Face::Regular => &mut self.regular,
            Face::Bold => &mut self.bold,
        };
        let mut out = Vec::with_capacity(text.len() * 2);
        for c in text.chars() {
            let gid = l.glyph(c);
            l.used.entry(gid).or_insert(c);
            out.extend_from_slice(&gid.to_be_bytes());
        }
        out
    }

    /// Writes both faces (Type0 → CIDFontType2 → descriptor → subset font file, and the
    /// `ToUnicode` map) under `refs[face]`, taking new object ids from `next`.
    pub fn write(&self, pdf: &mut Pdf, regular: Ref, bold: Ref, next: &mut impl FnMut() -> Ref) {
        write_face(pdf, &self.regular, b"AAAAAA+DejaVuSans", regular, next);
        write_face(pdf, &self.bold, b"AAAAAB+DejaVuSans-Bold", bold, next);
    }
}

fn write_face(pdf: &mut Pdf, l: &Loaded, name: &[u8], type0: Ref, next: &mut impl FnMut() -> Ref) {
    let (cid, descriptor, file, cmap) = (next(), next(), next(), next());
    let info = SystemInfo {
        registry: Str(b"Adobe"),
        ordering: Str(b"Identity"),
        supplement: 0,
    };
    pdf.type0_font(type0)
        .base_font(Name(name))
        .encoding_predefined(Name(b"Identity-H"))
        .descendant_font(cid)
        .to_unicode(cmap);
    let mut font = pdf.cid_font(cid);
    font.subtype(CidFontType::Type2)
        .base_font(Name(name))
        .system_info(info)
        .font_descriptor(descriptor)
        .default_width(0.0)
        .cid_to_gid_map_predefined(Name(b"Identity"));
    {
        let mut widths = font.widths();
        for &gid in l.used.keys() {
            widths.consecutive(gid, [l.advance(gid)]);
        }
    }
    font.finish();
    let bbox = l.face.global_bounding_box();
    pdf.font_descriptor(descriptor)
        .name(Name(name))
        .flags(FontFlags::NON_SYMBOLIC)
        .bbox(Rect::new(
            l.scaled(bbox.x_min),
            l.scaled(bbox.y_min),
            l.scaled(bbox.x_max),
            l.scaled(bbox.y_max),
        ))
        .italic_angle(0.0)
        .ascent(l.scaled(l.face.ascender()))
        .descent(l.scaled(l.face.descender()))
        .cap_height(l.scaled(l.face.capital_height().unwrap_or(l.face.ascender())))
        .stem_v(80.0)
        .font_file2(file);
    let glyphs: Vec<u16> = l.used.keys().copied().collect();
    // The subsetter keeps glyph ids (it only drops outlines), so CIDToGIDMap stays Identity.
    let subset = subsetter::subset(l.data, 0, subsetter::Profile::pdf(&glyphs))
        .unwrap_or_else(|_| l.data.to_vec());
    pdf.stream(file, &super::deflate(&subset))
        .filter(Filter::FlateDecode);
    let mut map = UnicodeCmap::new(Name(b"Custom"), info);
    for (&gid, &c) in &l.used {
        map.pair(gid, c);
    }
    pdf.cmap(cmap, &map.finish());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_fonts_cover_spanish() {
        let fonts = Fonts::new();
        for f in [Face::Regular, Face::Bold] {
            for c in "ÁÉÍÓÚÜÑáéíóúüñ¿¡$€".chars() {
                assert_ne!(fonts.get(f).glyph(c), 0, "{c} has no glyph in {f:?}");
            }
        }
        assert!(fonts.width(Face::Bold, 10.0, "Total") > fonts.width(Face::Regular, 10.0, "T"));
    }
}
