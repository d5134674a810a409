//! `CompressionActor` (SPEC R6, DESIGN "CompressionActor"): replaces the middle of a session's
//! wire copy with a summary written by the auxiliary provider. It takes the per-session
//! compression lock, summarizes without holding anything else, then swaps the transcript in
//! one fenced transaction with its `compression.completed` event. When the summarizer fails,
//! times out, answers nothing or something that saves too little, the middle is replaced by a
//! summary made without a model (`fallback.rs`) and the summarizer cools down, so a session is
//! never stranded by it; history is never lost. Its handler returns a future, so sessions
//! compress concurrently.
//!
//! A `Compress` request (from `turn::preflight`, over the threshold or the window, or after a
//! provider overflow) goes through these steps:
//! 1. refused while the session cools down after a compression that saved less than 10%
//!    (anti-thrash), unless the request does not fit without compressing or an overflow was proven;
//! 2. the cut is planned (`plan.rs`);
//! 3. the `compression_locks` row is taken (holder = turn id; a lock whose turn no longer runs is
//!    taken over at once);
//! 4. the summarizer (the `auxiliary` provider, else the one in use) is asked with the bounded
//!    request of `summary.rs`, within `compression.timeout_s` and the summary budget; on failure,
//!    timeout, no text, too little saved (`keep_or_replace`) or while the summarizer cools down,
//!    `fallback.rs` writes the summary instead;
//! 5. the swap commits (`Store::commit_compression`, or `commit_rotation` with `mode = "rotate"`),
//!    fenced by the lease and refused if the session's `compression_epoch` moved.
//!
//! A compression that does not commit writes nothing; the turn then sends the request if it fits,
//! else ends with `context_overflow`, `compression_failed` or `session_persistence_failed`. The
//! model sees every live row in index order with the newest summary after `summary_after_idx`,
//! its stored `system` role turned into `user` or `assistant` to differ from both neighbours.
//! `[compression] models."<model>"` overrides the section per model
//! (`CompressionConfig::for_model`).
pub mod fallback;
pub mod plan;
pub mod summary;

use crate::config::{CompressionConfig, CompressionMode};
use crate::delivery::EventHub;
use actix::prelude::*;
use dashmap::DashMap;
use plan::{Budget, Plan};
use std::sync::Arc;
use std::time::{Duration, Instant};
use turnkey_providers::{estimate_tokens, ChatRequest, Provider};
use turnkey_storage::{
    AdmissionId, Compaction, Fence, Message, MessageId, MessageRole, NewMessage, Replaced,
    Rotation, SessionId, Store, StoreError, TurnId,
};

/// The lock outlives the summary call's bound by this much, so a crashed holder frees it soon.
const LOCK_SLACK: Duration = Duration::from_secs(30);
/// A compression that keeps more than this share of the tokens did not help: cooldown.
const USELESS_RATIO: f64 = 0.9;
/// About four bytes a token: a summary's budget in bytes.
const BYTES_PER_TOKEN: usize = 4;

/// Compress one session's live rows.
#[derive(Message)]
#[rtype(result = "Result<Compacted, CompressFailure>")]
pub struct Compress {
    pub fence: Fence,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub admission_id: AdmissionId,
    /// The session's compression epoch the rows were read at.
    pub base_epoch: i32,
    /// The live rows in wire order (system prompt excluded), with each row's token estimate.
    pub rows: Vec<(Message, u64)>,
    /// Tokens of the whole request before compression (for the event and anti-thrash rule).
    pub before_tokens: u64,
    /// The window of the provider the request is for.
    pub window: u32,
    pub config: CompressionConfig,
    /// Writes the summary: the auxiliary provider, else the primary.
    pub summarizer: Arc<dyn Provider>,
    /// A provider proved an overflow: ignore the anti-thrash cooldown, keep the smallest tail.
    pub force: bool,
    /// The request does not fit the window without compressing: ignore the anti-thrash cooldown.
    pub needed: bool,
}

/// A committed compression.
#[derive(Clone, Debug)]
pub struct Compacted {
    pub epoch: i32,
    pub summary: Message,
    pub compressed: Vec<MessageId>,
    pub before_tokens: u64,
    pub after_tokens: u64,
    /// Set in `rotate` mode: the child that holds the live transcript now.
    pub rotated: Option<Rotated>,
    /// Set when the summary was made without a model, and why.
    pub fallback: Option<fallback::Reason>,
}

