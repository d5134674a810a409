//! What a call commits: `started` before its side effect, and the result row with `finished`
//! and `tool.completed` in one commit after it (SPEC R9.5); large results spilled to a file.
use super::{error_json, Halt, NotPersisted, PendingCall, Round, PREVIEW_CHARS};
use crate::delivery::EventHub;
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_storage::*;

pub(super) fn spill(round: &Round, call: &PendingCall, content: String) -> String {
    let dir = round
        .inner
        .data_dir
        .join("spill")
        .join(round.batch.turn.turn_id.to_string());
    // The spill module makes the call id a safe file name.
    match turnkey_tools::spill::spill_if_large(
        &content,
        round.inner.config.spill_bytes,
        &dir,
        &call.call_id,
    ) {
        Ok(text) => text,
        Err(e) => {
            tracing::warn!(call = %call.call_id, error = %e, "cannot spill a large result; keeping it whole");
            content
        }
    }
}

fn turn_event(round: &Round, kind: EventKind, data: Value) -> NewEvent {
    NewEvent {
        session_id: round.batch.turn.session_id,
        kind,
        turn_id: Some(round.batch.turn.turn_id),
        admission_id: Some(round.batch.turn.admission_id),
        data,
    }
}

/// `→ started`, before the side effect; with `tool.started` when the turn shows it.
pub(super) async fn start(
    round: &Round,
    call: &PendingCall,
    args: &Value,
    shown: bool,
) -> Result<(), NotPersisted> {
    let event = shown.then(|| {
        turn_event(
            round,
            EventKind::ToolStarted,
            json!({"call_id": call.call_id, "name": call.name, "args": args}),
        )
    });
    let ev = round
        .inner
        .store
        .start_tool_run(
            &round.batch.fence,
            round.batch.turn.turn_id,
            &call.call_id,
            event.as_ref(),
        )
        .await
        .map_err(|e| NotPersisted(e.to_string()))?;
    if let Some(ev) = ev {
        round.inner.hub.publish(ev);
    }
    Ok(())
}

/// Settles a call the stop caught before it started as `skipped`, unless the turn is parked:
/// then it is left as it is (`planned`, or `unknown` awaiting a decision) for the next process.
pub(super) async fn skipped(
    round: &Round,
    call: &PendingCall,
) -> Result<Option<Message>, NotPersisted> {
    let stopped = matches!(round.halt.lock().ok().and_then(|h| *h), Some(Halt::Stopped));
    if stopped && (round.batch.park)() {
        return Ok(None);
    }
    let text = round.skip_reason();
    finish(round, call, ToolOutcome::Skipped, error_json(&text), None)
        .await
        .map(Some)
}

pub(super) async fn finish(
    round: &Round,
    call: &PendingCall,
    outcome: ToolOutcome,
    content: String,
    took: Option<Duration>,
) -> Result<Message, NotPersisted> {
    let settled = Settled {
        call_id: &call.call_id,
        name: &call.name,
        outcome,
        content,
        took,
    };
    settle(
        &round.inner.store,
        &round.inner.hub,
        &round.batch.fence,
        &round.batch.turn,
        settled,
    )
    .await
}

/// How one call ended, for [`settle`].
pub struct Settled<'a> {
    pub call_id: &'a str,
    pub name: &'a str,
    pub outcome: ToolOutcome,
    /// The result text the model gets.
    pub content: String,
    pub took: Option<Duration>,
}

/// The result row, `finished` and `tool.completed`, in one commit; then, and only then, the
/// result is shown and handed back for the model (SPEC R9.5).
pub async fn settle(
    store: &Store,
    hub: &EventHub,
    fence: &Fence,
    turn: &TurnRef,
    s: Settled<'_>,
) -> Result<Message, NotPersisted> {
    let result = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Tool),
        token_estimate: i64::try_from(s.content.len().div_ceil(4)).unwrap_or(i64::MAX),
        content: Some(s.content.clone()),
        tool_call_id: Some(s.call_id.to_owned()),
        name: Some(s.name.to_owned()),
        turn_id: Some(turn.turn_id),
        admission_id: Some(turn.admission_id),
        ..Default::default()
    };
    let preview: String = s.content.chars().take(PREVIEW_CHARS).collect();
    let event = NewEvent {
        session_id: turn.session_id,
        kind: EventKind::ToolCompleted,
        turn_id: Some(turn.turn_id),
        admission_id: Some(turn.admission_id),
        data: json!({
            "call_id": s.call_id,
            "name": s.name,
            "status": s.outcome.as_str(),
            "preview": preview,
            "duration_ms": s.took.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }),
    };
    let (row, ev) = store
        .finish_tool_run(fence, turn.turn_id, s.call_id, s.outcome, &result, &event)
        .await
        .map_err(|e| NotPersisted(e.to_string()))?;
    hub.publish(ev);
    Ok(row)
}
