//! A person's answers to a running turn's questions and the undo of a turn's file changes:
//! approvals (SPEC R9.7, R13.2), decisions on tool runs a crash left `unknown` (R13.1), and
//! checkpoint restore (R9.6).
use super::parse_id;
use crate::auth::AuthPrincipal;
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};
use turnkey_storage::{
    ApprovalDecision, ApprovalId, Principal, SessionId, ToolRunDecision, TurnId,
};

#[derive(Debug, Deserialize)]
pub struct ApprovalBody {
    pub decision: ApprovalDecision,
}

/// `POST /v1/sessions/{id}/approvals/{approval_id}` `{decision: approve|deny}`: 200, or 409
/// `approval_closed` when it was already decided or has expired.
pub async fn decide_approval(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<(String, String)>,
    body: web::Json<ApprovalBody>,
) -> Result<HttpResponse, ApiError> {
    let (session, approval) = path.into_inner();
    let session: SessionId = parse_id(&session, "session")?;
    let approval: ApprovalId = parse_id(&approval, "approval")?;
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
) -> Result<Value, ApiError> {
    let decided = state
        .gateway
        .decide_approval(who, session, approval, decision)
        .await?;
    Ok(json!({
        "approval_id": decided.id,
        "call_id": decided.call_id,
        "status": decided.status,
    }))
}

#[derive(Debug, Deserialize)]
pub struct ToolRunBody {
    pub decision: ToolRunDecision,
}

/// `POST /v1/sessions/{id}/tool_runs/{call_id}` `{decision: retry|skip}`: 200, or 409
/// `not_unknown` when the run is not waiting for a decision.
pub async fn decide_tool_run(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<(String, String)>,
    body: web::Json<ToolRunBody>,
) -> Result<HttpResponse, ApiError> {
    let (session, call_id) = path.into_inner();
    let session: SessionId = parse_id(&session, "session")?;
    turnkey_actors::limits::request_id(&call_id).map_err(|_| {
        ApiError::bad_request("invalid_id", "the call id is not a valid tool call id")
    })?;
    let run = state
        .gateway
        .decide_tool_run(&who.0, session, &call_id, body.decision)
        .await?;
    Ok(HttpResponse::Ok().json(json!({
        "call_id": run.call_id,
        "status": run.status,
        "decision": run.decision,
    })))
}

/// `POST /v1/sessions/{id}/checkpoints/{turn_id}/restore`: puts back the files that turn
/// changed; 409 `session_busy` while a turn of the session runs.
pub async fn restore(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (session, turn) = path.into_inner();
    let session: SessionId = parse_id(&session, "session")?;
    let turn: TurnId = parse_id(&turn, "turn")?;
    let restored = state
        .gateway
        .restore_checkpoint(&who.0, session, turn)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "turn_id": turn, "restored": restored })))
}
