//! `Wakeups`: per-session wake-up signals. One set wakes turns waiting on a person (an approval,
//! a decision on an `unknown` tool run), others wake event followers, lease waiters and
//! interrupt askers. A signal is woken in this process right after the commit it announces,
//! and by the notifier (`notifier.rs`) when another replica's notice arrives. It says nothing
//! about what changed: the waiter reads the store. Subscribe before reading the store: a
//! wake-up that comes in between is kept, not lost.
use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use turnkey_storage::SessionId;

/// How long a waiter on a person may go without a wake-up before it re-reads the store anyway:
/// only a safety net, since every decision wakes it (here, or through a notice).
pub const SAFETY_NET: Duration = Duration::from_secs(30);

#[derive(Clone, Default)]
pub struct Wakeups {
    sessions: Arc<DashMap<SessionId, watch::Sender<u64>>>,
}

/// A subscription to one session's wake-ups.
pub struct Woken {
    rx: watch::Receiver<u64>,
}

impl Woken {
    /// Resolves at the next wake-up after the subscription (or the last wait), at once if one
    /// came meanwhile. Cancel-safe.
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The sender never goes while a receiver lives (the map keeps it); wait forever
            // rather than spin if it ever did.
            std::future::pending::<()>().await;
        }
    }

    /// `changed`, or `at_most` elapsed; answers whether a wake-up came.
    pub async fn wait(&mut self, at_most: Duration) -> bool {
        tokio::time::timeout(at_most, self.changed()).await.is_ok()
    }
}

impl Wakeups {
    /// Subscribes to `session`'s wake-ups from now on.
    pub fn subscribe(&self, session: SessionId) -> Woken {
        let tx = self
            .sessions
            .entry(session)
            .or_insert_with(|| watch::channel(0).0);
        // A new receiver has seen the current value: only later wake-ups count.
        Woken { rx: tx.subscribe() }
    }

    /// Wakes every subscriber of `session`; call after the answer is committed.
    pub fn wake(&self, session: SessionId) {
        let idle = match self.sessions.get(&session) {
            Some(tx) => {
                tx.send_modify(|v| *v = v.wrapping_add(1));
                tx.receiver_count() == 0
            }
            None => false,
        };
        if idle {
            self.sessions
                .remove_if(&session, |_, tx| tx.receiver_count() == 0);
        }
    }

    /// Wakes every subscriber of every session (notices may have been missed).
    pub fn wake_all(&self) {
        self.sessions.retain(|_, tx| {
            tx.send_modify(|v| *v = v.wrapping_add(1));
            tx.receiver_count() > 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn r13_6_a_wake_before_the_wait_is_kept() {
        let w = Wakeups::default();
        let s = SessionId::new();
        let mut woken = w.subscribe(s);
        w.wake(s);
        assert!(woken.wait(Duration::from_millis(10)).await);
        // Consumed: the next wait times out.
        assert!(!woken.wait(Duration::from_millis(10)).await);
    }

    #[tokio::test]
    async fn r13_6_wakes_are_per_session_and_wake_all_reaches_everyone() {
        let w = Wakeups::default();
        let (a, b) = (SessionId::new(), SessionId::new());
        let mut wa = w.subscribe(a);
        let mut wb = w.subscribe(b);
        w.wake(a);
        assert!(wa.wait(Duration::from_millis(10)).await);
        assert!(!wb.wait(Duration::from_millis(10)).await);
        w.wake_all();
        assert!(wa.wait(Duration::from_millis(10)).await);
        assert!(wb.wait(Duration::from_millis(10)).await);
    }

    #[tokio::test]
    async fn r13_6_sessions_without_subscribers_are_forgotten() {
        let w = Wakeups::default();
        let s = SessionId::new();
        drop(w.subscribe(s));
        w.wake(s);
        assert!(w.sessions.is_empty());
        drop(w.subscribe(s));
        w.wake_all();
        assert!(w.sessions.is_empty());
    }
}
