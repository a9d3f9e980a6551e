//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as text or as one
//! JSON object per line (`[log] format`; JSON by default when stderr is not a terminal). Lines
//! about a document carry `payment_id`, `stamp_key` and `uuid` as fields: the worker's span for
//! the document holds them, and a JSON line includes the fields of its spans.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Whether lines are written as JSON: `format`, or for `auto`, whether stderr is not a
/// terminal (a container platform, systemd, a file).
pub fn json(format: LogFormat) -> bool {
    match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    }
}

/// Installs the global subscriber once; later calls (tests) are no-ops.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json(format) {
        // Event fields at the top level; the current span's fields (the document's ids) under
        // `span`, every open span under `spans`.
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init()
    } else {
        builder.try_init()
    };
}
