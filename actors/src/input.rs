//! What the doors hand to the gateway and what they get back: a new session request, one
//! submission as a door received it, the admission receipt (API.md), the title a person's
//! first message gives an untitled session, and the user row an admitted input becomes when
//! its turn claims it.
use crate::error::GatewayError;
use crate::limits::{
    self, sanitize_text, MAX_DOOR_BYTES, MAX_HISTORY_MESSAGES, MAX_OUTPUT_TOKENS, MAX_TEXT_CHARS,
};
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
    /// The conversation the session starts with, committed with it: a stateless client's
    /// earlier messages, which no turn runs again.
    pub history: Vec<SeedMessage>,
}

/// One message of the history a new session starts with.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedMessage {
    /// `User` or `Assistant`.
    pub role: MessageRole,
    pub text: String,
}

impl SeedMessage {
    /// The transcript row it becomes: its text sanitized as an input's is, written by no turn.
    pub fn row(&self) -> NewMessage {
        let text = sanitize_text(&self.text);
        NewMessage {
            id: MessageId::new(),
            role: Some(self.role),
            token_estimate: i64::try_from(estimate_tokens(&text)).unwrap_or(i64::MAX),
            content: Some(text),
            ..Default::default()
        }
    }
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
    /// Instructions for this input's turn only, after the session's system prompt (the
    /// Responses API's `instructions`).
    pub instructions: Option<String>,
    /// The output limit of each model call of this input's turn; an answer it cuts is the
    /// answer, marked `truncated`, without continuations (the Responses API's
    /// `max_output_tokens`).
    pub max_output_tokens: Option<u32>,
    /// What the door keeps with the input for reading it back (the Responses API's request:
    /// its input items, metadata, `background`, `previous_response_id`); no turn reads it.
    pub door: Option<serde_json::Value>,
}

/// The history a new session starts with: at most [`limits::MAX_HISTORY_MESSAGES`] user and assistant
/// messages of at most [`limits::MAX_TEXT_CHARS`] each.
pub fn check_history(history: &[SeedMessage]) -> Result<(), GatewayError> {
    if history.len() > limits::MAX_HISTORY_MESSAGES {
        return Err(invalid(
            "history_too_long",
            format!("a new session starts with at most {MAX_HISTORY_MESSAGES} earlier messages"),
        ));
    }
    for (i, m) in history.iter().enumerate() {
        if !matches!(m.role, MessageRole::User | MessageRole::Assistant) {
            return Err(invalid(
                "invalid_history",
                format!("earlier message {i}: only user and assistant messages are kept"),
            ));
        }
        if m.text.chars().count() > limits::MAX_TEXT_CHARS {
            return Err(invalid(
                "input_too_large",
                format!("earlier message {i} is longer than {MAX_TEXT_CHARS} characters"),
            ));
        }
    }
    Ok(())
}

/// An input's turn-only fields: `instructions` within [`limits::MAX_INSTRUCTIONS_CHARS`],
/// `max_output_tokens` from 1 to [`limits::MAX_OUTPUT_TOKENS`], the door's object within
/// [`limits::MAX_DOOR_BYTES`].
pub fn check_turn_fields(s: &Submission) -> Result<(), GatewayError> {
    if let Some(i) = &s.instructions {
        limits::text_field("instructions", i, limits::MAX_INSTRUCTIONS_CHARS)?;
    }
    if let Some(n) = s.max_output_tokens {
        if n == 0 || n > limits::MAX_OUTPUT_TOKENS {
            return Err(invalid(
                "invalid_field",
                format!("max_output_tokens must be 1 to {MAX_OUTPUT_TOKENS}, not {n}"),
            ));
        }
    }
    if let Some(d) = &s.door {
        if d.to_string().len() > limits::MAX_DOOR_BYTES {
            return Err(invalid(
                "input_too_large",
                format!("the request kept with the input is over {MAX_DOOR_BYTES} bytes"),
            ));
        }
    }
    Ok(())
}

fn invalid(code: &'static str, message: String) -> GatewayError {
    GatewayError::InvalidInput { code, message }
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
