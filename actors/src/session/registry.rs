//! `SessionRegistry`: one live `SessionActor` per session in this process, spawned on demand.
use crate::deps::Deps;
use crate::session::{CancelReview, Drain, Interrupt, SessionActor, Status};
use crate::turn::StopReason;
use actix::{Actor, Addr};
use dashmap::DashMap;
use std::sync::Arc;
use turnkey_storage::SessionId;

#[derive(Clone)]
pub struct SessionRegistry {
    deps: Arc<Deps>,
    actors: Arc<DashMap<SessionId, Addr<SessionActor>>>,
}

impl SessionRegistry {
    pub fn new(deps: Arc<Deps>) -> Self {
        Self {
            deps,
            actors: Arc::new(DashMap::new()),
        }
    }

    pub fn get(&self, session: SessionId) -> Option<Addr<SessionActor>> {
        self.actors
            .get(&session)
            .map(|a| a.clone())
            .filter(|a| a.connected())
    }

    /// The session's actor, started if it is not running.
    pub fn get_or_spawn(&self, session: SessionId) -> Addr<SessionActor> {
        self.actors
            .entry(session)
            .and_modify(|a| {
                if !a.connected() {
                    *a = SessionActor::new(session, self.deps.clone(), self.clone()).start();
                }
            })
            .or_insert_with(|| SessionActor::new(session, self.deps.clone(), self.clone()).start())
            .clone()
    }

    /// Tells the session's actor to drain its queue.
    pub fn drain(&self, session: SessionId) {
        self.get_or_spawn(session)
            .do_send(Drain { admitted: false });
    }

    /// `drain`, right after an admission to `session` committed: the drain need not look
    /// whether there is work before it takes the lease.
    pub fn drain_admitted(&self, session: SessionId) {
        self.get_or_spawn(session).do_send(Drain { admitted: true });
    }

    /// Stops a review of `session` running here, if any; starts no actor.
    pub fn cancel_review(&self, session: SessionId) {
        if let Some(a) = self.get(session) {
            a.do_send(CancelReview);
        }
    }

    /// Forgets an actor that stopped because it was idle.
    pub(crate) fn remove_if_stopped(&self, session: SessionId) {
        self.actors.remove_if(&session, |_, a| !a.connected());
    }

    fn addrs(&self) -> Vec<Addr<SessionActor>> {
        self.actors.iter().map(|a| a.clone()).collect()
    }

    /// Whether any session of this process still drains (runs a turn, or is about to release
    /// its lease).
    pub async fn any_draining(&self) -> bool {
        for a in self.addrs() {
            if let Ok(s) = a.send(Status).await {
                if s.running || s.draining {
                    return true;
                }
            }
        }
        false
    }

    /// Interrupts every running turn of this process with `reason`; returns how many.
    pub async fn interrupt_all(&self, reason: StopReason) -> usize {
        let mut n = 0;
        for a in self.addrs() {
            if let Ok(true) = a
                .send(Interrupt {
                    reason: reason.clone(),
                })
                .await
            {
                n += 1;
            }
        }
        n
    }
}
