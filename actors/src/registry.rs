//! `SessionRegistry`: one live `SessionActor` per session in this process, spawned on demand.
use crate::gateway::Deps;
use crate::session::{Drain, SessionActor, Status};
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
        self.get_or_spawn(session).do_send(Drain);
    }

    /// Forgets an actor that stopped because it was idle.
    pub(crate) fn remove_if_stopped(&self, session: SessionId) {
        self.actors.remove_if(&session, |_, a| !a.connected());
    }

    pub async fn any_running(&self) -> bool {
        let addrs: Vec<_> = self.actors.iter().map(|a| a.clone()).collect();
        for a in addrs {
            if let Ok(s) = a.send(Status).await {
                if s.running {
                    return true;
                }
            }
        }
        false
    }
}
