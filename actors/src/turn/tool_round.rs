//! The tool round (SPEC R9): validate, cap and de-duplicate the calls, persist the assistant
//! tool-call row with every call recorded `planned` BEFORE anything runs, then have the tool
//! executor give every call exactly one persisted result. The same code finishes a round a
//! crash interrupted (R13.1): calls still `planned` run once, a call found `started` without a
//! result becomes `unknown` and waits for a person. A call repeated `agent.repeat_guard` times
//! in one turn halts it (R9.6).
use super::context::TurnContext;
use super::{StopReason, TurnControl, TurnFailure};
use crate::deps::Record;
use crate::tool_exec::{self, Batch, ExecuteBatch, PendingCall, Settled, ToolExecActor};
use actix::Addr;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use turnkey_providers::{estimate_tokens, ChatResponse, ToolCall};
use turnkey_storage::*;

/// Most calls one assistant message may make; the rest are refused with a result each.
pub const MAX_CALLS_PER_ROUND: usize = 32;

/// Gives every call a unique, non-empty id (also against the ids this turn already used, which
/// some providers repeat), so each has exactly one result (SPEC R9.1).
pub fn normalize_calls(calls: &[ToolCall], used: &HashSet<String>) -> Vec<ToolCall> {
    let mut seen = used.clone();
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

/// What a tool round uses: the record it commits to, the executor that runs the calls, and
/// `agent.repeat_guard` (SPEC R9.6).
#[derive(Clone, Copy)]
pub struct Tools<'a> {
    pub record: Record<'a>,
    pub executor: &'a Addr<ToolExecActor>,
    pub repeat_guard: u32,
    /// Registered tools this session is not offered (a sub-agent's, SPEC R1.5).
    pub withheld: &'static [&'static str],
}

pub async fn run(
    tools: Tools<'_>,
    ctx: &mut TurnContext,
    control: &TurnControl,
    resp: &ChatResponse,
) -> Result<(), TurnFailure> {
    let calls = normalize_calls(&resp.tool_calls, &call_ids(&ctx.turn_rows));
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
    let runs: Vec<NewToolRun> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| NewToolRun {
            call_id: c.id.clone(),
            tool: c.name.clone(),
            args: c.arguments.clone(),
            idx: i64::try_from(i).unwrap_or(i64::MAX),
        })
        .collect();
    // Persist before execute: if this write fails, nothing runs from memory (SPEC R9.2).
    let row = tools
        .record
        .store
        .append_tool_calls(&ctx.fence, &ctx.turn_ref(), &assistant, &runs)
        .await
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
    ctx.turn_rows.push(row);
    crate::kill_point!("tool.after_planned");
    execute_pending(tools, ctx, control).await
}