/// The child session a rotation made canonical, with its rows in order.
#[derive(Clone, Debug)]
pub struct Rotated {
    pub child: SessionId,
    /// The child's rows, in order: copies of `kept` with the summary among them.
    pub rows: Vec<Message>,
    /// The parent rows the child copied, in order.
    pub kept: Vec<MessageId>,
}

#[derive(Debug, thiserror::Error)]
pub enum CompressFailure {
    #[error("compression is cooling down for {remaining_s} s after a failed or useless attempt")]
    Cooldown { remaining_s: u64 },
    #[error("nothing to compress between the protected head and tail")]
    NothingToCompress,
    #[error("another compressor holds this session's compression lock")]
    Locked,
    #[error("the compressor is gone: {0}")]
    Gone(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

pub struct CompressionActor {
    store: Store,
    hub: EventHub,
    /// Sessions whose last compression saved too little (anti-thrash): none again before the
    /// instant, unless the request needs one to fit.
    cooldowns: Arc<DashMap<SessionId, Instant>>,
    /// Sessions whose summarizer failed: until the instant, compressions use the fallback
    /// summary without asking it.
    summarizer_cooldowns: Arc<DashMap<SessionId, Instant>>,
}

impl CompressionActor {
    pub fn new(store: Store, hub: EventHub) -> Self {
        Self {
            store,
            hub,
            cooldowns: Arc::default(),
            summarizer_cooldowns: Arc::default(),
        }
    }
}

impl Actor for CompressionActor {
    type Context = Context<Self>;
}

impl Handler<Compress> for CompressionActor {
    type Result = ResponseFuture<Result<Compacted, CompressFailure>>;

    fn handle(&mut self, msg: Compress, _: &mut Self::Context) -> Self::Result {
        let store = self.store.clone();
        let hub = self.hub.clone();
        let cooldowns = self.cooldowns.clone();
        let summarizer_cooldowns = self.summarizer_cooldowns.clone();
        Box::pin(async move {
            let now = Instant::now();
            if !msg.force && !msg.needed {
                if let Some(remaining_s) = remaining(&cooldowns, msg.session_id, now) {
                    return Err(CompressFailure::Cooldown { remaining_s });
                }
            }
            let cooldown = Duration::from_secs(msg.config.cooldown_s);
            let summarizer = Summarizer {
                cooling: remaining(&summarizer_cooldowns, msg.session_id, now)
                    .map(|remaining_s| fallback::Reason::CoolingDown { remaining_s }),
                cooldowns: &summarizer_cooldowns,
                cooldown,
            };
            let result = compress(&store, &hub, &msg, &summarizer).await;
            if let Ok(done) = &result {
                if done.fallback.is_none() {
                    summarizer_cooldowns.remove(&msg.session_id);
                }
                if done.after_tokens as f64 > done.before_tokens as f64 * USELESS_RATIO {
                    cooldowns.insert(msg.session_id, now + cooldown);
                } else {
                    cooldowns.remove(&msg.session_id);
                }
            }
            result
        })
    }
}

/// Whole seconds left of a session's cooldown (at least 1), if it runs.
fn remaining(map: &DashMap<SessionId, Instant>, session: SessionId, now: Instant) -> Option<u64> {
    let until = map.get(&session).map(|u| *u)?;
    (until > now).then(|| (until - now).as_secs().max(1))
}

/// The summarizer's state for one compression: cooling down (do not ask it), and where a
/// failure now starts its cooldown.
struct Summarizer<'a> {
    cooling: Option<fallback::Reason>,
    cooldowns: &'a DashMap<SessionId, Instant>,
    cooldown: Duration,
}

impl Summarizer<'_> {
    /// Recorded at once, so the cooldown holds even when the swap then fails.
    fn failed(&self, session: SessionId) {
        self.cooldowns
            .insert(session, Instant::now() + self.cooldown);
    }
}

