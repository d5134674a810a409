//! Normalize and recover a model response before the loop sees it (SPEC R7.2, R8.5): a text
//! answer cut off by the output limit (`finish_reason = length`) is continued, at most
//! `MAX_CONTINUATIONS` times, and the parts are concatenated; an empty answer, or one identical
//! to the previous assistant answer, gets exactly one recovery call. What recovery cannot fix
//! stops the turn with a stable code (`truncated_output`, `empty_response`, `repeated_output`).
//!
//! Every extra instruction lives only in the wire copy of that call: the transcript never sees
//! it. Continuations and recovery calls go through the same retrying call, so streamed text
//! keeps flowing to clients as `message.delta`.
use super::context::TurnContext;
use super::request::{self, CallOutcome, StreamedText};
use super::{TurnControl, TurnFailure};
use crate::deps::Deps;
use turnkey_providers::{ChatMessage, ChatRequest, ChatResponse, FinishReason, Provider};
use turnkey_storage::MessageRole;

/// Continuation calls after a response cut off by the output limit.
pub const MAX_CONTINUATIONS: u32 = 2;

const CONTINUE: &str = "Your previous response was cut off by the output limit. Continue \
     exactly where it stopped, without repeating anything already written.";
const EMPTY_NUDGE: &str = "Your previous response was empty. Answer the last message now: \
     reply with text or call a tool.";
const REPEAT_NUDGE: &str = "That response repeats your previous answer word for word. Do not \
     repeat it; take the conversation forward: answer what is asked now, or call a tool.";

/// Calls `provider` with retries, then normalizes the response: `Ok` carries the call's
/// outcome (a normalized response, a stop, or the provider error for the loop to handle);
/// `Err` is an answer recovery could not fix. `record` sees every response received, for the
/// usage ledger (one row per call).
pub async fn call(
    deps: &Deps,
    ctx: &TurnContext,
    control: &TurnControl,
    provider: &dyn Provider,
    req: ChatRequest,
    streamed: &StreamedText,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> Result<CallOutcome, TurnFailure> {
    let previous = previous_answer(ctx);
    let base = req.messages.clone();
    let mut resp = match send(deps, ctx, control, provider, req.clone(), streamed, record).await {
        CallOutcome::Response(r) => r,
        other => return Ok(other),
    };
    // Text of earlier, truncated parts of this answer.
    let mut before = String::new();
    let mut continuations = 0;
    let mut recovered = false;
    loop {
        let text = resp.content.take().unwrap_or_default();
        let full = format!("{before}{text}");
        if !resp.tool_calls.is_empty() {
            resp.content = (!full.is_empty()).then_some(full);
            return Ok(CallOutcome::Response(resp));
        }
        let extra = if resp.finish_reason == FinishReason::Length && !text.trim().is_empty() {
            if continuations >= MAX_CONTINUATIONS {
                tracing::warn!(turn = %ctx.turn_id, continuations, "output still truncated after continuing");
                return Err(TurnFailure::TruncatedOutput);
            }
            continuations += 1;
            tracing::info!(turn = %ctx.turn_id, continuations, "response cut off by the output limit; continuing");
            before = full.clone();
            vec![ChatMessage::assistant(full), ChatMessage::user(CONTINUE)]
        } else if full.trim().is_empty() {
            if !streamed.is_empty() {
                // Text was streamed but the response came back empty: finalize recovers the
                // answer from the stream (SPEC R10.2).
                resp.content = None;
                return Ok(CallOutcome::Response(resp));
            }
            if recovered {
                return Err(TurnFailure::EmptyResponse);
            }
            recovered = true;
            tracing::warn!(turn = %ctx.turn_id, "empty response; one recovery call");
            before.clear();
            vec![ChatMessage::user(EMPTY_NUDGE)]
        } else if previous.as_deref().is_some_and(|p| p.trim() == full.trim()) {
            if recovered {
                return Err(TurnFailure::RepeatedOutput);
            }
            recovered = true;
            tracing::warn!(turn = %ctx.turn_id, "response repeats the previous answer; one recovery call");
            before.clear();
            vec![
                ChatMessage::assistant(full),
                ChatMessage::user(REPEAT_NUDGE),
            ]
        } else {
            resp.content = Some(full);
            return Ok(CallOutcome::Response(resp));
        };
        let mut next = req.clone();
        next.messages = base.iter().cloned().chain(extra).collect();
        resp = match send(deps, ctx, control, provider, next, streamed, record).await {
            CallOutcome::Response(r) => r,
            other => return Ok(other),
        };
    }
}

async fn send(
    deps: &Deps,
    ctx: &TurnContext,
    control: &TurnControl,
    provider: &dyn Provider,
    req: ChatRequest,
    streamed: &StreamedText,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> CallOutcome {
    let outcome = request::call_with_retries(deps, ctx, control, provider, req, streamed).await;
    if let CallOutcome::Response(r) = &outcome {
        record(r);
    }
    outcome
}

/// The previous assistant text of this turn, which a new answer must not repeat word for word:
/// a model that says again what it said before its last tool round is looping. Answers of
/// earlier turns do not count: the same short answer ("Done.") to two different requests is
/// normal, and failing a turn for it would lose a good answer.
fn previous_answer(ctx: &TurnContext) -> Option<String> {
    ctx.turn_rows
        .iter()
        .rev()
        .filter(|m| m.role == MessageRole::Assistant && m.compressed_epoch.is_none())
        .find_map(|m| {
            m.content
                .as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        })
}
