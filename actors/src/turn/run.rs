//! The loop (SPEC R7): begin (count, budget, interrupt) → preflight gate, which assembles the
//! wire request → call with retries → normalize → tool round or final text, until a stop
//! condition; then finalize, which takes the loop's `Outcome` whole. Each phase answers
//! continue or break.
//!
//! Timeouts: `agent.turn_timeout_s` interrupts a turn as `turn_timeout`. With `lease.watchdog_s`
//! set (or its older name `agent.liveness_timeout_s`; the smaller when both are), a watchdog
//! interrupts a turn with no sign of life for that long as `turn_inactive` (SPEC R4.3): streamed
//! text, any provider byte (an SSE keep-alive comment or a tool call's argument fragment counts,
//! through `providers::activity::on_bytes`, a task-local the provider call runs inside), a
//! response, tool progress or an iteration. Lease loss stops the turn without writing: every
//! write would be fenced anyway.
use super::context::{self, LastPrompt, TurnContext};
use super::finalize::{self, Closing, Outcome};
use super::preflight::{self, Carried, GateState};
use super::request::{CallOutcome, Calls, StreamedText};
use super::transcript::TranscriptCache;
use super::{
    fallback, grace, normalize, tool_round, AnswerStop, StopReason, TurnControl, TurnFailure,
};
use crate::deps::{Deps, Models};
use crate::stages::{timed, Stage};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info_span, Instrument};
use turnkey_providers::{ChatResponse, Pricing, Provider, ProviderError};
use turnkey_storage::{Admission, Fence, NewUsage, TurnId};

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
    let prepared = prepare(deps, transcript, fence, admission, turn_id, start).await;
    let (outcome, no_chat) = match prepared {
        Ok(mut ctx) => {
            // A session's chat is fixed when the session is made: a row without one never
            // gets one, so the turn's end need not look for it.
            let no_chat = ctx.session.id == admission.session_id && ctx.session.chat_key.is_none();
            (drive(deps, control, &mut ctx, &streamed).await, no_chat)
        }
        Err(f) => (Outcome::failed(f), false),
    };
    timer.abort();
    if let Some(w) = watchdog {
        w.abort();
    }
    let closing = Closing {
        fence: fence.clone(),
        session_id: admission.session_id,
        admission_id: admission.id,
        turn_id,
        outcome,
        held_delta: streamed.take_held(),
        streamed: deps.redactor.redact(&streamed.take()).into_owned(),
        no_chat,
        attempt: admission.attempt,
        stopped_at: control.stopped_at(),
    };
    finalize::finalize(deps.record(), &deps.delivery, closing)
        .instrument(info_span!("finalize"))
        .await
}

/// The turn's context: prepared fresh from the claim, or read back for a resumed round.
async fn prepare(
    deps: &Deps,
    transcript: &TranscriptCache,
    fence: &Fence,
    admission: &Admission,
    turn_id: TurnId,
    start: Start,
) -> Result<TurnContext, TurnFailure> {
    let (store, config) = (&deps.store, &deps.config);
    match start {
        Start::Fresh(claimed) => {
            let known = claimed.map(|s| *s);
            let prepare =
                context::prepare(store, config, transcript, fence, admission, turn_id, known);
            timed(Stage::Context, prepare.instrument(info_span!("context"))).await
        }
        Start::Resume => {
            let resume = context::resume(store, config, transcript, fence, admission, turn_id);
            let span = info_span!("context", resumed = true);
            timed(Stage::Context, resume.instrument(span)).await
        }
    }
}

/// The loop, run to its end: the outcome finalize commits.
async fn drive(
    deps: &Deps,
    control: &TurnControl,
    ctx: &mut TurnContext,
    streamed: &StreamedText,
) -> Outcome {
    let mut out = Outcome::default();
    let pricing = deps.config.pricing();
    let mut ledger = Ledger {
        out: &mut out,
        pricing: &pricing,
    };
    if let Err(f) = iterate(deps, control, ctx, streamed, &mut ledger).await {
        out.failure = Some(f);
    }
    out
}

/// The loop's counters (SPEC R7.3): model calls made, calls left in the iteration budget, and
/// the most calls the turn may make.
struct Counters {
    iterations: u32,
    budget: u32,
    max_iterations: u32,
}

impl Counters {
    fn new(deps: &Deps, ctx: &TurnContext) -> Self {
        let cfg = &deps.config;
        // A resumed turn has spent one model call per assistant row it already wrote.
        let iterations = u32::try_from(ctx.assistant_rows()).unwrap_or(u32::MAX);
        Self {
            iterations,
            budget: cfg.agent.iteration_budget.saturating_sub(iterations),
            // A sub-agent's turn has its own, usually lower, limit (SPEC R1.5).
            max_iterations: if crate::delegation::is_child(&ctx.session) {
                cfg.delegation.child_max_iterations
            } else {
                cfg.agent.max_iterations
            },
        }
    }

