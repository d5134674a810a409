//! Chat platforms (SPEC R1.3, R11.1, R13.5): their settings and the chat keys that tie a chat
//! to its session and its replies.
pub mod chat;
pub mod client;
pub mod config;
mod draft_text;
pub mod drafts;
pub mod files;
pub mod format;
pub mod send;
pub mod slack;
pub mod split;
pub mod telegram;
pub mod webhook;

pub use chat::ChatTarget;
pub use config::{PlatformSettings, PlatformsConfig, SlackConfig, TelegramConfig, WebhookConfig};

/// One message from a platform chat, as its adapter verified and parsed it.
#[derive(Clone, Debug)]
pub struct ChatMessage {
    pub chat: ChatTarget,
    /// The platform's id of the update (Telegram `update_id`, Slack `<channel>:<ts>` of the
    /// message, which its retries and its `app_mention` twin share, generic `message_id`):
    /// redeliveries carry the same one.
    pub external_id: String,
    /// The sender's platform user id (checked against `allowed_users`).
    pub user_id: String,
    pub user_name: Option<String>,
    pub text: String,
    /// The platform's id of the message itself (Telegram `message_id`, Slack `ts`, generic
    /// `message_id`), kept in the admission's `display.message_id` so a reply can answer it.
    pub message_id: Option<String>,
    /// The files the message carries (photos, documents, voice notes, Slack files, links),
    /// fetched when it is admitted (`files::fetch`).
    pub files: Vec<files::PlatformFile>,
}

/// What became of a chat message.
#[derive(Clone, Debug)]
pub enum ChatAdmission {
    /// Admitted (or found admitted before, for a redelivery).
    Admitted(crate::input::Receipt),
    /// The sender is not in `allowed_users`; they were told so once.
    Refused,
}

/// The principal a chat's session belongs to: the chat itself (its members share it).
pub fn chat_principal(msg: &ChatMessage) -> turnkey_storage::Principal {
    turnkey_storage::Principal {
        id: msg.chat.key(),
        name: msg.user_name.clone().unwrap_or_else(|| msg.user_id.clone()),
        kind: "platform".into(),
    }
}

/// The request id of a platform update: the same for every redelivery.
pub fn request_id(msg: &ChatMessage) -> String {
    format!("{}:{}", msg.chat.platform(), msg.external_id)
}

/// The submission of a chat message: request id from the update, the sender and the message id
/// in `display`, the platform as the surface.
pub fn chat_submission(
    msg: &ChatMessage,
    busy_policy: Option<crate::config::BusyPolicy>,
) -> crate::input::Submission {
    crate::input::Submission {
        text: msg.text.clone(),
        request_id: Some(request_id(msg)),
        display: Some(serde_json::json!({
            "from": { "id": msg.user_id, "name": msg.user_name },
            "message_id": msg.message_id,
        })),
        surface: msg.chat.platform().into(),
        busy_policy,
        ..Default::default()
    }
}
