//! The provider call (SPEC R8): build the wire copy from the transcript (never the other way),
//! call with per-attempt retries that respect interrupts, and stream text to clients through
//! a coalescing delta publisher.
use super::context::TurnContext;
use super::echo::{EchoFilter, Follow};
use super::TurnControl;
use crate::delivery::{DeliveryActor, Publish};
use crate::deps::Models;
use crate::stages::{timed, Stage, TURNS};
use actix::Addr;
use serde_json::json;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use turnkey_providers::activity::BytesSeen;
use turnkey_providers::{
    ChatMessage, ChatRequest, ChatResponse, Provider, ProviderError, Role, ToolCall,
};
use turnkey_storage::{AdmissionId, EventKind, Message, MessageRole, NewEvent, SessionId, TurnId};

/// Largest coalesced `message.delta` payload, in bytes.
const MAX_DELTA_BYTES: usize = 8 * 1024;

/// The wire copy (SPEC R5.4): the stored system prompt, then each row as it was sent
/// (`api_content` when recorded), stripped of bookkeeping fields. Tool results follow their
/// call in call order (they are stored in the order they finished), and a call without a
/// result row, or a result without its call, is repaired rather than sent broken (R6.3).
///
/// A user row's attachments (SPEC R8.1, only the wire copy changes) go on as
/// `turn::attached` shows them: image parts when `vision`, notes and text otherwise.
pub fn wire_messages(ctx: &TurnContext, vision: bool) -> Vec<ChatMessage> {
    let rows = ctx.live_rows();
    let mut out = Vec::with_capacity(rows.len() + 1);
    out.push(ChatMessage::system(ctx.system_prompt.clone()));
    let mut summary_at = None;
    let mut i = 0;
    while i < rows.len() {
        let m = rows[i];
        i += 1;
        match m.role {
            // A result is sent right after its call (below), never on its own.
            MessageRole::Tool => continue,
            MessageRole::Assistant if m.tool_calls.is_some() => {
                let call = wire_row(m);
                let mut results: HashMap<&str, &Message> = HashMap::new();
                while let Some(r) = rows.get(i).filter(|r| r.role == MessageRole::Tool) {
                    if let Some(id) = r.tool_call_id.as_deref() {
                        results.insert(id, r);
                    }
                    i += 1;
                }
                let ordered: Vec<ChatMessage> = call
                    .tool_calls
                    .iter()
                    .map(|c| match results.get(c.id.as_str()) {
                        Some(r) => wire_row(r),
                        None => ChatMessage {
                            images: Vec::new(),
                            role: Role::Tool,
                            content: Some(
                                json!({"error": "no result was recorded for this call"})
                                    .to_string(),
                            ),
                            tool_calls: Vec::new(),
                            tool_call_id: Some(c.id.clone()),
                            name: Some(c.name.clone()),
                        },
                    })
                    .collect();
                out.push(call);
                out.extend(ordered);
            }
            _ if m.summary_epoch.is_some() => {
                summary_at = Some(out.len());
                out.push(wire_row(m));
            }
            MessageRole::User if m.attachments.is_some() => {
                out.push(super::attached::with_attachments(
                    wire_row(m),
                    m,
                    ctx,
                    vision,
                ));
            }
            _ => out.push(wire_row(m)),
        }
    }
    if let Some(at) = summary_at {
        place_summary(&mut out, at);
    }
    out
}

/// A compression summary is stored as a system row; on the wire it takes the role that keeps
/// user and assistant turns alternating with its neighbours (SPEC R6.3). When neither role
/// can (a user message before it, an assistant message after it), it joins the user message.
fn place_summary(out: &mut Vec<ChatMessage>, at: usize) {
    let role_at = |i: usize| out.get(i).map(|m| m.role);
    let prev = at
        .checked_sub(1)
        .and_then(role_at)
        .filter(|r| *r != Role::System);
    let next = role_at(at + 1);
    let clashes = |r: Role| prev == Some(r) || next == Some(r);
    if !clashes(Role::User) {
        out[at].role = Role::User;
    } else if !clashes(Role::Assistant) {
        out[at].role = Role::Assistant;
    } else {
        // One neighbour is a user message and the other an assistant one: join the user's.
        let summary = out.remove(at).content.unwrap_or_default();
        let (user, before) = if prev == Some(Role::User) {
            (at - 1, false)
        } else {
            (at, true)
        };
        let user = &mut out[user];
        user.content = Some(match user.content.take() {
            Some(c) if !c.is_empty() && before => format!("{summary}\n\n{c}"),
            Some(c) if !c.is_empty() => format!("{c}\n\n{summary}"),
            _ => summary,
        });
    }
}

