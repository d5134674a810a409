//! `OutboxSender` (SPEC R13.5): sends the rows of `delivery_outbox` to the chat platforms, once.
//!
//! - Order: a chat's rows go out one at a time, oldest first (`Store::due_outbox` offers only a
//!   chat's oldest open row); chats are served in parallel, at most `MAX_CHATS` at once.
//! - Before the platform is called the row is marked `sending` (a compare-and-set from
//!   `pending` with this process as owner and one more attempt, committed); after the call it is
//!   `sent` with the platform's message id. Pieces of a split message are counted
//!   (`chunks_sent`) as they go out, so a retry resumes after the last piece that arrived.
//! - A call that did not reach the platform, or that the platform asked to repeat later (429:
//!   Telegram's `parameters.retry_after`, Slack's `Retry-After`, honoured exactly) or failed
//!   (5xx), puts the row back to `pending` with `next_attempt_at` (exponential backoff, capped)
//!   and `last_error`. A call that may have arrived (a timeout after sending) makes the row
//!   `unknown`, unless the platform's `resend_unknown` is set. A refusal makes it `failed`.
//! - Crash safety: a row left `sending` by a process that is gone (judged at start-up and every
//!   few seconds: a dead pid on this host at once, another host's after `STALE_SENDING_MS`
//!   without a change) becomes `unknown` and is not sent again, or `pending` again when the
//!   platform's `resend_unknown = true`. `GET /v1/outbox?status=unknown` lists such rows.
//! - Wake-ups: committed events that write rows (`turn.finished`, `approval.requested`,
//!   `turn.unknown`) and `Deps::outbox_wake` (notices written outside a turn) wake the sender at
//!   once; it also looks every second, for rows written by other processes.
use crate::deps::Deps;
use crate::kill_point;
use crate::platforms::client::CallError;
use crate::platforms::drafts::{draft_key, Drafts};
use crate::platforms::send::{self, Clients, Piece};
use crate::platforms::ChatTarget;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::Semaphore;
use turnkey_storage::{now_ms, AdmissionId, EventKind, Outbox, OutboxStatus, TurnId};

/// Chats served at once.
const MAX_CHATS: usize = 8;
/// The longest the sender sleeps without looking at the store.
const POLL: Duration = Duration::from_secs(1);
/// How often rows left `sending` by others are judged.
const JUDGE_EVERY: Duration = Duration::from_secs(5);
/// Backoff of a retried row: 1 s, 2 s, 4 s, ... up to 5 minutes.
const BACKOFF_BASE_MS: i64 = 1_000;
const BACKOFF_CAP_MS: i64 = 5 * 60 * 1_000;
/// A row the platform keeps failing is `failed` after this many attempts.
const MAX_ATTEMPTS: i32 = 20;
/// A row another host left `sending` this long without a change is judged abandoned: a live
/// sender writes the row at least once per call, and a call takes at most `CALL_TIMEOUT`.
const STALE_SENDING_MS: i64 = 120_000;

/// The sender; clones share it.
#[derive(Clone)]
pub struct OutboxSender {
    inner: Arc<Inner>,
}

struct Inner {
    deps: Arc<Deps>,
    clients: Clients,
    platforms: Vec<&'static str>,
    drafts: Option<Drafts>,
    /// Chats with a row being delivered now.
    busy: Mutex<HashSet<String>>,
    slots: Arc<Semaphore>,
    stopping: AtomicBool,
}

impl OutboxSender {
    /// Judges the rows dead senders left `sending`, then starts sending. `None` when no
    /// platform is configured.
    pub async fn start(deps: Arc<Deps>) -> Option<Self> {
        let clients = Clients::from_config(&deps.config.platforms);
        let platforms = clients.platforms();
        if platforms.is_empty() {
            return None;
        }
        let streams = platforms.iter().any(|p| {
            deps.config
                .platforms
                .settings(p)
                .is_some_and(|s| s.stream())
        });
        let drafts = streams.then(|| Drafts::spawn(deps.clone(), clients.clone()));
        let sender = Self {
            inner: Arc::new(Inner {
                deps,
                clients,
                platforms,
                drafts,
                busy: Mutex::new(HashSet::new()),
                slots: Arc::new(Semaphore::new(MAX_CHATS)),
                stopping: AtomicBool::new(false),
            }),
        };
        sender.judge().await;
        tokio::spawn(sender.clone().run());
        Some(sender)
    }

