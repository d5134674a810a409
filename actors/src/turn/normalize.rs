//! Normalize and recover a model response before the loop sees it (SPEC R7.2, R8.5, R10.2): a
//! text answer cut off by the output limit (`finish_reason = length`) is continued, at most
//! `MAX_CONTINUATIONS` times, and the parts are joined at word boundaries; an empty answer, or
//! one identical to the previous assistant answer, gets exactly one recovery call. When the
//! continuations are spent, or the answer repeats again after its recovery call, the text
//! produced so far is the answer: the turn completes with `stop_reason` `truncated` or
//! `repeated`. Only an answer that stays empty stops the turn (`empty_response`).
//!
//! A provider that takes a prefill (`Provider::prefills`) continues the partial answer sent
//! as the last, assistant message: no instruction the model could say back. Elsewhere (or when
//! the provider refuses the prefill) an instruction asks for the rest. Every extra message
//! lives only in the wire copy of that call: the transcript never sees it, and what a reply
//! opens with by repeating it is dropped (from the stream and from the answer, `echo`).
//! Continuations and recovery calls go through the same retrying call (`request::call`), so
//! streamed text keeps flowing to clients as `message.delta`.
use super::context::TurnContext;
use super::echo::Follow;
use super::request::{self, CallOutcome, Calls};
use super::{AnswerStop, TurnFailure};
use turnkey_providers::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, Provider, ProviderError,
};
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
    c: Calls<'_>,
    ctx: &TurnContext,
    provider: &dyn Provider,
    req: ChatRequest,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> Result<Normalized, TurnFailure> {
    let previous = previous_answer(ctx);
    let base = req.messages.clone();
    let first = request::call(c, ctx, provider, req.clone(), None, record).await;
    let mut resp = match first {
        CallOutcome::Response(r) => r,
        other => return Ok(Normalized::other(other)),
    };
    // Text of earlier, truncated parts of this answer.
    let mut before = String::new();
    let mut continuations = 0;
    let mut recovered = false;
    let mut prefill = provider.prefills();
    // What the last call added, whose echo its reply must not show.
    let mut asked: Option<Follow> = None;
    loop {
        let raw = resp.content.take().unwrap_or_default();
        let text = asked.as_ref().map_or(raw.as_str().into(), |f| f.take(&raw));
        let full = format!("{before}{text}");
        if !resp.tool_calls.is_empty() {
            // A call through the `tools` index is the named tool's call (`toolbox::index`).
            resp.tool_calls = std::mem::take(&mut resp.tool_calls)
                .into_iter()
                .map(|call| c.models.tool_offer.resolve(call))
                .collect();
            resp.content = (!full.is_empty()).then_some(full);
            return Ok(Normalized::other(CallOutcome::Response(resp)));
        }
        let cut = resp.finish_reason == FinishReason::Length;
        let next = if cut && !text.trim().is_empty() {
            // An input's own output limit is the client's to keep: its cut is the answer.
            if continuations >= MAX_CONTINUATIONS || ctx.max_output_tokens().is_some() {
                // Still cut off: what the model wrote is the answer, marked as cut (R10.2).
                tracing::warn!(turn = %ctx.turn_id, continuations, "output still truncated after continuing; the text so far is the answer");
                return Ok(Normalized::answer(resp, full, AnswerStop::Truncated));
            }
            continuations += 1;
            tracing::info!(turn = %ctx.turn_id, continuations, prefill, "response cut off by the output limit; continuing");
            before = full;
            FollowUp::Continue
        } else if full.trim().is_empty() {
            if !c.streamed.is_empty() {
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
            FollowUp::Nudge(Vec::new(), EMPTY_NUDGE)
        } else if previous.as_deref().is_some_and(|p| p.trim() == full.trim()) {
            if recovered {
                // The guard stops the loop, not the turn: the repeated text is the answer.
                tracing::warn!(turn = %ctx.turn_id, "response repeats the previous answer again; it is the answer");
                return Ok(Normalized::answer(resp, full, AnswerStop::Repeated));
            }
            recovered = true;
            tracing::warn!(turn = %ctx.turn_id, "response repeats the previous answer; one recovery call");
            before.clear();
            FollowUp::Nudge(vec![ChatMessage::assistant(full)], REPEAT_NUDGE)
        } else {
            // A continuation that added nothing more but was cut again is still cut off.
            return Ok(Normalized::answer(resp, full, stop_of(cut)));
        };
        loop {
            let (next_req, follow) = next.request(&req, &base, &before, prefill);
            let called = request::call(c, ctx, provider, next_req, Some(&follow), record).await;
            asked = Some(follow);
            match called {
                CallOutcome::Response(r) => {
                    resp = r;
                    break;
                }
                // A server that refuses a prefill (Claude 4.6 and later, a prefill set where
                // the wire has none) is asked for the rest in words instead, this once.
                CallOutcome::Failed(ProviderError::Client { status, message })
                    if prefill && matches!(next, FollowUp::Continue) =>
                {
                    tracing::warn!(turn = %ctx.turn_id, status, %message, "the provider refused a prefill; continuing with an instruction");
                    prefill = false;
                }
                other => return Ok(Normalized::other(other)),
            }
        }
    }
}

/// The call after a response that needs one: a continuation of a cut-off answer, or a
/// recovery call with `extra` messages and turnkey's instruction.
enum FollowUp {
    Continue,
    Nudge(Vec<ChatMessage>, &'static str),
}

impl FollowUp {
    /// `req` again, its messages `base` and then what this follow-up adds; and what its reply
    /// may echo. A continuation of `before` is a prefill when `prefill`, else the answer so
    /// far and an instruction.
    fn request(
        &self,
        req: &ChatRequest,
        base: &[ChatMessage],
        before: &str,
        prefill: bool,
    ) -> (ChatRequest, Follow) {
        let mut next = req.clone();
        let mut messages = base.to_vec();
        let follow = match self {
            Self::Continue if prefill => {
                messages.push(ChatMessage::assistant(before));
                next.prefill = true;
                Follow::prefilled(before)
            }
            Self::Continue => {
                messages.push(ChatMessage::assistant(before));
                messages.push(ChatMessage::user(CONTINUE));
                Follow::continuing(CONTINUE, before)
            }
            Self::Nudge(extra, instruction) => {
                messages.extend(extra.iter().cloned());
                messages.push(ChatMessage::user(*instruction));
                Follow::instruction(instruction)
            }
        };
        next.messages = messages;
        (next, follow)
    }
}

fn stop_of(cut: bool) -> AnswerStop {
    if cut {
        AnswerStop::Truncated
    } else {
        AnswerStop::Stop
    }
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
