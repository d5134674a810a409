//! The loop (SPEC R7): begin (count, budget, interrupt) → assemble the wire request →
//! preflight gate → call with retries → normalize → tool round or final text, until a stop
//! condition; then finalize. Each phase answers continue or break.
use super::context::{self, LastPrompt, TurnContext};
use super::finalize::{self, Closing};
use super::preflight::{self, Carried, GateState};
use super::request::{self, CallOutcome, StreamedText};
use super::transcript::TranscriptCache;
use super::{
    fallback, grace, normalize, tool_round, AnswerStop, StopReason, TurnControl, TurnFailure,
};
use crate::deps::Deps;
use crate::stages::{timed, Stage};
use std::time::Duration;
use tracing::{info_span, Instrument};
use turnkey_providers::{ChatResponse, Pricing, Provider, ProviderError, Usage};
use turnkey_storage::{Admission, Fence, MessageRole, NewUsage, TurnId};

struct Loop {
    final_text: Option<String>,
    /// How `final_text` ended.
    stop: AnswerStop,
    failure: Option<TurnFailure>,
    usage: Usage,
    usage_rows: Vec<NewUsage>,
}

/// How a turn begins: fresh from a claimed admission, or resumed from the rows a crashed
/// owner left in its tool round (SPEC R13.1).
#[derive(Clone, Debug)]
pub enum Start {
    /// With the session row as the claim's commit left it, when the claim returned it (the
    /// context then reads no session row of its own).
    Fresh(Option<Box<turnkey_storage::Session>>),
    Resume,
}

impl Start {
    pub fn is_resume(&self) -> bool {
        matches!(self, Start::Resume)
    }
}

