//! Streamed drafts (SPEC R11.1): with `platforms.<p>.stream = true`, a turn's answer shows up in
//! its chat as it is written. One message is sent as the answer starts, then edited with the
//! growing text at most once per `edit_interval_ms`, always ending in a visible "still writing"
//! marker. What a draft shows only ever grows: complete lines are formatted (a code fence still
//! open is shown closed), and of the line being written only the part no later text can change
//! (see `stable_markdown`). The final reply (the outbox row of the turn's end) edits the draft,
//! without the marker, and sends any further pieces as new messages; the generic webhook gets
//! the raw text so far in POSTs with `final: false`.
//!
//! Drafts follow live events (`EventHub::subscribe_all`: `turn.started`, `message.delta`) and are
//! best effort: a failed edit is logged and the next one tries again, and a draft is never
//! written ahead of an earlier message of the same chat still waiting in the outbox. The draft's
//! message id is recorded durably, as an outbox row of kind `draft` keyed `draft:<turn_id>`
//! (already `sent`), so the final edit finds it even from another process, and so does a
//! resumed turn (SPEC R13.9), whose draft starts again in that same message.
use super::client::CallError;
use super::draft_text::{render, Rendered};
use super::send::Clients;
use super::slack::{self, SlackChannel};
use super::telegram::{Outgoing, TelegramChat};
use super::ChatTarget;
use crate::deps::Deps;
use dashmap::DashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;
use turnkey_storage::{Event, EventKind, NewOutbox, SessionId, TurnId};

/// Starts the line a draft shows for a tool the turn shows starting (SPEC R3.1).
pub const TOOL_MARK: &str = "🔧";
/// A draft nobody settled (its turn's reply went elsewhere) is dropped this long after it began.
const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);

/// The live drafts of this process, by turn.
#[derive(Clone)]
pub struct Drafts {
    inner: Arc<Inner>,
}

struct Inner {
    deps: Arc<Deps>,
    clients: Clients,
    live: DashMap<TurnId, Arc<Draft>>,
}

struct Draft {
    chat: ChatTarget,
    session_id: SessionId,
    turn_id: TurnId,
    interval: Duration,
    /// The generic webhook's `in_reply_to`: the inbound message answered.
    in_reply_to: Option<String>,
    created: Instant,
    state: Mutex<State>,
    /// Held during a platform call; `settle` takes it so the final edit comes after the last.
    calls: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Everything streamed so far (Markdown).
    text: String,
    /// What the chat shows of the last draft sent (visible text, without the marker).
    shown: String,
    last_body: Option<String>,
    message_id: Option<String>,
    /// When the last call started: the next waits `interval` from there.
    last_call: Option<Instant>,
    closed: bool,
    /// Too long for one message: no more edits; the final reply splits it.
    frozen: bool,
    /// A flush task is running for this draft.
    scheduled: bool,
    /// The turn shows text written before a tool round (`display.interim`).
    interim: bool,
    /// Model text came after the last tool event: at the next, it is interim.
    after_text: bool,
    /// Bumped when the interim text is dropped: a call in flight then does not record what it
    /// showed as the base later drafts must append to (the next draft replaces it).
    epoch: u64,
}

impl Draft {
    fn state(&self) -> MutexGuard<'_, State> {
        // Plain data: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drafts {
    /// Starts following live events, when a configured platform streams.
    pub fn spawn(deps: Arc<Deps>, clients: Clients) -> Self {
        let drafts = Self {
            inner: Arc::new(Inner {
                deps,
                clients,
                live: DashMap::new(),
            }),
        };
        let follower = drafts.clone();
        let mut rx = drafts.inner.deps.hub.subscribe_all();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => follower.on_event(&ev).await,
                    // Drafts are a live view: missed deltas only make a draft stop early.
                    Err(RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "drafts lagged behind live events");
                        follower.freeze_all();
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        drafts
    }

