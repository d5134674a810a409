//! The call (SPEC R8): one model call with per-attempt retries that respect interrupts, its
//! text streamed to clients through a coalescing delta publisher. Entered from one place per
//! call, `call`: by `normalize` for the loop's calls and their follow-ups, and by `grace` for
//! the budget's last one. What it sends was assembled by `wire` (through preflight). The
//! stream's last delta is held back for the turn's end, which commits it (`deliver`).
use super::context::TurnContext;
use super::echo::{EchoFilter, Follow};
use super::TurnControl;
use crate::delivery::{DeliveryActor, Publish};
use crate::deps::Models;
use crate::stages::{timed, Stage, TURNS};
use actix::Addr;
use serde_json::json;
use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;
use turnkey_providers::activity::BytesSeen;
use turnkey_providers::{ChatRequest, ChatResponse, Provider, ProviderError};
use turnkey_storage::{AdmissionId, EventKind, NewEvent, SessionId, TurnId};

/// Largest coalesced `message.delta` payload, in bytes.
const MAX_DELTA_BYTES: usize = 8 * 1024;

/// What every model call of one turn shares.
#[derive(Clone, Copy)]
pub struct Calls<'a> {
    pub models: Models<'a>,
    pub control: &'a TurnControl,
    pub streamed: &'a StreamedText,
}

/// How one call ended.
pub enum CallOutcome {
    Response(ChatResponse),
    Stopped,
    Failed(ProviderError),
}

/// One model call: `req` to `provider`, with retries; `record` sees the response received,
/// for the usage ledger (one row per call).
pub async fn call(
    c: Calls<'_>,
    ctx: &TurnContext,
    provider: &dyn Provider,
    req: ChatRequest,
    asked: Option<&Follow>,
    record: &mut (dyn FnMut(&ChatResponse) + Send),
) -> CallOutcome {
    let outcome = with_retries(c, ctx, provider, req, asked).await;
    if let CallOutcome::Response(r) = &outcome {
        record(r);
    }
    outcome
}

/// Calls `provider` with retries for retryable errors. Text already streamed is never
/// re-streamed: after a stream broke mid-answer the retry asks for a non-streamed response,
/// whose full text arrives in the authoritative `message.complete`. `asked` is what turnkey
/// added at the end of this request (a prefill, an instruction to continue, a recovery
/// nudge): a reply that opens by echoing it streams without the echo, joined at a word
/// boundary to the text before it (`echo`).
async fn with_retries(
    c: Calls<'_>,
    ctx: &TurnContext,
    provider: &dyn Provider,
    mut req: ChatRequest,
    asked: Option<&Follow>,
) -> CallOutcome {
    let Calls {
        models,
        control,
        streamed,
    } = c;
    let policy = provider.retry_policy();
    let mut attempt = 0;
    loop {
        attempt += 1;
        // An earlier call's held-back delta goes out before anything this one streams.
        if let Some(text) = streamed.take_held() {
            publish_delta(models.delivery, ctx, text).await;
        }
        // A turn shown without streaming (SPEC R3.1) publishes no `message.delta`: its answer
        // comes with `message.complete`.
        let publisher = ctx
            .display
            .stream
            .then(|| DeltaPublisher::spawn(models, ctx));
        // An echo of what this call added never reaches a client.
        let echo = EchoFilter::new(asked);
        let show = |text: &str| {
            streamed.push(text);
            if let Some(p) = &publisher {
                p.send(text);
            }
        };
        let sink = |text: &str| {
            control.touch();
            if let Some(text) = echo.pass(text) {
                show(&text);
            }
        };
        // Any byte of the stream, text or not, is a sign of life for the watchdog (SPEC R4.3).
        let alive = control.clone();
        let seen: BytesSeen = std::sync::Arc::new(move || alive.touch());
        let call = turnkey_providers::activity::on_bytes(seen, provider.chat(&req, &sink));
        let result = tokio::select! {
            r = timed(Stage::Provider, call) => Some(r),
            _ = control.stopped() => None,
        };
        if let Some(rest) = echo.finish() {
            show(&rest);
        }
        if let Some(Err(e)) = &result {
            TURNS.provider_error(e.code());
        }
        // The stream's last delta: held back when this response may be the turn's final
        // answer, so that it commits with the turn's end (one write fewer a turn); committed
        // now otherwise (a tool round or another call follows).
        let rest = match publisher {
            Some(p) => p.finish().await,
            None => None,
        };
        if let Some(rest) = rest {
            match &result {
                Some(Ok(r)) if r.tool_calls.is_empty() => streamed.hold(rest),
                _ => publish_delta(models.delivery, ctx, rest).await,
            }
        }
        control.touch();
        let Some(result) = result else {
            return CallOutcome::Stopped;
        };
        match result {
            Ok(resp) => return CallOutcome::Response(masked(models, resp)),
            Err(e) if e.is_retryable() && attempt < policy.max_attempts => {
                let wait = policy.delay_for(attempt, &e);
                tracing::warn!(turn = %ctx.turn_id, attempt, error = %e, ?wait, "provider call failed; retrying");
                if !streamed.is_empty() {
                    req.stream = false;
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = control.stopped() => return CallOutcome::Stopped,
                }
            }
            Err(e) => return CallOutcome::Failed(e),
        }
    }
}

