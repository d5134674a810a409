//! Chat platforms in, for e2e tests: the `[platforms.*]` config of a test, the payloads of
//! `tests/fixtures/platforms/` (shapes from the platforms' documentation) with a test's ids put
//! in, a client that posts them to `/webhooks/*` signed as each platform signs (and measures how
//! long the answer took), and reads of the rows the webhooks write.
use crate::api::Resp;
use crate::fake_platforms::FakePlatform;
use crate::wait::within;
use hmac::{Hmac, Mac};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::{json, Value};
use sha2::Sha256;
use std::time::{Duration, Instant};

/// The inbound secrets this module signs with, which the fakes' configuration names.
pub use crate::fake_platforms::{GENERIC_SECRET, SLACK_SECRET, TELEGRAM_SECRET};
/// The Slack team of the fixtures.
pub const SLACK_TEAM: &str = "T123ABC456";
/// The app's bot user in the fixtures' `authorizations`.
pub const SLACK_BOT_USER: &str = "UBOT12345";

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub const TELEGRAM_BOT_TOKEN: &str = "123456:TEST";
pub const SLACK_BOT_TOKEN: &str = "xoxb-test";

/// Where a test's turnkey sends to: Telegram's and Slack's `api_base`, the generic `reply_url`.
#[derive(Clone, Debug)]
pub struct Endpoints {
    pub telegram: String,
    pub slack: String,
    pub reply_url: String,
}

impl Endpoints {
    /// Nothing listens there: for tests that only look at what came in.
    pub fn nowhere() -> Self {
        Self {
            telegram: "http://127.0.0.1:9".into(),
            slack: "http://127.0.0.1:9/api".into(),
            reply_url: "http://127.0.0.1:9/reply".into(),
        }
    }

    /// The fakes of `crate::fake_platforms`, started with this module's credentials.
    pub fn fakes() -> (Self, [FakePlatform; 3]) {
        let telegram = FakePlatform::telegram(TELEGRAM_BOT_TOKEN);
        let slack = FakePlatform::slack(SLACK_BOT_TOKEN);
        let webhook = FakePlatform::webhook(GENERIC_SECRET);
        (
            Self {
                telegram: telegram.endpoint(),
                slack: slack.endpoint(),
                reply_url: webhook.endpoint(),
            },
            [telegram, slack, webhook],
        )
    }
}

