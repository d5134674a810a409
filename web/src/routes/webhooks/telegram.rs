//! `POST /webhooks/telegram`: Telegram's Bot API webhook. Verified by
//! `X-Telegram-Bot-Api-Secret-Token` (the `secret_token` given to `setWebhook`). An `Update`
//! with a text `message`, or a photo, document, voice note, audio or video (with its caption),
//! is admitted (or is a command; the files are fetched at admission with `getFile`); a `callback_query` whose data is
//! `approve:<id>` / `deny:<id>` decides that approval, and the answer to the webhook is the
//! `answerCallbackQuery` call itself (Telegram runs a method named in a webhook's answer), so
//! the button stops spinning at once. Any other update is answered 200 and ignored. The
//! update's `update_id` is its id for dedupe: a redelivery is admitted once.
use super::{body, clean, configured, handle, parse, verify, WebhookAck};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::post;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use turnkey_actors::gateway::commands;
use turnkey_actors::platforms::files::PlatformFile;
use turnkey_actors::platforms::{ChatMessage, ChatTarget};
use turnkey_storage::ApprovalDecision;
use utoipa::ToSchema;

/// Telegram shows at most 200 characters in a callback answer.
const CALLBACK_TEXT_CHARS: usize = 200;
const NAME_CHARS: usize = 128;

/// The part of a Telegram `Update` this build reads.
#[derive(Debug, Deserialize)]
pub struct Update {
    pub update_id: i64,
    pub message: Option<Message>,
    pub callback_query: Option<CallbackQuery>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub message_id: i64,
    pub message_thread_id: Option<i64>,
    #[serde(default)]
    pub is_topic_message: bool,
    pub from: Option<User>,
    pub chat: Chat,
    pub text: Option<String>,
    /// The text of a photo, document, voice note or audio.
    pub caption: Option<String>,
    /// The sizes of a photo, smallest first.
    #[serde(default)]
    pub photo: Vec<TelegramFile>,
    pub document: Option<TelegramFile>,
    pub voice: Option<TelegramFile>,
    pub audio: Option<TelegramFile>,
    pub video: Option<TelegramFile>,
}

/// A photo size, document, voice note, audio or video: what `getFile` takes.
#[derive(Debug, Deserialize)]
pub struct TelegramFile {
    pub file_id: String,
    pub file_name: Option<String>,
}

impl Message {
    /// The files the message carries: the largest size of a photo, then a document, voice
    /// note, audio or video.
    fn files(&self) -> Vec<PlatformFile> {
        let mut files = Vec::new();
        let mut add = |f: &TelegramFile, kind: &'static str| {
            files.push(PlatformFile::Telegram {
                file_id: f.file_id.clone(),
                name: clean(f.file_name.as_deref(), NAME_CHARS),
                kind,
            });
        };
        if let Some(largest) = self.photo.last() {
            add(largest, "photo");
        }
        for (f, kind) in [
            (&self.document, "document"),
            (&self.voice, "voice note"),
            (&self.audio, "audio"),
            (&self.video, "video"),
        ] {
            if let Some(f) = f {
                add(f, kind);
            }
        }
        files
    }
}

#[derive(Debug, Deserialize)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub username: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Chat {
    pub id: i64,
}

#[derive(Debug, Deserialize)]
pub struct CallbackQuery {
    pub id: String,
    pub from: User,
    pub message: Option<Message>,
    pub data: Option<String>,
}

/// The answer to a button press: Telegram calls `answerCallbackQuery` with it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AnswerCallbackQuery {
    /// Always `answerCallbackQuery`.
    pub method: &'static str,
    pub callback_query_id: String,
    /// What the presser sees (at most 200 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Either what the webhook did, or, for a button press, the `answerCallbackQuery` call.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum TelegramAnswer {
    Ack(WebhookAck),
    Callback(AnswerCallbackQuery),
}

