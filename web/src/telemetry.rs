//! Logging and traces. Logs: `tracing` to stderr, filtered by `RUST_LOG`; stdout is reserved
//! for the lines scripts read (`operator token: …`, `listening on http://…`). Traces: when
//! `[telemetry] otlp_endpoint` is set, the spans of turns (`turn` and its phases) and of HTTP
//! requests (`http_request`) are exported over OTLP/HTTP (protobuf) by a batch exporter, and
//! flushed when `serve` ends. Once the configuration is read, every log line is written with
//! its secrets masked (`mask_logs`; SPEC R13.8): a provider's error that quotes its key, a
//! platform's answer that echoes a token.
//!
//! The spans are the code's own `tracing` spans: `turn` opens with no parent in the session actor
//! before the lease wait, `run_one` records its ids and the `admission` claim, `turn::run` wraps
//! each phase (`context`, `preflight`, `request`, `tool_round`, `finalize`, with `delivery`
//! inside), and the HTTP middleware of `startup::build_app` opens a server span per request. The
//! exporter's batch processor uses a blocking client on its own thread, so it needs no runtime.
use crate::configuration::{InvalidConfig, TelemetrySettings};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use turnkey_actors::redact::Redactor;

const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";
/// At exit, how long buffered spans get to reach the collector (part of
/// [`crate::startup::drain_bound`]).
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one export request to the collector.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The instrumentation scope of turnkey's spans.
const TRACER_NAME: &str = "turnkey";

/// Installs the global subscriber, logs only; a second call (tests) is a no-op.
pub fn init() {
    // Err only means a subscriber is already installed, which is what we want anyway.
    let _already_installed = tracing_subscriber::registry().with(log_layer()).try_init();
}

/// Installs the global subscriber with the OTLP trace export `settings` ask for (none when
/// `otlp_endpoint` is empty). Keep the answer until the program ends and call
/// [`Traces::shutdown`] then, so that buffered spans are sent.
pub fn init_with(settings: &TelemetrySettings) -> Result<Traces, InvalidConfig> {
    if !settings.enabled() {
        init();
        return Ok(Traces { provider: None });
    }
    let provider = tracer_provider(settings)?;
    let tracer = provider.tracer(TRACER_NAME);
    // turnkey's own spans at info and above, whatever RUST_LOG says about the logs: the turn
    // and request spans are what a trace is made of.
    let traced = Targets::new()
        .with_target("turnkey_web", Level::INFO)
        .with_target("turnkey_actors", Level::INFO);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(traced);
    let _already_installed = tracing_subscriber::registry()
        .with(log_layer())
        .with(otel)
        .try_init();
    tracing::info!(
        endpoint = %settings.traces_url(),
        service = %settings.service_name,
        sample_ratio = settings.sample_ratio,
        "exporting traces over OTLP/HTTP"
    );
    Ok(Traces {
        provider: Some(provider),
    })
}

/// The masking every log line passes through, once the configuration is known.
static LOG_MASK: OnceLock<Redactor> = OnceLock::new();

/// Masks the secrets `redactor` knows in every log line written from now on. The first call
/// wins (one configuration a process).
pub fn mask_logs(redactor: Redactor) {
    if LOG_MASK.set(redactor).is_err() {
        tracing::debug!("log masking already installed");
    }
}

/// stderr, each formatted event masked before it is written. The formatter hands over one
/// whole event a write, so a secret is never split between two writes.
struct MaskedStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for MaskedStderr {
    type Writer = MaskedStderr;
    fn make_writer(&'a self) -> Self::Writer {
        MaskedStderr
    }
}

impl Write for MaskedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut err = std::io::stderr().lock();
        match (LOG_MASK.get(), std::str::from_utf8(buf)) {
            (Some(mask), Ok(line)) if mask.is_on() => {
                err.write_all(mask.redact(line).as_bytes())?;
            }
            _ => err.write_all(buf)?,
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn log_layer<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    tracing_subscriber::fmt::layer()
        .with_writer(MaskedStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter)
}

fn tracer_provider(settings: &TelemetrySettings) -> Result<SdkTracerProvider, InvalidConfig> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.traces_url())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| {
            InvalidConfig::new(
                "telemetry.otlp_endpoint",
                format!("cannot set up the OTLP exporter: {e}"),
            )
        })?;
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(settings.sample_ratio)));
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build())
}

/// The trace export, while it runs.
#[must_use = "dropping it does not flush; call shutdown at the end"]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Sends what is buffered (bounded by [`FLUSH_TIMEOUT`]) and stops the exporter.
    pub fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        if let Err(e) = provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            // The process is ending: stderr is all that is left to tell.
            eprintln!("telemetry: traces not flushed: {e}");
        }
    }
}
