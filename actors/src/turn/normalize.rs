//! Normalize and recover a model response before the loop sees it (SPEC R7.2, R8.5, R10.2): a
//! text answer cut off by the output limit (`finish_reason = length`) is continued, at most
//! `MAX_CONTINUATIONS` times, and the parts are concatenated; an empty answer, or one identical
//! to the previous assistant answer, gets exactly one recovery call. When the continuations are
//! spent, or the answer repeats again after its recovery call, the text produced so far is the
//! answer: the turn completes with `stop_reason` `truncated` or `repeated`. Only an answer that
//! stays empty stops the turn (`empty_response`).
//!
//! Every extra instruction lives only in the wire copy of that call: the transcript never sees
//! it, and a model that echoes it back at the start of its reply has that echo dropped (from
//! the stream and from the answer). Continuations and recovery calls go through the same
//! retrying call, so streamed text keeps flowing to clients as `message.delta`.
use super::context::TurnContext;
use super::request::{self, CallOutcome, StreamedText};
use super::{echo, AnswerStop, TurnControl, TurnFailure};
use crate::deps::Models;
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

/// A call's outcome after normalizing, with how a final text answer ended.
pub struct Normalized {
    pub outcome: CallOutcome,
    /// `Stop` unless the answer is a response still cut off or repeated (meaningful only for
    /// a final text answer).
    pub stop: AnswerStop,
}

impl Normalized {
    fn answer(mut resp: ChatResponse, text: String, stop: AnswerStop) -> Self {
        resp.content = Some(text);
        Self {
            outcome: CallOutcome::Response(resp),
            stop,
        }
    }

    fn other(outcome: CallOutcome) -> Self {
        Self {
            outcome,
            stop: AnswerStop::Stop,
        }
    }
}

/// Calls `provider` with retries, then normalizes the response: `Ok` carries the call's
/// outcome (a normalized response, a stop, or the provider error for the loop to handle);
/// `Err` is an answer recovery could not fix. `record` sees every response received, for the
/// usage ledger (one row per call).
pub async fn call(
    models: Models<'_>,
    ctx: &TurnContext,
    control: &TurnControl,
    provider: &dyn Provider,
    req: ChatRequest,
    streamed: &StreamedText,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> Result<Normalized, TurnFailure> {
    let previous = previous_answer(ctx);
    let base = req.messages.clone();
    let first = send(
        models,
        ctx,
        control,
        provider,
        req.clone(),
        None,
        streamed,
        record,
    )
    .await;
    let mut resp = match first {
        CallOutcome::Response(r) => r,
        other => return Ok(Normalized::other(other)),
    };
    // Text of earlier, truncated parts of this answer.
    let mut before = String::new();
    let mut continuations = 0;
    let mut recovered = false;
    // The instruction the last call added, which its reply must not echo.
    let mut asked: Option<&'static str> = None;
    loop {
        let raw = resp.content.take().unwrap_or_default();
        let text = asked.map_or(raw.as_str(), |a| echo::strip(&raw, a));
        let full = format!("{before}{text}");
        if !resp.tool_calls.is_empty() {
            resp.content = (!full.is_empty()).then_some(full);
            return Ok(Normalized::other(CallOutcome::Response(resp)));
        }
        let cut = resp.finish_reason == FinishReason::Length;
        let (extra, instruction) = if cut && !text.trim().is_empty() {
            if continuations >= MAX_CONTINUATIONS {
                // Still cut off: what the model wrote is the answer, marked as cut (R10.2).
                tracing::warn!(turn = %ctx.turn_id, continuations, "output still truncated after continuing; the text so far is the answer");
                return Ok(Normalized::answer(resp, full, AnswerStop::Truncated));
            }
            continuations += 1;
            tracing::info!(turn = %ctx.turn_id, continuations, "response cut off by the output limit; continuing");
            before = full.clone();
            (vec![ChatMessage::assistant(full)], CONTINUE)
        } else if full.trim().is_empty() {
            if !streamed.is_empty() {
                // Text was streamed but the response came back empty: finalize recovers the
                // answer from the stream (SPEC R10.2).
                resp.content = None;
                return Ok(Normalized {
                    outcome: CallOutcome::Response(resp),
                    stop: stop_of(cut),
                });
            }
            if recovered {
                return Err(TurnFailure::EmptyResponse);
            }
            recovered = true;
            tracing::warn!(turn = %ctx.turn_id, "empty response; one recovery call");
            before.clear();
            (Vec::new(), EMPTY_NUDGE)
        } else if previous.as_deref().is_some_and(|p| p.trim() == full.trim()) {
            if recovered {
                // The guard stops the loop, not the turn: the repeated text is the answer.
                tracing::warn!(turn = %ctx.turn_id, "response repeats the previous answer again; it is the answer");
                return Ok(Normalized::answer(resp, full, AnswerStop::Repeated));
            }
            recovered = true;
            tracing::warn!(turn = %ctx.turn_id, "response repeats the previous answer; one recovery call");
            before.clear();
            (vec![ChatMessage::assistant(full)], REPEAT_NUDGE)
        } else {
            // A continuation that added nothing more but was cut again is still cut off.
            return Ok(Normalized::answer(resp, full, stop_of(cut)));
        };
        let next = follow_up(&req, &base, extra, instruction);
        asked = Some(instruction);
        let called = send(
            models, ctx, control, provider, next, asked, streamed, record,
        )
        .await;
        resp = match called {
            CallOutcome::Response(r) => r,
            other => return Ok(Normalized::other(other)),
        };
    }
}

fn stop_of(cut: bool) -> AnswerStop {
    if cut {
        AnswerStop::Truncated
    } else {
        AnswerStop::Stop
    }
}

/// `req` again, its messages `base`, then `extra` and turnkey's `instruction`.
fn follow_up(
    req: &ChatRequest,
    base: &[ChatMessage],
    extra: Vec<ChatMessage>,
    instruction: &str,
) -> ChatRequest {
    let mut next = req.clone();
    next.messages = base
        .iter()
        .cloned()
        .chain(extra)
        .chain([ChatMessage::user(instruction)])
        .collect();
    next
}

/// One call with retries; `asked` is the instruction this call adds, whose echo the stream
/// drops.
#[allow(clippy::too_many_arguments)]
async fn send(
    models: Models<'_>,
    ctx: &TurnContext,
    control: &TurnControl,
    provider: &dyn Provider,
    req: ChatRequest,
    asked: Option<&'static str>,
    streamed: &StreamedText,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> CallOutcome {
    let outcome =
        request::call_with_retries(models, ctx, control, provider, req, asked, streamed).await;
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
