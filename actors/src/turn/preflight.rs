//! The preflight gate before every model call (SPEC R6.1, R6.5): measure request pressure
//! against the window and say whether to send, compress first, or fail closed. Pressure
//! starts from the provider's last real prompt size and adds an estimate of what was added
//! since; without one it is an estimate of the whole request, tool schemas included. The
//! gate is where a model call's request is assembled (`wire`): what it measures is what goes.
use super::context::TurnContext;
use super::{wire, TurnFailure};
use crate::compressor::{Compress, CompressFailure};
use crate::config::CompressionConfig;
use crate::deps::Models;
use std::sync::Arc;
use turnkey_providers::{
    estimate_messages_for_model, estimate_tokens, estimate_tokens_for_model, ChatMessage,
    ChatRequest, Provider, ToolSchema,
};
use turnkey_storage::Message;

/// Compressions one turn may attempt (SPEC R6.1 "attempts under the cap").
const MAX_ATTEMPTS_PER_TURN: u32 = 3;

/// What the gate remembers across the calls of one turn.
#[derive(Debug, Default)]
pub struct GateState {
    /// The provider's prompt size from the session's last recorded call, read at turn start.
    pub carried: Option<Carried>,
    /// The provider rejected the last request as too long: compress whatever the pressure.
    pub force_compress: bool,
    /// A request was already compressed and retried after an overflow: a second overflow is
    /// proven, and the gate fails closed (SPEC R6.5).
    pub retried_after_overflow: bool,
    pub overflow_proven: bool,
    attempts: u32,
}

impl GateState {
    pub fn new(carried: Option<Carried>) -> Self {
        Self {
            carried,
            ..Self::default()
        }
    }

    /// Called on a provider overflow error: compress and retry once, then fail closed.
    pub fn on_overflow(&mut self) {
        if self.retried_after_overflow {
            self.overflow_proven = true;
        } else {
            self.retried_after_overflow = true;
            self.force_compress = true;
        }
    }
}

/// The gate before one model call: the request to send, assembled from the wire copy after
/// compressing when the pressure asks for it; or the failure that stops the turn.
pub async fn pass(
    models: Models<'_>,
    ctx: &mut TurnContext,
    provider: &Arc<dyn Provider>,
    state: &mut GateState,
) -> Result<ChatRequest, TurnFailure> {
    let messages = gate_wire(models, ctx, provider, state).await?;
    Ok(wire::request(models, ctx, provider.as_ref(), messages))
}

/// The wire copy that may be sent, compressed first when the pressure asks for it.
async fn gate_wire(
    models: Models<'_>,
    ctx: &mut TurnContext,
    provider: &Arc<dyn Provider>,
    state: &mut GateState,
) -> Result<Vec<ChatMessage>, TurnFailure> {
    let window = provider.context_window();
    let model = wire::model_for(models, ctx, provider.as_ref());
    let cfg = &models.config.compression.for_model(&model);
    let vision = provider.sees_images();
    super::attached::load(models, ctx, vision).await;
    let wire = wire::messages(ctx, vision);
    let pressure_tokens = pressure(&model, ctx, &wire, models.tool_schemas, state.carried);
    let force = std::mem::take(&mut state.force_compress);
    let must_fit = match gate(
        cfg,
        pressure_tokens,
        wire.len(),
        window,
        state.overflow_proven,
    ) {
        Gate::FailClosed { .. } if state.overflow_proven => {
            return Err(TurnFailure::ContextOverflow(format!(
                "the provider rejected the request as too long again after compression \
                 (~{pressure_tokens} tokens estimated, {window}-token window)"
            )));
        }
        Gate::Proceed { .. } if !force => return Ok(wire),
        Gate::FailClosed { .. } => true,
        Gate::ShouldCompress { .. } | Gate::Proceed { .. } => force,
    };
    let overflow = |why: &str| {
        TurnFailure::ContextOverflow(format!(
            "request of ~{pressure_tokens} tokens does not fit the {window}-token window{why}"
        ))
    };
    if !cfg.enabled || state.attempts >= MAX_ATTEMPTS_PER_TURN {
        return if must_fit {
            Err(overflow(if cfg.enabled {
                " and this turn already compressed as often as it may"
            } else {
                " and compression is disabled"
            }))
        } else {
            Ok(wire)
        };
    }
    state.attempts += 1;
    let summarizer = summarizer(models, provider);
    let rows = ctx
        .live_rows()
        .into_iter()
        .map(|m| (m.clone(), row_tokens(&model, m)))
        .collect();
    let asked = models
        .compressor
        .send(Compress {
            fence: ctx.fence.clone(),
            session_id: ctx.session.id,
            turn_id: ctx.turn_id,
            admission_id: ctx.admission.id,
            base_epoch: ctx.session.compression_epoch,
            rows,
            before_tokens: pressure_tokens,
            window,
            config: cfg.clone(),
            summarizer,
            force,
            needed: must_fit,
        })
        .await;
    let result = asked.map_err(|e| CompressFailure::Gone(e.to_string()));
    match result.and_then(|r| r) {
        Ok(done) => {
            match done.rotated {
                Some(r) => ctx.apply_rotation(done.epoch, &r.kept, r.rows),
                None => ctx.apply_compaction(done.epoch, &done.compressed, done.summary),
            }
            fitting(ctx, &model, models.tool_schemas, window, vision)
        }
        Err(CompressFailure::Store(e)) => Err(TurnFailure::PersistenceFailed(e.to_string())),
        Err(e) if !must_fit => {
            tracing::warn!(turn = %ctx.turn_id, error = %e, pressure_tokens, "compression skipped; the request still fits");
            Ok(wire)
        }
        Err(CompressFailure::NothingToCompress) => Err(overflow(
            "; everything in it is protected (the first and last messages of the session)",
        )),
        Err(e) => Err(TurnFailure::CompressionFailed(e.to_string())),
    }
}

