//! What the doors hand to the gateway and what they get back: a new session request, one
//! submission as a door received it, the admission receipt (API.md), the title a person's
//! first message gives an untitled session, and the user row an admitted input becomes when
//! its turn claims it.
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

/// One input as a door received it; the admission service normalizes it before it is stored.
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

/// The longest title taken from a message, in characters (before the ellipsis).
const TITLE_CHARS: usize = 60;

/// The title an untitled session takes from a person's message (from any door: the web UI,
/// `turnkey chat`, the OpenAI endpoint, a platform): its first line with text, its spaces
/// collapsed, cut at a word boundary with an ellipsis when longer than [`TITLE_CHARS`].
/// `None` for a message without text (files only).
pub fn title_of(text: &str) -> Option<String> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let whole = words.join(" ");
    if whole.chars().count() <= TITLE_CHARS {
        return Some(whole);
    }
    let mut title = String::new();
    for word in &words {
        let sep = usize::from(!title.is_empty());
        if title.chars().count() + sep + word.chars().count() > TITLE_CHARS {
            break;
        }
        if sep == 1 {
            title.push(' ');
        }
        title.push_str(word);
    }
    // A first word longer than the whole title is cut inside it.
    if title.is_empty() {
        title = whole.chars().take(TITLE_CHARS).collect();
    }
    title.push('…');
    Some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_1_a_title_is_the_first_line_cut_at_a_word() {
        assert_eq!(title_of("plan the trip").as_deref(), Some("plan the trip"));
        assert_eq!(
            title_of("\n\n  Plan   the\ttrip  \nwith details below").as_deref(),
            Some("Plan the trip")
        );
        let long = "Could you look at the failing deploy of the billing service and tell me why";
        let t = title_of(long).unwrap();
        assert_eq!(
            t, "Could you look at the failing deploy of the billing service…",
            "cut before the word that does not fit"
        );
        assert!(t.chars().count() <= TITLE_CHARS + 1);
        let word = "x".repeat(100);
        assert_eq!(title_of(&word).unwrap().chars().count(), TITLE_CHARS + 1);
        assert_eq!(title_of("  \n \t"), None);
        assert_eq!(title_of(""), None);
    }
}
