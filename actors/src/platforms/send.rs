//! One outbox row as a platform message: what it says (a reply, a notice, an approval request
//! with buttons), the pieces it is sent in (`split.rs`), and the call that sends (or edits) one
//! piece on the row's platform. The outbox sender decides when; this decides what and how.
use super::client::CallError;
use super::config::PlatformsConfig;
use super::slack::{self, Slack, SlackChannel};
use super::telegram::{self, Telegram, TelegramChat};
use super::webhook::Webhook;
use super::{format, split, ChatTarget};
use serde_json::Value;
use turnkey_storage::Outbox;

/// The clients of the configured platforms.
#[derive(Clone, Default)]
pub struct Clients {
    pub telegram: Option<Telegram>,
    pub slack: Option<Slack>,
    pub webhook: Option<Webhook>,
}

impl Clients {
    pub fn from_config(cfg: &PlatformsConfig) -> Self {
        Self {
            telegram: cfg.telegram.as_ref().map(Telegram::new),
            slack: cfg.slack.as_ref().map(Slack::new),
            webhook: cfg.webhook.as_ref().map(Webhook::new),
        }
    }

    /// The platforms that have a client.
    pub fn platforms(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.telegram.is_some() {
            out.push("telegram");
        }
        if self.slack.is_some() {
            out.push("slack");
        }
        if self.webhook.is_some() {
            out.push("webhook");
        }
        out
    }
}

/// What a row says, platform-neutral: Markdown text and what goes with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub text: String,
    /// An approval request: its id, for the buttons.
    pub approval_id: Option<String>,
    /// The platform message this one answers (`payload.reply_to`), if given.
    pub reply_to: Option<String>,
}

/// The message of an outbox row, or why it cannot be sent.
pub fn message_of(row: &Outbox) -> Result<Message, String> {
    let reply_to = row.payload.get("reply_to").and_then(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    match row.kind.as_str() {
        "reply" | "notice" | "draft" => {
            let text = row
                .payload
                .get("text")
                .and_then(Value::as_str)
                .filter(|t| !t.trim().is_empty())
                .ok_or("the payload has no text")?;
            Ok(Message {
                text: text.to_owned(),
                approval_id: None,
                reply_to,
            })
        }
        "approval" => {
            let id = row
                .payload
                .get("approval_id")
                .and_then(Value::as_str)
                .ok_or("the approval payload has no approval_id")?;
            Ok(Message {
                text: approval_text(&row.payload, id),
                approval_id: Some(id.to_owned()),
                reply_to,
            })
        }
        other => Err(format!("unknown outbox kind {other:?}")),
    }
}

/// Longest preview of a tool call's arguments in an approval request.
const ARGS_PREVIEW_CHARS: usize = 1500;

/// The question of an approval request, in Markdown.
fn approval_text(p: &Value, id: &str) -> String {
    let name = p.get("name").and_then(Value::as_str).unwrap_or("a tool");
    let args = match p.get("args") {
        Some(Value::Null) | None => String::new(),
        Some(a) => serde_json::to_string_pretty(a).unwrap_or_else(|_| a.to_string()),
    };
    let mut preview: String = args.chars().take(ARGS_PREVIEW_CHARS).collect();
    if preview.len() < args.len() {
        preview.push_str("\n…");
    }
    // The preview is code: a fence in it must not end ours.
    let preview = preview.replace("```", "'''");
    let mut text = format!("🔐 **Approval needed**: the agent wants to run `{name}`.");
    if !preview.is_empty() {
        text.push_str(&format!("\n\n```json\n{preview}\n```"));
    }
    if let Some(reason) = p.get("reason").and_then(Value::as_str) {
        text.push_str(&format!("\n\nWhy it asks: {reason}"));
    }
    if let Some(at) = p.get("expires_at").and_then(Value::as_i64) {
        if let Some(t) = chrono::DateTime::from_timestamp_millis(at) {
            text.push_str(&format!(
                "\n\nAnswer by {} UTC, or it is denied.",
                t.format("%H:%M")
            ));
        }
    }
    text.push_str(&format!("\n\nOr send /approve {id} or /deny {id}."));
    text
}

/// The Markdown pieces `msg` is sent in on `platform` (the generic webhook takes it whole).
pub fn pieces(platform: &str, msg: &Message) -> Vec<String> {
    match platform {
        "telegram" => split::telegram(&msg.text),
        "slack" => split::slack(&msg.text),
        _ => vec![msg.text.clone()],
    }
}

/// One piece to send.
pub struct Piece<'a> {
    pub markdown: &'a str,
    /// The last piece carries an approval's buttons.
    pub last: bool,
    /// The first piece answers `reply_to`.
    pub first: bool,
    /// Edit this platform message (a streamed draft) instead of sending a new one.
    pub edit: Option<&'a str>,
    /// The generic webhook's `final`.
    pub is_final: bool,
    /// The generic webhook's `in_reply_to`.
    pub in_reply_to: Option<&'a str>,
}

