//! A session's transcript rows, and what closes a turn: its tail, its usage, how it ended.
use super::NewEvent;
use crate::ids::*;
use serde::{Deserialize, Serialize};

/// What one turn's provider calls cost (`Store::usage_by_turn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct TurnUsage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cost_usd: f64,
}

/// How a turn went where its events said so live (`Store::turn_endings`), for a transcript
/// read later: each time it was resumed by itself, and how its answer stopped.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TurnEnding {
    /// `turn.finished`'s `stop_reason` (`stop`, `truncated`, `repeated`): only a turn that
    /// delivered an answer has one.
    pub stop_reason: Option<String>,
    /// Its `turn.resumed` events' data, in order.
    pub resumes: Vec<TurnResume>,
}

/// One resume of a turn by itself (SPEC R13.9), as its `turn.resumed` says.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TurnResume {
    pub attempt: i64,
    /// `crash` or `shutdown`.
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageRole {
    System,
    User,
    Assistant,
    Tool,
}

impl MessageRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "system" => Self::System,
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Message {
    pub id: MessageId,
    pub session_id: SessionId,
    pub idx: i64,
    pub role: MessageRole,
    pub content: Option<String>,
    /// The exact text sent to the provider for this message, when it differs from `content`.
    pub api_content: Option<String>,
    pub tool_calls: Option<serde_json::Value>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
    pub turn_id: Option<TurnId>,
    pub admission_id: Option<AdmissionId>,
    pub display: Option<serde_json::Value>,
    pub token_estimate: i64,
    pub created_at: i64,
    /// Set when compression took this row out of the wire copy: the epoch that did it. The
    /// row itself stays, readable through the messages API.
    pub compressed_epoch: Option<i32>,
    /// Set on a compression summary: the epoch that wrote it.
    pub summary_epoch: Option<i32>,
    /// Where a summary goes in the wire copy: right after the row with this index.
    pub summary_after_idx: Option<i64>,
    /// A user row's attachments (`[{file_id, name, content_type, bytes}]`), never the bytes.
    pub attachments: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default)]
pub struct NewMessage {
    pub id: MessageId,
    pub role: Option<MessageRole>,
    pub content: Option<String>,
    pub api_content: Option<String>,
    pub tool_calls: Option<serde_json::Value>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
    pub turn_id: Option<TurnId>,
    pub admission_id: Option<AdmissionId>,
    pub display: Option<serde_json::Value>,
    pub platform_message_id: Option<String>,
    pub token_estimate: i64,
    /// For a compression summary: its epoch and the row it follows in the wire copy.
    pub summary_epoch: Option<i32>,
    pub summary_after_idx: Option<i64>,
    /// A user row's attachments: references to `files` rows.
    pub attachments: Option<serde_json::Value>,
}

#[derive(Clone, Debug)]
pub struct NewUsage {
    pub provider: String,
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
}

/// Everything that closes a turn, committed in one transaction: the tail of the transcript,
/// the usage rows, the terminal receipt and the closing events.
#[derive(Clone, Debug)]
pub struct TurnEnd {
    pub admission_id: AdmissionId,
    pub turn_id: TurnId,
    pub messages: Vec<NewMessage>,
    /// For a turn that ends without a final answer: close whatever it left open (tool calls
    /// without results, a user or tool row without an assistant after it), read back from the
    /// transcript inside the same transaction. `None` leaves the tail as it is.
    pub close_tail: Option<TailClosure>,
    pub usage: Vec<NewUsage>,
    pub outcome: serde_json::Value,
    pub events: Vec<NewEvent>,
    /// What the session's chat is told (SPEC R1.3, R13.5): the answer, or a notice of how the
    /// turn ended. Written to `delivery_outbox` in the same transaction when the session belongs
    /// to a platform chat; ignored otherwise.
    pub reply: Option<String>,
}

/// How a turn ended without a final answer, as far as closing its transcript tail goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClosedAs {
    Failed,
    Interrupted,
    /// The owner died: nobody knows how far the turn got (SPEC R2.4).
    Unknown,
}

/// What closes an open tail (SPEC R10.3, R10.5): why the turn ended and the text the user
/// already saw, kept as a partial answer.
#[derive(Clone, Debug)]
pub struct TailClosure {
    pub closed_as: ClosedAs,
    /// Stable code, e.g. `provider_server_error`, `shutdown`, `owner_died`.
    pub reason: String,
    /// Human-readable, e.g. `connect error: Connection refused`.
    pub message: String,
    /// Text already streamed to clients during the turn, if any.
    pub partial: Option<String>,
}