    /// Takes one call from the budget.
    fn spend(&mut self) {
        self.iterations += 1;
        self.budget -= 1;
    }

    /// Gives the budget back a call that is made again after compression.
    fn retry(&mut self) {
        self.budget += 1;
    }

    /// Undoes the call entirely: the iteration starts over on the next provider.
    fn restart(&mut self) {
        self.iterations -= 1;
        self.budget += 1;
    }
}

/// The loop itself: answers the failure that ended it, else the final text is in `ledger`.
async fn iterate(
    deps: &Deps,
    control: &TurnControl,
    ctx: &mut TurnContext,
    streamed: &StreamedText,
    ledger: &mut Ledger<'_>,
) -> Result<(), TurnFailure> {
    // The provider set as it is now: providers connected meanwhile serve the next turn.
    let set = deps.providers.snapshot();
    let models = deps.models(&set);
    let tools = tools_of(deps, ctx);
    // The primary, or the first healthy fallback (SPEC R8.4).
    let mut chain = fallback::Chain::new(models, ctx.model_override.as_deref());
    let mut provider = chain.current().ok_or(TurnFailure::NoProvider)?;
    let mut n = Counters::new(deps, ctx);
    finish_open_round(tools, ctx, control, n.iterations > 0).await?;
    let mut gate = GateState::new(carried_prompt(ctx));
    let calls = Calls {
        models,
        control,
        streamed,
    };
    loop {
        // begin_iteration
        if let Some(r) = control.stop_reason() {
            return Err(TurnFailure::Stopped(r));
        }
        if n.iterations >= n.max_iterations {
            return Err(TurnFailure::MaxIterations);
        }
        if n.budget == 0 {
            // One grace call without tools summarizes where the work stopped (SPEC R7.3).
            let record = &mut |r: &ChatResponse| ledger.record(provider.as_ref(), r);
            let (text, failure) = grace::summarize(calls, ctx, &provider, &mut gate, record)
                .instrument(info_span!("request", grace = true))
                .await;
            ledger.out.final_text = text;
            return Err(failure);
        }
        n.spend();
        control.touch();
        let called = call_model(calls, ctx, &provider, &mut gate, ledger, n.iterations).await;
        let (resp, stop, wire_len) =
            match called.map(|(o, stop, len)| (judge(o, control, &mut chain, models), stop, len)) {
                Ok((Next::Answer(resp), stop, len)) => (resp, stop, len),
                Ok((Next::Compress, ..)) => {
                    // Back to preflight: compress and retry once; a second overflow is proven
                    // and the gate fails closed instead of re-sending (SPEC R6.5).
                    gate.on_overflow();
                    n.retry();
                    continue;
                }
                Ok((Next::Fallback(next), ..)) => {
                    // Restart this iteration from preflight with messages rebuilt for the next
                    // provider (new window, estimate, wire format).
                    provider = next;
                    ctx.last_prompt = None;
                    gate.carried = None;
                    n.restart();
                    continue;
                }
                Ok((Next::Fail(f), ..)) | Err(f) => return Err(f),
            };
        chain.succeeded();
        ctx.last_prompt = Some(LastPrompt {
            input_tokens: resp.usage.input_tokens,
            wire_len,
        });

        if !resp.tool_calls.is_empty() {
            tool_round_then_steer(deps, tools, ctx, control, &resp, streamed)
                .instrument(info_span!(
                    "tool_round",
                    iteration = n.iterations,
                    calls = resp.tool_calls.len()
                ))
                .await?;
            continue;
        }
        ledger.out.final_text = resp.content.filter(|t| !t.trim().is_empty());
        ledger.out.stop = stop;
        return Ok(());
    }
}

/// What the tool round runs with: for a sub-agent's session, without the tools children do
/// not get (SPEC R1.5).
fn tools_of<'a>(deps: &'a Deps, ctx: &TurnContext) -> tool_round::Tools<'a> {
    tool_round::Tools {
        record: deps.record(),
        executor: &deps.tools,
        repeat_guard: deps.config.agent.repeat_guard,
        withheld: if crate::delegation::is_child(&ctx.session) {
            crate::delegation::withheld(&deps.config)
        } else {
            &[]
        },
    }
}

/// The outcome the loop fills in, and the prices its model calls are charged at.
struct Ledger<'a> {
    out: &'a mut Outcome,
    pricing: &'a Pricing,
}

