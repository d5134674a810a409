//! A person's answers to a running turn's questions and the undo of a turn's file changes:
//! approvals (SPEC R9.7, R13.2), decisions on tool runs a crash left `unknown` (R13.1), and
//! checkpoint restore (R9.6).
use super::id::Id;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::openapi::mirrors::{
    ApprovalDecisionName, ApprovalStatusName, ToolRunDecisionName, ToolRunStatusName,
};
use crate::state::AppState;
use actix_web::post;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use turnkey_storage::{
    ApprovalDecision, ApprovalId, ApprovalStatus, Principal, SessionId, ToolRunDecision,
    ToolRunStatus, TurnId,
};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = ApprovalDecisionBody)]
pub struct ApprovalBody {
    #[schema(value_type = ApprovalDecisionName)]
    pub decision: ApprovalDecision,
}

/// A decided approval.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalDecided {
    #[schema(value_type = uuid::Uuid)]
    pub approval_id: ApprovalId,
    pub call_id: String,
    #[schema(value_type = ApprovalStatusName)]
    pub status: ApprovalStatus,
}

/// `POST /v1/sessions/{id}/approvals/{approval_id}` `{decision: approve|deny}`: 200, or 409
/// `approval_closed` when it was already decided or has expired.
#[utoipa::path(
    operation_id = "decide_approval",
    tag = "tools",
    params(
        ("id" = uuid::Uuid, Path, description = "The session's id"),
        ("approval_id" = uuid::Uuid, Path, description = "The approval's id (`approval.requested`)"),
    ),
    request_body = ApprovalBody,
    responses(
        (status = 200, description = "The approval as decided", body = ApprovalDecided),
        (status = 400, description = "`invalid_id`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session (or someone else's) or no such approval/run/turn in it", body = ErrorBody),
        (status = 409, description = "`approval_closed`: already decided or expired", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/sessions/{id}/approvals/{approval_id}")]
pub async fn decide_approval(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<(Id<SessionId>, Id<ApprovalId>)>,
    body: web::Json<ApprovalBody>,
) -> Result<HttpResponse, ApiError> {
    let (Id(session), Id(approval)) = path.into_inner();
    Ok(HttpResponse::Ok().json(approve(&state, &who.0, session, approval, body.decision).await?))
}

/// Decides a pending approval and answers `{approval_id, call_id, status}` (also the
/// WebSocket's `approval.respond`).
pub async fn approve(
    state: &AppState,
    who: &Principal,
    session: SessionId,
    approval: ApprovalId,
    decision: ApprovalDecision,
) -> Result<ApprovalDecided, ApiError> {
    let decided = state
        .gateway
        .decide_approval(who, session, approval, decision)
        .await?;
    Ok(ApprovalDecided {
        approval_id: decided.id,
        call_id: decided.call_id,
        status: decided.status,
    })
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = ToolRunDecisionBody)]
pub struct ToolRunBody {
    #[schema(value_type = ToolRunDecisionName)]
    pub decision: ToolRunDecision,
}

/// A decided tool run.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolRunDecided {
    pub call_id: String,
    #[schema(value_type = ToolRunStatusName)]
    pub status: ToolRunStatus,
    #[schema(value_type = Option<ToolRunDecisionName>)]
    pub decision: Option<ToolRunDecision>,
}

/// `POST /v1/sessions/{id}/tool_runs/{call_id}` `{decision: retry|skip}`: 200, or 409
/// `not_unknown` when the run is not waiting for a decision.
#[utoipa::path(
    operation_id = "decide_tool_run",
    tag = "tools",
    params(
        ("id" = uuid::Uuid, Path, description = "The session's id"),
        ("call_id" = String, Path, description = "The tool call's id (`unknown_tool_runs` of the session)"),
    ),
    request_body = ToolRunBody,
    responses(
        (status = 200, description = "The run with its decision", body = ToolRunDecided),
        (status = 400, description = "`invalid_id`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session (or someone else's) or no such approval/run/turn in it", body = ErrorBody),
        (status = 409, description = "`not_unknown`: the run is not waiting for a decision", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/sessions/{id}/tool_runs/{call_id}")]
pub async fn decide_tool_run(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<(Id<SessionId>, String)>,
    body: web::Json<ToolRunBody>,
) -> Result<HttpResponse, ApiError> {
    let (Id(session), call_id) = path.into_inner();
    turnkey_actors::limits::request_id(&call_id).map_err(|_| {
        ApiError::bad_request("invalid_id", "the call id is not a valid tool call id")
    })?;
    let run = state
        .gateway
        .decide_tool_run(&who.0, session, &call_id, body.decision)
        .await?;
    Ok(HttpResponse::Ok().json(ToolRunDecided {
        call_id: run.call_id,
        status: run.status,
        decision: run.decision,
    }))
}

/// The answer of a checkpoint restore.
#[derive(Debug, Serialize, ToSchema)]
pub struct Restored {
    #[schema(value_type = uuid::Uuid)]
    pub turn_id: TurnId,
    /// The paths put back (or removed, for files the turn created).
    pub restored: Vec<String>,
}

/// `POST /v1/sessions/{id}/checkpoints/{turn_id}/restore`: puts back the files that turn
/// changed; 409 `session_busy` while a turn of the session runs.
#[utoipa::path(
    operation_id = "restore_checkpoint",
    tag = "tools",
    params(
        ("id" = uuid::Uuid, Path, description = "The session's id"),
        ("turn_id" = uuid::Uuid, Path, description = "The turn whose file changes to undo"),
    ),
    responses(
        (status = 200, description = "The files put back", body = Restored),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session (or someone else's) or no such approval/run/turn in it", body = ErrorBody),
        (status = 409, description = "`session_busy`: a turn of the session runs", body = ErrorBody),
        (status = 500, description = "`io_error`: a checkpoint could not be restored (the message says which file)", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/sessions/{id}/checkpoints/{turn_id}/restore")]
pub async fn restore(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<(Id<SessionId>, Id<TurnId>)>,
) -> Result<HttpResponse, ApiError> {
    let (Id(session), Id(turn)) = path.into_inner();
    let restored = state
        .gateway
        .restore_checkpoint(&who.0, session, turn)
        .await?;
    Ok(HttpResponse::Ok().json(Restored {
        turn_id: turn,
        restored,
    }))
}