    /// Stops taking rows and waits (at most `limit`) for the deliveries under way to end, so
    /// that a graceful stop leaves no row `sending`.
    pub async fn drain(&self, limit: Duration) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + limit;
        while !self.busy().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(self) {
        let mut events = self.inner.deps.hub.subscribe_all();
        let mut judged = Instant::now();
        loop {
            if self.inner.stopping.load(Ordering::SeqCst) {
                return;
            }
            if judged.elapsed() >= JUDGE_EVERY {
                self.judge().await;
                judged = Instant::now();
            }
            self.dispatch().await;
            let woken = async {
                loop {
                    match events.recv().await {
                        Ok(ev)
                            if matches!(
                                ev.kind,
                                EventKind::TurnFinished
                                    | EventKind::ApprovalRequested
                                    | EventKind::TurnUnknown
                            ) =>
                        {
                            return
                        }
                        Ok(_) => {}
                        // Missed events: look at the store now.
                        Err(RecvError::Lagged(_)) => return,
                        Err(RecvError::Closed) => std::future::pending::<()>().await,
                    }
                }
            };
            tokio::select! {
                _ = self.inner.deps.outbox_wake.notified() => {}
                _ = woken => {}
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Starts a delivery for each chat whose oldest open row is due, up to `MAX_CHATS`.
    async fn dispatch(&self) {
        let deps = &self.inner.deps;
        let rows = match deps.store.due_outbox(&self.inner.platforms, now_ms()).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the outbox");
                return;
            }
        };
        for row in rows {
            if self.inner.stopping.load(Ordering::SeqCst) {
                return;
            }
            let Ok(slot) = self.inner.slots.clone().try_acquire_owned() else {
                return;
            };
            if !self.busy().insert(row.chat_key.clone()) {
                continue;
            }
            let me = self.clone();
            tokio::spawn(async move {
                let chat = row.chat_key.clone();
                me.deliver(row).await;
                me.busy().remove(&chat);
                drop(slot);
                // The chat's next row may be due now.
                me.inner.deps.outbox_wake.notify_one();
            });
        }
    }

    /// Sends one row: claim it, send its pieces, record the outcome.
    async fn deliver(&self, due: Outbox) {
        // The row is committed and nothing is sent: a crash here leaves it `pending`.
        kill_point!("outbox.before_send");
        let deps = &self.inner.deps;
        let me = deps.instance.id();
        let row = match deps.store.claim_outbox(&due.id, &deps.instance.owner).await {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(row = %due.id, error = %e, "cannot claim an outbox row");
                return;
            }
        };
        let (chat, msg) = match (ChatTarget::parse(&row.chat_key), send::message_of(&row)) {
            (Some(chat), Ok(msg)) => (chat, msg),
            (None, _) => {
                let why = format!("chat key {:?} is not one this build writes", row.chat_key);
                return self.settle(&row, OutboxStatus::Failed, &why).await;
            }
            (_, Err(why)) => return self.settle(&row, OutboxStatus::Failed, &why).await,
        };
        let pieces = send::pieces(&row.platform, &msg);
        let done = usize::try_from(row.chunks_sent).unwrap_or(0);
        // The reply of a streamed turn replaces its draft.
        let draft = match (row.kind.as_str(), row.turn_id.as_deref(), done) {
            ("reply", Some(turn), 0) => self.draft_of(turn).await,
            _ => None,
        };
        let in_reply_to = self.in_reply_to(&row).await;
        let mut first_id = row.platform_message_id.clone();
        for (i, markdown) in pieces.iter().enumerate().skip(done) {
            let piece = Piece {
                markdown,
                last: i + 1 == pieces.len(),
                first: i == 0,
                edit: draft.as_deref().filter(|_| i == 0),
                is_final: true,
                in_reply_to: in_reply_to.as_deref(),
            };
            let mut sent = send::send_piece(&self.inner.clients, &chat, &msg, &piece).await;
            if let (Err(CallError::Permanent(why)), Some(_)) = (&sent, piece.edit) {
                // The draft is gone (deleted in the chat): the answer comes as a new message.
                tracing::warn!(row = %row.id, error = %why, "cannot edit the draft; sending anew");
                let anew = Piece {
                    edit: None,
                    ..piece
                };
                sent = send::send_piece(&self.inner.clients, &chat, &msg, &anew).await;
            }
            match sent {
                Ok(id) => {
                    // The platform has it; the row still says `sending`.
                    kill_point!("outbox.mid_send");
                    if i == 0 {
                        first_id = id.or(first_id);
                    }
                    let count = i32::try_from(i + 1).unwrap_or(i32::MAX);
                    if i + 1 < pieces.len() {
                        if let Err(e) = deps
                            .store
                            .outbox_progress(&row.id, me, count, first_id.as_deref())
                            .await
                        {
                            // Unrecorded progress: stop here; after a restart the row is
                            // `unknown`, never sent twice blindly.
                            tracing::error!(row = %row.id, error = %e, "outbox progress not recorded");
                            return;
                        }
                    }
                }
                Err(e) => return self.call_failed(&row, e).await,
            }
        }
        let count = i32::try_from(pieces.len()).unwrap_or(i32::MAX);
        match deps
            .store
            .outbox_sent(&row.id, me, count, first_id.as_deref())
            .await
        {
            Ok(()) => tracing::debug!(row = %row.id, pieces = count, "outbox row sent"),
            Err(e) => {
                tracing::error!(row = %row.id, error = %e, "outbox row sent but not recorded")
            }
        }
    }