    /// Ends the draft of `turn`: no edit starts after this, and the one in flight (if any) has
    /// answered, and `edit_interval_ms` since the last has passed. Answers the draft's platform
    /// message id, if one was sent by this process.
    pub async fn settle(&self, turn: TurnId) -> Option<String> {
        let (_, draft) = self.inner.live.remove(&turn)?;
        draft.state().closed = true;
        let _call = draft.calls.lock().await;
        let wait = {
            let s = draft.state();
            s.last_call
                .map(|t| (t + draft.interval).saturating_duration_since(Instant::now()))
                .unwrap_or_default()
        };
        tokio::time::sleep(wait.min(draft.interval)).await;
        let id = draft.state().message_id.clone();
        id
    }

    fn freeze_all(&self) {
        for d in self.inner.live.iter() {
            d.state().frozen = true;
        }
    }

    async fn on_event(&self, ev: &Event) {
        let Some(turn) = ev.turn_id else {
            return;
        };
        match ev.kind {
            EventKind::TurnStarted => {
                self.forget_old();
                if let Err(e) = self.start(ev, turn).await {
                    tracing::warn!(%turn, error = %e, "no draft for this turn");
                }
            }
            EventKind::MessageDelta => {
                let text = ev.data.get("text").and_then(|t| t.as_str()).unwrap_or("");
                self.change(turn, |s| {
                    s.text.push_str(text);
                    s.after_text = true;
                });
            }
            EventKind::ToolStarted | EventKind::ToolCompleted => {
                let started = ev.kind == EventKind::ToolStarted;
                let name = ev.data.get("name").and_then(|n| n.as_str()).unwrap_or("");
                self.change(turn, |s| {
                    // At a tool round the text written so far was interim: a turn shown
                    // without it (`display.interim = false`) drops it from the draft.
                    if s.after_text && !s.interim {
                        s.text.clear();
                        s.shown.clear();
                        s.last_body = None;
                        s.epoch += 1;
                    }
                    s.after_text = false;
                    // A tool the turn shows starting gets a line; the next model call's text
                    // starts a paragraph of its own.
                    paragraph_break(&mut s.text);
                    if started && !name.is_empty() {
                        s.text.push_str(&format!("{TOOL_MARK} {name}\n\n"));
                    }
                });
            }
            EventKind::TurnResumed => {
                // The cut attempt's draft takes no more edits; the resumed attempt's
                // `turn.started` (next in the same commit) starts it again in the same message.
                if let Some(d) = self.inner.live.get(&turn) {
                    d.state().closed = true;
                }
            }
            EventKind::TurnFinished | EventKind::TurnUnknown => {
                // No edit after the turn ended: the reply takes over.
                if let Some(d) = self.inner.live.get(&turn) {
                    d.state().closed = true;
                }
            }
            _ => {}
        }
    }

    /// Changes the live draft of `turn`, if any, and has its flush run.
    fn change(&self, turn: TurnId, f: impl FnOnce(&mut State)) {
        let Some(draft) = self.inner.live.get(&turn).map(|d| d.clone()) else {
            return;
        };
        let spawn = {
            let mut s = draft.state();
            f(&mut s);
            let spawn = !s.scheduled && !s.closed && !s.frozen;
            s.scheduled |= spawn;
            spawn
        };
        if spawn {
            tokio::spawn(self.clone().flush(draft));
        }
    }

