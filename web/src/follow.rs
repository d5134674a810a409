//! `EventFollower`: a session's events after a seq, in order, with no gap and no repeat, first
//! the stored ones, then the new ones as they commit. The SSE route, WebSocket subscriptions
//! and the OpenAI-compatible stream all read a session's events through it.
//!
//! The store is the truth; wake-ups only say when to look. Events committed by this process
//! come through the hub; a broadcast that skips ahead (the hub's receiver lagged) is repaired by
//! reading the store after the last seq handed out. Events committed by another process on the
//! same database (a replica, SPEC R13.6) wake the follower through the notifier: a PostgreSQL
//! notice, or a change SQLite's `data_version` shows. There is no timed re-read.
use crate::state::AppState;
use actix_web::web;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use turnkey_actors::wakeups::Woken;
use turnkey_actors::SharedEvent;
use turnkey_storage::{Seq, SessionId};

/// Events read from the store at once.
pub const PAGE: u64 = 500;
/// After a failed store read, how long before the next try.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

pub struct EventFollower {
    state: web::Data<AppState>,
    session: SessionId,
    /// The last seq handed out.
    last: Seq,
    live: broadcast::Receiver<SharedEvent>,
    /// Wake-ups for events other processes committed.
    remote: Woken,
    shutdown: watch::Receiver<bool>,
    /// Set after a failed store read: when to read again.
    retry_at: Option<Instant>,
    /// The store must be read before waiting: at the start, after a full page, after a lag.
    read_first: bool,
}

impl EventFollower {
    /// Follows `session` after `since`. It subscribes to the hub and to other processes'
    /// wake-ups before its first read of the store, so nothing committed in between is missed:
    /// whatever the store read already returned is skipped by seq when it comes live.
    pub fn start(state: web::Data<AppState>, session: SessionId, since: Seq) -> Self {
        let live = state.gateway.hub().subscribe(session);
        let remote = state.gateway.event_wakes().subscribe(session);
        let shutdown = state.shutdown_signal();
        Self {
            state,
            session,
            last: since,
            live,
            remote,
            shutdown,
            retry_at: None,
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
    /// loses nothing, so it can sit in a `select!` beside a keep-alive timer. A live event is
    /// the one every subscriber shares (serialized once); a stored one is this follower's.
    pub async fn next(&mut self) -> Option<Vec<SharedEvent>> {
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
                () = self.remote.changed() => self.read_first = true,
                () = retry(self.retry_at) => {
                    self.retry_at = None;
                    self.read_first = true;
                }
            }
        }
    }

    /// One page of stored events after the cursor, which then moves past them. A store error
    /// is logged and retried a little later: the cursor has not moved, so nothing is skipped.
    async fn read_store(&mut self) -> Vec<SharedEvent> {
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
                page.into_iter().map(SharedEvent::new).collect()
            }
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, "event read failed; retrying");
                self.read_first = false;
                self.retry_at = Some(Instant::now() + RETRY_AFTER_ERROR);
                Vec::new()
            }
        }
    }
}

/// Resolves at `at`; never when there is nothing to retry.
async fn retry(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
