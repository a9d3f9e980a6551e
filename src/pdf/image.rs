//! The merchant's logo (`[pdf] logo`): a JPEG passes through as DCTDecode; a PNG's
//! compressed rows pass through as FlateDecode with the PNG predictor, so nothing is decoded.
//! PNGs with transparency, a palette, interlacing or 16 bits are refused at startup with what
//! to do.

use pdf_writer::{Filter, Finish, Name, Pdf, Ref};

/// A logo ready to embed.
#[derive(Debug, Clone)]
pub struct Logo {
    pub width: u32,
    pub height: u32,
    kind: Kind,
    data: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Kind {
    Jpeg { components: u8 },
    Png { colors: u8 },
}

impl Logo {
    /// Reads a JPEG or PNG file's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Logo, String> {
        if bytes.starts_with(&[0xFF, 0xD8]) {
            return jpeg(bytes);
        }
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            return png(bytes);
        }
        Err("the logo must be a JPEG or a PNG file".into())
    }

    pub(super) fn write(&self, pdf: &mut Pdf, id: Ref) {
        let mut img = pdf.image_xobject(id, &self.data);
        img.width(i32::try_from(self.width).unwrap_or(1))
            .height(i32::try_from(self.height).unwrap_or(1))
            .bits_per_component(8);
        let colors = match self.kind {
            Kind::Jpeg { components } => {
                img.filter(Filter::DctDecode);
                components
            }
            Kind::Png { colors } => {
                img.filter(Filter::FlateDecode);
                img.decode_parms()
                    .pair(Name(b"Predictor"), 15)
                    .pair(Name(b"Colors"), i32::from(colors))
                    .pair(Name(b"BitsPerComponent"), 8)
                    .pair(Name(b"Columns"), i32::try_from(self.width).unwrap_or(1));
                colors
            }
        };
        img.color_space_name(match colors {
            1 => Name(b"DeviceGray"),
            4 => Name(b"DeviceCMYK"),
            _ => Name(b"DeviceRGB"),
        });
        img.finish();
    }
}

fn jpeg(b: &[u8]) -> Result<Logo, String> {
    let mut i = 2;
    while i + 9 < b.len() {
        if b[i] != 0xFF {
            i += 1;
            continue;
        }
        let marker = b[i + 1];
        let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
        // SOF0..SOF15 without DHT (C4), JPG (C8) and DAC (CC).
        if (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker) {
            let height = u32::from(u16::from_be_bytes([b[i + 5], b[i + 6]]));
            let width = u32::from(u16::from_be_bytes([b[i + 7], b[i + 8]]));
            let components = b[i + 9];
            if width == 0 || height == 0 || ![1, 3, 4].contains(&components) {
                break;
            }
            return Ok(Logo {
                width,
                height,
                kind: Kind::Jpeg { components },
                data: b.to_vec(),
            });
        }
        i += 2 + len;
    }
    Err("the JPEG logo has no readable size (is the file complete?)".into())
}

fn png(b: &[u8]) -> Result<Logo, String> {
    let mut i = 8;
    let mut header = None;
    let mut data = Vec::new();
    while i + 8 <= b.len() {
        let len = usize::try_from(u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]))
            .unwrap_or(usize::MAX);
        let kind = &b[i + 4..i + 8];
        let body = b
            .get(i + 8..i.saturating_add(8).saturating_add(len))
            .ok_or("the PNG logo is truncated")?;
        match kind {
            b"IHDR" if body.len() >= 13 => header = Some(body.to_vec()),
            b"IDAT" => data.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        i += 12 + len;
    }
    let h = header.ok_or("the PNG logo has no header")?;
    let width = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let height = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let (depth, color, interlace) = (h[8], h[9], h[12]);
    let colors = match color {
        0 => 1,
        2 => 3,
        _ => {
            return Err(
                "the PNG logo has transparency or a palette: save it as a PNG without \
                        alpha (RGB or grayscale) or as a JPEG"
                    .into(),
            );
        }
    };
    if depth != 8 || interlace != 0 {
        return Err(
            "the PNG logo must be 8 bits per channel and not interlaced: save it again, or as a JPEG"
                .into(),
        );
    }
    Ok(Logo {
        width,
        height,
        kind: Kind::Png { colors },
        data,
    })
}
