//! The events of a session's log: every kind (API.md "Events"), a committed event and one
//! waiting for its seq.
use crate::ids::*;
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
