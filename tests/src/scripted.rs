//! The scripted provider: a real HTTP server on loopback that speaks OpenAI Chat Completions and
//! Anthropic Messages and answers from a script (FIFO, rules, default), recording every request
//! so tests can count calls and measure how many ran at once.
use crate::scripted_wire::{self as wire, Usage, Wire};
use actix_web::{dev::ServerHandle, web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Longest a `Hang` reply stays silent when nobody releases it; keeps every test bounded.
const MAX_HANG: Duration = Duration::from_secs(300);

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Text streamed in the given chunks, sleeping `chunk_delay` before each one.
    Text {
        chunks: Vec<String>,
        chunk_delay: Duration,
    },
    /// Tool calls: (call id, function name, arguments).
    ToolCalls(Vec<(String, String, Value)>),
    /// An HTTP error with this JSON body, optionally with `Retry-After` seconds.
    Error {
        status: u16,
        body: Value,
        retry_after: Option<u64>,
    },
    /// These raw bytes as the body of a 200 (SSE content type when streaming was asked).
    Malformed(Vec<u8>),
    /// 200 and headers, then silence until `release_hangs()` or the client goes away.
    Hang,
    /// 400 "context length exceeded" in the shape of the API the request came in on.
    Overflow,
}

impl Reply {
    /// Instant text in one chunk.
    pub fn text(text: &str) -> Self {
        Self::chunks(&[text], Duration::ZERO)
    }

    /// Text in several chunks with a delay before each.
    pub fn chunks(chunks: &[&str], chunk_delay: Duration) -> Self {
        Self::Text {
            chunks: chunks.iter().map(|c| c.to_string()).collect(),
            chunk_delay,
        }
    }

    /// One tool call.
    pub fn tool_call(id: &str, name: &str, args: Value) -> Self {
        Self::ToolCalls(vec![(id.to_string(), name.to_string(), args)])
    }

    /// A plain error in OpenAI's shape.
    pub fn error(status: u16, code: &str) -> Self {
        Self::Error {
            status,
            body: json!({"error": {"message": code, "type": code, "code": code}}),
            retry_after: None,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::ToolCalls(_) => "tool_calls",
            Self::Error { .. } => "error",
            Self::Malformed(_) => "malformed",
            Self::Hang => "hang",
            Self::Overflow => "overflow",
        }
    }
}

/// What the provider saw of one model call.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub path: String,
    pub wire: Wire,
    pub body: Value,
    pub headers: Vec<(String, String)>,
    pub last_user_text: String,
    pub stream: bool,
    /// Which kind of reply answered it ("text", "hang", ...).
    pub reply: &'static str,
    pub received_at: Instant,
    /// When the last byte was handed to the connection, or the client went away.
    pub finished_at: Option<Instant>,
}

struct Rule {
    needle: String,
    reply: Reply,
    remaining: Option<usize>,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Reply>,
    rules: Vec<Rule>,
    records: Vec<RecordedRequest>,
    other_requests: Vec<String>,
}

struct Shared {
    script: Mutex<Script>,
    /// Bumped by `release_hangs`; each hanging reply waits for a change.
    hang_release: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Script> {
        // A panicking test thread must not hide the records from the others.
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_reply(&self, last_user_text: &str) -> Reply {
        let mut script = self.lock();
        if let Some(reply) = script.queue.pop_front() {
            return reply;
        }
        let hit = script.rules.iter_mut().find(|r| {
            r.remaining != Some(0) && last_user_text.contains(r.needle.as_str())
        });
        if let Some(rule) = hit {
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            return rule.reply.clone();
        }
        Reply::text(&format!("ok: {last_user_text}"))
    }
}

/// Marks its request finished when dropped, so a client that goes away ends the interval too.
struct InFlight {
    shared: Arc<Shared>,
    index: usize,
}

impl InFlight {
    fn finish(&self) {
        let mut script = self.shared.lock();
        if let Some(r) = script.records.get_mut(self.index) {
            r.finished_at.get_or_insert_with(Instant::now);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Stops the server when the last handle to the provider goes.
struct ServerGuard {
    handle: ServerHandle,
    shared: Arc<Shared>,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.shared.hang_release.send_modify(|g| *g += 1);
        // `stop` sends its command at once; the returned future only waits for completion.
        drop(self.handle.stop(false));
    }
}

/// A running scripted provider. Clones share the same server and script.
#[derive(Clone)]
pub struct ScriptedProvider {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    shared: Arc<Shared>,
    _server: Arc<ServerGuard>,
}

impl ScriptedProvider {
    /// Starts the server on 127.0.0.1 with a free port, on its own thread and actix System.
    pub fn start() -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::default()),
            hang_release: watch::channel(0).0,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let for_server = shared.clone();
        std::thread::Builder::new()
            .name("scripted-provider".into())
            .spawn(move || serve(for_server, tx))
            .unwrap_or_else(|e| panic!("scripted provider: cannot spawn thread: {e}"));
        let (addr, handle) = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("scripted provider did not start: {e}"))
            .unwrap_or_else(|e| panic!("scripted provider did not start: {e}"));
        Self {
            base_url: format!("http://{addr}/v1"),
            _server: Arc::new(ServerGuard {
                handle,
                shared: shared.clone(),
            }),
            shared,
        }
    }