/// `[platforms.telegram]`, `[platforms.slack]` and `[platforms.webhook]` with the secrets above,
/// the given allowed users (the generic webhook allows everyone), sending to `to`.
pub fn platforms_toml(to: &Endpoints, telegram_users: &[&str], slack_users: &[&str]) -> String {
    let list = |users: &[&str]| {
        users
            .iter()
            .map(|u| format!("{u:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "\n[platforms.telegram]\nbot_token = \"{TELEGRAM_BOT_TOKEN}\"\n\
         secret_token = \"{TELEGRAM_SECRET}\"\napi_base = \"{}\"\nallowed_users = [{}]\n\
         \n[platforms.slack]\nbot_token = \"{SLACK_BOT_TOKEN}\"\n\
         signing_secret = \"{SLACK_SECRET}\"\napi_base = \"{}\"\nallowed_users = [{}]\n\
         \n[platforms.webhook]\nsecret = \"{GENERIC_SECRET}\"\nreply_url = \"{}\"\n\
         allowed_users = [\"*\"]\n",
        to.telegram,
        list(telegram_users),
        to.slack,
        list(slack_users),
        to.reply_url,
    )
}

/// A fixture of `tests/fixtures/platforms/`.
pub fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/fixtures/platforms/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// A Telegram `Update` with a text message in private chat `chat` from user `user`.
pub fn telegram_message(update_id: i64, chat: i64, user: i64, text: &str) -> Value {
    let mut u = fixture("telegram_message");
    u["update_id"] = json!(update_id);
    u["message"]["message_id"] = json!(update_id + 500);
    u["message"]["chat"]["id"] = json!(chat);
    u["message"]["from"]["id"] = json!(user);
    u["message"]["text"] = json!(text);
    u
}

/// A Telegram `Update` with a `callback_query` (an inline-keyboard button) carrying `data`.
pub fn telegram_button(update_id: i64, chat: i64, user: i64, data: &str) -> Value {
    let mut u = fixture("telegram_callback_query");
    u["update_id"] = json!(update_id);
    u["callback_query"]["id"] = json!(format!("cb-{update_id}"));
    u["callback_query"]["from"]["id"] = json!(user);
    u["callback_query"]["message"]["chat"]["id"] = json!(chat);
    u["callback_query"]["data"] = json!(data);
    u
}

/// A Slack `event_callback` with a `message` event from `user` in `channel`.
pub fn slack_message(event_id: &str, channel: &str, ts: &str, user: &str, text: &str) -> Value {
    let mut e = fixture("slack_event_message");
    e["event_id"] = json!(event_id);
    e["event"]["channel"] = json!(channel);
    e["event"]["ts"] = json!(ts);
    e["event"]["event_ts"] = json!(ts);
    e["event"]["user"] = json!(user);
    e["event"]["text"] = json!(text);
    e
}

/// A Slack `block_actions` interaction: `action_id` pressed by `user` in `channel`.
pub fn slack_button(
    trigger: &str,
    channel: &str,
    user: &str,
    action_id: &str,
    value: &str,
) -> Value {
    let mut p = fixture("slack_block_actions");
    p["trigger_id"] = json!(trigger);
    p["channel"]["id"] = json!(channel);
    p["container"]["channel_id"] = json!(channel);
    p["user"]["id"] = json!(user);
    p["actions"][0]["action_id"] = json!(action_id);
    p["actions"][0]["value"] = json!(value);
    p
}

/// A message of the generic webhook.
pub fn generic_message(chat: &str, message_id: &str, user: &str, text: &str) -> Value {
    let mut m = fixture("generic_message");
    m["chat_id"] = json!(chat);
    m["message_id"] = json!(message_id);
    m["user"] = json!(user);
    m["text"] = json!(text);
    m
}

/// HMAC-SHA256(key, parts joined), hex.
pub fn hmac_hex(key: &str, parts: &[&[u8]]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(key.as_bytes()) {
        Ok(m) => m,
        Err(e) => panic!("hmac key: {e}"),
    };
    parts.iter().for_each(|p| mac.update(p));
    hex::encode(mac.finalize().into_bytes())
}

/// Slack's `X-Slack-Signature` of `body` sent at `ts`.
pub fn slack_signature(secret: &str, ts: i64, body: &[u8]) -> String {
    format!(
        "v0={}",
        hmac_hex(secret, &[b"v0:", ts.to_string().as_bytes(), b":", body])
    )
}

/// The generic webhook's `X-Signature` of `body`.
pub fn generic_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hmac_hex(secret, &[body]))
}

pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Posts to a turnkey's `/webhooks/*` over one kept-alive connection.
#[derive(Clone)]
pub struct Webhooks {
    base: String,
    http: reqwest::Client,
}

