//! Typed domain records the `Store` returns: parsed once from their rows, so that nothing
//! above the store handles raw status strings or unparsed ids.
use crate::ids::*;
use crate::status::AdmissionStatus;
use serde::{Deserialize, Serialize};

/// Every kind of event a session's log can hold (API.md "Events").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    #[serde(rename = "admission.queued")]
    AdmissionQueued,
    #[serde(rename = "turn.started")]
    TurnStarted,
    #[serde(rename = "message.delta")]
    MessageDelta,
    #[serde(rename = "tool.started")]
    ToolStarted,
    #[serde(rename = "tool.progress")]
    ToolProgress,
    #[serde(rename = "tool.completed")]
    ToolCompleted,
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    #[serde(rename = "approval.resolved")]
    ApprovalResolved,
    #[serde(rename = "compression.completed")]
    CompressionCompleted,
    #[serde(rename = "message.complete")]
    MessageComplete,
    #[serde(rename = "turn.finished")]
    TurnFinished,
    #[serde(rename = "turn.unknown")]
    TurnUnknown,
    /// A turn that started no side effect is run again by itself, once (SPEC R13.9):
    /// `{admission_id, attempt, reason: crash/shutdown}`. Text streamed before it is void.
    #[serde(rename = "turn.resumed")]
    TurnResumed,
    #[serde(rename = "session.rotated")]
    SessionRotated,
    #[serde(rename = "status")]
    Status,
    /// A queued input was carried by another admission's turn (busy policy `steer`, input
    /// coalescing): `{admission_id, result: steered/coalesced, turn_id, carried_by}`.
    #[serde(rename = "admission.carried")]
    AdmissionCarried,
    /// A memory store changed by this session's tool call or review (SPEC R5.2):
    /// `{target, action, chars, limit, by}`.
    #[serde(rename = "memory.updated")]
    MemoryUpdated,
    /// A post-delivery review began (SPEC R10.4): `{review_id, turn_id}`.
    #[serde(rename = "review.started")]
    ReviewStarted,
    /// A review ended and committed its writes: `{review_id, actions}`.
    #[serde(rename = "review.finished")]
    ReviewFinished,
    /// A review ended without writing anything (SPEC R4.5): `{review_id, reason}`; `reason`
    /// is `input` (a new input took the session), `shutdown`, `failed` or `interrupted`
    /// (its owner died; it is not run again).
    #[serde(rename = "review.cancelled")]
    ReviewCancelled,
    /// A task was delegated to a child session (SPEC R1.5): `{task_id, child_session_id, goal}`.
    #[serde(rename = "subagent.started")]
    SubagentStarted,
    /// A child's report was admitted into this session: `{task_id, status, admission_id}`.
    #[serde(rename = "subagent.finished")]
    SubagentFinished,
    /// A command started in the background: `{process_id, command}`.
    #[serde(rename = "process.started")]
    ProcessStarted,
    /// A background command's end was admitted into this session as a report:
    /// `{process_id, exit_code, status, admission_id}`; `status` is `exited`, `killed` or
    /// `unknown` (no exit code).
    #[serde(rename = "process.exited")]
    ProcessExited,
    /// A queued input was cancelled before it ran (its parent was interrupted, SPEC R1.5):
    /// `{admission_id, reason}`; its receipt is `terminal` with `outcome.result = cancelled`.
    #[serde(rename = "admission.cancelled")]
    AdmissionCancelled,
}

