//! `POST /webhooks/generic`: a chat of the integrator's own. The body is
//! `{chat_id, message_id, user, text, user_name?, attachments?}` signed with `X-Signature: sha256=HEX`
//! (HMAC-SHA256 of the raw body with `platforms.webhook.secret`). `message_id` is the id for
//! dedupe: the same one again is admitted once. Replies go to `platforms.webhook.reply_url`.
//! `attachments` is `[{url, name?}]`: a `data:` URL, or an http(s) URL the server fetches at
//! admission through the `web_fetch` guard (public addresses unless `tools.fetch_allow`).
use super::{body, configured, handle, parse, verify};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::post;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::Value;
use turnkey_actors::platforms::files::PlatformFile;
use turnkey_actors::platforms::{ChatMessage, ChatTarget};
use utoipa::ToSchema;

/// The longest `chat_id`, `message_id` and `user` taken (the request id `webhook:<message_id>`
/// must stay within 255 bytes).
const ID_CHARS: usize = 200;
const NAME_CHARS: usize = 128;

/// A message of the generic webhook.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = GenericWebhookMessage)]
pub struct GenericMessage {
    /// The integrator's chat: every chat has its own session. A string or an integer.
    #[schema(value_type = String)]
    pub chat_id: Value,
    /// The message's id: unique per message; a redelivery carries the same one. A string
    /// (visible ASCII) or an integer.
    #[schema(value_type = String)]
    pub message_id: Value,
    /// The sender's id, checked against `platforms.webhook.allowed_users`.
    #[schema(value_type = String)]
    pub user: Value,
    /// Required unless `attachments` has one.
    #[serde(default)]
    pub text: String,
    pub user_name: Option<String>,
    /// Files: `{url, name?}`, the url a `data:` URL or http(s). At most 16.
    #[serde(default)]
    pub attachments: Vec<GenericAttachment>,
}

/// A file of a generic message.
#[derive(Debug, Deserialize, ToSchema)]
pub struct GenericAttachment {
    /// `data:<type>;base64,<data>`, or an http(s) URL fetched at admission.
    pub url: String,
    pub name: Option<String>,
}

/// The most files one generic message carries.
const MAX_ATTACHMENTS: usize = 16;

/// A string or integer id: trimmed, not empty, at most `ID_CHARS` characters.
fn id(v: &Value, field: &str, visible_ascii: bool) -> Result<String, ApiError> {
    let s = match v {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => {
            return Err(ApiError::bad_request(
                "invalid_field",
                format!("{field} must be a string or an integer"),
            ))
        }
    };
    let ok = !s.is_empty()
        && s.chars().count() <= ID_CHARS
        && (!visible_ascii || s.bytes().all(|b| b.is_ascii_graphic()))
        && !s.chars().any(char::is_control);
    if !ok {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "{field} must be 1-{ID_CHARS} characters{}",
                if visible_ascii {
                    " of visible ASCII"
                } else {
                    " without control characters"
                }
            ),
        ));
    }
    Ok(s)
}

/// Reads a generic message.
pub fn parse_message(m: GenericMessage) -> Result<ChatMessage, ApiError> {
    let message_id = id(&m.message_id, "message_id", true)?;
    if m.attachments.len() > MAX_ATTACHMENTS {
        return Err(ApiError::bad_request(
            "invalid_attachment",
            format!("at most {MAX_ATTACHMENTS} attachments"),
        ));
    }
    let mut files = Vec::with_capacity(m.attachments.len());
    for (i, a) in m.attachments.into_iter().enumerate() {
        let scheme = a
            .url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if !matches!(scheme.as_str(), "data" | "http" | "https") {
            return Err(ApiError::bad_request(
                "invalid_attachment",
                format!("attachments[{i}].url must be a data: or http(s) URL"),
            ));
        }
        files.push(PlatformFile::Url {
            url: a.url,
            name: super::clean(a.name.as_deref(), NAME_CHARS),
        });
    }
    Ok(ChatMessage {
        chat: ChatTarget::Webhook {
            chat_id: id(&m.chat_id, "chat_id", false)?,
        },
        external_id: message_id.clone(),
        user_id: id(&m.user, "user", false)?,
        user_name: super::clean(m.user_name.as_deref(), NAME_CHARS),
        text: m.text,
        message_id: Some(message_id),
        files,
    })
}

/// Receives a message of the generic webhook.
#[utoipa::path(
    operation_id = "webhook_generic",
    tag = "webhooks",
    params(
        ("X-Signature" = String, Header, description = "`sha256=HEX`: HMAC-SHA256 of the raw body with `platforms.webhook.secret`"),
    ),
    request_body = GenericMessage,
    responses(
        (status = 200, description = "What became of the message (`admitted`, `duplicate`, `command`, `refused`, `rejected`)", body = super::WebhookAck),
        (status = 400, description = "`invalid_json`, `invalid_update`, `invalid_field`, `invalid_attachment`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`invalid_signature`: missing or wrong signature; nothing was written", body = ErrorBody),
        (status = 404, description = "`platform_not_configured`: no `[platforms.webhook]`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`, `shutting_down`, `no_provider`", body = ErrorBody),
    ),
)]
#[post("/webhooks/generic")]
pub async fn webhook(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let config = configured(&state, "webhook", |p| &p.webhook)?;
    let body = body(&state, payload).await?;
    verify::generic(&req, config.secret.expose(), &body)?;
    let message: GenericMessage = parse(&body, "generic webhook message")?;
    handle(&state, &parse_message(message)?).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(v: Value) -> Result<ChatMessage, ApiError> {
        parse_message(serde_json::from_value(v).expect("a message"))
    }

    #[test]
    fn r1_3_ids_may_be_strings_or_integers() {
        let m = parsed(json!({"chat_id": "room:1", "message_id": 7, "user": 42, "text": "hi", "user_name": " Ada "}))
            .expect("valid");
        assert_eq!(m.chat.key(), "webhook:room:1");
        assert_eq!(m.external_id, "7");
        assert_eq!(m.user_id, "42");
        assert_eq!(m.user_name.as_deref(), Some("Ada"));
        for bad in [
            json!({"chat_id": "", "message_id": "1", "user": "u", "text": "x"}),
            json!({"chat_id": "c", "message_id": "a b", "user": "u", "text": "x"}),
            json!({"chat_id": "c", "message_id": "1", "user": null, "text": "x"}),
            json!({"chat_id": "c", "message_id": 1.5, "user": "u", "text": "x"}),
            json!({"chat_id": "c", "message_id": "x".repeat(201), "user": "u", "text": "x"}),
        ] {
            let e = parsed(bad.clone()).expect_err("invalid");
            assert_eq!(e.code, "invalid_field", "{bad}");
        }
    }
}
