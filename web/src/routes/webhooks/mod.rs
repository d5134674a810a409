//! Chat platforms in (SPEC R1.3, R1.4): `POST /webhooks/telegram`, `/webhooks/slack`,
//! `/webhooks/slack/interactive` and `/webhooks/generic`. Not under `/v1` and not behind the
//! bearer token: each platform's own verification (`verify`) authenticates the request, and a
//! request that fails it writes nothing. A platform that is not configured answers
//! 404 `platform_not_configured`.
//!
//! A webhook only admits: it verifies, parses the update into a `ChatMessage` and hands it to
//! `turnkey_actors::gateway::commands` (a command, or input admitted through
//! `Gateway::chat_submit`), then answers 200 at once. The turn runs later; its answer leaves
//! through the outbox. Updates this build does not handle (stickers, edits, joins, …) are
//! answered 200 and ignored, since a platform retries any other answer.
pub mod generic;
pub mod slack;
pub mod telegram;
pub mod verify;

use super::read_body;
use crate::error::ApiError;
use crate::openapi::mirrors::ReceiptSchema;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use turnkey_actors::gateway::commands::{self, Handled};
use turnkey_actors::platforms::{ChatMessage, PlatformsConfig};
use turnkey_actors::Receipt;
use utoipa::ToSchema;

/// What the webhook did with an update (the platforms ignore it; it helps integrators and logs).
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct WebhookAck {
    /// `admitted` (a new input), `duplicate` (a redelivery: the first admission's receipt),
    /// `command` (answered in the chat), `decided` (an approve/deny button), `refused` (the
    /// sender is not in `allowed_users`; told once), `rejected` (input the gateway refuses,
    /// e.g. too long; the chat is told why), `ignored` (an update this build does not handle).
    pub outcome: &'static str,
    /// The receipt of the admission (also for `/queue` and `/retry`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ReceiptSchema>)]
    pub receipt: Option<Receipt>,
    /// The command's name, for `command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<&'static str>,
    /// `true` when the update was handled before (a redelivery): nothing was done again.
    pub duplicate: bool,
    /// The command's answer, or why the update was rejected or ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl WebhookAck {
    pub fn ignored(why: impl Into<String>) -> Self {
        Self {
            outcome: "ignored",
            detail: Some(why.into()),
            ..Default::default()
        }
    }

    pub fn ok(self) -> HttpResponse {
        HttpResponse::Ok().json(self)
    }
}

impl From<Handled> for WebhookAck {
    fn from(h: Handled) -> Self {
        match h {
            Handled::Admitted(receipt) => Self {
                outcome: if receipt.duplicate {
                    "duplicate"
                } else {
                    "admitted"
                },
                duplicate: receipt.duplicate,
                receipt: Some(receipt),
                ..Default::default()
            },
            Handled::Refused => Self {
                outcome: "refused",
                ..Default::default()
            },
            Handled::Command {
                name,
                answer,
                duplicate,
                receipt,
            } => Self {
                outcome: "command",
                receipt,
                command: Some(name),
                duplicate,
                detail: Some(answer),
            },
            Handled::Rejected { code, message } => Self {
                outcome: "rejected",
                detail: Some(format!("{code}: {message}")),
                ..Default::default()
            },
        }
    }
}

/// The configuration of `platform`, taken from `[platforms]` by `pick`; 404
/// `platform_not_configured` when that table is absent.
pub fn configured<T: Clone>(
    state: &AppState,
    platform: &str,
    pick: impl FnOnce(&PlatformsConfig) -> &Option<T>,
) -> Result<T, ApiError> {
    pick(&state.gateway.config().platforms)
        .clone()
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "platform_not_configured",
                format!(
                    "the {platform} platform is not configured: add [platforms.{platform}] to turnkey.toml"
                ),
            )
        })
}

/// The raw body (the signature covers its bytes), at most `server.max_body_bytes`.
pub async fn body(state: &AppState, payload: web::Payload) -> Result<web::BytesMut, ApiError> {
    read_body(payload, state.max_body_bytes).await
}

/// A JSON body of the platform's update shape: 400 `invalid_json` when it is not JSON,
/// 400 `invalid_update` when it is JSON of another shape.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(ApiError::invalid_json)?;
    serde_json::from_value(value).map_err(|e| {
        ApiError::bad_request("invalid_update", format!("the body is not a {what}: {e}"))
    })
}

/// Hands a verified chat message to the commands (or, not a command, to admission).
pub async fn handle(state: &AppState, msg: &ChatMessage) -> Result<HttpResponse, ApiError> {
    let handled = commands::handle(&state.gateway, msg).await?;
    Ok(WebhookAck::from(handled).ok())
}

/// Unix seconds now (Slack's window).
pub fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

/// At most `max` characters of a platform-given name or id, trimmed; `None` when empty.
pub fn clean(s: Option<&str>, max: usize) -> Option<String> {
    let s = s?.trim();
    if s.is_empty() {
        return None;
    }
    Some(s.chars().take(max).collect())
}