/// Who writes the summary: the first auxiliary provider, else the one the turn calls.
fn summarizer(models: Models<'_>, provider: &Arc<dyn Provider>) -> Arc<dyn Provider> {
    models.set.auxiliary().unwrap_or(provider).clone()
}

/// The wire copy of the compressed context, if it fits the window now.
fn fitting(
    ctx: &TurnContext,
    model: &str,
    tool_schemas: &[ToolSchema],
    window: u32,
    vision: bool,
) -> Result<Vec<ChatMessage>, TurnFailure> {
    let wire = wire::messages(ctx, vision);
    let after = estimate(model, &wire).saturating_add(schema_tokens(tool_schemas));
    if after > u64::from(window) {
        return Err(TurnFailure::ContextOverflow(format!(
            "after compression the request of ~{after} tokens still does not fit the \
             {window}-token window"
        )));
    }
    Ok(wire)
}

/// The provider's prompt size for the session's last recorded call and when it was recorded
/// (ms), read at turn start; valid while no compression happened after it.
#[derive(Clone, Copy, Debug)]
pub struct Carried {
    pub input_tokens: u64,
    pub recorded_at: i64,
}

/// Token estimate of a request's messages for `model`: its real tokenizer for OpenAI-family
/// models, about four bytes a token elsewhere.
pub fn estimate(model: &str, msgs: &[ChatMessage]) -> u64 {
    estimate_messages_for_model(model, msgs)
}

/// Token estimate of one transcript row as it goes on the wire.
pub fn row_tokens(model: &str, m: &Message) -> u64 {
    let estimate_tokens = |t: &str| estimate_tokens_for_model(model, t);
    let text = m
        .api_content
        .as_deref()
        .or(m.content.as_deref())
        .unwrap_or_default();
    let calls = m
        .tool_calls
        .as_ref()
        .map(|v| estimate_tokens(&v.to_string()))
        .unwrap_or(0);
    4 + estimate_tokens(text) + calls + m.tool_call_id.as_deref().map(estimate_tokens).unwrap_or(0)
}

/// Tokens the tool schemas add to every request.
pub fn schema_tokens(tools: &[ToolSchema]) -> u64 {
    tools
        .iter()
        .map(|t| {
            8 + estimate_tokens(&t.name)
                + estimate_tokens(&t.description)
                + estimate_tokens(&t.parameters.to_string())
        })
        .sum()
}

/// The request pressure of `wire` for this turn (SPEC R6.1).
pub fn pressure(
    model: &str,
    ctx: &TurnContext,
    wire: &[ChatMessage],
    tools: &[ToolSchema],
    carried: Option<Carried>,
) -> u64 {
    if let Some(last) = ctx
        .last_prompt
        .filter(|l| l.input_tokens > 0 && wire.len() >= l.wire_len)
    {
        let added: u64 = wire[last.wire_len..]
            .iter()
            .map(|m| estimate(model, std::slice::from_ref(m)))
            .sum();
        return last.input_tokens.saturating_add(added);
    }
    let fresh_since = |c: &Carried| {
        c.input_tokens > 0
            && ctx
                .session
                .compressed_at
                .is_none_or(|at| at < c.recorded_at)
    };
    if let Some(c) = carried.filter(fresh_since) {
        let added: u64 = ctx
            .live_rows()
            .into_iter()
            .filter(|m| m.created_at >= c.recorded_at)
            .map(|m| row_tokens(model, m))
            .sum();
        return c.input_tokens.saturating_add(added);
    }
    estimate(model, wire).saturating_add(schema_tokens(tools))
}

