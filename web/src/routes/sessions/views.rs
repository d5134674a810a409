//! What a session and a transcript row look like on the API: the views `GET /v1/sessions`,
//! `GET /v1/sessions/{id}` and `GET /v1/sessions/{id}/messages` answer with.
use crate::error::ApiError;
use crate::openapi::mirrors::{BusyPolicyName, UsageTotalsSchema};
use serde::Serialize;
use serde_json::Value;
use turnkey_actors::config::BusyPolicy;
use turnkey_actors::Gateway;
use turnkey_storage::{
    rfc3339, Approval, Message, MessageRole, Session, SessionId, ToolRun, UsageTotals,
};
use utoipa::ToSchema;

/// A session as the API shows it (API.md `GET /v1/sessions/{id}`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Session)]
pub struct SessionView {
    #[schema(value_type = uuid::Uuid)]
    pub id: SessionId,
    pub title: Option<String>,
    /// The session a rotated child continues.
    #[schema(value_type = Option<uuid::Uuid>)]
    pub parent_session_id: Option<SessionId>,
    /// The session holding the lineage's live transcript now; `id` until a rotation.
    #[schema(value_type = uuid::Uuid)]
    pub canonical_id: SessionId,
    /// `idle` or `running`.
    #[schema(example = "idle")]
    pub state: &'static str,
    /// Inputs waiting.
    pub queue_depth: u64,
    pub last_event_seq: i64,
    /// The session's own model, else the primary provider's: what its turns run on.
    pub model: Option<String>,
    #[schema(example = "api")]
    pub platform: String,
    /// What a new input does while a turn runs: the session's own policy, else the
    /// platform's `agent.busy_policy` (SPEC R13.4).
    #[schema(value_type = BusyPolicyName)]
    pub busy_policy: &'static str,
    /// How the session's turns are shown (SPEC R3.1): the session's own `display` over its
    /// platform table over `[agent]`. An input's own `display` can still change one turn.
    pub display: DisplayView,
    #[schema(value_type = UsageTotalsSchema)]
    pub usage: UsageTotals,
    pub created_at: String,
    pub updated_at: String,
    /// What the session waits on a person for (only in `GET /v1/sessions/{id}`): pending
    /// approvals, and tool runs a crash left `unknown` (answer with
    /// `POST /v1/sessions/{id}/tool_runs/{call_id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_approvals: Option<Vec<ApprovalView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_tool_runs: Option<Vec<UnknownToolRunView>>,
}

/// How a session's turns are shown (SPEC R3.1).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Display)]
pub struct DisplayView {
    /// `message.delta` events while the model writes, and a platform draft.
    pub stream: bool,
    /// `all` (every `tool.started` and `tool.progress`), `new` (`tool.started` only when the
    /// tool changes; no `tool.progress`) or `off`; `tool.completed` is always shown.
    #[schema(example = "all")]
    pub tool_progress: &'static str,
    /// A platform draft keeps the text written before a tool round.
    pub interim: bool,
}

impl From<turnkey_actors::display::Display> for DisplayView {
    fn from(d: turnkey_actors::display::Display) -> Self {
        Self {
            stream: d.stream,
            tool_progress: d.tool_progress.as_str(),
            interim: d.interim,
        }
    }
}

/// A tool run a crash left `unknown`, waiting for a person's `retry` or `skip`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = UnknownToolRun)]
pub struct UnknownToolRunView {
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments exactly as the model sent them (JSON text).
    pub args: String,
    #[schema(value_type = uuid::Uuid)]
    pub turn_id: turnkey_storage::TurnId,
    pub started_at: Option<String>,
    /// The path to `POST` the decision to.
    #[schema(example = "/v1/sessions/{id}/tool_runs/{call_id}")]
    pub decide: String,
}

impl UnknownToolRunView {
    fn new(session: SessionId, r: ToolRun) -> Self {
        Self {
            decide: format!("/v1/sessions/{session}/tool_runs/{}", r.call_id),
            call_id: r.call_id,
            name: r.tool,
            args: r.args,
            turn_id: r.turn_id,
            started_at: r.started_at.map(rfc3339),
        }
    }
}

/// A pending approval as `approval.requested` announced it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PendingApproval)]
pub struct ApprovalView {
    #[schema(format = Uuid)]
    pub approval_id: String,
    pub call_id: String,
    /// The tool's name.
    #[schema(value_type = String)]
    pub name: Value,
    /// The call's arguments.
    #[schema(value_type = Object)]
    pub args: Value,
    /// Why the call needs a person's approval.
    #[schema(value_type = Option<String>)]
    pub reason: Value,
    pub expires_at: String,
}

