//! The scripted provider: a real HTTP server on loopback that speaks OpenAI Chat Completions and
//! Anthropic Messages and answers from a script (FIFO, rules, default), recording every request
//! so tests can count calls and measure how many ran at once.
mod server;

use crate::scripted_wire::Wire;
use crate::wait::within;
use actix_web::dev::ServerHandle;
use serde_json::{json, Value};
use server::serve;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

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
    /// Text, then tool calls, in one answer (a model that says what it is about to do).
    TextThenToolCalls(String, Vec<(String, String, Value)>),
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
    /// Text that opens by echoing the request's last user text, then this (a model that
    /// repeats an instruction back before following it).
    EchoThen(String),
    /// Text streamed in steps: chunks after their delays, and gates where the stream stays
    /// open and silent until the next `release_hangs()` (or the client goes away); then the
    /// normal end. A slow model whose answer a test holds mid-stream.
    Steps(Vec<Step>),
}

/// One step of a [`Reply::Steps`] answer.
#[derive(Clone, Debug)]
pub enum Step {
    /// A text chunk, sent after this delay.
    Text(String, Duration),
    /// Silence until the next `release_hangs()`, or until the client goes away.
    Gate,
    /// An SSE comment (`: keep-alive`) after this delay: bytes that carry no text.
    Ping(Duration),
}

impl Step {
    /// A chunk sent at once.
    pub fn text(text: &str) -> Self {
        Self::Text(text.to_string(), Duration::ZERO)
    }
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