    /// A turn of a chat whose platform streams gets a draft when the turn is shown streaming
    /// (SPEC R3.1: unless the session or the input says `display.stream = false`), and unless
    /// the chat still waits for an earlier message (the draft would overtake it).
    async fn start(&self, ev: &Event, turn: TurnId) -> Result<(), turnkey_storage::StoreError> {
        let deps = &self.inner.deps;
        let Some(session) = deps.store.get_session(ev.session_id).await? else {
            return Ok(());
        };
        let Some(key) = session.chat_key.as_deref() else {
            return Ok(());
        };
        let Some(chat) = ChatTarget::parse(key) else {
            return Ok(());
        };
        let interval = match deps.config.platforms.settings(chat.platform()) {
            Some(s) if s.stream() => Duration::from_millis(s.edit_interval_ms()),
            _ => return Ok(()),
        };
        let admission = match ev.admission_id {
            Some(a) => deps.store.get_admission(a).await?,
            None => None,
        };
        let input = admission.as_ref().and_then(|a| a.payload.get("display"));
        let display = deps.config.display(&session, input);
        if !display.stream {
            return Ok(());
        }
        if deps.store.open_outbox_in_chat(key).await? > 0 {
            tracing::debug!(%turn, chat = key, "no draft: the chat waits for an earlier message");
            return Ok(());
        }
        let in_reply_to = match (&chat, &admission) {
            (ChatTarget::Webhook { .. }, Some(a)) => {
                a.request_id.strip_prefix("webhook:").map(str::to_owned)
            }
            _ => None,
        };
        // A resumed turn (SPEC R13.9) edits the draft its cut attempt sent, whichever process
        // sent it: from the start, with the resumed attempt's text, never as a second reply.
        let message_id = if ev.data.get("resumed").and_then(|r| r.as_bool()) == Some(true) {
            deps.store
                .outbox_by_key(&draft_key(turn))
                .await?
                .and_then(|r| r.platform_message_id)
        } else {
            None
        };
        self.inner.live.insert(
            turn,
            Arc::new(Draft {
                interval,
                chat,
                session_id: ev.session_id,
                turn_id: turn,
                in_reply_to,
                created: Instant::now(),
                state: Mutex::new(State {
                    message_id,
                    interim: display.interim,
                    ..State::default()
                }),
                calls: tokio::sync::Mutex::new(()),
            }),
        );
        Ok(())
    }

    /// Drops drafts whose turn ended long ago without a reply settling them.
    fn forget_old(&self) {
        self.inner
            .live
            .retain(|_, d| d.created.elapsed() < FORGET_AFTER);
    }

