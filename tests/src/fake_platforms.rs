//! Fake chat platforms on loopback for the platform tests (SPEC R1.3, R11.1, R13.5): the
//! Telegram Bot API (`/bot<token>/<method>`), the Slack Web API (`/api/chat.postMessage`,
//! `/api/chat.update`) and a generic reply receiver (`/reply`, HMAC-signed). Each records every
//! call (method, body, headers, when it came, what it answered), hands out message ids, keeps
//! the current text of each message it sent (so edits can be followed), and can be scripted per
//! method: answer 429 with a retry-after, a Telegram parse error, any status, or hold a request
//! until released (to place a SIGKILL while a send is in flight).
//!
//! The fakes check what the real services check where a wrong client would get an error: the
//! bot token (Telegram 401, Slack `invalid_auth`), Telegram's HTML (only its tags, balanced, `&`
//! and `<` escaped: else 400 "can't parse entities"), Telegram's 4096-character limit on the
//! visible text, "message is not modified" for an edit that changes nothing, an edit of an
//! unknown message, Slack's 3000-character section text (`invalid_blocks`), and the generic
//! receiver's `X-Signature` (401 when it does not match).
use crate::wait::within;
use actix_web::{dev::ServerHandle, web, App, HttpRequest, HttpResponse, HttpServer};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Longest a held request waits when nobody releases it; keeps every test bounded.
const MAX_HOLD: Duration = Duration::from_secs(120);
/// Telegram's limit on a message's text after entity parsing, in UTF-16 code units.
pub const TELEGRAM_MAX_TEXT: usize = 4096;
/// Slack's limit on a section block's text.
pub const SLACK_MAX_SECTION: usize = 3000;
/// Slack truncates (and, for very long texts, refuses) a message's `text` beyond this.
const SLACK_MAX_TEXT: usize = 40_000;
/// The tags Telegram's HTML parse mode understands.
const TELEGRAM_TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "a",
    "code",
    "pre",
    "tg-spoiler",
    "tg-emoji",
    "span",
    "blockquote",
];

/// Which platform a fake plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeKind {
    Telegram,
    Slack,
    /// The generic webhook's reply receiver.
    Webhook,
}

/// One call the fake received.
#[derive(Clone, Debug)]
pub struct FakeCall {
    /// `sendMessage`, `editMessageText`, `answerCallbackQuery`, `setWebhook` (Telegram);
    /// `chat.postMessage`, `chat.update` (Slack); `reply` (generic).
    pub method: String,
    pub body: Value,
    pub headers: Vec<(String, String)>,
    /// When the request arrived.
    pub at: Instant,
    /// The HTTP status answered; 0 while the call is held.
    pub status: u16,
    /// Whether the platform accepted it (`ok: true`; for the generic receiver a 2xx with a
    /// good signature).
    pub ok: bool,
    /// The message id given (Telegram `message_id`, Slack `ts`) or edited.
    pub message_id: Option<String>,
    /// The platform's error text when it refused (`description` / `error`).
    pub error: Option<String>,
}

impl FakeCall {
    /// `body.text` (Telegram, Slack, generic), or "" when absent.
    pub fn text(&self) -> &str {
        self.body.get("text").and_then(Value::as_str).unwrap_or("")
    }

