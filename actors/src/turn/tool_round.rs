//! The tool round (SPEC R9): validate, cap and de-duplicate the calls, persist the assistant
//! tool-call row BEFORE anything runs, then give every call exactly one result row. This build
//! offers the model no tools yet, so every call names an unknown tool (R9.3): it gets a
//! matching error result and is never dispatched.
use super::context::TurnContext;
use super::TurnFailure;
use crate::delivery::Publish;
use crate::deps::Deps;
use serde_json::json;
use std::collections::HashSet;
use turnkey_providers::{estimate_tokens, ChatResponse, ToolCall};
use turnkey_storage::{EventKind, MessageId, MessageRole, NewEvent, NewMessage};

/// Most calls one assistant message may make; the rest are refused with a result each.
pub const MAX_CALLS_PER_ROUND: usize = 32;

/// Gives every call a unique, non-empty id, so each has exactly one result (SPEC R9.1).
pub fn normalize_calls(calls: &[ToolCall]) -> Vec<ToolCall> {
    let mut seen = HashSet::new();
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut c = c.clone();
            if c.id.trim().is_empty() || !seen.insert(c.id.clone()) {
                c.id = format!("call_{i}_{}", uuid::Uuid::new_v4().simple());
                seen.insert(c.id.clone());
            }
            c
        })
        .collect()
}

pub async fn run(
    deps: &Deps,
    ctx: &mut TurnContext,
    resp: &ChatResponse,
) -> Result<(), TurnFailure> {
    let calls = normalize_calls(&resp.tool_calls);
    let assistant = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        content: resp.content.clone(),
        tool_calls: Some(json!(calls)),
        turn_id: Some(ctx.turn_id),
        admission_id: Some(ctx.admission.id),
        token_estimate: est(resp.content.as_deref().unwrap_or_default()),
        ..Default::default()
    };
    // Persist before execute: if this write fails, nothing runs from memory (SPEC R9.2).
    let row = deps
        .store
        .append_message(&ctx.fence, &assistant)
        .await
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
    ctx.turn_rows.push(row);

    for (i, call) in calls.iter().enumerate() {
        let (status, text) = if i >= MAX_CALLS_PER_ROUND {
            (
                "skipped",
                format!("not run: more than {MAX_CALLS_PER_ROUND} calls in one message"),
            )
        } else {
            (
                "error",
                format!(
                    "unknown tool: {:?} is not available in this session",
                    call.name
                ),
            )
        };
        let result = NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::Tool),
            content: Some(json!({ "error": text }).to_string()),
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            turn_id: Some(ctx.turn_id),
            admission_id: Some(ctx.admission.id),
            token_estimate: est(&text),
            ..Default::default()
        };
        // The result is flushed before the UI sees the call complete (SPEC R9.5).
        let row = deps
            .store
            .append_message(&ctx.fence, &result)
            .await
            .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
        ctx.turn_rows.push(row);
        let event = NewEvent {
            session_id: ctx.session.id,
            kind: EventKind::ToolCompleted,
            turn_id: Some(ctx.turn_id),
            admission_id: Some(ctx.admission.id),
            data: json!({
                "call_id": call.id,
                "name": call.name,
                "status": status,
                "preview": text,
                "duration_ms": 0,
            }),
        };
        publish(deps, ctx, event).await?;
    }
    Ok(())
}

/// Commits a turn event under the fence; a fenced-out or failed commit ends the turn.
pub(crate) async fn publish(
    deps: &Deps,
    ctx: &TurnContext,
    event: NewEvent,
) -> Result<(), TurnFailure> {
    match deps
        .delivery
        .send(Publish {
            fence: Some(ctx.fence.clone()),
            event,
        })
        .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(TurnFailure::PersistenceFailed(e.to_string())),
        Err(e) => Err(TurnFailure::PersistenceFailed(e.to_string())),
    }
}

fn est(text: &str) -> i64 {
    i64::try_from(estimate_tokens(text)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "x".into(),
            arguments: "{}".into(),
        }
    }

    #[test]
    fn r9_1_ids_are_unique_and_non_empty() {
        let out = normalize_calls(&[call("a"), call("a"), call(""), call("b")]);
        let ids: HashSet<_> = out.iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids.len(), 4);
        assert_eq!(out[0].id, "a");
        assert_eq!(out[3].id, "b");
        assert!(out.iter().all(|c| !c.id.is_empty()));
    }
}