impl Ledger<'_> {
    /// Counts one model call's usage and adds its row to the usage ledger.
    fn record(&mut self, provider: &dyn Provider, resp: &ChatResponse) {
        self.out.usage.add(&resp.usage);
        let row = usage_row(self.pricing, provider, resp);
        self.out.usage_rows.push(row);
    }
}

/// One model call: the preflight gate (compressing when the pressure asks) assembles the
/// request, the call with retries, and the normalization of its response (continue a
/// truncated answer, recover an empty or repeated one once, and take what is left of a still
/// truncated or repeated one as the answer). Each call is recorded in the usage ledger.
/// Answers the outcome, how the answer ended and how many messages were sent.
async fn call_model(
    c: Calls<'_>,
    ctx: &mut TurnContext,
    provider: &Arc<dyn Provider>,
    gate: &mut GateState,
    ledger: &mut Ledger<'_>,
    iteration: u32,
) -> Result<(CallOutcome, AnswerStop, usize), TurnFailure> {
    let req = preflight::pass(c.models, ctx, provider, gate)
        .instrument(info_span!("preflight", iteration))
        .await?;
    let wire_len = req.messages.len();
    let record = &mut |r: &ChatResponse| ledger.record(provider.as_ref(), r);
    let called = normalize::call(c, ctx, provider.as_ref(), req, record)
        .instrument(info_span!(
            "request",
            iteration,
            provider = %provider.name(),
        ))
        .await?;
    Ok((called.outcome, called.stop, wire_len))
}

/// Finishes the round a crash interrupted before the model is called again (nothing to do on
/// a fresh turn: it has no tool-call row yet).
async fn finish_open_round(
    tools: tool_round::Tools<'_>,
    ctx: &mut TurnContext,
    control: &TurnControl,
    resumed: bool,
) -> Result<(), TurnFailure> {
    let pending = tool_round::execute_pending(tools, ctx, control);
    if resumed {
        pending
            .instrument(info_span!("tool_round", resumed = true))
            .await
    } else {
        pending.await
    }
}

/// What the loop does after a model call.
enum Next {
    Answer(ChatResponse),
    /// The provider said the request is too long: back to preflight.
    Compress,
    /// The provider failed for good and the chain has another.
    Fallback(Arc<dyn Provider>),
    Fail(TurnFailure),
}

fn judge(
    called: CallOutcome,
    control: &TurnControl,
    chain: &mut fallback::Chain<'_>,
    models: Models<'_>,
) -> Next {
    match called {
        CallOutcome::Stopped => Next::Fail(TurnFailure::Stopped(
            control
                .stop_reason()
                .unwrap_or(StopReason::Interrupted("stopped".into())),
        )),
        CallOutcome::Failed(ProviderError::Overflow { message }) => {
            tracing::warn!(%message, "provider rejected the request as too long");
            Next::Compress
        }
        CallOutcome::Failed(e) => match chain.failed(&e) {
            Some(next) => Next::Fallback(next),
            None => Next::Fail(TurnFailure::Provider {
                code: e.code().to_owned(),
                // A provider's error may quote what it was sent (a key, a prompt).
                message: models.redactor.redact(&e.to_string()).into_owned(),
            }),
        },
        CallOutcome::Response(r) => Next::Answer(r),
    }
}

/// Runs the response's tool calls; then input steered into this turn joins it at this model
/// boundary (SPEC R13.4).
async fn tool_round_then_steer(
    deps: &Deps,
    tools: tool_round::Tools<'_>,
    ctx: &mut TurnContext,
    control: &TurnControl,
    resp: &ChatResponse,
    streamed: &StreamedText,
) -> Result<(), TurnFailure> {
    tool_round::run(tools, ctx, control, resp).await?;
    // What streamed before the calls is in the tool-call row now; the partial or recovered
    // answer (SPEC R10.2) is only what the next call streams.
    streamed.take();
    super::steer::absorb(deps.record(), deps.config.agent.busy_policy, ctx).await
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

/// The usage ledger's row for one model call (the model the answer names, else the
/// provider's), priced by `pricing`. The turn and the review (`crate::review`) record the same.
pub fn usage_row(pricing: &Pricing, provider: &dyn Provider, resp: &ChatResponse) -> NewUsage {
    let model = if resp.model.is_empty() {
        provider.model()
    } else {
        &resp.model
    };
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    NewUsage {
        provider: provider.name().to_owned(),
        model: model.to_owned(),
        input_tokens: n(resp.usage.input_tokens),
        output_tokens: n(resp.usage.output_tokens),
        cache_read_tokens: n(resp.usage.cache_read_tokens),
        cache_write_tokens: n(resp.usage.cache_write_tokens),
        cost_usd: pricing.cost_usd(model, &resp.usage),
    }
}
