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
use crate::admission::AdmissionActor;
use crate::deps::Deps;
use crate::scheduler::SchedulerActor;
use crate::session::registry::SessionRegistry;
use actix::Addr;
use std::sync::{Arc, OnceLock};

pub mod process;
pub mod report;
pub mod schedule_tool;
pub mod subagent;

/// What the gateway's own tools of this module reach that exists only once the toolbox is
/// built (the actors take the tools): set once at start-up.
#[derive(Clone)]
pub struct Wired {
    pub deps: Arc<Deps>,
    pub admission: Addr<AdmissionActor>,
    pub registry: SessionRegistry,
    pub scheduler: Addr<SchedulerActor>,
    pub processes: process::Watched,
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
