//! What the doors hand to the gateway and what they get back: a new session request, one
//! submission as a door received it, the admission receipt (API.md), and the user row an
//! admitted input becomes when its turn claims it.
use crate::limits::sanitize_text;
use serde::Serialize;
use turnkey_providers::estimate_tokens;
use turnkey_storage::{
    Admission, AdmissionId, AdmissionStatus, MessageId, MessageRole, NewMessage, SessionId, TurnId,
};

/// What a door asks for when it creates a session.
#[derive(Clone, Debug, Default)]
pub struct NewSessionRequest {
    pub title: Option<String>,
    pub system_message: Option<String>,
    pub model: Option<String>,
    pub platform: String,
    pub chat_key: Option<String>,
}

/// One input as a door received it; the admission actor normalizes it before it is stored.
#[derive(Clone, Debug, Default)]
pub struct Submission {
    pub text: String,
    pub request_id: Option<String>,
    pub attachments: Vec<serde_json::Value>,
    pub display: Option<serde_json::Value>,
    pub model: Option<String>,
    /// Which door: api, ws, openai, cli, telegram, slack, webhook, internal.
    pub surface: String,
    /// This input's busy policy instead of the session's (a chat's `/queue <text>` waits
    /// for the running turn even where the session interrupts or steers). Kept in the payload.
    pub busy_policy: Option<crate::config::BusyPolicy>,
}

/// The answer to a submission (API.md receipt).
#[derive(Clone, Debug, Serialize)]
pub struct Receipt {
    pub admission_id: AdmissionId,
    pub session_id: SessionId,
    pub seq: i64,
    pub status: AdmissionStatus,
    pub duplicate: bool,
    /// The `unknown` admission this one runs again, for a retry's receipt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<AdmissionId>,
}

/// The user row that `admission` becomes as `turn_id`: its sanitized text and display
/// (SPEC R5.1). Built once, for the claim's commit (`lease`) or for `turn::context`.
pub fn user_row(admission: &Admission, turn_id: TurnId) -> NewMessage {
    let payload = &admission.payload;
    let text = sanitize_text(payload["text"].as_str().unwrap_or_default());
    let display = payload.get("display").filter(|d| d.is_object()).cloned();
    // The admission's file references (SPEC R2.2), never the bytes.
    let attachments = payload
        .get("attachments")
        .filter(|a| a.as_array().is_some_and(|l| !l.is_empty()))
        .cloned();
    NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::User),
        token_estimate: i64::try_from(estimate_tokens(&text)).unwrap_or(i64::MAX),
        content: Some(text),
        turn_id: Some(turn_id),
        admission_id: Some(admission.id),
        display,
        attachments,
        ..Default::default()
    }
}

/// The surface of the gateway's own inputs (reports, schedules): never refused by a
/// principal's limits.
pub const INTERNAL_SURFACE: &str = "internal";