async fn compress(
    store: &Store,
    hub: &EventHub,
    msg: &Compress,
    summarizer: &Summarizer<'_>,
) -> Result<Compacted, CompressFailure> {
    let refs: Vec<&Message> = msg.rows.iter().map(|(m, _)| m).collect();
    let tokens: std::collections::HashMap<MessageId, u64> =
        msg.rows.iter().map(|(m, t)| (m.id, *t)).collect();
    // A provider that proved an overflow gets the smallest request the protection allows.
    let tail_tokens = if msg.force {
        0
    } else {
        (f64::from(msg.window) * msg.config.target_ratio) as u64
    };
    let budget = Budget {
        protect_first_n: msg.config.protect_first_n,
        protect_last_n: msg.config.protect_last_n,
        tail_tokens,
    };
    let token_of = |m: &Message| tokens.get(&m.id).copied().unwrap_or(0);
    let Some(plan) = plan::plan(&refs, budget, token_of) else {
        return Err(CompressFailure::NothingToCompress);
    };
    let holder = msg.turn_id.to_string();
    let timeout_s = msg.config.timeout_s;
    let ttl_ms = i64::try_from((Duration::from_secs(timeout_s) + LOCK_SLACK).as_millis())
        .unwrap_or(i64::MAX);
    if !store
        .take_compression_lock(msg.session_id, &holder, ttl_ms)
        .await?
    {
        return Err(CompressFailure::Locked);
    }
    let outcome = summarize_and_swap(store, hub, msg, summarizer, &refs, plan, &token_of).await;
    if let Err(e) = store
        .release_compression_lock(msg.session_id, &holder)
        .await
    {
        // The lock's TTL frees it; the compression itself stands or failed on its own.
        tracing::warn!(session = %msg.session_id, error = %e, "could not release the compression lock");
    }
    outcome
}

async fn summarize_and_swap(
    store: &Store,
    hub: &EventHub,
    msg: &Compress,
    summarizer: &Summarizer<'_>,
    rows: &[&Message],
    plan: Plan,
    token_of: &dyn Fn(&Message) -> u64,
) -> Result<Compacted, CompressFailure> {
    let middle = &rows[plan.middle()];
    let epoch = msg.base_epoch.saturating_add(1);
    let replaced = middle.iter().filter(|m| m.summary_epoch.is_none()).count();
    let removed: u64 = middle.iter().map(|m| token_of(m)).sum();
    let started = Instant::now();
    let (content, fallback) = summary_content(msg, summarizer, middle, epoch, removed).await;
    let summary_estimate = estimate_tokens(&content).saturating_add(4);
    let after_tokens = after_tokens(msg, removed, &content);
    let after_idx = plan
        .head_end
        .checked_sub(1)
        .map(|i| rows[i].idx)
        .unwrap_or(0);
    let compressed: Vec<MessageId> = middle.iter().map(|m| m.id).collect();
    let summary = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::System),
        content: Some(content),
        display: Some(serde_json::json!({
            "kind": "compression_summary",
            "epoch": epoch,
            "replaced_messages": replaced,
            "fallback": fallback.as_ref().map(fallback::Reason::code),
        })),
        token_estimate: i64::try_from(summary_estimate).unwrap_or(i64::MAX),
        summary_after_idx: Some(after_idx),
        ..Default::default()
    };
    let event_data = serde_json::json!({
        "before_tokens": msg.before_tokens,
        "after_tokens": after_tokens,
        "compressed_messages": compressed.len(),
        "child_session_id": null,
        "summary_ms": started.elapsed().as_millis() as u64,
        "fallback": fallback.as_ref().map(fallback::Reason::code),
    });
    let (epoch, summary, rotated) = match msg.config.mode {
        CompressionMode::InPlace => {
            commit_in_place(store, hub, msg, middle, summary, event_data).await?
        }
        CompressionMode::Rotate => {
            commit_rotated(store, hub, msg, rows, &plan, summary, event_data).await?
        }
    };
    tracing::info!(
        session = %msg.session_id,
        epoch,
        before_tokens = msg.before_tokens,
        after_tokens,
        compressed = compressed.len(),
        child = ?rotated.as_ref().map(|r| r.child),
        fallback = fallback.as_ref().map(fallback::Reason::code),
        "compressed"
    );
    Ok(Compacted {
        epoch,
        summary,
        compressed,
        before_tokens: msg.before_tokens,
        after_tokens,
        rotated,
        fallback,
    })
}

