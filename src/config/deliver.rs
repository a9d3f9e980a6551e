//! `[pdf]`: how the representación impresa is printed (paper, the merchant's logo). Every
//! default is in `config/default.toml`.

use std::path::PathBuf;

use serde::Deserialize;

/// Paper size of the PDF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Paper {
    #[default]
    Letter,
    A4,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PdfSettings {
    /// `letter` (216 × 279 mm) or `a4`.
    pub paper: Paper,
    /// A JPEG or PNG (RGB or grayscale, no transparency) printed at the top left, at most
    /// 160 × 56 points; read once at start.
    pub logo: Option<PathBuf>,
}
