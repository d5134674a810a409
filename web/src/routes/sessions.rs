//! Sessions: create, list (newest first, only the caller's own unless operator), read one with
//! its live state, and read its transcript.
use super::id::Id;
use super::reject_privileged_fields;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::openapi::mirrors::{BusyPolicyName, UsageTotalsSchema};
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_actors::config::BusyPolicy;
use turnkey_actors::display::DisplayLayer;
use turnkey_actors::{Gateway, NewSessionRequest};
use turnkey_storage::{
    rfc3339, Approval, Message, MessageRole, Principal, Session, SessionId, SessionUpdate, ToolRun,
    UsageTotals,
};
use utoipa::{IntoParams, ToSchema};

const DEFAULT_LIST_LIMIT: u64 = 50;
const MAX_LIST_LIMIT: u64 = 200;

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateSession {
    /// At most 200 characters.
    pub title: Option<String>,
    /// At most 32 000 characters.
    pub system_message: Option<String>,
    /// At most 128 bytes of visible ASCII; else the primary provider's model.
    pub model: Option<String>,
    /// Anything else the body carried; checked for privileged fields, otherwise ignored.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

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

fn non_blank(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

/// Creates a session owned by the caller.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "create_session",
    tag = "sessions",
    request_body = CreateSession,
    responses(
        (status = 201, description = "The new session", body = SessionView),
        (status = 400, description = "`field_too_long`, `invalid_field`, `forbidden_field`, `invalid_json`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    body: web::Json<CreateSession>,
) -> Result<HttpResponse, ApiError> {
    let view = create_view(&state, &who.0, body.into_inner()).await?;
    Ok(HttpResponse::Created().json(view))
}

/// Creates a session from a `POST /v1/sessions` body (also the WebSocket's `session.create`).
pub async fn create_view(
    state: &AppState,
    who: &Principal,
    body: CreateSession,
) -> Result<SessionView, ApiError> {
    reject_privileged_fields(&body.extra)?;
    let session = state
        .gateway
        .create_session(
            who,
            NewSessionRequest {
                title: non_blank(body.title),
                system_message: non_blank(body.system_message),
                model: non_blank(body.model),
                platform: "api".into(),
                chat_key: None,
            },
        )
        .await?;
    SessionView::load(&state.gateway, session).await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// 1–200, default 50.
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// RFC 3339 time or milliseconds since the epoch: only sessions created before it.
    pub before: Option<String>,
    /// Search: only sessions whose title holds this text, or with a message holding all of
    /// its words (each as a word prefix). At most 200 characters; empty lists all.
    #[param(max_length = 200)]
    pub q: Option<String>,
}

/// The longest `q` of `GET /v1/sessions`.
pub const MAX_QUERY_CHARS: usize = 200;

/// `GET /v1/sessions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// Newest first.
    pub sessions: Vec<SessionView>,
}

/// `GET /v1/sessions/{id}/messages`.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageList {
    /// The transcript in order; a rotated lineage's whole history, oldest segment first.
    pub messages: Vec<MessageView>,
}

/// Parses `before` as milliseconds or an RFC 3339 time.
pub fn parse_before(raw: &str) -> Result<i64, ApiError> {
    if let Ok(ms) = raw.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(raw)
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            ApiError::bad_request(
                "invalid_query",
                format!("before must be an RFC 3339 time or milliseconds: {e}"),
            )
        })
}

/// Lists the caller's sessions (all of them for the operator), newest first, each rotated
/// lineage once by its root; with `q`, only those whose title or transcript holds it.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    operation_id = "list_sessions",
    tag = "sessions",
    params(ListQuery),
    responses(
        (status = 200, description = "The sessions", body = SessionList),
        (status = 400, description = "`invalid_query`: `limit` out of range, `before` unreadable, `q` over 200 characters", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn list(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be between 1 and {MAX_LIST_LIMIT}"),
        ));
    }
    let before = query.before.as_deref().map(parse_before).transpose()?;
    let owner = (!who.is_operator()).then_some(who.0.id.as_str());
    let q = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    if q.is_some_and(|q| q.chars().count() > MAX_QUERY_CHARS) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("q must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    let store = state.gateway.store();
    let rows = match q {
        Some(q) => store.search_sessions(owner, q, limit, before).await?,
        None => store.list_sessions(owner, limit, before).await?,
    };
    let views = futures::future::try_join_all(
        rows.into_iter()
            .map(|s| SessionView::load(&state.gateway, s)),
    )
    .await?;
    Ok(HttpResponse::Ok().json(SessionList { sessions: views }))
}