    /// Queues a reply; queued replies answer the next requests in order, before rules.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Answers every request whose last user text contains `needle` with `reply`
    /// (when the FIFO is empty). Earlier rules win.
    pub fn on_user_text(&self, needle: &str, reply: Reply) {
        self.add_rule(needle, reply, None);
    }

    /// Like `on_user_text`, but only for the next `times` matching requests.
    pub fn on_user_text_times(&self, needle: &str, reply: Reply, times: usize) {
        self.add_rule(needle, reply, Some(times));
    }

    fn add_rule(&self, needle: &str, reply: Reply, remaining: Option<usize>) {
        self.shared.lock().rules.push(Rule {
            needle: needle.to_string(),
            reply,
            remaining,
        });
    }

    /// Every model call so far (chat completions and messages), in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().records.clone()
    }

    /// Number of model calls so far.
    pub fn request_count(&self) -> usize {
        self.shared.lock().records.len()
    }

    /// Number of model calls whose last user text contains `tag`.
    pub fn request_count_for(&self, tag: &str) -> usize {
        self.shared
            .lock()
            .records
            .iter()
            .filter(|r| r.last_user_text.contains(tag))
            .count()
    }

    /// Paths of requests that were not model calls (e.g. `/v1/models`).
    pub fn other_requests(&self) -> Vec<String> {
        self.shared.lock().other_requests.clone()
    }

    /// Waits (polling, bounded) until at least `n` model calls arrived.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let have = self.request_count();
            if have >= n {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "scripted provider: expected {n} requests within {timeout:?}, got {have}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The most requests whose last user text contains `tag` that were in flight at once.
    pub fn max_concurrency_for(&self, tag: &str) -> usize {
        self.max_concurrency_where(|text| text.contains(tag))
    }

    /// The most requests matching `pred` (on the last user text) that were in flight at once.
    pub fn max_concurrency_where(&self, pred: impl Fn(&str) -> bool) -> usize {
        let now = Instant::now();
        let mut edges: Vec<(Instant, i32)> = Vec::new();
        for r in self.shared.lock().records.iter() {
            if pred(&r.last_user_text) {
                edges.push((r.received_at, 1));
                edges.push((r.finished_at.unwrap_or(now), -1));
            }
        }
        // At equal instants an end sorts before a start: touching intervals do not overlap.
        edges.sort_by_key(|&(at, delta)| (at, delta));
        let (mut current, mut max) = (0i32, 0i32);
        for (_, delta) in edges {
            current += delta;
            max = max.max(current);
        }
        max as usize
    }

    /// Lets every reply that is hanging now finish (later `Hang` replies hang again).
    pub fn release_hangs(&self) {
        self.shared.hang_release.send_modify(|g| *g += 1);
    }
}

type Started = Result<(std::net::SocketAddr, ServerHandle), String>;

fn serve(shared: Arc<Shared>, started: std::sync::mpsc::Sender<Started>) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let data = web::Data::from(shared);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(64 << 20))
                .default_service(web::to(dispatch))
        })
        .workers(2)
        .disable_signals()
        .shutdown_timeout(1)
        .bind(("127.0.0.1", 0));
        let server = match server {
            Ok(s) => s,
            Err(e) => {
                // The receiver waits for exactly this message; if it is gone there is no one to tell.
                drop(started.send(Err(e.to_string())));
                return;
            }
        };
        let addr = server.addrs()[0];
        let running = server.run();
        if started.send(Ok((addr, running.handle()))).is_err() {
            return;
        }
        if let Err(e) = running.await {
            eprintln!("scripted provider stopped with an error: {e}");
        }
    });
}

