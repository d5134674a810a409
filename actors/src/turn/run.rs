//! The loop (SPEC R7): begin (count, budget, interrupt) → assemble the wire request →
//! preflight gate → call with retries → normalize → tool round or final text, until a stop
//! condition; then finalize. Each phase answers continue or break.
use super::context::{self, TurnContext};
use super::finalize::{self, Closing};
use super::preflight::{self, Gate};
use super::request::{self, CallOutcome, StreamedText};
use super::{tool_round, StopReason, TurnControl, TurnFailure};
use crate::deps::Deps;
use std::time::Duration;
use turnkey_providers::{cost_usd, ChatResponse, Provider, ProviderError, Usage};
use turnkey_storage::{Admission, Fence, MessageRole, NewUsage, TurnId};

struct Loop {
    final_text: Option<String>,
    failure: Option<TurnFailure>,
    usage: Usage,
    usage_rows: Vec<NewUsage>,
}

/// How a turn begins: fresh from a claimed admission, or resumed from the rows a crashed
/// owner left in its tool round (SPEC R13.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    Fresh,
    Resume,
}

pub async fn run_turn(
    deps: &Deps,
    control: &TurnControl,
    fence: &Fence,
    admission: &Admission,
    turn_id: TurnId,
    start: Start,
) {
    let timeout = Duration::from_secs(deps.config.agent.turn_timeout_s);
    let timer = {
        let control = control.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            control.interrupt(StopReason::TimedOut);
        })
    };
    let watchdog = spawn_watchdog(deps, control);
    let streamed = StreamedText::default();
    let mut closing = Closing {
        fence: fence.clone(),
        session_id: admission.session_id,
        admission_id: admission.id,
        turn_id,
        final_text: None,
        streamed: String::new(),
        failure: None,
        usage: Usage::default(),
        usage_rows: Vec::new(),
    };
    let prepared = match start {
        Start::Fresh => context::prepare(deps, fence, admission, turn_id).await,
        Start::Resume => context::resume(deps, fence, admission, turn_id).await,
    };
    match prepared {
        Ok(mut ctx) => {
            let out = iterate(deps, control, &mut ctx, &streamed).await;
            closing.final_text = out.final_text;
            closing.failure = out.failure;
            closing.usage = out.usage;
            closing.usage_rows = out.usage_rows;
        }
        Err(f) => closing.failure = Some(f),
    }
    timer.abort();
    if let Some(w) = watchdog {
        w.abort();
    }
    closing.streamed = streamed.take();
    finalize::finalize(deps, closing).await;
}