/// The model's text and its calls' arguments are masked like any text that reaches the
/// transcript: a call runs with the arguments its row keeps.
fn masked(models: Models<'_>, mut resp: ChatResponse) -> ChatResponse {
    if let Some(t) = &resp.content {
        if let Cow::Owned(masked) = models.redactor.redact(t) {
            resp.content = Some(masked);
        }
    }
    for call in &mut resp.tool_calls {
        if let Cow::Owned(masked) = models.redactor.redact(&call.arguments) {
            call.arguments = masked;
        }
    }
    resp
}

/// Everything streamed during the turn, for recovering a final answer that the provider's
/// last response left empty (SPEC R10.2); and the stream's last `message.delta` text while it
/// is held back to commit with the turn's end (`finalize`), or with the next call's first.
#[derive(Default)]
pub struct StreamedText {
    text: Mutex<String>,
    held: Mutex<String>,
}

impl StreamedText {
    fn push(&self, t: &str) {
        if let Ok(mut s) = self.text.lock() {
            s.push_str(t);
        }
    }
    pub fn is_empty(&self) -> bool {
        self.text.lock().map(|s| s.is_empty()).unwrap_or(true)
    }
    pub fn take(&self) -> String {
        self.text
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }
    fn hold(&self, t: String) {
        if let Ok(mut s) = self.held.lock() {
            s.push_str(&t);
        }
    }
    /// The delta text held back and not committed yet, if any.
    pub fn take_held(&self) -> Option<String> {
        self.held
            .lock()
            .ok()
            .map(|mut s| std::mem::take(&mut *s))
            .filter(|s| !s.is_empty())
    }
}

/// A `message.delta` event of `text` for the turn `ids` names (session, turn, admission).
pub(super) fn delta_event(ids: (SessionId, TurnId, AdmissionId), text: String) -> NewEvent {
    NewEvent {
        session_id: ids.0,
        kind: EventKind::MessageDelta,
        turn_id: Some(ids.1),
        admission_id: Some(ids.2),
        data: json!({ "text": text }),
    }
}

fn ids_of(ctx: &TurnContext) -> (SessionId, TurnId, AdmissionId) {
    (ctx.session.id, ctx.turn_id, ctx.admission.id)
}

/// Commits one `message.delta` now, under the turn's fence, through the delivery actor.
async fn publish_delta(delivery: &Addr<DeliveryActor>, ctx: &TurnContext, text: String) {
    let publish = Publish {
        fence: Some(ctx.fence.clone()),
        event: delta_event(ids_of(ctx), text),
    };
    deliver(delivery, publish, ctx.turn_id).await;
}

/// Sends `publish` to the delivery actor and waits for its commit. Deltas are a live view;
/// the transcript and `message.complete` are the durable answer. A lost delta is logged, and
/// a fenced turn stops at its next fenced write.
pub async fn deliver(delivery: &Addr<DeliveryActor>, publish: Publish, turn_id: TurnId) {
    match delivery.send(publish).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(turn = %turn_id, error = %e, "delta not committed"),
        Err(e) => tracing::warn!(turn = %turn_id, error = %e, "delivery unavailable"),
    }
}

/// Coalesces streamed fragments into a few `message.delta` events a second, committed through
/// the delivery actor under the turn's fence, in order. What it was still gathering when the
/// stream ended is not committed: `finish` hands it back.
struct DeltaPublisher {
    tx: mpsc::UnboundedSender<String>,
    task: tokio::task::JoinHandle<Option<String>>,
}

impl DeltaPublisher {
    fn spawn(models: Models<'_>, ctx: &TurnContext) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let delivery = models.delivery.clone();
        let fence = ctx.fence.clone();
        let ids = ids_of(ctx);
        let window = Duration::from_millis(models.config.agent.delta_flush_ms);
        let redactor = models.redactor.clone();
        let task = tokio::spawn(async move {
            // The end of the text so far that may be the start of a secret: it waits for
            // the next window (or the end) to be masked whole.
            let mut unsettled = String::new();
            let masked = |t: &str| redactor.redact(t).into_owned();
            while let Some(first) = rx.recv().await {
                let mut buf = std::mem::take(&mut unsettled);
                buf.push_str(&first);
                let deadline = tokio::time::Instant::now() + window;
                while buf.len() < MAX_DELTA_BYTES {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(more)) => buf.push_str(&more),
                        // The stream ended: the rest goes back to `finish`.
                        Ok(None) => return Some(masked(&buf)),
                        Err(_) => break,
                    }
                }
                let settled = redactor.settled_len(&buf);
                unsettled = buf.split_off(settled);
                if buf.is_empty() {
                    continue;
                }
                let publish = Publish {
                    fence: Some(fence.clone()),
                    event: delta_event(ids, masked(&buf)),
                };
                deliver(&delivery, publish, ids.1).await;
            }
            (!unsettled.is_empty()).then(|| masked(&unsettled))
        });
        Self { tx, task }
    }

    fn send(&self, text: &str) {
        if !text.is_empty() && self.tx.send(text.to_owned()).is_err() {
            tracing::debug!("delta publisher already finished");
        }
    }

    /// Waits until every full window is committed; answers the text gathered since the last
    /// one, not committed.
    async fn finish(self) -> Option<String> {
        drop(self.tx);
        match self.task.await {
            Ok(rest) => rest,
            Err(e) => {
                tracing::warn!(error = %e, "delta publisher panicked");
                None
            }
        }
    }
}