/// What an update is to this build.
#[derive(Debug)]
pub enum Parsed {
    Message(ChatMessage),
    /// An approve/deny button: the message is the press (its `text` is the button's data).
    Button {
        press: ChatMessage,
        callback_query_id: String,
        approval: String,
        decision: ApprovalDecision,
    },
    /// A callback this build did not make a button for: answered without text.
    OtherCallback(String),
    Ignored(&'static str),
}

fn chat_of(m: &Message) -> ChatTarget {
    ChatTarget::Telegram {
        chat_id: m.chat.id,
        // A forum topic is a chat of its own; a reply thread in a plain group is not.
        thread_id: m.message_thread_id.filter(|_| m.is_topic_message),
    }
}

fn name_of(u: &User) -> Option<String> {
    clean(u.username.as_deref(), NAME_CHARS).or_else(|| {
        let full = [u.first_name.as_deref(), u.last_name.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        clean(Some(&full), NAME_CHARS)
    })
}

/// Reads an update.
pub fn parse_update(u: Update) -> Parsed {
    let external_id = u.update_id.to_string();
    if let Some(q) = u.callback_query {
        let Some(message) = q.message.as_ref() else {
            return Parsed::OtherCallback(q.id);
        };
        let data = q.data.clone().unwrap_or_default();
        let (decision, approval) = match data.split_once(':') {
            Some(("approve", id)) => (ApprovalDecision::Approve, id),
            Some(("deny", id)) => (ApprovalDecision::Deny, id),
            _ => return Parsed::OtherCallback(q.id),
        };
        return Parsed::Button {
            approval: approval.to_owned(),
            decision,
            press: ChatMessage {
                chat: chat_of(message),
                external_id,
                user_id: q.from.id.to_string(),
                user_name: name_of(&q.from),
                text: data.clone(),
                message_id: Some(message.message_id.to_string()),
                files: Vec::new(),
            },
            callback_query_id: q.id,
        };
    }
    let Some(m) = u.message else {
        return Parsed::Ignored("not a message or a button press");
    };
    let Some(from) = m.from.as_ref().filter(|f| !f.is_bot) else {
        return Parsed::Ignored("not from a person");
    };
    let files = m.files();
    let text = m
        .text
        .as_ref()
        .or(m.caption.as_ref())
        .cloned()
        .unwrap_or_default();
    if text.trim().is_empty() && files.is_empty() {
        return Parsed::Ignored("not a text message and no file");
    }
    Parsed::Message(ChatMessage {
        chat: chat_of(&m),
        external_id,
        user_id: from.id.to_string(),
        user_name: name_of(from),
        text,
        message_id: Some(m.message_id.to_string()),
        files,
    })
}

/// Receives a Telegram update (set with `setWebhook` and a `secret_token`).
#[utoipa::path(
    operation_id = "webhook_telegram",
    tag = "webhooks",
    params(
        ("X-Telegram-Bot-Api-Secret-Token" = String, Header, description = "The `secret_token` given to setWebhook (`platforms.telegram.secret_token`)"),
    ),
    request_body(content = Object, description = "A Telegram `Update`", content_type = "application/json"),
    responses(
        (status = 200, description = "Handled or ignored: what became of it, or for a button press the `answerCallbackQuery` call Telegram makes from this answer", body = TelegramAnswer),
        (status = 400, description = "`invalid_json`, `invalid_update`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`invalid_signature`: the secret token is missing or wrong; nothing was written", body = ErrorBody),
        (status = 404, description = "`platform_not_configured`: no `[platforms.telegram]`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`, `shutting_down`, `no_provider`: Telegram retries", body = ErrorBody),
    ),
)]
#[post("/webhooks/telegram")]
pub async fn webhook(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let config = configured(&state, "telegram", |p| &p.telegram)?;
    verify::telegram(&req, config.secret_token.expose())?;
    let body = body(&state, payload).await?;
    let update: Update = parse(&body, "Telegram Update")?;
    match parse_update(update) {
        Parsed::Message(msg) => handle(&state, &msg).await,
        Parsed::Button {
            press,
            callback_query_id,
            approval,
            decision,
        } => {
            let answer = commands::button(&state.gateway, &press, &approval, decision).await?;
            Ok(callback_answer(callback_query_id, Some(answer.text)))
        }
        Parsed::OtherCallback(id) => Ok(callback_answer(id, None)),
        Parsed::Ignored(why) => Ok(WebhookAck::ignored(why).ok()),
    }
}

