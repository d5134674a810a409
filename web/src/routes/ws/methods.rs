//! The JSON-RPC methods of `GET /v1/ws` (API.md "WebSocket JSON-RPC"), each on the same
//! shared code as its HTTP counterpart: authorization, limits, admission and idempotency are
//! those of the HTTP routes.
use super::rpc::{params, RpcError};
use crate::routes::sessions::{create_view, CreateSession, SessionView};
use crate::routes::submissions::{admit, SubmitBody};
use crate::routes::{events, parse_id, tools};
use crate::state::AppState;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use turnkey_storage::{rfc3339, ApprovalDecision, ApprovalId, Principal, Seq, SessionId};

/// `session.create {title?, system_message?, model?}` → the session.
pub async fn session_create(
    state: &AppState,
    who: &Principal,
    p: Map<String, Value>,
) -> Result<Value, RpcError> {
    let body: CreateSession = params("session.create", p)?;
    let view = create_view(state, who, body).await?;
    Ok(json!(view))
}

/// `prompt.submit {session_id, text, request_id?, attachments?, display?, model?}` → receipt.
pub async fn prompt_submit(
    state: &AppState,
    who: &Principal,
    mut p: Map<String, Value>,
) -> Result<Value, RpcError> {
    let session = session_id(p.remove("session_id"))?;
    let body: SubmitBody = params("prompt.submit", p)?;
    let receipt = admit(state, who, session, None, body, "ws").await?;
    Ok(json!(receipt))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SinceParams {
    session_id: String,
    since: i64,
    limit: Option<u64>,
}

/// `session.events.since {session_id, since, limit?}` → `{events, next_since}`.
pub async fn events_since(
    state: &AppState,
    who: &Principal,
    p: Map<String, Value>,
) -> Result<Value, RpcError> {
    let p: SinceParams = params("session.events.since", p)?;
    let session = authorized(state, who, &p.session_id).await?;
    let since = non_negative(p.since)?;
    let (events, next_since) = events::page(state, session, since, p.limit).await?;
    Ok(json!({ "events": events, "next_since": next_since }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionParams {
    session_id: String,
}

/// `session.resume {session_id}` → `{session, pending_approvals, running_turn, last_event_seq}`:
/// what a client needs to pick a session up again (then `session.subscribe` with
/// `since = last_event_seq`, or its own last seen seq).
pub async fn session_resume(
    state: &AppState,
    who: &Principal,
    p: Map<String, Value>,
) -> Result<Value, RpcError> {
    let p: SessionParams = params("session.resume", p)?;
    let id: SessionId = parse_id(&p.session_id, "session")?;
    let session = state.gateway.authorize(who, id).await?;
    // A rotated lineage's turns and events are keyed on its root (SPEC R6.4).
    let lineage = session.lineage();
    let mut view = SessionView::load_with_questions(&state.gateway, session).await?;
    let pending = view.pending_approvals.take().unwrap_or_default();
    let last_event_seq = view.last_event_seq;
    let running = state
        .gateway
        .store()
        .started_admissions(Some(lineage))
        .await
        .map_err(crate::error::ApiError::from)?
        .into_iter()
        .next()
        .map(|a| {
            json!({
                "turn_id": a.turn_id,
                "admission_id": a.id,
                "started_at": a.started_at.map(rfc3339),
            })
        });
    Ok(json!({
        "session": view,
        "pending_approvals": pending,
        "running_turn": running,
        "last_event_seq": last_event_seq,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalParams {
    session_id: String,
    approval_id: String,
    decision: ApprovalDecision,
}

/// `approval.respond {session_id, approval_id, decision}` → `{approval_id, call_id, status}`.
pub async fn approval_respond(
    state: &AppState,
    who: &Principal,
    p: Map<String, Value>,
) -> Result<Value, RpcError> {
    let p: ApprovalParams = params("approval.respond", p)?;
    let session: SessionId = parse_id(&p.session_id, "session")?;
    let approval: ApprovalId = parse_id(&p.approval_id, "approval")?;
    let decided = tools::approve(state, who, session, approval, p.decision).await?;
    Ok(json!(decided))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InterruptParams {
    session_id: String,
    reason: Option<String>,
}

/// `turn.interrupt {session_id, reason?}` → `{interrupted}`.
pub async fn turn_interrupt(
    state: &AppState,
    who: &Principal,
    p: Map<String, Value>,
) -> Result<Value, RpcError> {
    let p: InterruptParams = params("turn.interrupt", p)?;
    let session: SessionId = parse_id(&p.session_id, "session")?;
    let reason = p.reason.filter(|r| !r.trim().is_empty());
    let interruption = state.gateway.interrupt(who, session, reason).await?;
    // The same answer as `POST /v1/sessions/{id}/interrupt`.
    Ok(json!(crate::routes::submissions::Interrupted::from(
        interruption
    )))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    pub session_id: String,
    pub since: Option<i64>,
}

/// Checks `session.subscribe`: the session must be the caller's. Answers the session and
/// where the subscription starts: `since`, or the session's last event (only new events).
pub async fn subscription_start(
    state: &AppState,
    who: &Principal,
    p: Map<String, Value>,
) -> Result<(SessionId, Seq), RpcError> {
    let p: SubscribeParams = params("session.subscribe", p)?;
    let id: SessionId = parse_id(&p.session_id, "session")?;
    // Any id of a rotated lineage follows the lineage's one log (SPEC R6.4).
    let session = state.gateway.authorize_lineage(who, id).await?;
    let since = match p.since {
        Some(n) => non_negative(n)?,
        None => session.last_event_seq,
    };
    Ok((session.id, since))
}

/// `session.unsubscribe {session_id}`: the session's id (authorization is not needed to stop).
pub fn unsubscribe_target(p: Map<String, Value>) -> Result<SessionId, RpcError> {
    let p: SessionParams = params("session.unsubscribe", p)?;
    Ok(parse_id(&p.session_id, "session")?)
}

fn session_id(v: Option<Value>) -> Result<SessionId, RpcError> {
    match v {
        Some(Value::String(s)) => Ok(parse_id(&s, "session")?),
        Some(_) => Err(RpcError::invalid_params("session_id must be a string")),
        None => Err(RpcError::invalid_params("session_id is required")),
    }
}

async fn authorized(state: &AppState, who: &Principal, raw: &str) -> Result<SessionId, RpcError> {
    let id: SessionId = parse_id(raw, "session")?;
    Ok(state.gateway.authorize(who, id).await?.lineage())
}

fn non_negative(since: i64) -> Result<Seq, RpcError> {
    if since < 0 {
        return Err(crate::error::ApiError::bad_request(
            "invalid_query",
            "since must be 0 or more",
        )
        .into());
    }
    Ok(Seq(since))
}
