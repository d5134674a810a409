//! The Telegram Bot API client (https://core.telegram.org/bots/api): `sendMessage`,
//! `editMessageText`, `answerCallbackQuery`, `setWebhook`, `getFile`. JSON bodies, HTML parse mode,
//! `message_thread_id` for forum topics, an inline keyboard for approvals. Every call is bounded
//! by a timeout, and a failure is classified for the outbox sender (`CallError`). The bot token
//! is part of every URL, so no error text carries the URL.
use super::client::{http_client, CallError, CALL_TIMEOUT};
use super::config::TelegramConfig;
use serde_json::{json, Value};
use std::time::Duration;

/// A message's text after entity parsing is at most this long (UTF-16 code units).
pub const MAX_TEXT: usize = 4096;

#[derive(Clone)]
pub struct Telegram {
    http: reqwest::Client,
    /// `<api_base>/bot<token>`
    base: String,
}

/// Where a message goes: a chat, and a forum topic in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TelegramChat {
    pub chat_id: i64,
    pub thread_id: Option<i64>,
}

/// One `sendMessage`.
#[derive(Clone, Debug, Default)]
pub struct Outgoing<'a> {
    pub text: &'a str,
    /// `parse_mode = "HTML"`; false sends the text as it is.
    pub html: bool,
    /// An inline keyboard (`reply_markup`).
    pub keyboard: Option<Value>,
    /// The message this one answers (`reply_parameters`), if still there.
    pub reply_to: Option<i64>,
}

impl Telegram {
    pub fn new(cfg: &TelegramConfig) -> Self {
        Self::with_timeout(cfg, CALL_TIMEOUT)
    }

    /// The same with another bound on each call (tests of ambiguous timeouts).
    pub fn with_timeout(cfg: &TelegramConfig, timeout: Duration) -> Self {
        Self {
            http: http_client(timeout),
            base: format!(
                "{}/bot{}",
                cfg.api_base.trim_end_matches('/'),
                cfg.bot_token.expose()
            ),
        }
    }