fn callback_answer(callback_query_id: String, text: Option<String>) -> HttpResponse {
    HttpResponse::Ok().json(TelegramAnswer::Callback(AnswerCallbackQuery {
        method: "answerCallbackQuery",
        callback_query_id,
        text: text.map(|t| t.chars().take(CALLBACK_TEXT_CHARS).collect()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(v: serde_json::Value) -> Parsed {
        parse_update(serde_json::from_value(v).expect("an Update"))
    }

    #[test]
    fn r1_3_a_text_message_in_a_forum_topic_is_its_own_chat() {
        let Parsed::Message(m) = update(json!({
            "update_id": 10,
            "message": {
                "message_id": 5, "message_thread_id": 7, "is_topic_message": true,
                "date": 1, "chat": {"id": -100123, "type": "supergroup"},
                "from": {"id": 42, "is_bot": false, "first_name": "Ada", "last_name": "L"},
                "text": "hi"
            }
        })) else {
            panic!("not a message");
        };
        assert_eq!(m.chat.key(), "telegram:-100123:7");
        assert_eq!(m.external_id, "10");
        assert_eq!(m.user_id, "42");
        assert_eq!(m.user_name.as_deref(), Some("Ada L"));
        assert_eq!(m.message_id.as_deref(), Some("5"));
        // A reply thread of a plain group is the group's chat.
        let Parsed::Message(m) = update(json!({
            "update_id": 11,
            "message": {
                "message_id": 6, "message_thread_id": 3, "date": 1,
                "chat": {"id": -5}, "from": {"id": 1, "is_bot": false, "username": "ada"},
                "text": "x"
            }
        })) else {
            panic!("not a message");
        };
        assert_eq!(m.chat.key(), "telegram:-5");
        assert_eq!(m.user_name.as_deref(), Some("ada"));
    }

    #[test]
    fn r1_3_stickers_edits_joins_and_bots_are_ignored() {
        for v in [
            json!({"update_id": 1, "edited_message": {"message_id": 1, "date": 1, "chat": {"id": 1}, "text": "x"}}),
            json!({"update_id": 2, "message": {"message_id": 1, "date": 1, "chat": {"id": 1}, "from": {"id": 3, "is_bot": false}, "sticker": {"file_id": "f"}}}),
            json!({"update_id": 3, "message": {"message_id": 1, "date": 1, "chat": {"id": 1}, "from": {"id": 3, "is_bot": false}, "new_chat_members": [{"id": 4, "is_bot": false}]}}),
            json!({"update_id": 4, "message": {"message_id": 1, "date": 1, "chat": {"id": 1}, "from": {"id": 3, "is_bot": true}, "text": "x"}}),
            json!({"update_id": 5, "my_chat_member": {}}),
        ] {
            assert!(matches!(update(v.clone()), Parsed::Ignored(_)), "{v}");
        }
    }

    #[test]
    fn r1_4_buttons_carry_the_decision_and_the_approval() {
        let Parsed::Button {
            press,
            callback_query_id,
            approval,
            decision,
        } = update(json!({
            "update_id": 20,
            "callback_query": {
                "id": "cb1", "chat_instance": "ci", "data": "deny:0190-x",
                "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
                "message": {"message_id": 9, "date": 1, "chat": {"id": 77}}
            }
        }))
        else {
            panic!("not a button");
        };
        assert_eq!(callback_query_id, "cb1");
        assert_eq!(approval, "0190-x");
        assert_eq!(decision, ApprovalDecision::Deny);
        assert_eq!(press.chat.key(), "telegram:77");
        assert_eq!(press.external_id, "20");
        assert!(matches!(
            update(json!({"update_id": 21, "callback_query": {"id": "cb2", "chat_instance": "c", "data": "other", "from": {"id": 1, "is_bot": false}, "message": {"message_id": 1, "date": 1, "chat": {"id": 1}}}})),
            Parsed::OtherCallback(id) if id == "cb2"
        ));
    }
}