/// The request's estimated size once `removed` tokens are replaced by `summary`.
fn after_tokens(msg: &Compress, removed: u64, summary: &str) -> u64 {
    msg.before_tokens
        .saturating_sub(removed)
        .saturating_add(estimate_tokens(summary).saturating_add(4))
}

/// The summary's text and, when it was made without a model, why: the summarizer's text cut
/// to its budget, unless the summarizer is cooling down, fails, or writes one that saves too
/// little.
async fn summary_content(
    msg: &Compress,
    summarizer: &Summarizer<'_>,
    middle: &[&Message],
    epoch: i32,
    removed: u64,
) -> (String, Option<fallback::Reason>) {
    let summary_tokens = summary_budget(msg.window, msg.config.target_ratio);
    let budget_bytes = summary_tokens as usize * BYTES_PER_TOKEN;
    let replaced = middle.iter().filter(|m| m.summary_epoch.is_none()).count();
    let model_text = match &summarizer.cooling {
        Some(reason) => Err(reason.clone()),
        None => ask(msg, middle, summary_tokens).await,
    };
    let made_without =
        |reason: &fallback::Reason| fallback::summary(middle, epoch, reason, budget_bytes);
    let (content, fallback) = match model_text {
        Ok(text) => {
            // A model that ignores `max_tokens` is cut to the budget it was given, not refused.
            if text.trim().len() > budget_bytes {
                tracing::info!(session = %msg.session_id, bytes = text.trim().len(), budget_bytes, "the summary is longer than its budget; cut to it");
            }
            let text = fallback::cut_to_budget(text.trim(), budget_bytes);
            let content = summary::summary_text(replaced, epoch, &text);
            let after = after_tokens(msg, removed, &content);
            let useless = after as f64 > msg.before_tokens as f64 * USELESS_RATIO;
            keep_or_replace(content, useless, || {
                made_without(&fallback::Reason::Useless)
            })
        }
        Err(reason) => (made_without(&reason), Some(reason)),
    };
    if let Some(reason) = fallback.as_ref().filter(|r| r.is_failure()) {
        summarizer.failed(msg.session_id);
        tracing::warn!(session = %msg.session_id, reason = reason.code(), ?reason, "the summarizer failed; compressing with the summary made without a model");
    }
    (content, fallback)
}

/// What a swap committed: the new epoch, the summary row, and the child when it rotated.
type Swapped = (i32, Message, Option<Rotated>);

/// `compression.mode = "in_place"`: the middle is marked compressed, the summary inserted.
async fn commit_in_place(
    store: &Store,
    hub: &EventHub,
    msg: &Compress,
    middle: &[&Message],
    summary: NewMessage,
    event_data: serde_json::Value,
) -> Result<Swapped, CompressFailure> {
    let compaction = Compaction {
        session_id: msg.session_id,
        turn_id: msg.turn_id,
        admission_id: msg.admission_id,
        base_epoch: msg.base_epoch,
        compressed: middle
            .iter()
            .map(|m| Replaced {
                id: m.id,
                idx: m.idx,
                summary: m.summary_epoch.is_some(),
            })
            .collect(),
        summary,
        event_data,
    };
    let done = store.commit_compression(&msg.fence, &compaction).await?;
    crate::kill_point!("compression.after_commit");
    hub.publish(done.event);
    Ok((done.epoch, done.summary, None))
}

/// `compression.mode = "rotate"` (SPEC R6.4): the live transcript moves into a child session.
async fn commit_rotated(
    store: &Store,
    hub: &EventHub,
    msg: &Compress,
    rows: &[&Message],
    plan: &Plan,
    summary: NewMessage,
    event_data: serde_json::Value,
) -> Result<Swapped, CompressFailure> {
    // The child starts from the kept rows; an earlier summary is superseded by this one (the
    // middle it summarized went into the new summary's input).
    let kept = |range: std::ops::Range<usize>| -> Vec<MessageId> {
        rows[range]
            .iter()
            .filter(|m| m.summary_epoch.is_none())
            .map(|m| m.id)
            .collect()
    };
    let rotation = Rotation {
        session_id: msg.session_id,
        turn_id: msg.turn_id,
        admission_id: msg.admission_id,
        base_epoch: msg.base_epoch,
        child_id: SessionId::new(),
        head: kept(0..plan.head_end),
        tail: kept(plan.tail_start..rows.len()),
        summary,
        event_data,
    };
    let done = store.commit_rotation(&msg.fence, &rotation).await?;
    crate::kill_point!("compression.after_commit");
    for ev in done.events {
        hub.publish(ev);
    }
    let summary = done
        .rows
        .iter()
        .find(|m| m.summary_epoch.is_some())
        .cloned()
        .ok_or_else(|| StoreError::Corrupt("the rotated child has no summary".into()))?;
    let rotated = Rotated {
        child: done.child.id,
        rows: done.rows,
        kept: rotation
            .head
            .iter()
            .chain(&rotation.tail)
            .copied()
            .collect(),
    };
    Ok((done.epoch, summary, Some(rotated)))
}

