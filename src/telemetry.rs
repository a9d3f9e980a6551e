//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), as text or as one
//! JSON object per line (`[log] format`; JSON by default when stderr is not a terminal). Lines
//! about a document carry `payment_id`, `stamp_key` and `uuid` as fields: the worker's span for
//! the document holds them, and a JSON line includes the fields of its spans.
//!
//! Traces (cargo feature `otel`, off by default; `[log] otlp_endpoint`): the same spans go to
//! an OpenTelemetry collector over OTLP/HTTP. A document's spans, the webhook's that recorded
//! it and the worker's that stamped it, hours or processes apart, share one trace: its id is
//! derived from the stamp key ([`document_trace`]), so nothing has to be stored to link them.

use std::io::IsTerminal;

use sha2::{Digest, Sha256};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogFormat, LogSettings};

/// Whether lines are written as JSON: `format`, or for `auto`, whether stderr is not a
/// terminal (a container platform, systemd, a file).
pub fn json(format: LogFormat) -> bool {
    match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    }
}

/// What [`init`] installed that must be flushed before the process ends: the trace exporter's
/// batch (a no-op without one).
#[must_use = "flush it at the end with `shutdown`"]
pub struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still batched (on a thread of its own: the exporter's client blocks).
    pub fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(p) = self.provider {
            let _ = std::thread::spawn(move || {
                if let Err(e) = p.shutdown() {
                    eprintln!("OpenTelemetry: the last spans were not exported: {e}");
                }
            })
            .join();
        }
    }
}

/// Installs the global subscriber once; later calls (tests) install nothing. An
/// `otlp_endpoint` in a binary built without the `otel` feature is refused by the settings.
pub fn init(log: &LogSettings) -> anyhow::Result<Telemetry> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    // Event fields at the top level; the current span's fields (the document's ids) under
    // `span`, every open span under `spans`.
    let fmt = if json(log.format) {
        fmt.json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .boxed()
    } else {
        fmt.boxed()
    };
    #[cfg(feature = "otel")]
    {
        let (layer, provider) = match &log.otlp_endpoint {
            Some(url) => {
                let (layer, provider) = otel::layer(url)?;
                (Some(layer), Some(provider))
            }
            None => (None, None),
        };
        // The exporter's layer sits on the registry itself (its type names what it is layered
        // on); the filter, above it, still applies to every layer.
        let _ = tracing_subscriber::registry()
            .with(layer)
            .with(filter)
            .with(fmt)
            .try_init();
        Ok(Telemetry { provider })
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init();
        Ok(Telemetry {})
    }
}

/// The trace id and parent span id of the document stamped under `stamp_key`: SHA-256 of the
/// key, its first 16 bytes and the next 8 (a trace id is never all zeros; neither is this one
/// but with odds of 2^-128).
pub fn document_trace(stamp_key: &str) -> ([u8; 16], [u8; 8]) {
    let h = Sha256::digest(format!("autofactura-document-trace:{stamp_key}").as_bytes());
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    trace.copy_from_slice(&h[..16]);
    span.copy_from_slice(&h[16..24]);
    (trace, span)
}

/// Puts `span`, not yet entered, in the trace of the document stamped under `stamp_key`.
pub fn in_document_trace(span: &tracing::Span, stamp_key: &str) {
    #[cfg(feature = "otel")]
    otel::set_document_parent(span, stamp_key);
    #[cfg(not(feature = "otel"))]
    let _ = (span, stamp_key);
}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider,
    };
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    type Layer = tracing_opentelemetry::OpenTelemetryLayer<
        tracing_subscriber::Registry,
        opentelemetry_sdk::trace::SdkTracer,
    >;

    /// The layer sending spans to `url` (the collector's full traces URL, e.g.
    /// `http://collector:4318/v1/traces`) in batches, and its provider to flush at the end.
    pub(super) fn layer(url: &str) -> anyhow::Result<(Layer, SdkTracerProvider)> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url)
            .build()
            .map_err(|e| anyhow::anyhow!("[log] otlp_endpoint {url}: {e}"))?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("autofactura")
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("autofactura");
        Ok((tracing_opentelemetry::layer().with_tracer(tracer), provider))
    }

    pub(super) fn set_document_parent(span: &tracing::Span, stamp_key: &str) {
        let (trace, parent) = super::document_trace(stamp_key);
        let cx = SpanContext::new(
            TraceId::from_bytes(trace),
            SpanId::from_bytes(parent),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        // Fails only for a span already entered or disabled by the filter: then it keeps
        // its own trace, which loses the link and nothing else.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(cx));
    }
}