/// Windows below this size get the raised 0.75 threshold (raise-only floor, SPEC R6.2).
const LARGE_WINDOW: u32 = 512_000;

#[derive(Debug, PartialEq)]
pub enum Gate {
    /// Send the request.
    Proceed { pressure_tokens: u64 },
    /// Over the compression threshold: compress before sending (when a compressor is
    /// available); the request may still fit, so it proceeds otherwise.
    ShouldCompress { pressure_tokens: u64 },
    /// It cannot fit, or the provider already proved it does not: do not send.
    FailClosed { pressure_tokens: u64, window: u32 },
}

/// The threshold actually used for a window: the configured one, raised to 0.75 for windows
/// under 512K tokens; a model's own threshold (`[compression.models."<model>"]`) as given.
pub fn effective_threshold(config: &CompressionConfig, window: u32) -> f64 {
    if window < LARGE_WINDOW && !config.exact_threshold {
        config.threshold.max(0.75)
    } else {
        config.threshold
    }
}

pub fn gate(
    config: &CompressionConfig,
    pressure_tokens: u64,
    message_count: usize,
    window: u32,
    overflow_proven: bool,
) -> Gate {
    if overflow_proven || pressure_tokens > u64::from(window) {
        return Gate::FailClosed {
            pressure_tokens,
            window,
        };
    }
    let eligible = config.enabled && message_count > 1;
    let limit = effective_threshold(config, window) * f64::from(window);
    if eligible && pressure_tokens as f64 > limit {
        Gate::ShouldCompress { pressure_tokens }
    } else {
        Gate::Proceed { pressure_tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r6_2_threshold_is_raised_for_small_windows_only() {
        let c = CompressionConfig::default();
        assert_eq!(effective_threshold(&c, 128_000), 0.75);
        assert_eq!(effective_threshold(&c, 1_000_000), 0.50);
    }

    #[test]
    fn r6_2_a_model_override_applies_to_that_model_only_and_as_given() {
        let mut c = CompressionConfig::default();
        c.models.insert(
            "small-model".into(),
            crate::config::ModelCompression {
                threshold: Some(0.6),
                protect_last_n: Some(8),
                ..Default::default()
            },
        );
        let small = c.for_model("small-model");
        assert_eq!(effective_threshold(&small, 128_000), 0.6, "no 0.75 floor");
        assert_eq!(small.protect_last_n, 8);
        assert_eq!(small.target_ratio, 0.20, "unset fields are the section's");
        let other = c.for_model("other");
        assert_eq!(effective_threshold(&other, 128_000), 0.75);
        assert_eq!(other.protect_last_n, 20);
        // 0.6 of a 10K window is 6K: 7K tokens of pressure compress for this model only.
        assert!(matches!(
            gate(&small, 7_000, 10, 10_000, false),
            Gate::ShouldCompress { .. }
        ));
        assert!(matches!(
            gate(&other, 7_000, 10, 10_000, false),
            Gate::Proceed { .. }
        ));
    }

    #[test]
    fn r6_5_proven_overflow_fails_closed() {
        let c = CompressionConfig::default();
        let m = vec![ChatMessage::user("hi".to_string())];
        assert!(matches!(
            gate(&c, estimate("m", &m), m.len(), 128_000, true),
            Gate::FailClosed { .. }
        ));
    }

    #[test]
    fn r6_1_small_request_proceeds_and_big_one_wants_compression() {
        let c = CompressionConfig::default();
        let small = vec![
            ChatMessage::system("s".to_string()),
            ChatMessage::user("hi".to_string()),
        ];
        assert!(matches!(
            gate(&c, estimate("m", &small), small.len(), 1000, false),
            Gate::Proceed { .. }
        ));
        let big = vec![
            ChatMessage::system("s".to_string()),
            ChatMessage::user("word ".repeat(700)),
        ];
        assert!(matches!(
            gate(&c, estimate("m", &big), big.len(), 1000, false),
            Gate::ShouldCompress { .. }
        ));
        let huge = vec![ChatMessage::user("word ".repeat(2000))];
        assert!(matches!(
            gate(&c, estimate("m", &huge), huge.len(), 1000, false),
            Gate::FailClosed { .. }
        ));
    }
}