    /// A header's value (names are case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A scripted answer for the next call(s) of one method.
#[derive(Clone, Debug)]
pub enum Fault {
    /// HTTP 429: Telegram's body `parameters.retry_after`, Slack's `Retry-After` header, in
    /// seconds (the generic receiver sends the header too).
    RateLimit(u64),
    /// Telegram's 400 "Bad Request: can't parse entities: ...".
    ParseError,
    /// This status with this JSON body.
    Status(u16, Value),
    /// Record the call, then wait until `release()` (at most two minutes) and answer normally.
    Hold,
}

/// A message as the chat shows it now (after edits).
#[derive(Clone, Debug, PartialEq)]
pub struct FakeMessage {
    pub chat: String,
    pub id: String,
    pub text: String,
    /// How many edits changed it.
    pub edits: usize,
}

#[derive(Default)]
struct State {
    calls: Vec<FakeCall>,
    faults: HashMap<String, VecDeque<Fault>>,
    /// (chat, message id) → the message; ordered by id for `messages()`.
    messages: BTreeMap<(String, u64), FakeMessage>,
    next_id: u64,
    /// Files a message may carry: Telegram's `getFile` and file URLs, Slack's private URLs.
    files: HashMap<String, Vec<u8>>,
}

struct Shared {
    kind: FakeKind,
    /// Telegram and Slack: the bot token; generic: the HMAC secret.
    secret: String,
    state: Mutex<State>,
    release: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not hide the records from the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct ServerGuard {
    handle: ServerHandle,
    shared: Arc<Shared>,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.shared.release.send_modify(|g| *g += 1);
        // `stop` sends its command at once; the returned future only waits for completion.
        drop(self.handle.stop(false));
    }
}

/// A running fake platform. Clones share the server and its records.
#[derive(Clone)]
pub struct FakePlatform {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    shared: Arc<Shared>,
    _server: Arc<ServerGuard>,
}

impl FakePlatform {
    /// A fake Telegram Bot API accepting `bot_token`.
    pub fn telegram(bot_token: &str) -> Self {
        Self::start(FakeKind::Telegram, bot_token)
    }

    /// A fake Slack Web API accepting `Authorization: Bearer <bot_token>`.
    pub fn slack(bot_token: &str) -> Self {
        Self::start(FakeKind::Slack, bot_token)
    }

    /// A generic reply receiver checking `X-Signature` with `secret`.
    pub fn webhook(secret: &str) -> Self {
        Self::start(FakeKind::Webhook, secret)
    }

