//! A real OTLP/HTTP trace collector for tests: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest` body (the OTLP specification's binary encoding), decoded with the
//! OpenTelemetry project's own generated types, on 127.0.0.1 with a free port, on its own
//! thread and actix System like the scripted provider.
use crate::wait::within;
use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One received span with what a test asserts on.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    /// Empty for a root span.
    pub parent_span_id: Vec<u8>,
    pub kind: SpanKind,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Attributes rendered as strings (ints and bools by their Display).
    pub attributes: Vec<(String, String)>,
    /// The `service.name` of the resource the span came with.
    pub service_name: Option<String>,
    /// The instrumentation scope's name.
    pub scope: String,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty() || self.parent_span_id.iter().all(|b| *b == 0)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// `Content-Type` of every export request.
    content_types: Vec<String>,
    /// Bodies that did not decode, with the decoder's reason.
    undecodable: Vec<String>,
}

/// A running collector. Dropping it stops the server.
pub struct OtlpCollector {
    /// `http://127.0.0.1:PORT` (the base URL: exports go to `/v1/traces` under it).
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
    handle: ServerHandle,
}

impl OtlpCollector {
    pub fn start() -> Self {
        let received = Arc::new(Mutex::new(Received::default()));
        let shared = received.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("otlp-collector".into())
            .spawn(move || {
                let system = actix_web::rt::System::new();
                system.block_on(async move {
                    let data = web::Data::new(shared);
                    let server = HttpServer::new(move || {
                        App::new()
                            .app_data(data.clone())
                            .app_data(web::PayloadConfig::new(64 * 1024 * 1024))
                            .route("/v1/traces", web::post().to(export))
                    })
                    .workers(1)
                    .disable_signals()
                    .bind(("127.0.0.1", 0));
                    let server = match server {
                        Ok(s) => s,
                        Err(e) => {
                            let _receiver_gone = tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let addr = server.addrs()[0];
                    let server = server.run();
                    let _receiver_gone = tx.send(Ok((addr, server.handle())));
                    if let Err(e) = server.await {
                        eprintln!("otlp collector: {e}");
                    }
                });
            })
            .unwrap_or_else(|e| panic!("otlp collector: cannot spawn thread: {e}"));
        let (addr, handle) = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("otlp collector did not start: {e}"))
            .unwrap_or_else(|e| panic!("otlp collector did not start: {e}"));
        Self {
            endpoint: format!("http://{addr}"),
            received,
            handle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.lock().spans.clone()
    }

    pub fn content_types(&self) -> Vec<String> {
        self.lock().content_types.clone()
    }

    /// Export bodies that were not valid OTLP protobuf.
    pub fn undecodable(&self) -> Vec<String> {
        self.lock().undecodable.clone()
    }

    /// Waits (bounded) until `pred` holds for the spans received.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Result<Vec<ReceivedSpan>, Vec<ReceivedSpan>> {
        let found = within(timeout, || async {
            let spans = self.spans();
            pred(&spans).then_some(spans)
        })
        .await;
        found.ok_or_else(|| self.spans())
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

async fn export(
    req: HttpRequest,
    body: web::Bytes,
    received: web::Data<Arc<Mutex<Received>>>,
) -> HttpResponse {
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let decoded = ExportTraceServiceRequest::decode(body.as_ref());
    let mut r = received.lock().unwrap_or_else(|p| p.into_inner());
    r.content_types.push(content_type);
    let request = match decoded {
        Ok(request) => request,
        Err(e) => {
            r.undecodable.push(e.to_string());
            return HttpResponse::BadRequest().finish();
        }
    };
    for resource_spans in request.resource_spans {
        let service_name = resource_spans.resource.as_ref().and_then(|res| {
            res.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .map(render)
        });
        for scope_spans in resource_spans.scope_spans {
            let scope = scope_spans
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in scope_spans.spans {
                r.spans.push(ReceivedSpan {
                    kind: SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified),
                    name: span.name,
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    parent_span_id: span.parent_span_id,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    attributes: span.attributes.iter().map(key_value).collect(),
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .body(answer)
}

fn key_value(kv: &KeyValue) -> (String, String) {
    (
        kv.key.clone(),
        kv.value.as_ref().map(render).unwrap_or_default(),
    )
}

fn render(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