/// Sends (or edits) one piece of `msg`; answers the platform message id (Telegram
/// `message_id`, Slack `ts`; none for the generic webhook). Telegram HTML it refuses to parse
/// is sent once more as plain text.
pub async fn send_piece(
    clients: &Clients,
    chat: &ChatTarget,
    msg: &Message,
    piece: &Piece<'_>,
) -> Result<Option<String>, CallError> {
    let not_configured = |p: &str| CallError::Permanent(format!("platform {p} is not configured"));
    match chat {
        ChatTarget::Telegram { chat_id, thread_id } => {
            let client = clients
                .telegram
                .as_ref()
                .ok_or_else(|| not_configured("telegram"))?;
            let to = TelegramChat {
                chat_id: *chat_id,
                thread_id: *thread_id,
            };
            let keyboard = match (&msg.approval_id, piece.last) {
                (Some(id), true) => Some(telegram::approval_keyboard(id)),
                _ => None,
            };
            let html = format::telegram_html(piece.markdown);
            let sent = telegram_send(client, to, piece, &html, true, keyboard.as_ref(), msg).await;
            match sent {
                Err(CallError::BadFormat(why)) => {
                    tracing::warn!(error = %why, "telegram refused the HTML; sending as plain text");
                    telegram_send(
                        client,
                        to,
                        piece,
                        piece.markdown,
                        false,
                        keyboard.as_ref(),
                        msg,
                    )
                    .await
                }
                other => other,
            }
        }
        ChatTarget::Slack {
            channel, thread_ts, ..
        } => {
            let client = clients
                .slack
                .as_ref()
                .ok_or_else(|| not_configured("slack"))?;
            let mrkdwn = format::slack_mrkdwn(piece.markdown);
            let blocks = match (&msg.approval_id, piece.last) {
                (Some(id), true) => slack::approval_blocks(&mrkdwn, id),
                _ => slack::section(&mrkdwn),
            };
            match piece.edit {
                Some(ts) => client
                    .update(channel, ts, &mrkdwn, &blocks)
                    .await
                    .map(|()| Some(ts.to_owned())),
                None => {
                    let to = SlackChannel {
                        channel: channel.clone(),
                        thread_ts: thread_ts.clone(),
                    };
                    client.post_message(&to, &mrkdwn, &blocks).await.map(Some)
                }
            }
        }
        ChatTarget::Webhook { chat_id } => {
            let client = clients
                .webhook
                .as_ref()
                .ok_or_else(|| not_configured("webhook"))?;
            client
                .post(chat_id, piece.markdown, piece.in_reply_to, piece.is_final)
                .await
                .map(|()| None)
        }
    }
}

async fn telegram_send(
    client: &Telegram,
    to: TelegramChat,
    piece: &Piece<'_>,
    text: &str,
    html: bool,
    keyboard: Option<&Value>,
    msg: &Message,
) -> Result<Option<String>, CallError> {
    if let Some(id) = piece.edit {
        let id: i64 = id
            .parse()
            .map_err(|_| CallError::Permanent(format!("bad telegram message id {id:?}")))?;
        client
            .edit_message_text(to, id, text, html, keyboard)
            .await
            .map(|()| Some(id.to_string()))
    } else {
        let out = telegram::Outgoing {
            text,
            html,
            keyboard: keyboard.cloned(),
            reply_to: msg
                .reply_to
                .as_deref()
                .filter(|_| piece.first)
                .and_then(|r| r.parse().ok()),
        };
        client
            .send_message(to, &out)
            .await
            .map(|id| Some(id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use turnkey_storage::OutboxStatus;

    fn row(kind: &str, payload: Value) -> Outbox {
        Outbox {
            id: "o1".into(),
            platform: "telegram".into(),
            chat_key: "telegram:1".into(),
            session_id: None,
            turn_id: None,
            idempotency_key: "k".into(),
            kind: kind.into(),
            payload,
            status: OutboxStatus::Pending,
            attempts: 0,
            chunks_sent: 0,
            platform_message_id: None,
            owner_instance: None,
            owner: None,
            last_error: None,
            created_at: 0,
            next_attempt_at: 0,
            updated_at: 0,
            sent_at: None,
        }
    }

    #[test]
    fn r1_4_an_approval_row_renders_its_question_and_ids() {
        let m = message_of(&row(
            "approval",
            json!({"approval_id": "ap-9", "name": "terminal", "args": {"command": "ls ```x"},
                   "reason": "runs commands", "expires_at": 1_700_000_000_000_i64}),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.approval_id.as_deref(), Some("ap-9"));
        assert!(m.text.contains("`terminal`"));
        assert!(m.text.contains("/approve ap-9"));
        assert!(
            !m.text.contains("ls ```x"),
            "a fence in the args must not end the preview"
        );
        let html = format::telegram_html(&m.text);
        assert!(html.contains("<pre><code class=\"language-json\">"));
    }

    #[test]
    fn r13_5_rows_without_text_or_of_unknown_kinds_are_refused() {
        assert!(message_of(&row("reply", json!({"text": " "}))).is_err());
        assert!(message_of(&row("sticker", json!({"text": "x"}))).is_err());
        let m = message_of(&row("notice", json!({"text": "hi", "reply_to": 42})));
        assert_eq!(m.map(|m| m.reply_to), Ok(Some("42".into())));
    }
}