    fn start(kind: FakeKind, secret: &str) -> Self {
        let shared = Arc::new(Shared {
            kind,
            secret: secret.to_owned(),
            state: Mutex::new(State {
                next_id: 1,
                ..State::default()
            }),
            release: watch::channel(0).0,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let for_server = shared.clone();
        std::thread::Builder::new()
            .name("fake-platform".into())
            .spawn(move || serve(for_server, tx))
            .unwrap_or_else(|e| panic!("fake platform: cannot spawn thread: {e}"));
        let (addr, handle) = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("fake platform did not start: {e}"))
            .unwrap_or_else(|e| panic!("fake platform did not start: {e}"));
        Self {
            url: format!("http://{addr}"),
            _server: Arc::new(ServerGuard {
                handle,
                shared: shared.clone(),
            }),
            shared,
        }
    }

    pub fn kind(&self) -> FakeKind {
        self.shared.kind
    }

    /// What goes in the platform's config: Telegram's and Slack's `api_base`, the generic
    /// `reply_url`.
    pub fn endpoint(&self) -> String {
        match self.shared.kind {
            FakeKind::Telegram => self.url.clone(),
            FakeKind::Slack => format!("{}/api", self.url),
            FakeKind::Webhook => format!("{}/reply", self.url),
        }
    }

    /// A `[platforms.<p>]` table pointing at this fake, with its credentials (the inbound
    /// secrets are those `crate::webhooks` signs with), `allowed_users = ["*"]` unless `extra`
    /// sets it, and `extra` lines (e.g. `stream = true`) appended.
    pub fn config_toml(&self, extra: &str) -> String {
        use crate::webhooks::{SLACK_SECRET, TELEGRAM_SECRET};
        let s = &self.shared.secret;
        let body = match self.shared.kind {
            FakeKind::Telegram => format!(
                "[platforms.telegram]\nbot_token = \"{s}\"\nsecret_token = \"{TELEGRAM_SECRET}\"\n\
                 api_base = \"{}\"\n",
                self.endpoint()
            ),
            FakeKind::Slack => format!(
                "[platforms.slack]\nbot_token = \"{s}\"\nsigning_secret = \"{SLACK_SECRET}\"\n\
                 api_base = \"{}\"\n",
                self.endpoint()
            ),
            FakeKind::Webhook => format!(
                "[platforms.webhook]\nsecret = \"{s}\"\nreply_url = \"{}\"\n",
                self.endpoint()
            ),
        };
        let allowed = if extra.contains("allowed_users") {
            ""
        } else {
            "allowed_users = [\"*\"]\n"
        };
        format!("\n{body}{allowed}{extra}\n")
    }

    /// A file the platform holds under `id`: Telegram's `getFile` finds it and its file URL
    /// serves it under the bot token; Slack serves it at [`FakePlatform::slack_file_url`] to
    /// the bot token. Each download is recorded as a call of method `file`.
    pub fn add_file(&self, id: &str, bytes: &[u8]) {
        self.shared
            .lock()
            .files
            .insert(id.to_owned(), bytes.to_vec());
    }

    /// Where a Slack file added with `add_file` is (its `url_private_download`).
    pub fn slack_file_url(&self, id: &str) -> String {
        format!("{}/files/{id}", self.url)
    }

    /// Answers the next `times` calls of `method` with `fault`, after any faults queued before.
    pub fn fail_next(&self, method: &str, fault: Fault, times: usize) {
        let mut state = self.shared.lock();
        let queue = state.faults.entry(method.to_owned()).or_default();
        queue.extend(std::iter::repeat_n(fault, times));
    }

    /// Lets every held call answer (later `Hold` faults hold again).
    pub fn release(&self) {
        self.shared.release.send_modify(|g| *g += 1);
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.shared.lock().calls.clone()
    }

    /// The calls of `method`, in arrival order.
    pub fn calls_to(&self, method: &str) -> Vec<FakeCall> {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// The calls the platform accepted, of any of `methods`, in arrival order.
    pub fn accepted(&self, methods: &[&str]) -> Vec<FakeCall> {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.ok && methods.contains(&c.method.as_str()))
            .cloned()
            .collect()
    }

    /// The messages the fake holds now (with their edits applied), oldest first.
    pub fn messages(&self) -> Vec<FakeMessage> {
        self.shared.lock().messages.values().cloned().collect()
    }

    /// Waits (polling, bounded) until at least `n` calls of `method` arrived; answers them.
    pub async fn wait_calls(
        &self,
        method: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<FakeCall>, String> {
        self.wait_until(timeout, |calls| {
            let of: Vec<_> = calls.iter().filter(|c| c.method == method).collect();
            (of.len() >= n).then(|| of.into_iter().cloned().collect())
        })
        .await
        .map_err(|calls| {
            format!(
                "fake {:?}: expected {n} `{method}` calls within {timeout:?}; calls: {}",
                self.shared.kind,
                summary(&calls)
            )
        })
    }

    /// Waits (polling, bounded) until at least `n` accepted calls of any of `methods` arrived.
    pub async fn wait_accepted(
        &self,
        methods: &[&str],
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<FakeCall>, String> {
        self.wait_until(timeout, |calls| {
            let of: Vec<_> = calls
                .iter()
                .filter(|c| c.ok && methods.contains(&c.method.as_str()))
                .collect();
            (of.len() >= n).then(|| of.into_iter().cloned().collect())
        })
        .await
        .map_err(|calls| {
            format!(
                "fake {:?}: expected {n} accepted {methods:?} calls within {timeout:?}; calls: {}",
                self.shared.kind,
                summary(&calls)
            )
        })
    }

    async fn wait_until<T>(
        &self,
        timeout: Duration,
        check: impl Fn(&[FakeCall]) -> Option<T>,
    ) -> Result<T, Vec<FakeCall>> {
        let found = within(timeout, || async { check(&self.calls()) }).await;
        found.ok_or_else(|| self.calls())
    }
}

/// One line per call, for failure messages.
fn summary(calls: &[FakeCall]) -> String {
    if calls.is_empty() {
        return "none".into();
    }
    calls
        .iter()
        .map(|c| {
            let text: String = c.text().chars().take(60).collect();
            format!(
                "\n  {} {} ok={} {:?} {text:?}",
                c.method,
                c.status,
                c.ok,
                c.error.as_deref().unwrap_or("")
            )
        })
        .collect()
}

type Started = Result<(std::net::SocketAddr, ServerHandle), String>;

fn serve(shared: Arc<Shared>, started: std::sync::mpsc::Sender<Started>) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let data = web::Data::from(shared);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .app_data(web::PayloadConfig::new(8 << 20))
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
            eprintln!("fake platform stopped with an error: {e}");
        }
    });
}

/// What one call is answered with, before it is recorded.
struct Outcome {
    status: u16,
    body: Value,
    retry_after: Option<u64>,
    ok: bool,
    message_id: Option<String>,
    error: Option<String>,
}