async fn dispatch(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let path = req.path().to_string();
    let wire = if path.ends_with("/chat/completions") {
        Wire::OpenAi
    } else if path.ends_with("/messages") {
        Wire::Anthropic
    } else {
        shared.lock().other_requests.push(path.clone());
        return if path.ends_with("/models") {
            HttpResponse::Ok().json(json!({"object": "list", "data": [
                {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "scripted"}
            ]}))
        } else {
            HttpResponse::NotFound().json(json!({"error": {"message": "no such path",
                "type": "not_found", "code": "not_found"}}))
        };
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let last_user_text = wire::last_user_text(&body);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let reply = shared.next_reply(&last_user_text);
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let index = {
        let mut script = shared.lock();
        script.records.push(RecordedRequest {
            path,
            wire,
            body: body.clone(),
            headers,
            last_user_text,
            stream,
            reply: reply.kind(),
            received_at: Instant::now(),
            finished_at: None,
        });
        script.records.len() - 1
    };
    let flight = InFlight {
        shared: shared.clone().into_inner(),
        index,
    };
    let answer = Answer {
        wire,
        stream,
        include_usage,
        body,
        flight,
    };
    answer.respond(reply).await
}

/// One request being answered.
struct Answer {
    wire: Wire,
    stream: bool,
    include_usage: bool,
    body: Value,
    flight: InFlight,
}

impl Answer {
    async fn respond(self, reply: Reply) -> HttpResponse {
        match reply {
            Reply::Text {
                chunks,
                chunk_delay,
            } => {
                if self.stream {
                    self.stream_text(chunks, chunk_delay)
                } else {
                    let text = chunks.concat();
                    tokio::time::sleep(chunk_delay * chunks.len() as u32).await;
                    let usage = Usage::estimate(&self.body, &text);
                    self.flight.finish();
                    HttpResponse::Ok().json(wire::full_body(self.wire, Some(&text), &[], usage))
                }
            }
            Reply::ToolCalls(calls) => {
                let usage = Usage::estimate(&self.body, &json!(calls).to_string());
                if self.stream {
                    let mut frames = wire::stream_head(self.wire, usage);
                    frames.extend(wire::tool_call_frames(self.wire, &calls));
                    frames.extend(wire::stream_tail(
                        self.wire,
                        true,
                        self.include_usage,
                        usage,
                    ));
                    let timed = frames.into_iter().map(|f| (Duration::ZERO, f)).collect();
                    sse(timed, self.flight)
                } else {
                    self.flight.finish();
                    HttpResponse::Ok().json(wire::full_body(self.wire, None, &calls, usage))
                }
            }
            Reply::Error {
                status,
                body,
                retry_after,
            } => {
                let code = actix_web::http::StatusCode::from_u16(status)
                    .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
                let mut builder = HttpResponse::build(code);
                if let Some(secs) = retry_after {
                    builder.insert_header(("Retry-After", secs.to_string()));
                }
                self.flight.finish();
                builder.json(body)
            }
            Reply::Overflow => {
                self.flight.finish();
                HttpResponse::BadRequest().json(wire::overflow_body(self.wire))
            }
            Reply::Malformed(bytes) => {
                self.flight.finish();
                let content_type = if self.stream {
                    "text/event-stream"
                } else {
                    "application/json"
                };
                HttpResponse::Ok().content_type(content_type).body(bytes)
            }
            Reply::Hang => self.hang(),
        }
    }

    fn stream_text(self, chunks: Vec<String>, delay: Duration) -> HttpResponse {
        let text = chunks.concat();
        let usage = Usage::estimate(&self.body, &text);
        let immediate = |frames: Vec<String>| frames.into_iter().map(|f| (Duration::ZERO, f));
        let mut timed: Vec<(Duration, String)> = Vec::new();
        timed.extend(immediate(wire::stream_head(self.wire, usage)));
        timed.extend(immediate(wire::text_block_start(self.wire)));
        timed.extend(chunks.iter().map(|c| (delay, wire::text_delta(self.wire, c))));
        timed.extend(immediate(wire::text_block_stop(self.wire)));
        timed.extend(immediate(wire::stream_tail(
            self.wire,
            false,
            self.include_usage,
            usage,
        )));
        sse(timed, self.flight)
    }

    /// Headers now, then nothing until released (then a short normal answer) or the client leaves.
    fn hang(self) -> HttpResponse {
        let (tx, rx) = mpsc::channel::<Result<web::Bytes, std::io::Error>>(16);
        let mut released = self.flight.shared.hang_release.subscribe();
        let content_type = if self.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        tokio::spawn(async move {
            let flight = self.flight;
            tokio::select! {
                _ = released.changed() => {}
                _ = tx.closed() => return,
                _ = tokio::time::sleep(MAX_HANG) => {}
            }
            let text = "released";
            let usage = Usage::estimate(&self.body, text);
            let frames = if self.stream {
                let mut f = wire::stream_head(self.wire, usage);
                f.extend(wire::text_block_start(self.wire));
                f.push(wire::text_delta(self.wire, text));
                f.extend(wire::text_block_stop(self.wire));
                f.extend(wire::stream_tail(self.wire, false, self.include_usage, usage));
                f
            } else {
                vec![wire::full_body(self.wire, Some(text), &[], usage).to_string()]
            };
            send_frames(&tx, frames.into_iter().map(|f| (Duration::ZERO, f)), &flight).await;
        });
        HttpResponse::Ok()
            .content_type(content_type)
            .streaming(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// A streaming 200 whose frames are produced by a task, each after its delay.
fn sse(frames: Vec<(Duration, String)>, flight: InFlight) -> HttpResponse {
    let (tx, rx) = mpsc::channel::<Result<web::Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        send_frames(&tx, frames.into_iter(), &flight).await;
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Sends frames in order; the request counts as finished just before the last frame goes out,
/// so a client reacting to the end can never be seen overlapping this request.
async fn send_frames(
    tx: &mpsc::Sender<Result<web::Bytes, std::io::Error>>,
    frames: impl ExactSizeIterator<Item = (Duration, String)>,
    flight: &InFlight,
) {
    let last = frames.len().saturating_sub(1);
    for (i, (delay, frame)) in frames.enumerate() {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if i == last {
            flight.finish();
        }
        if tx.send(Ok(web::Bytes::from(frame))).await.is_err() {
            return; // the client went away; `flight` records the end when dropped
        }
    }
}