fn wire_row(m: &Message) -> ChatMessage {
    let role = match m.role {
        MessageRole::System => Role::System,
        MessageRole::User => Role::User,
        MessageRole::Assistant => Role::Assistant,
        MessageRole::Tool => Role::Tool,
    };
    let tool_calls: Vec<ToolCall> = m
        .tool_calls
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    ChatMessage {
        images: Vec::new(),
        role,
        content: m.api_content.clone().or_else(|| m.content.clone()),
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
    }
}

/// The tool schemas offered to this turn's model: the always-on ones and the index of the
/// rest (`toolbox::index`), but for a sub-agent's session without the ones children do not get
/// (SPEC R1.5).
fn offered(models: Models<'_>, ctx: &TurnContext) -> Vec<turnkey_providers::ToolSchema> {
    if !crate::delegation::is_child(&ctx.session) {
        return models.tool_schemas.to_vec();
    }
    models
        .tool_offer
        .schemas_without(crate::delegation::withheld(models.config))
}

/// The model a request to `provider` names: the chosen one (the session's or the input's) on
/// the provider serving it; the provider's own on any other one the chain falls back to. A
/// chosen name no provider serves goes as given to the primary only (the name of another model
/// of the same server).
pub fn model_for(models: Models<'_>, ctx: &TurnContext, provider: &dyn Provider) -> String {
    let own = provider.model();
    match ctx.model_override.as_deref() {
        None => own.to_owned(),
        Some(m) if m == own => own.to_owned(),
        Some(m) => {
            let served = models.set.serving(m).is_some();
            let primary = models
                .set
                .primary()
                .is_some_and(|p| std::ptr::addr_eq(Arc::as_ptr(p), provider));
            if !served && primary {
                m.to_owned()
            } else {
                own.to_owned()
            }
        }
    }
}

/// The request for `messages`. A call of a tool listed behind the `tools` index goes on the
/// wire as the index call the model made: a request names only the tools it offers.
pub fn build_request(
    models: Models<'_>,
    ctx: &TurnContext,
    provider: &dyn Provider,
    mut messages: Vec<ChatMessage>,
    stream: bool,
) -> ChatRequest {
    for call in messages.iter_mut().flat_map(|m| m.tool_calls.iter_mut()) {
        if let Some(wired) = models.tool_offer.wrap(call) {
            *call = wired;
        }
    }
    ChatRequest {
        model: model_for(models, ctx, provider),
        messages,
        tools: offered(models, ctx),
        stream: stream && models.config.agent.streaming,
        max_tokens: None,
        temperature: None,
        prefill: false,
    }
}

pub enum CallOutcome {
    Response(ChatResponse),
    Stopped,
    Failed(ProviderError),
}

/// Calls `provider` with retries for retryable errors. Text already streamed is never
/// re-streamed: after a stream broke mid-answer the retry asks for a non-streamed response,
/// whose full text arrives in the authoritative `message.complete`. `asked` is what turnkey
/// added at the end of this request (a prefill, an instruction to continue, a recovery
/// nudge): a reply that opens by echoing it streams without the echo, joined at a word
/// boundary to the text before it (`echo`).
pub async fn call_with_retries(
    models: Models<'_>,
    ctx: &TurnContext,
    control: &TurnControl,
    provider: &dyn Provider,
    mut req: ChatRequest,
    asked: Option<&Follow>,
    streamed: &StreamedText,
) -> CallOutcome {
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
            Ok(mut resp) => {
                // The model's text and its calls' arguments are masked like any text that
                // reaches the transcript: a call runs with the arguments its row keeps.
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
                return CallOutcome::Response(resp);
            }
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
pub fn delta_event(ids: (SessionId, TurnId, AdmissionId), text: String) -> NewEvent {
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