impl Outcome {
    fn ok(body: Value, message_id: Option<String>) -> Self {
        Self {
            status: 200,
            body,
            retry_after: None,
            ok: true,
            message_id,
            error: None,
        }
    }

    fn telegram_error(status: u16, description: String) -> Self {
        Self {
            status,
            body: json!({"ok": false, "error_code": status, "description": description}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some(description),
        }
    }

    /// Slack answers refusals with 200 and `ok: false`.
    fn slack_error(error: &str) -> Self {
        Self {
            status: 200,
            body: json!({"ok": false, "error": error}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some(error.to_owned()),
        }
    }
}

/// A file download (Telegram `/file/bot<token>/<path>`, Slack `/files/<id>` with the bot token
/// as bearer), recorded as a call of method `file`; `None` for any other path.
fn download(req: &HttpRequest, shared: &Shared) -> Option<HttpResponse> {
    let path = req.path();
    let (authorized, id) = match shared.kind {
        FakeKind::Telegram => {
            let rest = path.strip_prefix("/file/bot")?;
            let (token, file_path) = rest.split_once('/')?;
            let id = file_path.rsplit('/').next().unwrap_or_default();
            (token == shared.secret, id.to_owned())
        }
        FakeKind::Slack => {
            let id = path.strip_prefix("/files/")?;
            let bearer = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            (bearer == Some(shared.secret.as_str()), id.to_owned())
        }
        FakeKind::Webhook => return None,
    };
    let mut state = shared.lock();
    let found = state.files.get(&id).cloned();
    let status = match (&found, authorized) {
        (_, false) => 401,
        (None, true) => 404,
        (Some(_), true) => 200,
    };
    state.calls.push(FakeCall {
        method: "file".into(),
        body: json!({ "id": id }),
        headers: Vec::new(),
        at: Instant::now(),
        status,
        ok: status == 200,
        message_id: None,
        error: None,
    });
    Some(match (found, status) {
        (Some(bytes), 200) => HttpResponse::Ok()
            .content_type("application/octet-stream")
            .body(bytes),
        _ => HttpResponse::build(
            actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::NOT_FOUND),
        )
        .finish(),
    })
}

async fn dispatch(req: HttpRequest, raw: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    if let Some(served) = download(&req, &shared) {
        return served;
    }
    let path = req.path().to_owned();
    let method = match shared.kind {
        FakeKind::Telegram => path
            .strip_prefix("/bot")
            .and_then(|rest| rest.split_once('/'))
            .map(|(_, m)| m.to_owned()),
        FakeKind::Slack => path.strip_prefix("/api/").map(str::to_owned),
        FakeKind::Webhook => (path == "/reply").then(|| "reply".to_owned()),
    };
    let Some(method) = method else {
        return HttpResponse::NotFound().json(json!({"ok": false, "error": "no such path"}));
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let (index, fault) = {
        let mut state = shared.lock();
        let fault = state.faults.get_mut(&method).and_then(VecDeque::pop_front);
        state.calls.push(FakeCall {
            method: method.clone(),
            body: body.clone(),
            headers,
            at: Instant::now(),
            status: 0,
            ok: false,
            message_id: None,
            error: None,
        });
        (state.calls.len() - 1, fault)
    };
    let outcome = match fault {
        Some(Fault::Hold) => {
            let mut rx = shared.release.subscribe();
            // Bounded: nobody releasing must not hang a test forever.
            if tokio::time::timeout(MAX_HOLD, rx.changed()).await.is_err() {
                eprintln!("fake platform: a held `{method}` call was never released");
            }
            answer(&shared, &req, &method, &raw, &body)
        }
        Some(Fault::RateLimit(secs)) => rate_limited(shared.kind, secs),
        Some(Fault::ParseError) => Outcome::telegram_error(
            400,
            "Bad Request: can't parse entities: Can't find end tag corresponding to start tag \
             \"b\""
                .into(),
        ),
        Some(Fault::Status(status, body)) => Outcome {
            status,
            error: Some(body.to_string()),
            body,
            retry_after: None,
            ok: false,
            message_id: None,
        },
        None => answer(&shared, &req, &method, &raw, &body),
    };
    {
        let mut state = shared.lock();
        if let Some(call) = state.calls.get_mut(index) {
            call.status = outcome.status;
            call.ok = outcome.ok;
            call.message_id = outcome.message_id.clone();
            call.error = outcome.error.clone();
        }
    }
    let status = actix_web::http::StatusCode::from_u16(outcome.status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = HttpResponse::build(status);
    if let Some(secs) = outcome.retry_after {
        builder.insert_header(("Retry-After", secs.to_string()));
    }
    builder.json(outcome.body)
}

fn rate_limited(kind: FakeKind, secs: u64) -> Outcome {
    let body = match kind {
        FakeKind::Telegram => json!({
            "ok": false, "error_code": 429,
            "description": format!("Too Many Requests: retry after {secs}"),
            "parameters": {"retry_after": secs},
        }),
        FakeKind::Slack => json!({"ok": false, "error": "ratelimited"}),
        FakeKind::Webhook => json!({"error": "rate limited"}),
    };
    Outcome {
        status: 429,
        body,
        retry_after: Some(secs),
        ok: false,
        message_id: None,
        error: Some("rate limited".into()),
    }
}

fn answer(shared: &Shared, req: &HttpRequest, method: &str, raw: &[u8], body: &Value) -> Outcome {
    match shared.kind {
        FakeKind::Telegram => telegram(shared, req, method, body),
        FakeKind::Slack => slack(shared, req, method, body),
        FakeKind::Webhook => webhook(shared, req, raw, body),
    }
}

fn telegram(shared: &Shared, req: &HttpRequest, method: &str, body: &Value) -> Outcome {
    let token_ok = req
        .path()
        .strip_prefix("/bot")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(token, _)| token == shared.secret);
    if !token_ok {
        return Outcome::telegram_error(401, "Unauthorized".into());
    }
    if body.is_null() {
        return Outcome::telegram_error(400, "Bad Request: the body is not JSON".into());
    }
    match method {
        "sendMessage" => {
            let Some(chat) = body.get("chat_id").map(id_text) else {
                return Outcome::telegram_error(400, "Bad Request: chat_id is empty".into());
            };
            let visible = match telegram_visible_text(body) {
                Ok(v) => v,
                Err(e) => return Outcome::telegram_error(400, e),
            };
            let mut state = shared.lock();
            let id = state.next_id;
            state.next_id += 1;
            state.messages.insert(
                (chat.clone(), id),
                FakeMessage {
                    chat: chat.clone(),
                    id: id.to_string(),
                    text: visible.clone(),
                    edits: 0,
                },
            );
            Outcome::ok(
                json!({"ok": true, "result": {
                    "message_id": id, "date": chrono::Utc::now().timestamp(),
                    "chat": {"id": body.get("chat_id"), "type": "private"},
                    "text": visible,
                }}),
                Some(id.to_string()),
            )
        }
        "editMessageText" => {
            let chat = body.get("chat_id").map(id_text).unwrap_or_default();
            let id = body
                .get("message_id")
                .and_then(Value::as_u64)
                .unwrap_or_default();
            let visible = match telegram_visible_text(body) {
                Ok(v) => v,
                Err(e) => return Outcome::telegram_error(400, e),
            };
            let mut state = shared.lock();
            let Some(msg) = state.messages.get_mut(&(chat, id)) else {
                return Outcome::telegram_error(
                    400,
                    "Bad Request: message to edit not found".into(),
                );
            };
            if msg.text == visible {
                return Outcome::telegram_error(
                    400,
                    "Bad Request: message is not modified: specified new message content and \
                     reply markup are exactly the same as a current content and reply markup \
                     of the message"
                        .into(),
                );
            }
            msg.text = visible.clone();
            msg.edits += 1;
            Outcome::ok(
                json!({"ok": true, "result": {"message_id": id, "text": visible}}),
                Some(id.to_string()),
            )
        }
        "getFile" => {
            let id = body
                .get("file_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if shared.lock().files.contains_key(&id) {
                Outcome::ok(
                    json!({"ok": true, "result": {"file_id": id, "file_path": format!("documents/{id}")}}),
                    None,
                )
            } else {
                Outcome::telegram_error(400, "Bad Request: invalid file_id".into())
            }
        }
        "answerCallbackQuery" => {
            if body.get("callback_query_id").is_none() {
                return Outcome::telegram_error(400, "Bad Request: query_id is empty".into());
            }
            Outcome::ok(json!({"ok": true, "result": true}), None)
        }
        "setWebhook" | "deleteWebhook" => Outcome::ok(
            json!({"ok": true, "result": true, "description": "Webhook was set"}),
            None,
        ),
        _ => Outcome::telegram_error(404, "Not Found: method not found".into()),
    }
}

/// A chat id as text (Telegram takes a number or `@channel`).
fn id_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The text a Telegram chat would show, or Telegram's refusal.
fn telegram_visible_text(body: &Value) -> Result<String, String> {
    let text = body.get("text").and_then(Value::as_str).unwrap_or("");
    let visible = match body.get("parse_mode").and_then(Value::as_str) {
        Some("HTML") => parse_telegram_html(text)
            .map_err(|e| format!("Bad Request: can't parse entities: {e}"))?,
        Some(other) => {
            return Err(format!("Bad Request: unsupported parse_mode {other:?}"));
        }
        None => text.to_owned(),
    };
    if visible.trim().is_empty() {
        return Err("Bad Request: message text is empty".into());
    }
    if visible.encode_utf16().count() > TELEGRAM_MAX_TEXT {
        return Err("Bad Request: message is too long".into());
    }
    Ok(visible)
}

/// Telegram's HTML parse mode, strictly: only its tags, properly nested and closed; `<`, `>`
/// and `&` in text must be entities (`&lt;` `&gt;` `&amp;` `&quot;` or numeric). Answers the
/// visible text.
pub fn parse_telegram_html(html: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    let mut offset = 0;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest
                    .find('>')
                    .ok_or_else(|| format!("Unclosed start tag at byte offset {offset}"))?;
                let inner = &rest[1..end];
                if let Some(name) = inner.strip_prefix('/') {
                    let name = name.trim();
                    match open.pop() {
                        Some(top) if top == name => {}
                        Some(top) => {
                            return Err(format!(
                                "Can't find end tag corresponding to start tag \"{top}\""
                            ))
                        }
                        None => return Err(format!("Unexpected end tag at byte offset {offset}")),
                    }
                } else {
                    let name: String = inner
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    if !TELEGRAM_TAGS.contains(&name.as_str()) {
                        return Err(format!(
                            "Unsupported start tag \"{name}\" at byte offset {offset}"
                        ));
                    }
                    if name == "a" && !inner.contains("href=") {
                        return Err("an <a> tag needs href".into());
                    }
                    open.push(name);
                }
                offset += end + 1;
                rest = &rest[end + 1..];
            }
            '&' => {
                let end = rest
                    .find(';')
                    .filter(|e| *e <= 10)
                    .ok_or_else(|| format!("Unescaped '&' at byte offset {offset}"))?;
                let entity = &rest[1..end];
                let decoded = match entity {
                    "lt" => '<',
                    "gt" => '>',
                    "amp" => '&',
                    "quot" => '"',
                    e if e.starts_with("#x") => u32::from_str_radix(&e[2..], 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("bad entity &{e};"))?,
                    e if e.starts_with('#') => e[1..]
                        .parse::<u32>()
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| format!("bad entity &{e};"))?,
                    e => return Err(format!("Unsupported entity &{e};")),
                };
                out.push(decoded);
                offset += end + 1;
                rest = &rest[end + 1..];
            }
            '>' => return Err(format!("Unescaped '>' at byte offset {offset}")),
            c => {
                out.push(c);
                offset += c.len_utf8();
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if let Some(top) = open.pop() {
        return Err(format!(
            "Can't find end tag corresponding to start tag \"{top}\""
        ));
    }
    Ok(out)
}

fn slack(shared: &Shared, req: &HttpRequest, method: &str, body: &Value) -> Outcome {
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match auth.strip_prefix("Bearer ") {
        None => return Outcome::slack_error("not_authed"),
        Some(t) if t != shared.secret => return Outcome::slack_error("invalid_auth"),
        Some(_) => {}
    }
    if body.is_null() {
        return Outcome::slack_error("invalid_json");
    }
    let Some(channel) = body.get("channel").and_then(Value::as_str) else {
        return Outcome::slack_error("channel_not_found");
    };
    let text = body.get("text").and_then(Value::as_str).unwrap_or("");
    if text.chars().count() > SLACK_MAX_TEXT {
        return Outcome::slack_error("msg_too_long");
    }
    if let Some(blocks) = body.get("blocks") {
        let Some(blocks) = blocks.as_array() else {
            return Outcome::slack_error("invalid_blocks_format");
        };
        for b in blocks {
            let section_text = b.pointer("/text/text").and_then(Value::as_str);
            if b.get("type").and_then(Value::as_str) == Some("section")
                && section_text
                    .is_none_or(|t| t.is_empty() || t.chars().count() > SLACK_MAX_SECTION)
            {
                return Outcome::slack_error("invalid_blocks");
            }
        }
    } else if text.trim().is_empty() {
        return Outcome::slack_error("no_text");
    }
    let shown = if text.is_empty() {
        body.pointer("/blocks/0/text/text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    } else {
        text.to_owned()
    };
    match method {
        "chat.postMessage" => {
            let mut state = shared.lock();
            let n = state.next_id;
            state.next_id += 1;
            let ts = format!("1712345678.{n:06}");
            state.messages.insert(
                (channel.to_owned(), n),
                FakeMessage {
                    chat: channel.to_owned(),
                    id: ts.clone(),
                    text: shown.clone(),
                    edits: 0,
                },
            );
            Outcome::ok(
                json!({"ok": true, "channel": channel, "ts": ts,
                       "message": {"type": "message", "text": shown, "ts": ts}}),
                Some(ts),
            )
        }
        "chat.update" => {
            let ts = body.get("ts").and_then(Value::as_str).unwrap_or("");
            let n = ts
                .split_once('.')
                .and_then(|(_, n)| n.parse::<u64>().ok())
                .unwrap_or(0);
            let mut state = shared.lock();
            let Some(msg) = state.messages.get_mut(&(channel.to_owned(), n)) else {
                return Outcome::slack_error("message_not_found");
            };
            if msg.text != shown {
                msg.edits += 1;
            }
            msg.text = shown.clone();
            Outcome::ok(
                json!({"ok": true, "channel": channel, "ts": ts, "text": shown}),
                Some(ts.to_owned()),
            )
        }
        _ => Outcome::slack_error("unknown_method"),
    }
}

/// `sha256=HEX` of HMAC-SHA256(`secret`, `body`): the generic webhook's signature.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|e| panic!("hmac key: {e}"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn webhook(shared: &Shared, req: &HttpRequest, raw: &[u8], body: &Value) -> Outcome {
    let given = req
        .headers()
        .get("x-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if given != sign(&shared.secret, raw) {
        return Outcome {
            status: 401,
            body: json!({"error": "bad signature"}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some("bad signature".into()),
        };
    }
    let fields_ok = body.get("chat_id").is_some_and(Value::is_string)
        && body.get("text").is_some_and(Value::is_string)
        && body.get("final").is_some_and(Value::is_boolean)
        && body.get("in_reply_to").is_some();
    if !fields_ok {
        return Outcome {
            status: 400,
            body: json!({"error": "want {chat_id, text, in_reply_to, final}"}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some("bad body".into()),
        };
    }
    let chat = body
        .get("chat_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let text = body
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut state = shared.lock();
    let n = state.next_id;
    state.next_id += 1;
    state.messages.insert(
        (chat.clone(), n),
        FakeMessage {
            chat,
            id: n.to_string(),
            text,
            edits: 0,
        },
    );
    Outcome::ok(json!({"ok": true}), None)
}

#[cfg(test)]
mod tests {
    use super::parse_telegram_html;

    #[test]
    fn telegram_html_is_checked_like_telegram() {
        assert_eq!(
            parse_telegram_html("<b>a &amp; b</b> &lt;c&gt;").as_deref(),
            Ok("a & b <c>")
        );
        assert_eq!(
            parse_telegram_html("<pre><code class=\"language-rust\">x</code></pre>").as_deref(),
            Ok("x")
        );
        for bad in [
            "a < b",
            "a & b",
            "<b>x",
            "<b>x</i>",
            "<div>x</div>",
            "x</b>",
            "a > b",
        ] {
            assert!(parse_telegram_html(bad).is_err(), "{bad}");
        }
    }
}
