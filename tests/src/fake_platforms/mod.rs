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
mod server;
mod slack;
mod telegram;
mod webhook;

pub use slack::SLACK_MAX_SECTION;
pub use telegram::{parse_telegram_html, TELEGRAM_MAX_TEXT};
pub use webhook::sign;

use crate::wait::within;
use actix_web::dev::ServerHandle;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

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
}

/// The inbound secrets of the platforms' configuration ([`FakePlatform::config_toml`]), with
/// which `crate::webhooks` signs what it sends.
pub const TELEGRAM_SECRET: &str = "tg-secret_token-1";
pub const SLACK_SECRET: &str = "slack-signing-secret";
pub const GENERIC_SECRET: &str = "generic-webhook-secret";

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
            .spawn(move || server::serve(for_server, tx))
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
    /// secrets are this module's, which `crate::webhooks` signs with), `allowed_users = ["*"]` unless `extra`
    /// sets it, and `extra` lines (e.g. `stream = true`) appended.
    pub fn config_toml(&self, extra: &str) -> String {
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