/// Runs what the turn's last tool-call row still owes: every call without a result row.
pub async fn execute_pending(
    tools: Tools<'_>,
    ctx: &mut TurnContext,
    control: &TurnControl,
) -> Result<(), TurnFailure> {
    let Some(calls) = ctx.turn_rows.iter().rev().find_map(|m| {
        (m.role == MessageRole::Assistant)
            .then(|| tool_calls(m))
            .filter(|c| !c.is_empty())
    }) else {
        return Ok(());
    };
    let answered: HashSet<String> = ctx
        .turn_rows
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    let open: Vec<(usize, &ToolCall)> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| !answered.contains(&c.id))
        .collect();
    if open.is_empty() {
        return Ok(());
    }
    let runs: HashMap<String, ToolRun> = tools
        .record
        .store
        .tool_runs_of_turn(ctx.turn_id)
        .await
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?
        .into_iter()
        .map(|r| (r.call_id.clone(), r))
        .collect();

    if let Some((name, times)) = repeated_call(&ctx.turn_rows, tools.repeat_guard) {
        let text = format!(
            "not run: {name} was called {times} times with the same arguments in this turn; \
             the turn was halted"
        );
        for (_, call) in &open {
            let row = settle_unrun(tools.record, ctx, call, ToolOutcome::Skipped, &text).await?;
            ctx.turn_rows.push(row);
        }
        return Err(TurnFailure::GuardHalt { tool: name, times });
    }

    let mut pending = Vec::new();
    for (i, call) in open {
        if i >= MAX_CALLS_PER_ROUND {
            let text = format!("not run: more than {MAX_CALLS_PER_ROUND} calls in one message");
            let row = settle_unrun(tools.record, ctx, call, ToolOutcome::Skipped, &text).await?;
            ctx.turn_rows.push(row);
            continue;
        }
        let Some(run) = runs.get(&call.id) else {
            tracing::error!(turn = %ctx.turn_id, call = %call.id, "tool call has no tool_runs row");
            return Err(TurnFailure::PersistenceFailed(format!(
                "tool call {} has no durable record",
                call.id
            )));
        };
        let status = match run.status {
            // Found started without a result: it may have run. Never run it again blindly.
            ToolRunStatus::Started => mark_unknown(tools.record, ctx, call).await?,
            other => other,
        };
        pending.push(PendingCall {
            call_id: call.id.clone(),
            name: call.name.clone(),
            args: call.arguments.clone(),
            status,
            decision: run.decision,
        });
    }
    if pending.is_empty() {
        return Ok(());
    }
    let (batch, link) = batch(ctx, control, pending, tools.withheld);
    let results = tools.executor.send(ExecuteBatch(batch)).await;
    link.abort();
    let rows = results
        .map_err(|e| TurnFailure::PersistenceFailed(format!("tool executor unavailable: {e}")))?
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
    // A graceful shutdown parks the round: calls not started stay for the next process.
    let parked = rows.iter().any(Option::is_none);
    ctx.turn_rows.extend(rows.into_iter().flatten());
    if parked {
        return Err(TurnFailure::Parked);
    }
    Ok(())
}

/// The executor's batch for `pending`, with a task that passes the turn's stop on to it (abort
/// it once the batch is done).
fn batch(
    ctx: &TurnContext,
    control: &TurnControl,
    pending: Vec<PendingCall>,
    withheld: &'static [&'static str],
) -> (Batch, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let link = {
        let (control, stop) = (control.clone(), stop.clone());
        tokio::spawn(async move {
            control.stopped().await;
            stop.cancel();
        })
    };
    let activity = {
        let control = control.clone();
        Arc::new(move || control.touch())
    };
    let park = {
        let control = control.clone();
        Arc::new(move || control.stop_reason() == Some(StopReason::Shutdown))
    };
    // What `tool_progress: new` compares the round's first call with (SPEC R3.1).
    let previous_tool = ctx
        .turn_rows
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Tool)
        .and_then(|m| m.name.clone());
    let batch = Batch {
        turn: ctx.turn_ref(),
        principal: ctx.admission.principal.clone(),
        owner: ctx.session.owner.clone(),
        fence: ctx.fence.clone(),
        calls: pending,
        stop,
        activity,
        park,
        tool_progress: ctx.display.tool_progress,
        previous_tool,
        withheld,
    };
    (batch, link)
}

/// `started` → `unknown`, announced as `tool.completed` with status `unknown`.
async fn mark_unknown(
    record: Record<'_>,
    ctx: &TurnContext,
    call: &ToolCall,
) -> Result<ToolRunStatus, TurnFailure> {
    let event = NewEvent {
        session_id: ctx.session.id,
        kind: EventKind::ToolCompleted,
        turn_id: Some(ctx.turn_id),
        admission_id: Some(ctx.admission.id),
        data: json!({
            "call_id": call.id,
            "name": call.name,
            "status": "unknown",
            "preview": "the gateway stopped while this call ran; it may or may not have run. \
                        Decide: POST /v1/sessions/{id}/tool_runs/{call_id} with retry or skip",
            "duration_ms": 0,
        }),
    };
    let marked = record
        .store
        .mark_tool_run_unknown(&ctx.fence, ctx.turn_id, &call.id, &event)
        .await
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
    if let Some(ev) = marked {
        tracing::warn!(turn = %ctx.turn_id, call = %call.id, "tool run outcome unknown; waiting for a decision");
        record.hub.publish(ev);
    }
    Ok(ToolRunStatus::Unknown)
}

