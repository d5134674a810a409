//! `GET /v1/sessions/{id}/subagents` and `GET /v1/sessions/{id}/processes` (API.md
//! "Sub-agents, background processes and agent schedules"): what a session started that runs
//! outside its turns, and how each ended.
use super::id::Id;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use turnkey_storage::{rfc3339, BackgroundProcess, ProcessId, SessionId, SubagentTask, TaskId};
use utoipa::ToSchema;

/// One delegated task.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Subagent)]
pub struct SubagentView {
    #[schema(value_type = uuid::Uuid)]
    pub task_id: TaskId,
    /// The child session: its transcript and events are a session's like any other.
    #[schema(value_type = uuid::Uuid)]
    pub child_session_id: SessionId,
    pub goal: String,
    /// `running`, `completed`, `failed`, `interrupted` or `unknown`.
    #[schema(example = "completed")]
    pub status: String,
    /// The report as admitted into the parent session, once the child ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    pub depth: i64,
    pub created_at: String,
    /// When the report was admitted into the parent; absent before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<String>,
}

impl From<SubagentTask> for SubagentView {
    fn from(t: SubagentTask) -> Self {
        Self {
            task_id: t.task_id,
            child_session_id: t.child_session_id,
            goal: t.goal,
            status: t.status,
            result: t.result,
            depth: t.depth,
            created_at: rfc3339(t.created_at),
            reported_at: t.reported_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubagentList {
    pub subagents: Vec<SubagentView>,
}

/// One background process.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = BackgroundProcess)]
pub struct ProcessView {
    #[schema(value_type = uuid::Uuid)]
    pub process_id: ProcessId,
    pub command: String,
    /// `running`, `exited`, `killed` or `unknown`.
    #[schema(example = "exited")]
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    /// The end of its output, once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail: Option<String>,
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// When its report was admitted into the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<String>,
}

impl From<BackgroundProcess> for ProcessView {
    fn from(p: BackgroundProcess) -> Self {
        Self {
            process_id: p.process_id,
            command: p.command,
            status: p.status,
            exit_code: p.exit_code,
            pid: p.pid,
            tail: p.tail,
            started_at: rfc3339(p.started_at),
            ended_at: p.ended_at.map(rfc3339),
            reported_at: p.reported_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProcessList {
    pub processes: Vec<ProcessView>,
}

/// The sub-agents the session started with `delegate_task`, oldest first.
#[utoipa::path(
    operation_id = "list_subagents",
    tag = "sessions",
    params(("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)")),
    responses(
        (status = 200, description = "The session's sub-agents", body = SubagentList),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/sessions/{id}/subagents")]
pub async fn subagents(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let list = state.gateway.subagents(&who.0, id).await?;
    Ok(HttpResponse::Ok().json(SubagentList {
        subagents: list.into_iter().map(SubagentView::from).collect(),
    }))
}

/// The background processes the session started (`terminal` with `background: true`).
#[utoipa::path(
    operation_id = "list_processes",
    tag = "sessions",
    params(("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)")),
    responses(
        (status = 200, description = "The session's background processes", body = ProcessList),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/sessions/{id}/processes")]
pub async fn processes(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let list = state.gateway.processes(&who.0, id).await?;
    Ok(HttpResponse::Ok().json(ProcessList {
        processes: list.into_iter().map(ProcessView::from).collect(),
    }))
}
