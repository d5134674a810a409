//! Work that outlives the turn (SPEC R1.5, R13.10; API.md "Sub-agents, background processes
//! and agent schedules"): sub-agents (`delegate_task`), background commands (`terminal` with
//! `background: true`, and `process`) and the agent's own schedules (`schedule`).
//!
//! Each ends in a *report*, an internal input of the session that started it, admitted
//! through the same durable FIFO as a user's input ([`report`]). The report is written down
//! first (the child's terminal admission and its settled task row; the process's recorded
//! end), then admitted under a request id derived from the task or process id (so it is
//! admitted once, whoever tries), and only then announced (`subagent.finished`,
//! `process.exited`), in a commit that happens once. The recovery sweep finds what a dead
//! gateway left between those steps and finishes it; what cannot be known is reported as
//! `unknown`, once, and never run again.
use crate::admission::Admissions;
use crate::deps::Deps;
use crate::scheduler::SchedulerActor;
use crate::session::registry::SessionRegistry;
use actix::Addr;
use serde_json::Value;
use std::sync::{Arc, OnceLock};
use turnkey_storage::{Session, SessionId};

pub mod process;
pub mod report;
pub mod schedule_tool;
pub mod subagent;

/// What the gateway's own tools of this module reach that exists only once the toolbox is
/// built (the actors take the tools): set once at start-up.
#[derive(Clone)]
pub struct Wired {
    pub deps: Arc<Deps>,
    pub admission: Admissions,
    pub registry: SessionRegistry,
    pub scheduler: Addr<SchedulerActor>,
    pub processes: process::Watched,
    /// The children this process follows, each by a task on its session's events.
    pub children: subagent::Children,
}

/// A late-bound [`Wired`], shared by the tools made before it exists.
#[derive(Clone, Default)]
pub struct Handles(Arc<OnceLock<Wired>>);

impl Handles {
    pub fn set(&self, wired: Wired) {
        if self.0.set(wired).is_err() {
            tracing::error!("work handles set twice; the first stays");
        }
    }

    /// The wiring, or the error result a tool answers while the gateway is still starting.
    pub fn get(&self) -> Result<&Wired, String> {
        self.0
            .get()
            .ok_or_else(|| "the gateway is still starting; try again in a moment".to_owned())
    }
}

/// A store failure as a tool's error result says it.
pub(crate) fn store_err(e: turnkey_storage::StoreError) -> String {
    format!("the store failed: {e}")
}

/// The session a tool call runs for (`caller`, the calling turn's session id), read.
pub(crate) async fn caller_session(w: &Wired, caller: &str) -> Result<Session, String> {
    let id: SessionId = caller
        .parse()
        .map_err(|_| format!("the calling session {caller:?} is not a session id"))?;
    w.deps
        .store
        .get_session(id)
        .await
        .map_err(store_err)?
        .ok_or_else(|| format!("session {id} not found"))
}

/// Refuses arguments other than `allowed` (the schemas say `additionalProperties: false`).
pub(crate) fn only_known(args: &Value, allowed: &[&str]) -> Result<(), String> {
    match args
        .as_object()
        .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
    {
        Some(extra) => Err(format!("unknown argument `{extra}`")),
        None => Ok(()),
    }
}

/// Everything each kind of work left unfinished, looked at once: reports not yet admitted,
/// children whose goal was never admitted, processes whose watcher died. Run at start-up and
/// then as often as the recovery sweep (`lease.refresh_s`, at most 30 s).
pub async fn sweep(w: &Wired) {
    subagent::sweep(w).await;
    process::sweep(w).await;
}

/// Sweeps every so often, on the actix arbiter (a report admission may start session actors).
pub fn spawn_sweeper(w: Wired) {
    let every = std::time::Duration::from_secs(w.deps.config.lease.refresh_s.clamp(1, 30));
    actix::spawn(async move {
        loop {
            tokio::select! {
                _ = w.deps.shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            sweep(&w).await;
        }
    });
}