/// The summarizer's text for `middle`, or why there is none: an error, no answer within
/// `compression.timeout_s`, or an empty one.
async fn ask(
    msg: &Compress,
    middle: &[&Message],
    summary_tokens: u32,
) -> Result<String, fallback::Reason> {
    // About four bytes a token: half the summarizer's window for the conversation (at least
    // 2 KiB, so a tiny window still gets a useful excerpt; at most 400 KiB).
    let input_bytes = (msg.summarizer.context_window() as usize)
        .saturating_mul(2)
        .clamp(2 * 1024, 400 * 1024);
    let req = ChatRequest {
        model: msg.summarizer.model().to_owned(),
        messages: summary::request_messages(middle, input_bytes, summary_tokens * 3 / 4),
        tools: Vec::new(),
        stream: false,
        max_tokens: Some(summary_tokens),
        temperature: None,
        prefill: false,
    };
    let timeout_s = msg.config.timeout_s;
    let call = msg.summarizer.chat(&req, &|_| {});
    match tokio::time::timeout(Duration::from_secs(timeout_s), call).await {
        Err(_) => Err(fallback::Reason::Timeout { timeout_s }),
        Ok(Err(e)) => Err(fallback::Reason::Failed(e.to_string())),
        Ok(Ok(r)) => match r.content {
            Some(text) if !text.trim().is_empty() => Ok(text),
            _ => Err(fallback::Reason::Empty),
        },
    }
}

/// The model's summary `content`, unless it is `useless` and the summary made without a model
/// is shorter: a middle too small to save much is no fault of the summary (the anti-thrash
/// cooldown handles that).
fn keep_or_replace(
    content: String,
    useless: bool,
    made_without: impl FnOnce() -> String,
) -> (String, Option<fallback::Reason>) {
    if !useless {
        return (content, None);
    }
    let instead = made_without();
    if estimate_tokens(&instead) < estimate_tokens(&content) {
        (instead, Some(fallback::Reason::Useless))
    } else {
        (content, None)
    }
}

/// Tokens the summary may take: a quarter of the kept budget, between 256 and 2,000.
fn summary_budget(window: u32, target_ratio: f64) -> u32 {
    ((f64::from(window) * target_ratio / 4.0) as u32).clamp(256, 2_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r6_5_a_useless_model_summary_is_replaced_by_a_shorter_fallback() {
        let long = "word ".repeat(400);
        let (kept, why) = keep_or_replace(long.clone(), false, || "short".into());
        assert_eq!(
            (kept.as_str(), why),
            (long.as_str(), None),
            "a useful summary stays"
        );
        let (kept, why) = keep_or_replace(long.clone(), true, || "short".into());
        assert_eq!(kept, "short");
        assert_eq!(why, Some(fallback::Reason::Useless));
        // Not when the fallback would be no shorter: the middle was too small to save much.
        let (kept, why) = keep_or_replace("short".into(), true, || long.clone());
        assert_eq!((kept.as_str(), why), ("short", None));
    }

    #[test]
    fn r6_3_summary_budget_is_bounded() {
        assert_eq!(summary_budget(16_000, 0.2), 800);
        assert_eq!(summary_budget(2_048, 0.2), 256);
        assert_eq!(summary_budget(1_000_000, 0.2), 2_000);
        assert!(summary_budget(u32::MAX, 1.0) as usize * BYTES_PER_TOKEN <= fallback::MAX_CHARS);
    }
}
