//! `EventFollower`: a session's events after a seq, in order, with no gap and no repeat, first
//! the stored ones, then the new ones as they commit. The SSE route, WebSocket subscriptions
//! and the OpenAI-compatible stream all read a session's events through it.
//!
//! The store is the truth; the hub's broadcasts only wake the follower. A broadcast that skips
//! ahead (the hub's receiver lagged, or another process on the same database produced events
//! that never reach this hub) is repaired by reading the store after the last seq handed out,
//! and an idle follower re-reads the store every [`IDLE_POLL`] for the same reason.
use crate::startup::AppState;
use actix_web::web;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use turnkey_storage::{Event, Seq, SessionId};

/// Events read from the store at once.
pub const PAGE: u64 = 500;
/// How long a follower may go without news before it re-reads the store: another process on
/// the same database may be producing this session's events, and its broadcasts never reach us.
const IDLE_POLL: Duration = Duration::from_secs(1);

pub struct EventFollower {
    state: web::Data<AppState>,
    session: SessionId,
    /// The last seq handed out.
    last: Seq,
    live: broadcast::Receiver<Event>,
    shutdown: watch::Receiver<bool>,
    poll: Interval,
    last_news: Instant,
    /// The store must be read before waiting: at the start, after a full page, after a lag.
    read_first: bool,
}

impl EventFollower {
    /// Follows `session` after `since`. It subscribes to the hub before its first read of the
    /// store, so nothing committed in between is missed: whatever the store read already
    /// returned is skipped by seq when it comes live.
    pub fn start(state: web::Data<AppState>, session: SessionId, since: Seq) -> Self {
        let live = state.gateway.hub().subscribe(session);
        let shutdown = state.shutdown_signal();
        let start = Instant::now();
        let mut poll = interval_at(start + IDLE_POLL, IDLE_POLL);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            state,
            session,
            last: since,
            live,
            shutdown,
            poll,
            last_news: start,
            read_first: true,
        }
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The last seq handed out (where a client resumes).
    pub fn last(&self) -> Seq {
        self.last
    }

    /// The next events after [`Self::last`], at least one, in seq order; `None` once the
    /// server is stopping. Cancel-safe: a call dropped while it waits hands out nothing and
    /// loses nothing, so it can sit in a `select!` beside a keep-alive timer.
    pub async fn next(&mut self) -> Option<Vec<Event>> {
        loop {
            if *self.shutdown.borrow() {
                return None;
            }
            if self.read_first {
                let page = self.read_store().await;
                if !page.is_empty() {
                    return Some(page);
                }
            }
            tokio::select! {
                changed = self.shutdown.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                msg = self.live.recv() => {
                    self.last_news = Instant::now();
                    match msg {
                        Ok(ev) if ev.seq.0 <= self.last.0 => {}
                        Ok(ev) if ev.seq.0 == self.last.0 + 1 => {
                            self.last = ev.seq;
                            return Some(vec![ev]);
                        }
                        // A jump ahead: something was missed; the store fills the gap.
                        Ok(_) => self.read_first = true,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            tracing::debug!(session = %self.session, missed, "event follower lagged; re-reading the store");
                            self.read_first = true;
                        }
                        Err(broadcast::error::RecvError::Closed) => {
                            self.live = self.state.gateway.hub().subscribe(self.session);
                            self.read_first = true;
                        }
                    }
                }
                _ = self.poll.tick() => {
                    if self.last_news.elapsed() >= IDLE_POLL {
                        self.last_news = Instant::now();
                        self.read_first = true;
                    }
                }
            }
        }
    }

    /// One page of stored events after the cursor, which then moves past them. A store error
    /// is logged and left for the next poll: the cursor has not moved, so nothing is skipped.
    async fn read_store(&mut self) -> Vec<Event> {
        match self
            .state
            .gateway
            .store()
            .events_since(self.session, self.last, PAGE)
            .await
        {
            Ok(page) => {
                // A full page may have more behind it: read again before waiting.
                self.read_first = page.len() as u64 == PAGE;
                if let Some(ev) = page.last() {
                    self.last = ev.seq;
                }
                page
            }
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, "event read failed; retrying at the next poll");
                self.read_first = false;
                Vec::new()
            }
        }
    }
}