impl Webhooks {
    pub fn new(base: &str) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(4)
            .build()
            .unwrap_or_else(|e| panic!("reqwest client: {e}"));
        Self {
            base: base.trim_end_matches('/').to_owned(),
            http,
        }
    }

    /// Opens the connection (so a measured request does not include the TCP handshake).
    pub async fn warm_up(&self) {
        let r = self
            .raw("GET", "/healthz", &[], "text/plain", Vec::new())
            .await;
        assert_eq!(r.0.status, 200, "{}", r.0.text);
    }

    /// Any request, with its wall time.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        content_type: &str,
        body: Vec<u8>,
    ) -> (Resp, Duration) {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .unwrap_or_else(|e| panic!("method {method}: {e}"));
        let mut b = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(REQUEST_TIMEOUT)
            .header("Content-Type", content_type)
            .body(body);
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        let started = Instant::now();
        let resp = b
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = resp
            .text()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: reading body: {e}"));
        let took = started.elapsed();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (
            Resp {
                status,
                body,
                text,
                content_type,
                retry_after: None,
            },
            took,
        )
    }

    /// A Telegram update with this secret token (`None`: no header).
    pub async fn telegram_with(&self, update: &Value, secret: Option<&str>) -> (Resp, Duration) {
        let headers: Vec<(&str, String)> = secret
            .map(|s| ("X-Telegram-Bot-Api-Secret-Token", s.to_owned()))
            .into_iter()
            .collect();
        self.raw(
            "POST",
            "/webhooks/telegram",
            &headers,
            "application/json",
            update.to_string().into_bytes(),
        )
        .await
    }

    pub async fn telegram(&self, update: &Value) -> (Resp, Duration) {
        self.telegram_with(update, Some(TELEGRAM_SECRET)).await
    }

    /// A Slack request with exactly these headers.
    pub async fn slack_raw(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        headers: &[(&str, String)],
    ) -> (Resp, Duration) {
        self.raw("POST", path, headers, content_type, body).await
    }

    /// A Slack Events API request signed now (and marked as Slack's retry `retry`, if given).
    pub async fn slack_retry(&self, envelope: &Value, retry: Option<u32>) -> (Resp, Duration) {
        let body = envelope.to_string().into_bytes();
        let ts = unix_now();
        let mut headers = vec![
            ("X-Slack-Request-Timestamp", ts.to_string()),
            (
                "X-Slack-Signature",
                slack_signature(SLACK_SECRET, ts, &body),
            ),
        ];
        if let Some(n) = retry {
            headers.push(("X-Slack-Retry-Num", n.to_string()));
            headers.push(("X-Slack-Retry-Reason", "http_timeout".to_owned()));
        }
        self.slack_raw("/webhooks/slack", "application/json", body, &headers)
            .await
    }

    pub async fn slack(&self, envelope: &Value) -> (Resp, Duration) {
        self.slack_retry(envelope, None).await
    }

    /// A Slack interaction (`payload=<JSON>`, form-encoded) signed now.
    pub async fn slack_interactive(&self, payload: &Value) -> (Resp, Duration) {
        let body = form_payload(payload);
        let ts = unix_now();
        let headers = vec![
            ("X-Slack-Request-Timestamp", ts.to_string()),
            (
                "X-Slack-Signature",
                slack_signature(SLACK_SECRET, ts, &body),
            ),
        ];
        self.slack_raw(
            "/webhooks/slack/interactive",
            "application/x-www-form-urlencoded",
            body,
            &headers,
        )
        .await
    }

    /// A generic webhook message signed with `secret` (`None`: no header).
    pub async fn generic_with(&self, message: &Value, secret: Option<&str>) -> (Resp, Duration) {
        let body = message.to_string().into_bytes();
        let headers: Vec<(&str, String)> = secret
            .map(|s| ("X-Signature", generic_signature(s, &body)))
            .into_iter()
            .collect();
        self.raw(
            "POST",
            "/webhooks/generic",
            &headers,
            "application/json",
            body,
        )
        .await
    }

    pub async fn generic(&self, message: &Value) -> (Resp, Duration) {
        self.generic_with(message, Some(GENERIC_SECRET)).await
    }
}

/// `payload=<JSON>` form-encoded, as Slack posts interactions.
pub fn form_payload(payload: &Value) -> Vec<u8> {
    let json = payload.to_string();
    let mut out = String::from("payload=");
    for b in json.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out.into_bytes()
}

/// Reads the store of a test's turnkey directly (SQLite file or PostgreSQL database).
pub struct Rows {
    db: DatabaseConnection,
}

/// One `delivery_outbox` row.
#[derive(Clone, Debug)]
pub struct OutboxRow {
    pub platform: String,
    pub chat_key: String,
    pub session_id: Option<String>,
    pub idempotency_key: String,
    pub kind: String,
    pub payload: Value,
    pub status: String,
}