impl From<Approval> for ApprovalView {
    fn from(a: Approval) -> Self {
        Self {
            approval_id: a.id.to_string(),
            call_id: a.call_id,
            name: a.request["name"].clone(),
            args: a.request["args"].clone(),
            reason: a.request["reason"].clone(),
            expires_at: rfc3339(a.expires_at),
        }
    }
}

impl SessionView {
    /// The view of `s`. A rotated lineage's queue, events, counters, title and policy live on
    /// its root (SPEC R6.4), so a child shows the root's, and every id names the canonical one.
    pub async fn load(gateway: &Gateway, s: Session) -> Result<Self, ApiError> {
        let root = gateway.lineage_root(s.clone()).await?;
        let live = gateway.session_state(root.id).await?;
        let model = gateway.model_in_use(&root);
        let display = gateway.config().display(&root, None).into();
        Ok(Self {
            id: s.id,
            title: root.title,
            parent_session_id: s.parent_session_id,
            canonical_id: root.transcript_id.unwrap_or(root.id),
            state: if live.running { "running" } else { "idle" },
            queue_depth: live.queue_depth,
            last_event_seq: root.last_event_seq.0,
            model,
            platform: s.platform,
            busy_policy: BusyPolicy::effective(
                root.busy_policy.as_deref(),
                gateway.config().agent.busy_policy,
            )
            .as_str(),
            display,
            usage: root.usage,
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(root.updated_at.max(s.updated_at)),
            pending_approvals: None,
            unknown_tool_runs: None,
        })
    }

    /// The view with the session's open questions.
    pub async fn load_with_questions(gateway: &Gateway, s: Session) -> Result<Self, ApiError> {
        let id = s.lineage();
        let mut view = Self::load(gateway, s).await?;
        let (approvals, runs) = gateway.open_questions(id).await?;
        view.pending_approvals = Some(approvals.into_iter().map(ApprovalView::from).collect());
        view.unknown_tool_runs = Some(
            runs.into_iter()
                .map(|r| UnknownToolRunView::new(id, r))
                .collect(),
        );
        Ok(view)
    }
}

/// A transcript row as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Message)]
pub struct MessageView {
    #[schema(format = Uuid)]
    pub id: String,
    /// The segment of the lineage that holds the row (the session itself unless it rotated).
    #[schema(format = Uuid)]
    pub session_id: String,
    pub idx: i64,
    /// `user`, `assistant`, `tool` or `system` (a compression summary).
    #[schema(example = "assistant")]
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub turn_id: Option<String>,
    /// A user row's admission (the input it was made from), as `admission.queued` named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_id: Option<String>,
    /// How to show the row: the input's own `display`, or for a row that closes a turn
    /// without an answer `{boundary: true, closed_as, failure_reason, partial}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub display: Option<Value>,
    /// Set when compression took the row out of what the model sees: the compression epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compressed_epoch: Option<i32>,
    /// Set on a compression summary: the epoch that wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_epoch: Option<i32>,
    /// A user row's attachments: `[{file_id, name, content_type, bytes, path?}]` (the bytes
    /// at `GET /v1/files/{file_id}`; `path` in the workspace for a file that is not an image).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub attachments: Option<Value>,
    /// On the last row of a turn that called a model: what the turn cost,
    /// `{input_tokens, output_tokens, cache_read_tokens, cost_usd}` (what `turn.finished`
    /// said), so that a transcript read later shows it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub turn_usage: Option<turnkey_storage::TurnUsage>,
    /// On the last row of a turn that delivered an answer: how the answer stopped, as its
    /// `turn.finished` said (`stop`, `truncated`, `repeated`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_stop_reason: Option<String>,
    /// On the last row of a turn resumed by itself (SPEC R13.9): each resume,
    /// `[{attempt, reason}]`, as its `turn.resumed` said.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub turn_resumes: Option<Vec<turnkey_storage::TurnResume>>,
    pub created_at: String,
}

impl From<Message> for MessageView {
    fn from(m: Message) -> Self {
        Self {
            id: m.id.to_string(),
            session_id: m.session_id.to_string(),
            idx: m.idx,
            role: m.role.as_str(),
            content: m.content,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            name: m.name,
            turn_id: m.turn_id.map(|t| t.to_string()),
            admission_id: (m.role == MessageRole::User)
                .then_some(m.admission_id)
                .flatten()
                .map(|a| a.to_string()),
            display: m.display,
            compressed_epoch: m.compressed_epoch,
            summary_epoch: m.summary_epoch,
            attachments: m.attachments,
            turn_usage: None,
            turn_stop_reason: None,
            turn_resumes: None,
            created_at: rfc3339(m.created_at),
        }
    }
}
