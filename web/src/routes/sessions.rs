//! Sessions: create, list (newest first, only the caller's own unless operator), read one with
//! its live state, and read its transcript.
use super::{parse_id, reject_privileged_fields};
use crate::auth::AuthPrincipal;
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_actors::config::BusyPolicy;
use turnkey_actors::{Gateway, NewSessionRequest};
use turnkey_storage::{rfc3339, Approval, Message, Principal, Session, SessionId, UsageTotals};

const DEFAULT_LIST_LIMIT: u64 = 50;
const MAX_LIST_LIMIT: u64 = 200;

#[derive(Debug, Deserialize)]
pub struct CreateSession {
    pub title: Option<String>,
    pub system_message: Option<String>,
    pub model: Option<String>,
    /// Anything else the body carried; checked for privileged fields, otherwise ignored.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A session as the API shows it (API.md `GET /v1/sessions/{id}`).
#[derive(Debug, Serialize)]
pub struct SessionView {
    pub id: SessionId,
    pub title: Option<String>,
    pub parent_session_id: Option<SessionId>,
    /// The session the id resolves to; the same id until rotation is served.
    pub canonical_id: SessionId,
    pub state: &'static str,
    pub queue_depth: u64,
    pub last_event_seq: i64,
    /// The session's own model, else the primary provider's: what its turns run on.
    pub model: Option<String>,
    pub platform: String,
    /// What a new input does while a turn runs: the session's own policy, else the
    /// platform's `agent.busy_policy` (SPEC R13.4).
    pub busy_policy: &'static str,
    pub usage: UsageTotals,
    pub created_at: String,
    pub updated_at: String,
    /// What the session waits on a person for (only in `GET /v1/sessions/{id}`): pending
    /// approvals, and tool runs a crash left `unknown` (answer with
    /// `POST /v1/sessions/{id}/tool_runs/{call_id}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_approvals: Option<Vec<ApprovalView>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_tool_runs: Option<Vec<Value>>,
}

/// A pending approval as `approval.requested` announced it.
#[derive(Debug, Serialize)]
pub struct ApprovalView {
    pub approval_id: String,
    pub call_id: String,
    pub name: Value,
    pub args: Value,
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
        let root = match s.root_id {
            Some(r) => gateway
                .store()
                .get_session(r)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("session {r}")))?,
            None => s.clone(),
        };
        let live = gateway.session_state(root.id).await?;
        let model = gateway.model_in_use(&root);
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
                .map(|r| {
                    serde_json::json!({
                        "call_id": r.call_id,
                        "name": r.tool,
                        "args": r.args,
                        "turn_id": r.turn_id,
                        "started_at": r.started_at.map(rfc3339),
                        "decide": format!("/v1/sessions/{id}/tool_runs/{}", r.call_id),
                    })
                })
                .collect(),
        );
        Ok(view)
    }
}

fn non_blank(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

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

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub limit: Option<u64>,
    /// RFC 3339 time or milliseconds since the epoch: only sessions created before it.
    pub before: Option<String>,
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
    let rows = state
        .gateway
        .store()
        .list_sessions(owner, limit, before)
        .await?;
    let views = futures::future::try_join_all(
        rows.into_iter()
            .map(|s| SessionView::load(&state.gateway, s)),
    )
    .await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "sessions": views })))
}

pub async fn get(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id: SessionId = parse_id(&path, "session")?;
    let session = state.gateway.authorize(&who.0, id).await?;
    Ok(HttpResponse::Ok().json(SessionView::load_with_questions(&state.gateway, session).await?))
}

/// `PATCH /v1/sessions/{id}` `{title?, busy_policy?}`: a field that is absent stays as it was;
/// `null` clears it (a cleared busy policy follows the platform's `agent.busy_policy` again).
pub async fn update(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    let id: SessionId = parse_id(&path, "session")?;
    let body = body.into_inner();
    reject_privileged_fields(&body)?;
    if let Some(k) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "title" | "busy_policy"))
    {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("{k} cannot be changed; PATCH takes title and busy_policy"),
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
    let named = state.gateway.authorize(&who.0, id).await?;
    // Title and policy belong to the lineage: they are set on its root (SPEC R6.4).
    state
        .gateway
        .store()
        .update_session(named.lineage(), title, busy_policy)
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
#[derive(Debug, Serialize)]
pub struct MessageView {
    pub id: String,
    /// The segment of the lineage that holds the row (the session itself unless it rotated).
    pub session_id: String,
    pub idx: i64,
    pub role: &'static str,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub turn_id: Option<String>,
    /// How to show the row: the input's own `display`, or for a row that closes a turn
    /// without an answer `{boundary: true, closed_as, failure_reason, partial}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display: Option<Value>,
    /// Set when compression took the row out of what the model sees: the compression epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compressed_epoch: Option<i32>,
    /// Set on a compression summary: the epoch that wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_epoch: Option<i32>,
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
            display: m.display,
            compressed_epoch: m.compressed_epoch,
            summary_epoch: m.summary_epoch,
            created_at: rfc3339(m.created_at),
        }
    }
}

pub async fn messages(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id: SessionId = parse_id(&path, "session")?;
    let session = state.gateway.authorize(&who.0, id).await?;
    // Any id of a rotated lineage reads the lineage's whole history, each message once.
    let rows = state
        .gateway
        .store()
        .lineage_messages(session.lineage())
        .await?;
    let messages: Vec<MessageView> = rows.into_iter().map(MessageView::from).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "messages": messages })))
}
