//! The grace call (SPEC R7.3): when the iteration budget (`agent.iteration_budget`) is spent,
//! one last call without tools asks the model to summarize where the work stopped. Its text is
//! the turn's final response; the turn still ends as `budget_exhausted`. The instruction lives
//! only in the wire copy of that call, never in the transcript, nor, echoed, in the answer.
use super::context::TurnContext;
use super::preflight::{self, GateState};
use super::request::{self, CallOutcome, StreamedText};
use super::{StopReason, TurnControl, TurnFailure};
use crate::deps::Models;
use std::sync::Arc;
use turnkey_providers::{ChatMessage, ChatResponse, Provider};

const SUMMARIZE: &str = "You have used this turn's whole iteration budget, so no more tools can \
     be called now. Reply with text only: summarize where the work stopped: what was done, what \
     is left to do, and anything the user should know to continue.";

/// Makes the grace call and returns the summary (if the model wrote one) with the failure the
/// turn ends with: `BudgetExhausted`, or the stop that interrupted the call.
pub async fn summarize(
    models: Models<'_>,
    ctx: &mut TurnContext,
    control: &TurnControl,
    provider: &Arc<dyn Provider>,
    gate: &mut GateState,
    streamed: &StreamedText,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> (Option<String>, TurnFailure) {
    tracing::info!(turn = %ctx.turn_id, "iteration budget spent; one grace call without tools");
    control.touch();
    let mut wire = match preflight::pass(models, ctx, provider, gate).await {
        Ok(wire) => wire,
        Err(f) => {
            tracing::warn!(turn = %ctx.turn_id, failure = %f.code(), "no grace call: the request does not pass preflight");
            return (None, TurnFailure::BudgetExhausted);
        }
    };
    wire.push(ChatMessage::user(SUMMARIZE));
    let mut req = request::build_request(models, ctx, provider.as_ref(), wire, true);
    req.tools.clear();
    match request::call_with_retries(
        models,
        ctx,
        control,
        provider.as_ref(),
        req,
        Some(&super::echo::Follow::instruction(SUMMARIZE)),
        streamed,
    )
    .await
    {
        CallOutcome::Response(resp) => {
            record(&resp);
            if !resp.tool_calls.is_empty() {
                tracing::warn!(turn = %ctx.turn_id, "the grace call asked for tools; they are not run");
            }
            let text = resp
                .content
                .map(|t| super::echo::strip(&t, SUMMARIZE).to_owned())
                .filter(|t| !t.trim().is_empty());
            (text, TurnFailure::BudgetExhausted)
        }
        CallOutcome::Stopped => (
            None,
            TurnFailure::Stopped(
                control
                    .stop_reason()
                    .unwrap_or(StopReason::Interrupted("stopped".into())),
            ),
        ),
        CallOutcome::Failed(e) => {
            tracing::warn!(turn = %ctx.turn_id, error = %e, "the grace call failed");
            (None, TurnFailure::BudgetExhausted)
        }
    }
}
