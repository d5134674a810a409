//! The fake Telegram Bot API: `sendMessage`, `editMessageText`, `getFile`,
//! `answerCallbackQuery` and the webhook calls, checked as Telegram checks them (the bot token,
//! its HTML parse mode, the 4096-character limit, an edit that changes nothing).
use super::{FakeMessage, Outcome, Shared};
use actix_web::HttpRequest;
use serde_json::{json, Value};

/// Telegram's limit on a message's text after entity parsing, in UTF-16 code units.
pub const TELEGRAM_MAX_TEXT: usize = 4096;
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

impl Outcome {
    pub(super) fn telegram_error(status: u16, description: String) -> Self {
        Self {
            status,
            body: json!({"ok": false, "error_code": status, "description": description}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some(description),
        }
    }
}

/// Telegram's answer to `method` (`/bot<token>/<method>`).
pub(super) fn answer(shared: &Shared, req: &HttpRequest, method: &str, body: &Value) -> Outcome {
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
        "sendMessage" => send_message(shared, body),
        "editMessageText" => edit_message_text(shared, body),
        "getFile" => get_file(shared, body),
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

/// `sendMessage`: a new message in the chat, with the next id.
fn send_message(shared: &Shared, body: &Value) -> Outcome {
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

/// `editMessageText`: the new text of a message this fake sent, refused when it is unknown or
/// the text would not change.
fn edit_message_text(shared: &Shared, body: &Value) -> Outcome {
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
        return Outcome::telegram_error(400, "Bad Request: message to edit not found".into());
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

/// `getFile`: the path a file added with `add_file` is downloaded from.
fn get_file(shared: &Shared, body: &Value) -> Outcome {
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
