//! `[telemetry]`: the OTLP/HTTP exporter that the engines' trace spans go out through, set up once at start
//! and flushed at the stop.
//!
//! Spans are exported in batches by the SDK's batch processor on a thread of its own, so a turn never waits
//! on the collector: a span is queued when it ends, and a collector that is slow or down costs a turn
//! nothing (the queue is bounded; spans past it are dropped). A collector that cannot be reached is logged
//! once a time it goes down, without its URL (which may carry a token) or anything the spans hold.
//!
//! An endpoint that cannot be set up leaves traces off, with a warning: the engines then have no tracer,
//! and what the fronts say of telemetry (fisk-ai's card) is read off that, never off the configuration.

use crate::config::TelemetryChoice;
use agentwire_engine::Telemetry;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The OTLP/HTTP path of traces, added to `otlp_endpoint` as `OTEL_EXPORTER_OTLP_ENDPOINT` is read.
pub(crate) const TRACES_PATH: &str = "/v1/traces";

/// How long one export (one batch of spans posted to the collector) may take: a collector that has not
/// answered by then is counted down, and the batch's spans are dropped rather than held.
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the stop waits for the last spans to reach the collector: a collector that is down must not
/// hold a shutdown up for long, and a healthy one takes them in well under this.
pub(crate) const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// Most bytes read of a collector's answer (an OTLP response is a few bytes, or a short error).
const MAX_COLLECTOR_ANSWER_BYTES: usize = 64 * 1024;

/// The instrumentation scope of agentwire's spans.
const TRACER_NAME: &str = "agentwire";

/// The exporter in force: its provider, kept to flush at the stop.
pub(crate) struct Exporter {
    provider: SdkTracerProvider,
}

/// Sets up `choice`'s exporter: the engines' [`Telemetry`] and the exporter to flush at the stop. No
/// endpoint, or one that cannot be set up (logged), leaves traces off. Must be called on the runtime
/// (the exporter's requests run on it).
pub(crate) fn start(choice: &TelemetryChoice) -> (Telemetry, Option<Exporter>) {
    let Some(endpoint) = &choice.otlp_endpoint else {
        return (Telemetry::off(), None);
    };
    match provider(endpoint) {
        Ok(provider) => {
            let tracer = provider.tracer(TRACER_NAME);
            tracing::info!(
                endpoint = %crate::show_config::redact_url(endpoint),
                content = choice.content,
                "exporting traces over OTLP/HTTP"
            );
            (
                Telemetry::new(tracer, choice.content),
                Some(Exporter { provider }),
            )
        }
        Err(error) => {
            tracing::warn!(%error, "[telemetry] otlp_endpoint: the trace exporter could not be set up; traces are off");
            (Telemetry::off(), None)
        }
    }
}

fn provider(endpoint: &str) -> Result<SdkTracerProvider, String> {
    let http = agentwire_agents::openai::http_client(EXPORT_TIMEOUT).map_err(|e| e.to_string())?;
    let client = CollectorClient {
        http,
        runtime: tokio::runtime::Handle::try_current()
            .map_err(|_| "no async runtime to export on".to_string())?,
        down: Arc::new(AtomicBool::new(false)),
    };
    let url = format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(TRACER_NAME)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

impl Exporter {
    /// Sends the spans still queued (within [`SHUTDOWN_FLUSH`]) and stops the exporter's thread. Waits on
    /// a blocking thread, so the runtime goes on serving the export itself.
    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        let stopped =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(SHUTDOWN_FLUSH))
                .await;
        match stopped {
            Ok(Ok(())) => tracing::debug!("trace exporter flushed"),
            Ok(Err(error)) => {
                tracing::warn!(%error, "the last spans may not have reached the collector")
            }
            Err(error) => tracing::warn!(%error, "the trace exporter's stop failed"),
        }
    }
}

/// The exporter's HTTP client: the reqwest client agentwire builds (rustls with ring), each request run on
/// the daemon's runtime, since the batch processor's thread has no runtime of its own.
#[derive(Debug)]
struct CollectorClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// Whether the collector is known to be down: warned once when it goes down, told when it is back.
    down: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request: reqwest::Request = request.try_into()?;
        let http = self.http.clone();
        let sent = self
            .runtime
            .spawn(async move { post(http, request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?;
        let failed = match &sent {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("the collector answered {}", r.status())),
            Err(e) => Some(causes(e.as_ref())),
        };
        match failed {
            Some(why) if !self.down.swap(true, Ordering::Relaxed) => tracing::warn!(
                error = %why,
                "cannot export traces to the collector; spans are dropped until it is back (turns are not affected)"
            ),
            None if self.down.swap(false, Ordering::Relaxed) => {
                tracing::info!("exporting traces to the collector again")
            }
            _ => {}
        }
        sent
    }
}

/// An error with its causes (`error sending request: connection refused`), as one line.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        text.push_str(": ");
        text.push_str(&e.to_string());
        next = e.source();
    }
    text
}

/// Posts one export and reads the collector's answer, up to [`MAX_COLLECTOR_ANSWER_BYTES`]. Errors are
/// given without the URL.
async fn post(
    http: reqwest::Client,
    request: reqwest::Request,
) -> Result<Response<Bytes>, HttpError> {
    let mut response = http
        .execute(request)
        .await
        .map_err(|e| Box::new(e.without_url()) as HttpError)?;
    let status = response.status();
    let headers = std::mem::take(response.headers_mut());
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Box::new(e.without_url()) as HttpError)?
    {
        if body.len() + chunk.len() > MAX_COLLECTOR_ANSWER_BYTES {
            return Err(format!(
                "the collector's answer is over {MAX_COLLECTOR_ANSWER_BYTES} bytes"
            )
            .into());
        }
        body.extend_from_slice(&chunk);
    }
    let mut answer = Response::builder().status(status).body(Bytes::from(body))?;
    *answer.headers_mut() = headers;
    Ok(answer)
}