    /// What a failed call makes of the row.
    async fn call_failed(&self, row: &Outbox, e: CallError) {
        let deps = &self.inner.deps;
        let resend_unknown = deps
            .config
            .platforms
            .settings(&row.platform)
            .is_some_and(|s| s.resend_unknown());
        let now = now_ms();
        let backoff = now + backoff_ms(row.attempts);
        let retry_at = match &e {
            CallError::RateLimited { retry_after, .. } => Some(
                retry_after
                    .map(|d| now + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2))
                    .unwrap_or(backoff),
            ),
            CallError::NotSent(_) | CallError::Transient(_) if row.attempts < MAX_ATTEMPTS => {
                Some(backoff)
            }
            CallError::Ambiguous(_) if resend_unknown => Some(backoff),
            _ => None,
        };
        if let Some(at) = retry_at {
            tracing::info!(row = %row.id, attempts = row.attempts, error = %e,
                retry_in_ms = at - now, "outbox row will be retried");
            if let Err(err) = deps
                .store
                .outbox_retry(&row.id, deps.instance.id(), at, e.message())
                .await
            {
                tracing::error!(row = %row.id, error = %err, "outbox retry not recorded");
            }
            // Wake up when it is due (the poll would too, within a second).
            let wake = deps.outbox_wake.clone();
            let wait = Duration::from_millis(u64::try_from(at - now).unwrap_or(0));
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                wake.notify_one();
            });
            return;
        }
        let (to, why) = match e {
            CallError::Ambiguous(m) => (
                OutboxStatus::Unknown,
                format!("{m}; it may or may not be in the chat, so it is not sent again"),
            ),
            CallError::NotSent(m) | CallError::Transient(m) => (
                OutboxStatus::Failed,
                format!("gave up after {} attempts: {m}", row.attempts),
            ),
            other => (OutboxStatus::Failed, other.message().to_owned()),
        };
        self.settle(row, to, &why).await;
    }

    async fn settle(&self, row: &Outbox, to: OutboxStatus, why: &str) {
        let deps = &self.inner.deps;
        tracing::warn!(row = %row.id, chat = %row.chat_key, status = to.as_str(), error = why,
            "outbox row not sent");
        if let Err(e) = deps
            .store
            .outbox_settle(&row.id, deps.instance.id(), to, why)
            .await
        {
            tracing::error!(row = %row.id, error = %e, "outbox outcome not recorded");
        }
    }

    /// The platform message id of `turn`'s draft: settled here if this process drafts it,
    /// else as recorded.
    async fn draft_of(&self, turn: &str) -> Option<String> {
        let turn: TurnId = turn.parse().ok()?;
        if let Some(drafts) = &self.inner.drafts {
            if let Some(id) = drafts.settle(turn).await {
                return Some(id);
            }
        }
        match self.inner.deps.store.outbox_by_key(&draft_key(turn)).await {
            Ok(row) => row.and_then(|r| r.platform_message_id),
            Err(e) => {
                tracing::warn!(%turn, error = %e, "cannot read the draft row");
                None
            }
        }
    }

    /// The generic webhook's `in_reply_to`: a notice's `reply_to`, or the inbound message a
    /// turn's reply answers (its admission's request id is `webhook:<message_id>`).
    async fn in_reply_to(&self, row: &Outbox) -> Option<String> {
        if row.platform != "webhook" {
            return None;
        }
        if let Some(r) = row.payload.get("reply_to") {
            return r
                .as_str()
                .map(str::to_owned)
                .or_else(|| Some(r.to_string()));
        }
        let admission: AdmissionId = row.idempotency_key.strip_prefix("reply:")?.parse().ok()?;
        let a = self
            .inner
            .deps
            .store
            .get_admission(admission)
            .await
            .ok()
            .flatten()?;
        a.request_id.strip_prefix("webhook:").map(str::to_owned)
    }

    /// Rows left `sending` by a sender that is gone become `unknown` (or `pending` again when
    /// the platform's `resend_unknown` is set).
    async fn judge(&self) {
        let deps = &self.inner.deps;
        let rows = match deps.store.sending_outbox().await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read rows being sent");
                return;
            }
        };
        let me = &deps.instance.owner;
        for row in rows {
            let (Some(owner), Some(instance)) = (&row.owner, &row.owner_instance) else {
                continue;
            };
            let gone = deps.instance.is_dead(owner)
                || (owner.host != me.host && now_ms() - row.updated_at > STALE_SENDING_MS);
            if !gone || owner.instance == me.instance {
                continue;
            }
            let resend = deps
                .config
                .platforms
                .settings(&row.platform)
                .is_some_and(|s| s.resend_unknown());
            let note = format!(
                "the process sending it (pid {} on {}) stopped before the platform answered; \
                 it may or may not be in the chat{}",
                owner.pid,
                owner.host,
                if resend {
                    " (sent again: resend_unknown is set)"
                } else {
                    ""
                }
            );
            match deps
                .store
                .orphan_outbox(&row.id, instance, resend, &note)
                .await
            {
                Ok(true) => {
                    tracing::warn!(row = %row.id, chat = %row.chat_key, resend, "outbox row cut by a crash")
                }
                Ok(false) => {}
                Err(e) => tracing::error!(row = %row.id, error = %e, "cannot judge an outbox row"),
            }
        }
    }
}

/// The wait before attempt `attempts + 1`.
fn backoff_ms(attempts: i32) -> i64 {
    let exp = u32::try_from(attempts.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
    BACKOFF_BASE_MS
        .saturating_mul(1_i64 << exp)
        .min(BACKOFF_CAP_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r13_5_backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff_ms(1), 1_000);
        assert_eq!(backoff_ms(2), 2_000);
        assert_eq!(backoff_ms(4), 8_000);
        assert_eq!(backoff_ms(30), BACKOFF_CAP_MS);
    }
}