/// Settles a call that is not run at all (over the cap, or halted by the guard).
async fn settle_unrun(
    record: Record<'_>,
    ctx: &TurnContext,
    call: &ToolCall,
    outcome: ToolOutcome,
    text: &str,
) -> Result<Message, TurnFailure> {
    let settled = Settled {
        call_id: &call.id,
        name: &call.name,
        outcome,
        content: tool_exec::error_json(text),
        took: None,
    };
    tool_exec::settle(
        record.store,
        record.hub,
        &ctx.fence,
        &ctx.turn_ref(),
        settled,
    )
    .await
    .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))
}

fn tool_calls(m: &Message) -> Vec<ToolCall> {
    m.tool_calls
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// Ids of every call the turn's rows made.
fn call_ids(rows: &[Message]) -> HashSet<String> {
    rows.iter().flat_map(tool_calls).map(|c| c.id).collect()
}

/// The first call (name, canonical arguments) made `limit` times or more in `rows`, with its
/// count. Arguments are compared as parsed JSON, so key order and spacing do not hide a repeat.
pub fn repeated_call(rows: &[Message], limit: u32) -> Option<(String, u32)> {
    let mut counts: HashMap<(String, String), u32> = HashMap::new();
    for call in rows.iter().flat_map(tool_calls) {
        let args = serde_json::from_str::<Value>(&call.arguments)
            .map(|v| v.to_string())
            .unwrap_or(call.arguments);
        *counts.entry((call.name, args)).or_default() += 1;
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n >= limit)
        .max_by_key(|(_, n)| *n)
        .map(|((name, _), n)| (name, n))
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
        let out = normalize_calls(
            &[call("a"), call("a"), call(""), call("b")],
            &HashSet::new(),
        );
        let ids: HashSet<_> = out.iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids.len(), 4);
        assert_eq!(out[0].id, "a");
        assert_eq!(out[3].id, "b");
        assert!(out.iter().all(|c| !c.id.is_empty()));
    }

    #[test]
    fn r9_1_ids_already_used_in_the_turn_are_replaced() {
        let used = HashSet::from(["a".to_string()]);
        let out = normalize_calls(&[call("a"), call("b")], &used);
        assert_ne!(out[0].id, "a");
        assert_eq!(out[1].id, "b");
    }

    fn row(calls: Value) -> Message {
        Message {
            id: MessageId::new(),
            session_id: SessionId::new(),
            idx: 0,
            role: MessageRole::Assistant,
            content: None,
            api_content: None,
            tool_calls: Some(calls),
            tool_call_id: None,
            name: None,
            turn_id: None,
            admission_id: None,
            display: None,
            token_estimate: 0,
            created_at: 0,
            compressed_epoch: None,
            summary_epoch: None,
            summary_after_idx: None,
            attachments: None,
        }
    }

    #[test]
    fn r9_6_the_guard_sees_the_same_call_through_key_order() {
        let a = json!([{"id": "1", "name": "t", "arguments": "{\"a\":1,\"b\":2}"}]);
        let b = json!([{"id": "2", "name": "t", "arguments": "{ \"b\": 2, \"a\": 1 }"}]);
        let c = json!([{"id": "3", "name": "t", "arguments": "{\"a\":1,\"b\":2}"}]);
        let other = json!([{"id": "4", "name": "t", "arguments": "{\"a\":9}"}]);
        let rows = [row(a), row(b.clone()), row(other)];
        assert_eq!(repeated_call(&rows, 3), None);
        let rows = [rows[0].clone(), row(b), row(c)];
        assert_eq!(repeated_call(&rows, 3), Some(("t".into(), 3)));
    }
}