    /// Sends a message; answers its `message_id`.
    pub async fn send_message(
        &self,
        chat: TelegramChat,
        out: &Outgoing<'_>,
    ) -> Result<i64, CallError> {
        let mut body = json!({
            "chat_id": chat.chat_id,
            "text": out.text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(t) = chat.thread_id {
            body["message_thread_id"] = json!(t);
        }
        if out.html {
            body["parse_mode"] = json!("HTML");
        }
        if let Some(k) = &out.keyboard {
            body["reply_markup"] = k.clone();
        }
        if let Some(r) = out.reply_to {
            body["reply_parameters"] = json!({
                "message_id": r,
                "allow_sending_without_reply": true,
            });
        }
        let result = self.call("sendMessage", &body).await?;
        result
            .get("message_id")
            .and_then(Value::as_i64)
            .ok_or_else(|| {
                // It was sent (Telegram said ok) but we cannot tell which message it is.
                CallError::Ambiguous("sendMessage answered ok without a message_id".into())
            })
    }

    /// Replaces the text of a message the bot sent. An edit to the very same text is a
    /// success: the message already shows what was wanted.
    pub async fn edit_message_text(
        &self,
        chat: TelegramChat,
        message_id: i64,
        text: &str,
        html: bool,
        keyboard: Option<&Value>,
    ) -> Result<(), CallError> {
        let mut body = json!({
            "chat_id": chat.chat_id,
            "message_id": message_id,
            "text": text,
            "link_preview_options": {"is_disabled": true},
        });
        if html {
            body["parse_mode"] = json!("HTML");
        }
        if let Some(k) = keyboard {
            body["reply_markup"] = k.clone();
        }
        match self.call("editMessageText", &body).await {
            Ok(_) => Ok(()),
            Err(CallError::Permanent(m)) if m.contains("message is not modified") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Stops the spinner of a pressed inline button, optionally with a short toast.
    pub async fn answer_callback_query(
        &self,
        id: &str,
        text: Option<&str>,
    ) -> Result<(), CallError> {
        let mut body = json!({ "callback_query_id": id });
        if let Some(t) = text {
            body["text"] = json!(t);
        }
        self.call("answerCallbackQuery", &body).await.map(|_| ())
    }

    /// Points the bot's updates at `url`, with the secret Telegram will send back in
    /// `X-Telegram-Bot-Api-Secret-Token`.
    pub async fn set_webhook(&self, url: &str, secret_token: &str) -> Result<(), CallError> {
        let body = json!({
            "url": url,
            "secret_token": secret_token,
            "allowed_updates": ["message", "edited_message", "callback_query"],
        });
        self.call("setWebhook", &body).await.map(|_| ())
    }

    /// `getFile`: the path of a file under `<api_base>/file/bot<token>/`.
    pub async fn file_path(&self, file_id: &str) -> Result<String, CallError> {
        let result = self.call("getFile", &json!({ "file_id": file_id })).await?;
        result
            .get("file_path")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                CallError::Permanent(
                    "telegram getFile: no file_path (the file may be larger than 20 MB)".into(),
                )
            })
    }

    /// One Bot API call; answers its `result`.
    async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        let resp = self
            .http
            .post(format!("{}/{method}", self.base))
            .json(body)
            .send()
            .await
            .map_err(CallError::from_transport)?;
        let status = resp.status().as_u16();
        let answer: Option<Value> = match resp.bytes().await {
            Ok(b) => serde_json::from_slice(&b).ok(),
            Err(e) => {
                // The platform answered, but the body was cut: for a send it may have happened.
                return Err(match CallError::from_transport(e) {
                    CallError::NotSent(m) => CallError::Ambiguous(m),
                    other => other,
                });
            }
        };
        classify(method, status, answer)
    }
}

/// A Bot API answer: `{ok: true, result}` or `{ok: false, error_code, description,
/// parameters: {retry_after}}`.
fn classify(method: &str, status: u16, answer: Option<Value>) -> Result<Value, CallError> {
    let answer = answer.unwrap_or(Value::Null);
    if status == 200 && answer.get("ok").and_then(Value::as_bool) == Some(true) {
        return Ok(answer.get("result").cloned().unwrap_or(Value::Null));
    }
    let description = answer
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("no description")
        .to_owned();
    let message = format!("telegram {method}: {status} {description}");
    Err(match status {
        429 => CallError::RateLimited {
            retry_after: answer
                .pointer("/parameters/retry_after")
                .and_then(Value::as_u64)
                .map(Duration::from_secs),
            message,
        },
        500..=599 => CallError::Transient(message),
        400 if description.contains("can't parse entities") => CallError::BadFormat(message),
        // A 200 that is not `ok: true` with a result: the platform took the request and said
        // something we cannot read; for a send it may well be in the chat.
        200 => CallError::Ambiguous(message),
        _ => CallError::Permanent(message),
    })
}

/// The inline keyboard of an approval request: the agreed `callback_data`
/// `approve:<approval_id>` / `deny:<approval_id>` (the inbound side reads them back).
pub fn approval_keyboard(approval_id: &str) -> Value {
    json!({"inline_keyboard": [[
        {"text": "✅ Approve", "callback_data": format!("approve:{approval_id}")},
        {"text": "❌ Deny", "callback_data": format!("deny:{approval_id}")},
    ]]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r13_5_telegram_answers_are_classified() {
        let ok = classify(
            "sendMessage",
            200,
            Some(json!({"ok": true, "result": {"message_id": 5}})),
        );
        assert_eq!(ok, Ok(json!({"message_id": 5})));
        let limited = classify(
            "sendMessage",
            429,
            Some(
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 3",
                        "parameters": {"retry_after": 3}}),
            ),
        );
        assert!(
            matches!(limited, Err(CallError::RateLimited { retry_after: Some(d), .. }) if d == Duration::from_secs(3))
        );
        let parse = classify(
            "sendMessage",
            400,
            Some(json!({"ok": false, "error_code": 400,
                        "description": "Bad Request: can't parse entities: Unsupported start tag"})),
        );
        assert!(matches!(parse, Err(CallError::BadFormat(_))));
        let refused = classify(
            "sendMessage",
            403,
            Some(
                json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}),
            ),
        );
        assert!(matches!(refused, Err(CallError::Permanent(m)) if m.contains("blocked")));
        assert!(matches!(
            classify("sendMessage", 502, None),
            Err(CallError::Transient(_))
        ));
    }

    #[test]
    fn r1_4_approval_buttons_carry_the_agreed_callback_data() {
        let k = approval_keyboard("0190-a");
        assert_eq!(
            k["inline_keyboard"][0][0]["callback_data"],
            "approve:0190-a"
        );
        assert_eq!(k["inline_keyboard"][0][1]["callback_data"], "deny:0190-a");
    }
}
