//! The grace call (SPEC R7.3): when the iteration budget (`agent.iteration_budget`) is spent,
//! one last call without tools asks the model to summarize where the work stopped. Its text is
//! the turn's final response; the turn still ends as `budget_exhausted`. The instruction lives
//! only in the wire copy of that call, never in the transcript, nor, echoed, in the answer.
use super::context::TurnContext;
use super::preflight::{self, GateState};
use super::request::{self, CallOutcome, Calls};
use super::{StopReason, TurnFailure};
use std::sync::Arc;
use turnkey_providers::{ChatMessage, ChatResponse, Provider};

const SUMMARIZE: &str = "You have used this turn's whole iteration budget, so no more tools can \
     be called now. Reply with text only: summarize where the work stopped: what was done, what \
     is left to do, and anything the user should know to continue.";

/// Makes the grace call and returns the summary (if the model wrote one) with the failure the
/// turn ends with: `BudgetExhausted`, or the stop that interrupted the call.
pub async fn summarize(
    c: Calls<'_>,
    ctx: &mut TurnContext,
    provider: &Arc<dyn Provider>,
    gate: &mut GateState,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> (Option<String>, TurnFailure) {
    tracing::info!(turn = %ctx.turn_id, "iteration budget spent; one grace call without tools");
    c.control.touch();
    let mut req = match preflight::pass(c.models, ctx, provider, gate).await {
        Ok(req) => req,
        Err(f) => {
            tracing::warn!(turn = %ctx.turn_id, failure = %f.code(), "no grace call: the request does not pass preflight");
            return (None, TurnFailure::BudgetExhausted);
        }
    };
    // The instruction carries no tool call, so it goes on after the request was assembled.
    req.messages.push(ChatMessage::user(SUMMARIZE));
    req.tools.clear();
    let asked = super::echo::Follow::instruction(SUMMARIZE);
    let called = request::call(c, ctx, provider.as_ref(), req, Some(&asked), record).await;
    match called {
        CallOutcome::Response(resp) => {
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
                c.control
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