impl OutboxRow {
    pub fn text(&self) -> &str {
        self.payload["text"].as_str().unwrap_or_default()
    }
}

impl Rows {
    pub async fn connect(database_url: &str) -> Self {
        Self {
            db: crate::pg::open(database_url).await,
        }
    }

    async fn query(&self, sql: &str) -> Vec<sea_orm::QueryResult> {
        let backend = self.db.get_database_backend();
        self.db
            .query_all_raw(Statement::from_string(backend, sql.to_owned()))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Rows of `table` where `condition` (SQL) holds.
    pub async fn count_where(&self, table: &str, condition: &str) -> i64 {
        let rows = self
            .query(&format!(
                "SELECT COUNT(*) AS n FROM {table} WHERE {condition}"
            ))
            .await;
        rows.first()
            .and_then(|r| r.try_get::<i64>("", "n").ok())
            .unwrap_or_else(|| panic!("count of {table} where {condition}"))
    }

    pub async fn count(&self, table: &str) -> i64 {
        let rows = self
            .query(&format!("SELECT COUNT(*) AS n FROM {table}"))
            .await;
        rows.first()
            .and_then(|r| r.try_get::<i64>("", "n").ok())
            .unwrap_or_else(|| panic!("count of {table}"))
    }

    /// Every outbox row, in the order written (ids are time-ordered UUIDv7).
    pub async fn outbox(&self) -> Vec<OutboxRow> {
        self.query(
            "SELECT platform, chat_key, session_id, idempotency_key, kind, payload, status \
             FROM delivery_outbox ORDER BY id",
        )
        .await
        .into_iter()
        .map(|r| {
            let s = |c: &str| {
                r.try_get::<String>("", c)
                    .unwrap_or_else(|e| panic!("delivery_outbox.{c}: {e}"))
            };
            OutboxRow {
                platform: s("platform"),
                chat_key: s("chat_key"),
                session_id: r.try_get::<Option<String>>("", "session_id").ok().flatten(),
                idempotency_key: s("idempotency_key"),
                kind: s("kind"),
                payload: serde_json::from_str(&s("payload")).unwrap_or(Value::Null),
                status: s("status"),
            }
        })
        .collect()
    }

    /// The outbox row with this idempotency key, waiting for it at most `bound`.
    pub async fn wait_outbox(&self, key: &str, bound: Duration) -> OutboxRow {
        let found = within(bound, || async {
            self.outbox()
                .await
                .into_iter()
                .find(|r| r.idempotency_key == key)
        })
        .await;
        match found {
            Some(row) => row,
            None => panic!(
                "no outbox row {key} within {bound:?}; rows: {:?}",
                self.outbox().await
            ),
        }
    }

    /// `(platform, external_id, chat_key, session_id, result)` of every inbound update.
    pub async fn inbound(&self) -> Vec<(String, String, String, String, Option<String>)> {
        self.query(
            "SELECT platform, external_id, chat_key, session_id, result FROM inbound_updates \
             ORDER BY created_at, external_id",
        )
        .await
        .into_iter()
        .map(|r| {
            let s = |c: &str| {
                r.try_get::<String>("", c)
                    .unwrap_or_else(|e| panic!("inbound_updates.{c}: {e}"))
            };
            (
                s("platform"),
                s("external_id"),
                s("chat_key"),
                s("session_id"),
                r.try_get::<Option<String>>("", "result").ok().flatten(),
            )
        })
        .collect()
    }

    /// The session chat `chat_key` talks to now.
    pub async fn chat_session(&self, chat_key: &str) -> Option<String> {
        self.query(&format!(
            "SELECT session_id FROM chat_sessions WHERE chat_key = '{}'",
            chat_key.replace('\'', "''")
        ))
        .await
        .first()
        .and_then(|r| r.try_get::<String>("", "session_id").ok())
    }
}