impl EventKind {
    pub const ALL: [EventKind; 25] = [
        Self::AdmissionQueued,
        Self::TurnStarted,
        Self::MessageDelta,
        Self::ToolStarted,
        Self::ToolProgress,
        Self::ToolCompleted,
        Self::ApprovalRequested,
        Self::ApprovalResolved,
        Self::CompressionCompleted,
        Self::MessageComplete,
        Self::TurnFinished,
        Self::TurnUnknown,
        Self::TurnResumed,
        Self::SessionRotated,
        Self::Status,
        Self::AdmissionCarried,
        Self::MemoryUpdated,
        Self::ReviewStarted,
        Self::ReviewFinished,
        Self::ReviewCancelled,
        Self::SubagentStarted,
        Self::SubagentFinished,
        Self::ProcessStarted,
        Self::ProcessExited,
        Self::AdmissionCancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::AdmissionQueued => "admission.queued",
            Self::TurnStarted => "turn.started",
            Self::MessageDelta => "message.delta",
            Self::ToolStarted => "tool.started",
            Self::ToolProgress => "tool.progress",
            Self::ToolCompleted => "tool.completed",
            Self::ApprovalRequested => "approval.requested",
            Self::ApprovalResolved => "approval.resolved",
            Self::CompressionCompleted => "compression.completed",
            Self::MessageComplete => "message.complete",
            Self::TurnFinished => "turn.finished",
            Self::TurnUnknown => "turn.unknown",
            Self::TurnResumed => "turn.resumed",
            Self::SessionRotated => "session.rotated",
            Self::Status => "status",
            Self::AdmissionCarried => "admission.carried",
            Self::MemoryUpdated => "memory.updated",
            Self::ReviewStarted => "review.started",
            Self::ReviewFinished => "review.finished",
            Self::ReviewCancelled => "review.cancelled",
            Self::SubagentStarted => "subagent.started",
            Self::SubagentFinished => "subagent.finished",
            Self::ProcessStarted => "process.started",
            Self::ProcessExited => "process.exited",
            Self::AdmissionCancelled => "admission.cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One committed event, in the API's shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub session_id: SessionId,
    pub seq: Seq,
    pub kind: EventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<TurnId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_id: Option<AdmissionId>,
    pub created_at: String,
    pub data: serde_json::Value,
}

/// An event not yet committed: the store assigns its seq.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub session_id: SessionId,
    pub kind: EventKind,
    pub turn_id: Option<TurnId>,
    pub admission_id: Option<AdmissionId>,
    pub data: serde_json::Value,
}

/// Who runs a turn: a process instance on a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub instance: InstanceId,
    pub pid: i64,
    /// Host name plus PID-namespace token, so that a pid is only compared on the host that owns it.
    pub host: String,
}

/// Proof that a write belongs to the current holder of a session's lease (SPEC R13.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub session_id: SessionId,
    pub instance: InstanceId,
    pub generation: LeaseGeneration,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lease {
    pub session_id: SessionId,
    pub holder: Option<Owner>,
    pub turn_id: Option<TurnId>,
    pub platform: Option<String>,
    pub generation: LeaseGeneration,
    pub acquired_at: i64,
    pub expires_at: i64,
}

/// Which running turn carried a queued input it did not start (SPEC R13.4).
#[derive(Clone, Debug)]
pub struct Carried {
    /// `steered` or `coalesced`.
    pub result: &'static str,
    pub turn_id: TurnId,
    pub carried_by: AdmissionId,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Session {
    pub id: SessionId,
    pub parent_session_id: Option<SessionId>,
    pub owner: String,
    pub platform: String,
    pub chat_key: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_message: Option<String>,
    pub system_prompt: Option<String>,
    pub workspace_snapshot: Option<String>,
    pub last_event_seq: Seq,
    pub usage: UsageTotals,
    pub created_at: i64,
    pub updated_at: i64,
    /// How many compressions the session has had (0: none).
    pub compression_epoch: i32,
    /// When the last compression committed (ms since the epoch).
    pub compressed_at: Option<i64>,
    /// The session's own busy policy (SPEC R13.4), else the platform's.
    pub busy_policy: Option<String>,
    /// The session's own display behaviour (SPEC R3.1), else the platform's.
    pub display: Option<serde_json::Value>,
    /// A rotated child's lineage root (SPEC R6.4); `None` on a root.
    pub root_id: Option<SessionId>,
    /// On a root: the session holding the live transcript, when rotation moved it.
    pub transcript_id: Option<SessionId>,
    /// The provider's prompt size for the session's last recorded call (SPEC R6.1).
    #[serde(skip)]
    pub last_prompt: Option<PromptUsage>,
}

/// What `PATCH /v1/sessions/{id}` changes: `None` leaves a field as it is, `Some(None)`
/// clears it.
#[derive(Clone, Debug, Default)]
pub struct SessionUpdate {
    pub title: Option<Option<String>>,
    pub busy_policy: Option<Option<String>>,
    /// The session's display object (SPEC R3.1).
    pub display: Option<Option<serde_json::Value>>,
    /// The model its turns run on (`None` inside: the primary provider's). Set on every
    /// segment of the lineage, since a rotation copies it and a turn reads its own segment.
    pub model: Option<Option<String>>,
}

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

/// A provider's reported prompt size and when it was recorded (ms since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptUsage {
    pub input_tokens: i64,
    pub recorded_at: i64,
}