    /// Sends the draft's current text, then again as long as it keeps growing, one call per
    /// interval at most.
    async fn flush(self, draft: Arc<Draft>) {
        loop {
            let wait = {
                let s = draft.state();
                s.last_call
                    .map(|t| (t + draft.interval).saturating_duration_since(Instant::now()))
                    .unwrap_or_default()
            };
            tokio::time::sleep(wait).await;
            let _call = draft.calls.lock().await;
            let (body, visible, markdown, epoch) = {
                let mut s = draft.state();
                if s.closed || s.frozen {
                    s.scheduled = false;
                    return;
                }
                match render(&draft.chat, &s.text, s.message_id.is_some()) {
                    Rendered::Nothing => {
                        s.scheduled = false;
                        return;
                    }
                    Rendered::TooLong => {
                        s.frozen = true;
                        s.scheduled = false;
                        return;
                    }
                    Rendered::Body {
                        body,
                        visible,
                        markdown,
                    } => {
                        let unchanged = s.last_body.as_deref() == Some(body.as_str());
                        // Only ever append: a draft that would change what is shown waits.
                        if unchanged || !visible.starts_with(&s.shown) {
                            s.scheduled = false;
                            return;
                        }
                        s.last_call = Some(Instant::now());
                        (body, visible, markdown, s.epoch)
                    }
                }
            };
            let message_id = draft.state().message_id.clone();
            let sent = self.call(&draft, &body, message_id.as_deref()).await;
            match sent {
                Ok(id) => {
                    let first = {
                        let mut s = draft.state();
                        // Interim text dropped while this call ran: the chat shows it for now,
                        // and the next draft replaces it rather than appends to it.
                        if s.epoch == epoch {
                            s.last_body = Some(body);
                            s.shown = visible;
                        }
                        let first = s.message_id.is_none() && id.is_some();
                        if first {
                            s.message_id = id.clone();
                        }
                        first
                    };
                    if let (true, Some(id)) = (first, id) {
                        self.record(&draft, &markdown, &id).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(turn = %draft.turn_id, error = %e, "draft not updated");
                    if let CallError::RateLimited {
                        retry_after: Some(after),
                        ..
                    } = &e
                    {
                        // The next call waits what the platform asked for.
                        let next = Instant::now() + *after;
                        draft.state().last_call = next.checked_sub(draft.interval);
                    }
                    if matches!(e, CallError::Permanent(_) | CallError::Ambiguous(_))
                        && message_id.is_none()
                    {
                        // No message to edit: later drafts could only send more messages.
                        draft.state().frozen = true;
                    }
                }
            }
            let again = {
                let mut s = draft.state();
                let grew = render(&draft.chat, &s.text, s.message_id.is_some()).body()
                    != s.last_body.as_deref();
                let again = grew && !s.closed && !s.frozen;
                s.scheduled = again;
                again
            };
            if !again {
                return;
            }
        }
    }

    /// One draft call: a new message (answers its id) or an edit of `message_id`.
    async fn call(
        &self,
        draft: &Draft,
        body: &str,
        message_id: Option<&str>,
    ) -> Result<Option<String>, CallError> {
        let clients = &self.inner.clients;
        let missing = || CallError::Permanent("platform not configured".into());
        match &draft.chat {
            ChatTarget::Telegram { chat_id, thread_id } => {
                let client = clients.telegram.as_ref().ok_or_else(missing)?;
                let to = TelegramChat {
                    chat_id: *chat_id,
                    thread_id: *thread_id,
                };
                match message_id.and_then(|m| m.parse::<i64>().ok()) {
                    Some(id) => client
                        .edit_message_text(to, id, body, true, None)
                        .await
                        .map(|()| Some(id.to_string())),
                    None => {
                        let out = Outgoing {
                            text: body,
                            html: true,
                            ..Outgoing::default()
                        };
                        client
                            .send_message(to, &out)
                            .await
                            .map(|id| Some(id.to_string()))
                    }
                }
            }
            ChatTarget::Slack {
                channel, thread_ts, ..
            } => {
                let client = clients.slack.as_ref().ok_or_else(missing)?;
                let blocks = slack::section(body);
                match message_id {
                    Some(ts) => client
                        .update(channel, ts, body, &blocks)
                        .await
                        .map(|()| Some(ts.to_owned())),
                    None => {
                        let to = SlackChannel {
                            channel: channel.clone(),
                            thread_ts: thread_ts.clone(),
                        };
                        client.post_message(&to, body, &blocks).await.map(Some)
                    }
                }
            }
            ChatTarget::Webhook { chat_id } => {
                let client = clients.webhook.as_ref().ok_or_else(missing)?;
                client
                    .post(chat_id, body, draft.in_reply_to.as_deref(), false)
                    .await
                    .map(|()| None)
            }
        }
    }

    /// Records the draft's message id durably, for the final edit.
    async fn record(&self, draft: &Draft, markdown: &str, message_id: &str) {
        let row = NewOutbox {
            platform: draft.chat.platform().into(),
            chat_key: draft.chat.key(),
            session_id: Some(draft.session_id),
            turn_id: Some(draft.turn_id),
            idempotency_key: draft_key(draft.turn_id),
            kind: "draft".into(),
            payload: serde_json::json!({ "text": markdown }),
        };
        if let Err(e) = self.inner.deps.store.record_draft(&row, message_id).await {
            // The final reply still edits it when it is settled here; from another process it
            // would come as a new message.
            tracing::warn!(turn = %draft.turn_id, error = %e, "draft message id not recorded");
        }
    }
}

/// Ends `text` with an empty line (once), so that what follows starts a paragraph.
fn paragraph_break(text: &mut String) {
    if text.is_empty() || text.ends_with("\n\n") {
        return;
    }
    text.push_str(if text.ends_with('\n') { "\n" } else { "\n\n" });
}

/// The idempotency key of a turn's draft row.
pub fn draft_key(turn: TurnId) -> String {
    format!("draft:{turn}")
}