    /// A streamed OpenAI answer cut off by the output limit: `text`, then `finish_reason:
    /// "length"` (for a request that asked to stream, on the OpenAI wire).
    pub fn cut_off(text: &str) -> Self {
        let chunk = |delta: Value, finish: Value| {
            let c = json!({"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 0,
                "model": "scripted-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            format!("data: {c}\n\n")
        };
        let body = [
            chunk(json!({"role": "assistant", "content": text}), Value::Null),
            chunk(json!({}), json!("length")),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        Self::Malformed(body.into_bytes())
    }

    /// The same on the Anthropic wire: `text`, then `stop_reason: "max_tokens"` (streamed).
    pub fn cut_off_anthropic(text: &str) -> Self {
        let frame = |event: Value| {
            let kind = event["type"].as_str().unwrap_or_default().to_owned();
            format!("event: {kind}\ndata: {event}\n\n")
        };
        let body = [
            frame(
                json!({"type": "message_start", "message": {"id": "msg_t", "type": "message",
                "role": "assistant", "model": "scripted-model", "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            frame(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})),
            frame(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}})),
            frame(json!({"type": "content_block_stop", "index": 0})),
            frame(json!({"type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                "usage": {"output_tokens": 5}})),
            frame(json!({"type": "message_stop"})),
        ]
        .concat();
        Self::Malformed(body.into_bytes())
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

    /// The reply as sent to a request whose last user text is `last_user_text`.
    fn for_request(self, last_user_text: &str) -> Self {
        match self {
            // In two chunks: the echo and what follows arrive as separate deltas.
            Self::EchoThen(then) => {
                Self::chunks(&[last_user_text, &format!("\n\n{then}")], Duration::ZERO)
            }
            other => other,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Text { .. } | Self::EchoThen(_) => "text",
            Self::ToolCalls(_) | Self::TextThenToolCalls(..) => "tool_calls",
            Self::Error { .. } => "error",
            Self::Malformed(_) => "malformed",
            Self::Hang => "hang",
            Self::Overflow => "overflow",
            Self::Steps(_) => "steps",
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
    /// The text chunks of a [`Reply::Steps`] answer the HTTP server has taken so far (out of
    /// the provider, on their way to the client's socket).
    pub delivered_text: String,
}

impl RecordedRequest {
    /// A header's value (names are case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) struct Rule {
    needle: String,
    reply: Reply,
    remaining: Option<usize>,
    /// Only for a request whose last message is a tool result.
    after_tool: bool,
}

#[derive(Default)]
pub(crate) struct Script {
    pub(crate) queue: VecDeque<Reply>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) records: Vec<RecordedRequest>,
    pub(crate) other_requests: Vec<String>,
    /// What `/audio/transcriptions` answers (`None`: "scripted transcript").
    pub(crate) transcript: Option<String>,
    /// The multipart bodies `/audio/transcriptions` got, as text (lossy).
    pub(crate) transcriptions: Vec<String>,
    /// Records keep no request bodies or headers (`forget_bodies`).
    pub(crate) forget_bodies: bool,
    /// What a path other than a model call answers, by exact path (`answer_path`): a local
    /// server's metadata (`/props`, `/api/show`, `/v1/models` with a window).
    pub(crate) answers: Vec<(String, serde_json::Value)>,
    /// Serves nothing outside `/v1/` (404), as Ollama does (`only_under_v1`).
    pub(crate) only_under_v1: bool,
}

pub(crate) struct Shared {
    pub(crate) script: Mutex<Script>,
    /// Bumped by `release_hangs`; each hanging reply waits for a change.
    pub(crate) hang_release: watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Script> {
        // A panicking test thread must not hide the records from the others.
        self.script.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn next_reply(&self, last_user_text: &str, after_tool: bool) -> Reply {
        let mut script = self.lock();
        if let Some(reply) = script.queue.pop_front() {
            return reply.for_request(last_user_text);
        }
        let hit = script.rules.iter_mut().find(|r| {
            r.remaining != Some(0)
                && (after_tool || !r.after_tool)
                && last_user_text.contains(r.needle.as_str())
        });
        if let Some(rule) = hit {
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            return rule.reply.clone().for_request(last_user_text);
        }
        Reply::text(&format!("ok: {last_user_text}"))
    }
}

/// Marks its request finished when dropped, so a client that goes away ends the interval too.
pub(crate) struct InFlight {
    pub(crate) shared: Arc<Shared>,
    pub(crate) index: usize,
}

impl InFlight {
    pub(crate) fn finish(&self) {
        let mut script = self.shared.lock();
        if let Some(r) = script.records.get_mut(self.index) {
            r.finished_at.get_or_insert_with(Instant::now);
        }
    }

    /// Records that the HTTP server took this chunk of the answer's text.
    pub(crate) fn delivered(&self, text: &str) {
        let mut script = self.shared.lock();
        if let Some(r) = script.records.get_mut(self.index) {
            r.delivered_text.push_str(text);
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
        Self::start_on(0).unwrap_or_else(|e| panic!("scripted provider did not start: {e}"))
    }

    /// Starts the server on 127.0.0.1:`port` (0: a free one); `Err` when it cannot bind there,
    /// e.g. a real server already uses the port.
    pub fn start_on(port: u16) -> Result<Self, String> {
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::default()),
            hang_release: watch::channel(0).0,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let for_server = shared.clone();
        std::thread::Builder::new()
            .name("scripted-provider".into())
            .spawn(move || serve(for_server, port, tx))
            .map_err(|e| format!("cannot spawn its thread: {e}"))?;
        let (addr, handle) = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| e.to_string())??;
        Ok(Self {
            base_url: format!("http://{addr}/v1"),
            _server: Arc::new(ServerGuard {
                handle,
                shared: shared.clone(),
            }),
            shared,
        })
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

    /// Like `on_user_text`, but only for requests whose last message is a tool result (the
    /// call after a tool round). Add it before the rule that makes the tool call.
    pub fn on_tool_result(&self, needle: &str, reply: Reply) {
        self.shared.lock().rules.push(Rule {
            needle: needle.to_string(),
            reply,
            remaining: None,
            after_tool: true,
        });
    }

    fn add_rule(&self, needle: &str, reply: Reply, remaining: Option<usize>) {
        self.shared.lock().rules.push(Rule {
            needle: needle.to_string(),
            reply,
            remaining,
            after_tool: false,
        });
    }

    /// Every model call so far (chat completions and messages), in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().records.clone()
    }

    /// The last user text of every model call so far, in arrival order: what each call was
    /// asked.
    pub fn asked(&self) -> Vec<String> {
        self.shared
            .lock()
            .records
            .iter()
            .map(|r| r.last_user_text.clone())
            .collect()
    }

    /// The content of the tool result request `n` carried for `call_id` (OpenAI wire shape);
    /// empty when there is none.
    pub fn tool_result(&self, n: usize, call_id: &str) -> String {
        self.requests()[n].body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
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

    /// Keeps no request bodies or headers in its records from now on, only what each request
    /// was and when: a benchmark at hundreds of calls a second would otherwise hold every
    /// transcript it was sent (an open-loop soak at 400 turns/s outgrew 23 GiB in six minutes).
    pub fn forget_bodies(&self) {
        self.shared.lock().forget_bodies = true;
    }

    /// `path` (exact, e.g. `/props`; GET or POST) answers 200 with `body` from now on, as a
    /// real local server's metadata does; `/v1/models` may be replaced so too.
    pub fn answer_path(&self, path: &str, body: serde_json::Value) {
        let mut script = self.shared.lock();
        script.answers.retain(|(p, _)| p != path);
        script.answers.push((path.to_owned(), body));
    }

    /// From now on every path outside `/v1/` answers 404, as Ollama's does: a base URL typed
    /// without `/v1` reaches nothing.
    pub fn only_under_v1(&self) {
        self.shared.lock().only_under_v1 = true;
    }

    /// `/audio/transcriptions` (speech to text) answers `{text}` from now on.
    pub fn set_transcript(&self, text: &str) {
        self.shared.lock().transcript = Some(text.to_owned());
    }

    /// The multipart bodies of the transcription requests so far (lossy text).
    pub fn transcriptions(&self) -> Vec<String> {
        self.shared.lock().transcriptions.clone()
    }

    /// Paths of requests that were not model calls (e.g. `/v1/models`).
    pub fn other_requests(&self) -> Vec<String> {
        self.shared.lock().other_requests.clone()
    }

    /// Waits (polling, bounded) until at least `n` model calls arrived.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Result<(), String> {
        match within(timeout, || async {
            (self.request_count() >= n).then_some(())
        })
        .await
        {
            Some(()) => Ok(()),
            None => Err(format!(
                "scripted provider: expected {n} requests within {timeout:?}, got {}",
                self.request_count()
            )),
        }
    }

    /// The most requests whose last user text contains `tag` that were in flight at once.
    pub fn max_concurrency_for(&self, tag: &str) -> usize {
        self.max_concurrency_where(|text| text.contains(tag))
    }

    /// The most requests matching `pred` (on the last user text) that were in flight at once.
    pub fn max_concurrency_where(&self, pred: impl Fn(&str) -> bool) -> usize {
        let now = Instant::now();
        let script = self.shared.lock();
        crate::stats::max_overlap(
            script
                .records
                .iter()
                .filter(|r| pred(&r.last_user_text))
                .map(|r| (r.received_at, r.finished_at.unwrap_or(now))),
        )
    }

    /// Lets every reply that is hanging now finish, and every `Steps` reply waiting at a gate
    /// go on to its next step (later `Hang` replies and gates wait again).
    pub fn release_hangs(&self) {
        self.shared.hang_release.send_modify(|g| *g += 1);
    }
}