/// A session with its live state and the questions it waits on a person for
/// (`pending_approvals`, `unknown_tool_runs`).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    operation_id = "get_session",
    tag = "sessions",
    params(("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)")),
    responses(
        (status = 200, description = "The session", body = SessionView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let session = state.gateway.authorize(&who.0, id).await?;
    Ok(HttpResponse::Ok().json(SessionView::load_with_questions(&state.gateway, session).await?))
}

/// The body of `PATCH /v1/sessions/{id}`. The handler reads it as a JSON object, since an
/// absent field and `null` mean different things; these are the fields it takes.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // the schema of the body, read field by field by `update`
pub struct SessionPatch {
    /// A new title; `null` clears it.
    #[schema(nullable = true)]
    title: Option<String>,
    /// The session's own busy policy; `null` clears it (the session then follows
    /// `agent.busy_policy`).
    #[schema(nullable = true, value_type = Option<BusyPolicyName>)]
    busy_policy: Option<String>,
    /// The session's own display behaviour (SPEC R3.1): any of `stream` (bool),
    /// `tool_progress` (`all`, `new`, `off`) and `interim` (bool); a key left out (or the
    /// whole object `null`) follows the platform table and `[agent]`.
    #[schema(nullable = true, value_type = Option<Object>)]
    display: Option<Value>,
    /// The model the session's turns run on from the next one: one of `GET /v1/models`;
    /// `null` goes back to the primary provider's.
    #[schema(nullable = true)]
    model: Option<String>,
}

/// The fields [`update`] accepts (the properties of [`SessionPatch`]).
pub const PATCH_FIELDS: [&str; 4] = ["title", "busy_policy", "display", "model"];

/// `DELETE /v1/sessions/{id}`: the session goes, with its sub-agents' sessions, transcript,
/// events, outbox rows, background processes and files; a running turn is interrupted first.
/// Its receipts answer 404 from then on.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    operation_id = "delete_session",
    tag = "sessions",
    params(("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`read_only`: a read-only token", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session (deleted already), or someone else's", body = ErrorBody),
        (status = 409, description = "`session_busy`: a turn did not end within 15 s of its interrupt; try again", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn delete(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    state.gateway.delete_session(&who.0, id).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// `PATCH /v1/sessions/{id}` `{title?, busy_policy?, display?, model?}`: a field that is absent
/// stays as it was; `null` clears it (a cleared busy policy follows the platform's
/// `agent.busy_policy` again, a cleared display the platform table and `[agent]`, a cleared
/// model the primary provider's). A new model applies from the session's next turn.
#[utoipa::path(
    patch,
    path = "/v1/sessions/{id}",
    operation_id = "update_session",
    tag = "sessions",
    params(("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)")),
    request_body = SessionPatch,
    responses(
        (status = 200, description = "The session as it is now", body = SessionView),
        (status = 400, description = "`invalid_id`, `invalid_busy_policy`, `invalid_title`, `invalid_display`, `invalid_model` (not one of `GET /v1/models`), `invalid_field` (any other field), `field_too_long`, `forbidden_field`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn update(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let body = body.into_inner();
    reject_privileged_fields(&body)?;
    if let Some(k) = body.keys().find(|k| !PATCH_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("{k} cannot be changed; PATCH takes title, busy_policy, display and model"),
        ));
    }
    let title = match body.get("title") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(t)) => Some(non_blank(Some(t.clone()))),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_title",
                "title must be a string or null",
            ))
        }
    };
    let busy_policy = match body.get("busy_policy") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(p)) if BusyPolicy::parse(p).is_some() => Some(Some(p.clone())),
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_busy_policy",
                format!(
                    "busy_policy must be one of {}; got {other}",
                    BusyPolicy::NAMES
                ),
            ))
        }
    };
    let display = match body.get("display") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(d) => Some(
            DisplayLayer::for_session(d)
                .map_err(|e| ApiError::bad_request("invalid_display", e))?,
        ),
    };
    let model = match body.get("model") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(m)) => Some(Some(m.clone())),
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_model",
                format!("model must be a string (one of GET /v1/models) or null; got {other}"),
            ))
        }
    };
    let named = state.gateway.authorize(&who.0, id).await?;
    if let Some(model) = model {
        state.gateway.set_model(&named, model).await?;
    }
    // Title, policy and display belong to the lineage: they are set on its root (SPEC R6.4).
    let change = SessionUpdate {
        title,
        busy_policy,
        display,
        model: None,
    };
    state
        .gateway
        .store()
        .update_session(named.lineage(), change)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("session {id}")))?;
    let session = state
        .gateway
        .store()
        .get_session(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("session {id}")))?;
    Ok(HttpResponse::Ok().json(SessionView::load(&state.gateway, session).await?))
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

/// The session's transcript in order.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/messages",
    operation_id = "list_messages",
    tag = "sessions",
    params(("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)")),
    responses(
        (status = 200, description = "The transcript", body = MessageList),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn messages(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let session = state.gateway.authorize(&who.0, id).await?;
    // Any id of a rotated lineage reads the lineage's whole history, each message once.
    let rows = state
        .gateway
        .store()
        .lineage_messages(session.lineage())
        .await?;
    let mut segments: Vec<SessionId> = rows.iter().map(|m| m.session_id).collect();
    segments.sort();
    segments.dedup();
    let store = state.gateway.store();
    let usage = store.usage_by_turn(&segments).await?;
    let mut endings = store.turn_endings(&segments).await?;
    let mut messages: Vec<MessageView> = rows.into_iter().map(MessageView::from).collect();
    // Each turn's cost and how it went go on its last row: what its events showed live.
    let mut seen = std::collections::HashSet::new();
    for m in messages.iter_mut().rev() {
        if let Some(turn) = m.turn_id.clone() {
            if seen.insert(turn.clone()) {
                m.turn_usage = usage.get(&turn).copied();
                if let Some(ending) = endings.remove(&turn) {
                    m.turn_stop_reason = ending.stop_reason;
                    m.turn_resumes = (!ending.resumes.is_empty()).then_some(ending.resumes);
                }
            }
        }
    }
    Ok(HttpResponse::Ok().json(MessageList { messages }))
}
