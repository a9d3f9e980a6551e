//! autofactura: paid sales in, stamped CFDI 4.0 out, exactly once.
//!
//! # Layout
//!
//! - [`cfdi`]: the document engine (model, amounts, XML, cadena original, Sello, verification).
//!   No I/O; everything else stands on it.
//! - [`domain`]: identifiers shared across modules (the stamp key).
//! - [`cli`]: the command line (`main.rs` only calls [`cli::run`]).

#![forbid(unsafe_code)]

pub mod cfdi;
pub mod cli;
pub mod domain;
