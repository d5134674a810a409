//! The fake Slack Web API: `chat.postMessage` and `chat.update` under the bot token, refusing
//! what Slack refuses (a missing channel or text, a section over 3000 characters).
use super::{FakeMessage, Outcome, Shared};
use actix_web::HttpRequest;
use serde_json::{json, Value};

/// Slack's limit on a section block's text.
pub const SLACK_MAX_SECTION: usize = 3000;
/// Slack truncates (and, for very long texts, refuses) a message's `text` beyond this.
const SLACK_MAX_TEXT: usize = 40_000;

impl Outcome {
    /// Slack answers refusals with 200 and `ok: false`.
    pub(super) fn slack_error(error: &str) -> Self {
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

/// Slack's answer to `method` (`/api/<method>`).
pub(super) fn answer(shared: &Shared, req: &HttpRequest, method: &str, body: &Value) -> Outcome {
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
