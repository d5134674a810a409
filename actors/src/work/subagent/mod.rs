//! Sub-agents (SPEC R1.5, R13.10): `delegate_task` starts one child session per task, owned by
//! the caller's owner, with its own lease and turn lifecycle; the child's goal is its first
//! admission (request id `subagent:<task_id>`), so a child's turn is durable, fenced and
//! resumed like any other (R13.9). The tool returns at once with the task ids.
//!
//! A child's report comes back when its goal admission is terminal: the task is settled with
//! the report's text (the durable report), the report is admitted into the parent under the
//! same request id, and `subagent.finished` is committed on the parent once. A child marked
//! `unknown` (cut after a side effect, or past `[agent] max_resumes`) reports `unknown`, once:
//! it is not run again. Each child's session events are followed for the ends of its turns,
//! and the sweep catches what no process followed (a dead gateway, another replica).
//!
//! Children run the parent's tools minus `memory` and `schedule` (they speak for nobody) and,
//! at the depth limit, `delegate_task`; their model calls stop after
//! `delegation.child_max_iterations`. An interrupt of the parent stops its children.
mod delegate;
mod reporting;

pub use delegate::DelegateTask;
pub use reporting::{advance, sweep};

use crate::deps::Deps;
use crate::error::GatewayError;
use crate::session::registry::SessionRegistry;
use crate::work::report::{self, Report};
use crate::work::Wired;
use dashmap::DashMap;
use std::sync::Arc;
use turnkey_storage::{AdmissionStatus, SessionId, SubagentTask, TaskId};

pub use crate::delegation::{is_child, withheld, PLATFORM};

/// The request id of a task's goal (in the child) and of its report (in the parent).
pub fn request_id(task: TaskId) -> String {
    format!("subagent:{task}")
}

/// The children this process follows (by child session), each by a task on its session's
/// events: a turn end there is looked at at once.
#[derive(Clone, Default)]
pub struct Children(Arc<DashMap<SessionId, TaskId>>);

/// Interrupts the running children of `parent` (and theirs), here or on their replica.
pub async fn interrupt_children(
    deps: &Deps,
    registry: &SessionRegistry,
    parent: SessionId,
    reason: &str,
) {
    let tasks = match deps.store.subagent_tasks(parent).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(%parent, error = %e, "cannot read the children to interrupt");
            return;
        }
    };
    for t in tasks.into_iter().filter(|t| t.status == "running") {
        let child = t.child_session_id;
        match cancel_queued_goal(deps, &t, reason).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(task = %t.task_id, %child, error = %e, "cannot cancel a sub-agent's queued goal")
            }
        }
        let r = Box::pin(crate::remote_interrupt::interrupt(
            deps,
            registry,
            child,
            format!("parent_{reason}"),
        ))
        .await;
        match r {
            Ok(i) => {
                tracing::info!(task = %t.task_id, %child, interrupted = i.interrupted, "sub-agent interrupted with its parent")
            }
            Err(e) => {
                tracing::warn!(task = %t.task_id, %child, error = %e, "cannot interrupt a sub-agent")
            }
        }
        // And theirs (max_depth > 1).
        Box::pin(interrupt_children(deps, registry, child, reason)).await;
    }
}

/// Cancels the goal of `task` if it is still queued (its child has not begun): its watcher
/// or the sweep then reports the task `interrupted`. `false` when the goal is not queued
/// (its turn runs or ran: that is interrupted instead).
async fn cancel_queued_goal(
    deps: &Deps,
    task: &SubagentTask,
    reason: &str,
) -> Result<bool, GatewayError> {
    let child = task.child_session_id;
    let Some(goal) = deps
        .store
        .find_admission_by_request(child, &request_id(task.task_id))
        .await?
    else {
        return Ok(false);
    };
    if goal.status != AdmissionStatus::Queued {
        return Ok(false);
    }
    let why = format!("parent_{reason}");
    let Some(events) = deps
        .store
        .cancel_queued_admission(child, goal.id, &why)
        .await?
    else {
        return Ok(false);
    };
    for ev in events {
        deps.hub.publish(ev);
    }
    tracing::info!(task = %task.task_id, %child, "sub-agent's queued goal cancelled with its parent");
    Ok(true)
}

/// The tasks a session delegated, for `GET /v1/sessions/{id}/subagents`.
pub async fn list(deps: &Deps, session: SessionId) -> Result<Vec<SubagentTask>, GatewayError> {
    Ok(deps.store.subagent_tasks(session).await?)
}

/// A child session's title: the goal's first line, at most 80 characters.
pub(super) fn title_of(goal: &str) -> String {
    let first = goal.lines().next().unwrap_or(goal);
    let mut t: String = first.chars().take(80).collect();
    if first.chars().count() > 80 {
        t.push('…');
    }
    t
}

/// The child's first input: its goal and context.
fn goal_text(task: &SubagentTask) -> String {
    match &task.context {
        Some(c) => format!("{}\n\nContext:\n{c}", task.goal),
        None => task.goal.clone(),
    }
}

/// Admits the task's goal into its child (idempotent: its request id is the task's).
pub(super) async fn admit_goal(w: &Wired, task: &SubagentTask) -> Result<(), GatewayError> {
    let goal = Report {
        session: task.child_session_id,
        owner: task.owner.clone(),
        request_id: request_id(task.task_id),
        text: goal_text(task),
    };
    report::admit(w, goal).await.map(|_| ())
}
