//! Sessions: create, list (newest first, only the caller's own unless operator), read one with
//! its live state, and read its transcript.
mod views;

pub use views::{ApprovalView, DisplayView, MessageView, SessionView, UnknownToolRunView};

use super::id::Id;
use super::reject_privileged_fields;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::openapi::mirrors::BusyPolicyName;
use crate::state::AppState;
use actix_web::{delete, get, patch, post};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_actors::config::BusyPolicy;
use turnkey_actors::display::DisplayLayer;
use turnkey_actors::NewSessionRequest;
use turnkey_storage::{Principal, SessionId, SessionUpdate};
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

fn non_blank(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

/// Creates a session owned by the caller.
#[utoipa::path(
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
#[post("/v1/sessions")]
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
                history: Vec::new(),
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
#[get("/v1/sessions")]
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
#[get("/v1/sessions/{id}")]
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
#[delete("/v1/sessions/{id}")]
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
#[patch("/v1/sessions/{id}")]
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

/// The session's transcript in order.
#[utoipa::path(
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
#[get("/v1/sessions/{id}/messages")]
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
