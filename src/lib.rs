//! autofactura: paid sales in, stamped CFDI 4.0 out, exactly once.
//!
//! # Layout
//!
//! - [`cfdi`]: the document engine (model, amounts, XML, cadena original, Sello, verification).
//!   No I/O; everything else stands on it.
//! - [`domain`]: identifiers shared across modules (the stamp key).
//! - [`pac`]: PAC clients (SW, Finkok, failover) turning every answer into one unambiguous
//!   outcome; the SAT status query.
//! - [`pacsim`]: the sandbox PAC (SW wire shape, SAT checks, dedup, cancellation, faults,
//!   persistent state); in-process for the embedded default or `autofactura pac-sim`.
//! - [`cli`]: the command line (`main.rs` only calls [`cli::run`]).

#![forbid(unsafe_code)]

pub mod cfdi;
pub mod cli;
pub mod domain;
pub mod pac;
pub mod pacsim;
