//! `Wakeups`: wakes a turn that waits on a person (an approval, a decision on an `unknown` tool
//! run) as soon as the answer is committed in this process. The answer itself is always read
//! from the store, and waiters also re-read it every second, so an answer given through
//! another replica, or a wake-up that raced the wait, is never missed.
use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use turnkey_storage::SessionId;

/// How often a waiter re-reads the store even without a wake-up.
pub const POLL: Duration = Duration::from_secs(1);

#[derive(Clone, Default)]
pub struct Wakeups {
    sessions: Arc<DashMap<SessionId, Arc<Notify>>>,
}

impl Wakeups {
    fn notify_for(&self, session: SessionId) -> Arc<Notify> {
        self.sessions.entry(session).or_default().clone()
    }

    /// Wakes every waiter of `session`; call after the answer is committed.
    pub fn wake(&self, session: SessionId) {
        if let Some(n) = self.sessions.get(&session) {
            n.notify_waiters();
        }
    }

    /// Resolves on the next wake-up of `session`, or after `at_most`. Read the store after it
    /// resolves: it says nothing about what changed.
    pub async fn wait(&self, session: SessionId, at_most: Duration) {
        let notify = self.notify_for(session);
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(at_most) => {}
        }
    }
}
