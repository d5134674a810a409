//! Tool calls and how far each got (`tool_runs`), and the approvals a call may wait for.
use crate::ids::*;
use serde::Serialize;

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
