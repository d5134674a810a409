//! A child's end coming back to its parent: when its goal admission is terminal the task is
//! settled with the report's text, the report admitted into the parent, and
//! `subagent.finished` committed once; each child is watched, and the sweep catches the rest.
use super::{admit_goal, request_id, title_of};
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::work::report::{self, Report, END};
use crate::work::Wired;
use serde_json::Value;
use turnkey_storage::{Admission, AdmissionStatus, EventKind, MessageRole, SubagentTask};

/// What a child's goal admission says about the task: `None` while it runs.
async fn outcome_of(deps: &Deps, a: &Admission) -> Option<(&'static str, String)> {
    let status = match a.status {
        AdmissionStatus::Queued | AdmissionStatus::Started => return None,
        AdmissionStatus::Unknown => "unknown",
        AdmissionStatus::Terminal => {
            match a
                .outcome
                .as_ref()
                .and_then(|o| o.get("result"))
                .and_then(Value::as_str)
            {
                Some("completed") => "completed",
                Some("interrupted") | Some("cancelled") => "interrupted",
                _ => "failed",
            }
        }
    };
    let outcome = a.outcome.clone().unwrap_or(Value::Null);
    let mut answer = outcome
        .get("final_response")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if answer.is_none() {
        // A partial answer kept when the turn was cut (SPEC R10.3).
        if let Some(turn) = a.turn_id {
            match deps.store.turn_messages(a.session_id, turn).await {
                Ok(rows) => {
                    answer = rows
                        .iter()
                        .rev()
                        .filter(|m| m.role == MessageRole::Assistant)
                        .find_map(|m| m.content.clone().filter(|c| !c.trim().is_empty()));
                }
                Err(e) => {
                    tracing::warn!(admission = %a.id, error = %e, "cannot read a child's answer");
                    return None;
                }
            }
        }
    }
    let cancelled = outcome.get("result").and_then(Value::as_str) == Some("cancelled");
    let why = if cancelled {
        Some("it was cancelled before it began, because its parent was interrupted".to_owned())
    } else {
        outcome
            .get("failure_message")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut body = String::new();
    match (status, &answer) {
        ("completed", Some(text)) => body.push_str(text),
        (_, Some(text)) => {
            body.push_str("Partial output:\n");
            body.push_str(text);
        }
        (_, None) => body.push_str("(no answer)"),
    }
    if status != "completed" {
        if let Some(why) = why {
            body.push_str(&format!("\n\nWhy it did not complete: {why}"));
        }
        if status == "unknown" {
            body.push_str(
                "\n\nIts outcome cannot be known (the gateway stopped while it worked); it was \
                 not run again. Check its effects before relying on them.",
            );
        }
    }
    Some((status, body))
}

/// The report's text as the parent's model reads it.
fn report_text(task: &SubagentTask, status: &str, body: &str) -> String {
    format!(
        "[turnkey:subagent-report task_id={} status={status} child_session_id={}]\nGoal: {}\n\n{body}\n{END}",
        task.task_id,
        task.child_session_id,
        title_of(&task.goal),
    )
}

/// Brings `task` one step closer to reported: admits its goal if that never happened, or
/// settles, admits and announces its report once its goal admission is terminal. Answers
/// whether its report is in (nothing more to do for it).
pub async fn advance(w: &Wired, task: &SubagentTask) -> Result<bool, GatewayError> {
    let deps = &w.deps;
    let rid = request_id(task.task_id);
    let goal = deps
        .store
        .find_admission_by_request(task.child_session_id, &rid)
        .await?;
    let task = match goal {
        None if task.status == "running" => {
            tracing::info!(task = %task.task_id, "admitting a sub-agent's goal that was never admitted");
            return admit_goal(w, task).await.map(|()| false);
        }
        None => task.clone(),
        Some(a) => {
            if task.status == "running" {
                let Some((status, body)) = outcome_of(deps, &a).await else {
                    return Ok(false);
                };
                // Saved where the parent's tools can read it: its owner's workspace.
                let (workspace, _) = deps
                    .config
                    .tools
                    .workspace_of(&deps.config.tools.workspace, &task.owner);
                let body =
                    report::bounded(&body, &workspace, &format!("subagent-{}", task.task_id));
                let text = report_text(task, status, &body);
                deps.store
                    .settle_subagent_task(task.task_id, status, &text)
                    .await?
            } else {
                task.clone()
            }
        }
    };
    let Some(text) = task.result.clone() else {
        return Err(GatewayError::Io(format!(
            "task {} is {} without a report",
            task.task_id, task.status
        )));
    };
    let receipt = report::admit(
        w,
        Report {
            session: task.parent_session_id,
            owner: task.owner.clone(),
            request_id: rid,
            text,
        },
    )
    .await?;
    if let Some(ev) = deps
        .store
        .record_subagent_report(&task, receipt.admission_id)
        .await?
    {
        deps.hub.publish(ev);
        tracing::info!(
            task = %task.task_id, status = %task.status, parent = %task.parent_session_id,
            admission = %receipt.admission_id, "sub-agent report admitted"
        );
    }
    Ok(true)
}

/// Every task not yet reported, advanced, and watched by this process from now on (after a
/// restart, or when another replica started it).
pub async fn sweep(w: &Wired) {
    let tasks = match w.deps.store.unreported_subagent_tasks().await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the unreported sub-agent tasks");
            return;
        }
    };
    for task in tasks {
        watch_child(w, &task);
        if let Err(e) = advance(w, &task).await {
            tracing::warn!(task = %task.task_id, error = %e, code = e.code(), "sub-agent report not admitted yet; the sweep tries again");
        }
    }
}

/// Follows the events of `task`'s child session on this process's hub and advances the task
/// at each end of a turn there, until its report is in; one watcher per child and process.
/// Only the children's own channels are followed, so no other session's event costs anything
/// (a child whose turns run on another replica is advanced by the sweep).
pub(super) fn watch_child(w: &Wired, task: &SubagentTask) {
    use dashmap::mapref::entry::Entry;
    use tokio::sync::broadcast::error::RecvError;
    match w.children.0.entry(task.child_session_id) {
        Entry::Occupied(_) => return,
        Entry::Vacant(v) => {
            v.insert(task.task_id);
        }
    }
    let mut events = w.deps.hub.subscribe(task.child_session_id);
    let (w, id, child) = (w.clone(), task.task_id, task.child_session_id);
    actix::spawn(async move {
        loop {
            let ev = tokio::select! {
                _ = w.deps.shutdown.cancelled() => break,
                ev = events.recv() => ev,
            };
            match ev {
                Ok(ev)
                    if matches!(
                        ev.kind,
                        EventKind::TurnFinished
                            | EventKind::TurnUnknown
                            | EventKind::AdmissionCancelled
                    ) => {}
                Ok(_) => continue,
                // Events were missed: look at the task anyway.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => break,
            }
            match w.deps.store.get_subagent_task(id).await {
                Ok(Some(task)) if task.reported_at.is_none() => match advance(&w, &task).await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(task = %id, error = %e, code = e.code(), "sub-agent report not admitted yet; the sweep tries again");
                    }
                },
                Ok(_) => break,
                Err(e) => tracing::warn!(task = %id, error = %e, "cannot read a sub-agent task"),
            }
        }
        w.children.0.remove(&child);
    });
}