/// Runs the turn to its end; answers whether its end commit released the session's lease.
pub async fn run_turn(
    deps: &Deps,
    transcript: &TranscriptCache,
    control: &TurnControl,
    fence: &Fence,
    admission: &Admission,
    turn_id: TurnId,
    start: Start,
) -> bool {
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
        stop: AnswerStop::Stop,
        streamed: String::new(),
        held_delta: None,
        failure: None,
        usage: Usage::default(),
        usage_rows: Vec::new(),
        no_chat: false,
        attempt: admission.attempt,
        stopped_at: None,
    };
    let prepared = match start {
        Start::Fresh(claimed) => {
            let known = claimed.map(|s| *s);
            let prepare = context::prepare(deps, transcript, fence, admission, turn_id, known);
            timed(Stage::Context, prepare.instrument(info_span!("context"))).await
        }
        Start::Resume => {
            let resume = context::resume(deps, transcript, fence, admission, turn_id);
            timed(
                Stage::Context,
                resume.instrument(info_span!("context", resumed = true)),
            )
            .await
        }
    };
    match prepared {
        Ok(mut ctx) => {
            // A session's chat is fixed when the session is made: a row without one never
            // gets one, so the turn's end need not look for it.
            closing.no_chat =
                ctx.session.id == admission.session_id && ctx.session.chat_key.is_none();
            let out = iterate(deps, control, &mut ctx, &streamed).await;
            closing.final_text = out.final_text;
            closing.stop = out.stop;
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
    closing.stopped_at = control.stopped_at();
    closing.held_delta = streamed.take_held();
    closing.streamed = streamed.take();
    finalize::finalize(deps, closing)
        .instrument(info_span!("finalize"))
        .await
}

async fn iterate(
    deps: &Deps,
    control: &TurnControl,
    ctx: &mut TurnContext,
    streamed: &StreamedText,
) -> Loop {
    let mut out = Loop {
        final_text: None,
        stop: AnswerStop::Stop,
        failure: None,
        usage: Usage::default(),
        usage_rows: Vec::new(),
    };
    // The primary, or the first healthy fallback (SPEC R8.4).
    let mut chain = fallback::Chain::new(deps);
    let Some(mut provider) = chain.current(deps) else {
        out.failure = Some(TurnFailure::NoProvider);
        return out;
    };
    let cfg = &deps.config;
    let pricing = cfg.pricing();
    // A resumed turn has spent one model call per assistant row it already wrote.
    let spent = ctx
        .turn_rows
        .iter()
        .filter(|m| m.role == MessageRole::Assistant)
        .count();
    let mut iterations = u32::try_from(spent).unwrap_or(u32::MAX);
    let mut budget = cfg.agent.iteration_budget.saturating_sub(iterations);
    // Finish the round a crash interrupted before the model is called again.
    let pending = tool_round::execute_pending(deps, ctx, control);
    let pending = if spent > 0 {
        pending
            .instrument(info_span!("tool_round", resumed = true))
            .await
    } else {
        pending.await
    };
    if let Err(f) = pending {
        out.failure = Some(f);
        return out;
    }
    let mut gate = GateState::new(carried_prompt(ctx));
    loop {
        // begin_iteration
        if let Some(r) = control.stop_reason() {
            out.failure = Some(TurnFailure::Stopped(r));
            return out;
        }
        if iterations >= cfg.agent.max_iterations {
            out.failure = Some(TurnFailure::MaxIterations);
            return out;
        }
        if budget == 0 {
            // One grace call without tools summarizes where the work stopped (SPEC R7.3).
            let (text, failure) = grace::summarize(
                deps,
                ctx,
                control,
                &provider,
                &mut gate,
                streamed,
                &mut |r| record_usage(&mut out, &pricing, provider.as_ref(), r),
            )
            .instrument(info_span!("request", grace = true))
            .await;
            out.final_text = text;
            out.failure = Some(failure);
            return out;
        }
        iterations += 1;
        budget -= 1;
        control.touch();

        // assemble_api_request + run_preflight_gate (compressing when the pressure asks)
        let passed = preflight::pass(deps, ctx, &provider, &mut gate)
            .instrument(info_span!("preflight", iteration = iterations))
            .await;
        let wire = match passed {
            Ok(wire) => wire,
            Err(f) => {
                out.failure = Some(f);
                return out;
            }
        };
        let wire_len = wire.len();
        let req = request::build_request(deps, ctx, provider.as_ref(), wire, true);

        // call with retries, then normalize the response (continue a truncated answer,
        // recover an empty or repeated one once, and take what is left of a still truncated or
        // repeated one as the answer; each call is recorded in the usage ledger)
        let called = normalize::call(
            deps,
            ctx,
            control,
            provider.as_ref(),
            req,
            streamed,
            &mut |r| record_usage(&mut out, &pricing, provider.as_ref(), r),
        )
        .instrument(info_span!(
            "request",
            iteration = iterations,
            provider = %provider.name(),
        ))
        .await;
        let (called, stop) = match called {
            Ok(n) => (n.outcome, n.stop),
            Err(f) => {
                out.failure = Some(f);
                return out;
            }
        };
        let resp = match called {
            CallOutcome::Stopped => {
                out.failure = Some(TurnFailure::Stopped(
                    control
                        .stop_reason()
                        .unwrap_or(StopReason::Interrupted("stopped".into())),
                ));
                return out;
            }
            CallOutcome::Failed(ProviderError::Overflow { message }) => {
                // Back to preflight: compress and retry once; a second overflow is proven
                // and the gate fails closed instead of re-sending (SPEC R6.5).
                tracing::warn!(turn = %ctx.turn_id, %message, "provider rejected the request as too long");
                gate.on_overflow();
                budget += 1;
                continue;
            }
            CallOutcome::Failed(e) => {
                if let Some(next) = chain.failed(deps, &e) {
                    // Fall back: restart this iteration from preflight with messages
                    // rebuilt for the next provider (new window, estimate, wire format).
                    provider = next;
                    ctx.last_prompt = None;
                    gate.carried = None;
                    iterations -= 1;
                    budget += 1;
                    continue;
                }
                out.failure = Some(TurnFailure::Provider {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                });
                return out;
            }
            CallOutcome::Response(r) => r,
        };
        chain.succeeded(deps);
        ctx.last_prompt = Some(LastPrompt {
            input_tokens: resp.usage.input_tokens,
            wire_len,
        });

        if !resp.tool_calls.is_empty() {
            let round = tool_round::run(deps, ctx, control, &resp)
                .instrument(info_span!(
                    "tool_round",
                    iteration = iterations,
                    calls = resp.tool_calls.len()
                ))
                .await;
            if let Err(f) = round {
                out.failure = Some(f);
                return out;
            }
            // What streamed before the calls is in the tool-call row now; the partial or
            // recovered answer (SPEC R10.2) is only what the next call streams.
            streamed.take();
            // A model boundary: input steered into this turn joins it here (SPEC R13.4).
            if let Err(f) = super::steer::absorb(deps, ctx).await {
                out.failure = Some(f);
                return out;
            }
            continue;
        }
        out.final_text = resp.content.filter(|t| !t.trim().is_empty());
        out.stop = stop;
        return out;
    }
}

/// The provider's prompt size for the session's last recorded call: where the first pressure
/// measurement of a turn starts (SPEC R6.1). It comes with the session row the turn read.
fn carried_prompt(ctx: &TurnContext) -> Option<Carried> {
    ctx.session.last_prompt.map(|p| Carried {
        input_tokens: u64::try_from(p.input_tokens).unwrap_or(0),
        recorded_at: p.recorded_at,
    })
}

/// With `lease.watchdog_s` (or its older name `agent.liveness_timeout_s`) set, hard-interrupts
/// a turn that shows no activity for that long (SPEC R4.3): a stuck provider or tool must not
/// hold the session for the whole TTL.
fn spawn_watchdog(deps: &Deps, control: &TurnControl) -> Option<tokio::task::JoinHandle<()>> {
    let limit_s = deps.config.watchdog_s();
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

fn record_usage(out: &mut Loop, pricing: &Pricing, provider: &dyn Provider, resp: &ChatResponse) {
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
        cost_usd: pricing.cost_usd(model, &resp.usage),
    });
}