async fn iterate(
    deps: &Deps,
    control: &TurnControl,
    ctx: &mut TurnContext,
    streamed: &StreamedText,
) -> Loop {
    let mut out = Loop {
        final_text: None,
        failure: None,
        usage: Usage::default(),
        usage_rows: Vec::new(),
    };
    let Some(provider) = deps.providers.first().cloned() else {
        out.failure = Some(TurnFailure::NoProvider);
        return out;
    };
    let cfg = &deps.config;
    // A resumed turn has spent one model call per assistant row it already wrote.
    let spent = ctx
        .turn_rows
        .iter()
        .filter(|m| m.role == MessageRole::Assistant)
        .count();
    let mut iterations = u32::try_from(spent).unwrap_or(u32::MAX);
    let mut budget = cfg.agent.iteration_budget.saturating_sub(iterations);
    // Finish the round a crash interrupted before the model is called again.
    if let Err(f) = tool_round::execute_pending(deps, ctx, control).await {
        out.failure = Some(f);
        return out;
    }
    let mut overflow_proven = false;
    loop {
        // begin_iteration
        if let Some(r) = control.stop_reason() {
            out.failure = Some(TurnFailure::Stopped(r));
            return out;
        }
        if iterations >= cfg.agent.max_iterations || budget == 0 {
            out.failure = Some(TurnFailure::MaxIterations);
            return out;
        }
        iterations += 1;
        budget -= 1;
        control.touch();

        // assemble_api_request + run_preflight_gate
        let wire = request::wire_messages(ctx);
        match preflight::gate(
            &cfg.compression,
            &wire,
            provider.context_window(),
            overflow_proven,
        ) {
            Gate::FailClosed {
                pressure_tokens,
                window,
            } => {
                out.failure = Some(TurnFailure::ContextOverflow(format!(
                    "request of ~{pressure_tokens} tokens does not fit the {window}-token window"
                )));
                return out;
            }
            Gate::ShouldCompress { pressure_tokens } => {
                tracing::info!(turn = %ctx.turn_id, pressure_tokens, "over the compression threshold");
            }
            Gate::Proceed { .. } => {}
        }
        let req = request::build_request(deps, ctx, provider.as_ref(), wire, true);

        // call with retries, then normalize the response
        let resp =
            match request::call_with_retries(deps, ctx, control, provider.as_ref(), req, streamed)
                .await
            {
                CallOutcome::Stopped => {
                    out.failure = Some(TurnFailure::Stopped(
                        control
                            .stop_reason()
                            .unwrap_or(StopReason::Interrupted("stopped".into())),
                    ));
                    return out;
                }
                CallOutcome::Failed(ProviderError::Overflow { message }) => {
                    // Back to preflight: the gate now fails closed instead of re-sending (SPEC R6.5).
                    tracing::warn!(turn = %ctx.turn_id, %message, "provider proved an overflow");
                    overflow_proven = true;
                    budget += 1;
                    continue;
                }
                CallOutcome::Failed(e) => {
                    out.failure = Some(TurnFailure::Provider {
                        code: e.code().to_owned(),
                        message: e.to_string(),
                    });
                    return out;
                }
                CallOutcome::Response(r) => r,
            };
        record_usage(&mut out, provider.as_ref(), &resp);

        if !resp.tool_calls.is_empty() {
            if let Err(f) = tool_round::run(deps, ctx, control, &resp).await {
                out.failure = Some(f);
                return out;
            }
            // What streamed before the calls is in the tool-call row now; the partial or
            // recovered answer (SPEC R10.2) is only what the next call streams.
            streamed.take();
            continue;
        }
        out.final_text = resp.content.filter(|t| !t.trim().is_empty());
        return out;
    }
}

/// With `agent.liveness_timeout_s` set, hard-interrupts a turn that shows no activity for that
/// long (SPEC R4.3): a stuck provider or tool must not hold the session for the whole TTL.
fn spawn_watchdog(deps: &Deps, control: &TurnControl) -> Option<tokio::task::JoinHandle<()>> {
    let limit_s = deps.config.agent.liveness_timeout_s;
    if limit_s == 0 {
        return None;
    }
    let limit_ms = i64::try_from(limit_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    let control = control.clone();
    Some(tokio::spawn(async move {
        let tick = Duration::from_millis((limit_ms / 4).clamp(50, 5_000) as u64);
        loop {
            tokio::time::sleep(tick).await;
            if control.idle_ms() >= limit_ms {
                control.interrupt(StopReason::Inactive);
                return;
            }
        }
    }))
}

fn record_usage(out: &mut Loop, provider: &dyn Provider, resp: &ChatResponse) {
    out.usage.add(&resp.usage);
    let model = if resp.model.is_empty() {
        provider.model()
    } else {
        &resp.model
    };
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    out.usage_rows.push(NewUsage {
        provider: provider.name().to_owned(),
        model: model.to_owned(),
        input_tokens: n(resp.usage.input_tokens),
        output_tokens: n(resp.usage.output_tokens),
        cache_read_tokens: n(resp.usage.cache_read_tokens),
        cache_write_tokens: n(resp.usage.cache_write_tokens),
        cost_usd: cost_usd(model, &resp.usage),
    });
}