impl Session {
    /// The lineage root: the key of the admission queue, the event log, the lease and the
    /// counters of every session of the lineage (SPEC R6.4).
    pub fn lineage(&self) -> SessionId {
        self.root_id.unwrap_or(self.id)
    }

    /// On a root: the session whose rows are the live transcript (the canonical session).
    pub fn canonical(&self) -> SessionId {
        self.transcript_id.unwrap_or(self.id)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cost_usd: f64,
}

#[derive(Clone, Debug)]
pub struct NewSession {
    pub id: SessionId,
    pub owner: String,
    pub platform: String,
    pub chat_key: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_message: Option<String>,
    pub system_prompt: String,
    pub workspace_snapshot: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Admission {
    pub id: AdmissionId,
    pub session_id: SessionId,
    pub seq: i64,
    pub request_id: String,
    pub payload_digest: String,
    pub payload: serde_json::Value,
    pub principal: String,
    pub surface: String,
    pub status: AdmissionStatus,
    pub owner: Option<Owner>,
    pub turn_id: Option<TurnId>,
    pub outcome: Option<serde_json::Value>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The `unknown` admission this one runs again (`POST /v1/admissions/{id}/retry`).
    pub retry_of: Option<AdmissionId>,
    /// Which attempt at the turn this is: 1, and one more each time it was resumed by itself
    /// (SPEC R13.9), after a crash or a hand-back at shutdown.
    pub attempt: i32,
    /// How many of those resumes followed a crash: `[agent] max_resumes` bounds these, not
    /// the hand-backs of a graceful shutdown.
    pub crash_resumes: i32,
    /// Why the last owner handed the `started` turn back without settling it, if it did.
    pub handed_back: Option<ResumeReason>,
}

impl Admission {
    /// Where the input came from (API.md `source`): a person through a door (`user`), or an
    /// internal input of the gateway, named by the prefix of its request id (`schedule:…`;
    /// `subagent:…` and `process:…` for sub-agent reports and process exits).
    pub fn source(&self) -> &'static str {
        source_of(&self.surface, &self.request_id)
    }
}

/// [`Admission::source`] from an admission's surface and request id.
pub fn source_of(surface: &str, request_id: &str) -> &'static str {
    if surface != "internal" {
        return "user";
    }
    match request_id.split_once(':').map(|(p, _)| p) {
        Some("schedule") => "schedule",
        Some("subagent") => "subagent",
        Some("process") => "process",
        _ => "user",
    }
}

/// Why a turn is resumed by itself (SPEC R13.9), as `turn.resumed` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeReason {
    /// Its owner died or lost the lease mid-turn.
    Crash,
    /// Its owner stopped gracefully and handed the turn back at the end of its grace.
    Shutdown,
}

impl ResumeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crash => "crash",
            Self::Shutdown => "shutdown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "crash" => Some(Self::Crash),
            "shutdown" => Some(Self::Shutdown),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct NewAdmission {
    pub session_id: SessionId,
    pub request_id: String,
    pub payload_digest: String,
    pub payload: serde_json::Value,
    pub principal: String,
    pub surface: String,
    pub retry_of: Option<AdmissionId>,
    /// The title the session takes from this input when it has none yet (a person's own title
    /// is never replaced): the first line of a person's first message.
    pub title: Option<String>,
}

/// What `admit` did: a new admission (with its `admission.queued` and `status` events) or the
/// earlier one (no events).
#[derive(Clone, Debug)]
pub struct Admitted {
    pub admission: Admission,
    pub duplicate: bool,
    pub events: Vec<Event>,
    /// The session's own busy policy (`None`: the configured default) as the admission's
    /// commit read it with the session's row; `None` for a duplicate, which changes nothing.
    pub busy_policy: Option<String>,
}

/// An admission claimed together with its session's lease: as it was read before the claim
/// (`queued`), and the committed `turn.started` and `status` events.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub admission: Admission,
    pub events: Vec<Event>,
    /// The session's row as the claim's commit left it: what the turn's context would read
    /// next (its system prompt, model, transcript segment, last prompt size).
    pub session: Session,
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

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Principal {
    pub id: String,
    pub name: String,
    pub kind: String,
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

/// Why a `started` admission became `unknown`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCause {
    /// Stable code: `owner_died`, `lease_lost`.
    pub reason: String,
    /// Human-readable: which owner, and what is known of how it ended.
    pub message: String,
}

/// One tool call of a turn and how far it got (`tool_runs`): the readback that answers "did
/// this call run?" after a crash (SPEC R13.1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolRun {
    pub call_id: String,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub admission_id: Option<AdmissionId>,
    pub tool: String,
    /// The arguments exactly as the model sent them (JSON text, possibly invalid).
    pub args: String,
    /// Position in the assistant message's call list.
    pub idx: i64,
    pub status: crate::ToolRunStatus,
    pub outcome: Option<crate::ToolOutcome>,
    pub decision: Option<crate::ToolRunDecision>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// A call to record as `planned`, with the assistant row that makes it.
#[derive(Clone, Debug)]
pub struct NewToolRun {
    pub call_id: String,
    pub tool: String,
    pub args: String,
    pub idx: i64,
}

/// Which turn a tool-run write belongs to.
#[derive(Clone, Debug)]
pub struct TurnRef {
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub admission_id: AdmissionId,
}

/// A durable request for a person's approval of one call (SPEC R9.7, R13.2).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Approval {
    pub id: ApprovalId,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub call_id: String,
    /// `{name, args, reason}` as announced in `approval.requested`.
    pub request: serde_json::Value,
    pub status: crate::ApprovalStatus,
    pub decided_by: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
}

/// A platform message to write to `delivery_outbox`. `idempotency_key` is unique: writing the
/// same key twice keeps the first row (a retried transaction does not double a reply).
#[derive(Clone, Debug, PartialEq)]
pub struct NewOutbox {
    pub platform: String,
    pub chat_key: String,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<TurnId>,
    pub idempotency_key: String,
    /// `reply` (a turn's answer or ending), `notice` (a command's answer), `approval` (a
    /// request with approve/deny buttons), `draft` (a streamed draft being edited).
    pub kind: String,
    /// `{text, ...}`; an approval adds `approval_id`, `name`, `args`.
    pub payload: serde_json::Value,
}

/// A row of `delivery_outbox` (API.md `GET /v1/outbox`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outbox {
    pub id: String,
    pub platform: String,
    pub chat_key: String,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub idempotency_key: String,
    pub kind: String,
    pub payload: serde_json::Value,
    pub status: crate::OutboxStatus,
    pub attempts: i32,
    pub chunks_sent: i32,
    pub platform_message_id: Option<String>,
    pub owner_instance: Option<String>,
    /// The process that marked the row `sending` (instance, pid, host), while it is known.
    pub owner: Option<Owner>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub next_attempt_at: i64,
    pub updated_at: i64,
    pub sent_at: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::source_of;

    #[test]
    fn r1_5_an_internal_input_names_its_source_by_its_request_id() {
        assert_eq!(
            source_of("api", "schedule:x:1"),
            "user",
            "a door's input is the user's"
        );
        assert_eq!(source_of("internal", "schedule:abc:1000"), "schedule");
        assert_eq!(source_of("internal", "subagent:t1"), "subagent");
        assert_eq!(source_of("internal", "process:p1"), "process");
        assert_eq!(source_of("internal", "other"), "user");
    }
}
