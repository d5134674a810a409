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
use super::report::{self, Report, END};
use super::Wired;
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::input::NewSessionRequest;
use crate::session::registry::SessionRegistry;
use crate::turn::prompt;
use async_trait::async_trait;
use dashmap::DashMap;
use serde_json::{json, Value};
use std::sync::Arc;
use turnkey_storage::{
    Admission, AdmissionStatus, EventKind, MessageRole, NewSession, NewSubagentTask, SessionId,
    SubagentTask, TaskId,
};
use turnkey_tools::{Tool, ToolContext, ToolOutput};

pub use crate::delegation::{is_child, withheld, PLATFORM};

/// The longest goal or context, in characters.
const MAX_GOAL_CHARS: usize = 20_000;

/// The request id of a task's goal (in the child) and of its report (in the parent).
pub fn request_id(task: TaskId) -> String {
    format!("subagent:{task}")
}

/// The children this process follows (by child session), each by a task on its session's
/// events: a turn end there is looked at at once.
#[derive(Clone, Default)]
pub struct Children(Arc<DashMap<SessionId, TaskId>>);

/// The system message of a child session.
const CHILD_GUIDANCE: &str = "You are a sub-agent: another agent delegated one task to you. \
Work on it with your tools, then answer with a short report of what you found or did, with \
the facts the other agent needs (paths, numbers, names). Your final answer is the report; \
nobody reads your messages live, so do not ask questions: decide, and say what you assumed.";

pub struct DelegateTask {
    handles: super::Handles,
}

impl DelegateTask {
    pub fn new(handles: super::Handles) -> Self {
        Self { handles }
    }
}

/// One task of a `delegate_task` call, read.
struct Asked {
    goal: String,
    context: Option<String>,
}

fn text_arg(v: &Value, key: &str, what: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => {
            let clean = crate::limits::sanitize_text(s);
            if clean.chars().count() > MAX_GOAL_CHARS {
                return Err(format!(
                    "{what}`{key}` is longer than {MAX_GOAL_CHARS} characters"
                ));
            }
            Ok((!clean.trim().is_empty()).then(|| clean.trim().to_owned()))
        }
        Some(other) => Err(format!("{what}`{key}` must be a string, not {other}")),
    }
}

/// The tasks a call asks for: `tasks`, or the one `goal`.
fn asked(args: &Value) -> Result<Vec<Asked>, String> {
    super::only_known(args, &["goal", "context", "tasks"])?;
    let mut out = Vec::new();
    match args.get("tasks") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let what = format!("tasks[{i}].");
                if !item.is_object() {
                    return Err(format!("tasks[{i}] must be an object {{goal, context?}}"));
                }
                let goal = text_arg(item, "goal", &what)?
                    .ok_or_else(|| format!("tasks[{i}].goal is required: a non-empty string"))?;
                out.push(Asked {
                    goal,
                    context: text_arg(item, "context", &what)?,
                });
            }
        }
        Some(_) => return Err("`tasks` must be an array of {goal, context?}".into()),
    }
    if let Some(goal) = text_arg(args, "goal", "")? {
        out.insert(
            0,
            Asked {
                goal,
                context: text_arg(args, "context", "")?,
            },
        );
    }
    if out.is_empty() {
        return Err("`goal` (or `tasks`) is required: what the sub-agent is to do".into());
    }
    Ok(out)
}

#[async_trait]
impl Tool for DelegateTask {
    fn name(&self) -> &str {
        "delegate_task"
    }

    fn description(&self) -> &str {
        "Start sub-agents on tasks. Each works on one in its own session, in parallel, with your \
         tools. Returns task ids at once; each report arrives later as a gateway message: answer \
         then, do not poll. A sub-agent sees only its goal and context."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "goal": {"type": "string", "description": "The task."},
                "context": {"type": "string", "description": "Facts the sub-agent needs."},
                "tasks": {
                    "type": "array",
                    "description": "Several tasks, one sub-agent each.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "goal": {"type": "string"},
                            "context": {"type": "string"}
                        },
                        "required": ["goal"],
                        "additionalProperties": false
                    }
                }
            },
            "additionalProperties": false
        })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let w = match self.handles.get() {
            Ok(w) => w,
            Err(e) => return ToolOutput::error(e),
        };
        let asked = match asked(&args) {
            Ok(a) => a,
            Err(e) => return ToolOutput::error(format!("invalid arguments: {e}")),
        };
        match delegate(w, &ctx.caller.session_id, asked).await {
            Ok(out) => ToolOutput::ok(out.to_string()),
            Err(e) => ToolOutput::error(e),
        }
    }
}

/// Starts one child per task of `parent` (the caller's session); answers the tool's result.
async fn delegate(w: &Wired, parent: &str, asked: Vec<Asked>) -> Result<Value, String> {
    let deps = &w.deps;
    let cfg = &deps.config.delegation;
    let store_err = super::store_err;
    let session = super::caller_session(w, parent).await?;
    let parent = session.lineage();
    let depth = match deps
        .store
        .subagent_task_of_child(parent)
        .await
        .map_err(store_err)?
    {
        Some(task) => task.depth + 1,
        None => 1,
    };
    if depth > i64::from(cfg.max_depth) {
        return Err(format!(
            "delegation depth limit reached: this session is a sub-agent at depth {} and \
             delegation.max_depth is {}; do the task yourself",
            depth - 1,
            cfg.max_depth
        ));
    }
    let open = deps
        .store
        .open_subagent_count(parent)
        .await
        .map_err(store_err)?;
    let room = u64::from(cfg.max_children).saturating_sub(open);
    if asked.len() as u64 > room {
        return Err(format!(
            "too many sub-agents: {} asked, {open} still running, at most {} at once \
             (delegation.max_children); wait for their reports or ask for fewer",
            asked.len(),
            cfg.max_children
        ));
    }
    let mut started = Vec::new();
    for a in asked {
        let task = start_one(w, &session.owner, parent, depth, a)
            .await
            .map_err(|e| {
                format!(
                    "starting a sub-agent failed after {} started: {e}",
                    started.len()
                )
            })?;
        started.push(task);
    }
    Ok(json!({
        "task_ids": started.iter().map(|t| t.task_id).collect::<Vec<_>>(),
        "note": "Started. Each report arrives later as a message from the gateway; do not poll.",
    }))
}

/// One child: its session, its task row and `subagent.started` (one commit), then its goal
/// admitted into it. A crash between the two leaves a task whose goal the sweep admits.
async fn start_one(
    w: &Wired,
    owner: &str,
    parent: SessionId,
    depth: i64,
    a: Asked,
) -> Result<SubagentTask, GatewayError> {
    let deps = &w.deps;
    let req = NewSessionRequest {
        title: Some(title_of(&a.goal)),
        system_message: Some(CHILD_GUIDANCE.into()),
        model: None,
        platform: PLATFORM.into(),
        chat_key: None,
    };
    let remembered = prompt::Remembered::default();
    let built = prompt::build_for_new_session(&deps.config, &req, &remembered)?;
    let child = NewSession {
        id: SessionId::new(),
        owner: owner.to_owned(),
        platform: req.platform,
        chat_key: None,
        title: req.title,
        model: None,
        system_message: req.system_message,
        system_prompt: built.prompt,
        workspace_snapshot: Some(built.workspace_snapshot),
    };
    let (task, event) = deps
        .store
        .create_subagent_task(NewSubagentTask {
            id: TaskId::new(),
            parent_session_id: parent,
            goal: a.goal,
            context: a.context,
            depth,
            child,
        })
        .await?;
    deps.hub.publish(event);
    // Watched before its goal is admitted: its turn's end cannot pass unseen.
    watch_child(w, &task);
    tracing::info!(task = %task.task_id, %parent, child = %task.child_session_id, depth, "sub-agent started");
    admit_goal(w, &task).await?;
    Ok(task)
}

fn title_of(goal: &str) -> String {
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
async fn admit_goal(w: &Wired, task: &SubagentTask) -> Result<(), GatewayError> {
    let goal = Report {
        session: task.child_session_id,
        owner: task.owner.clone(),
        request_id: request_id(task.task_id),
        text: goal_text(task),
    };
    report::admit(w, goal).await.map(|_| ())
}

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
fn watch_child(w: &Wired, task: &SubagentTask) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_5_delegate_arguments_are_read_strictly() {
        let one = asked(&json!({"goal": "count files", "context": "in ./src"})).expect("one");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].context.as_deref(), Some("in ./src"));
        let many =
            asked(&json!({"tasks": [{"goal": "a"}, {"goal": "b", "context": "c"}]})).expect("many");
        assert_eq!(many.len(), 2);
        for (bad, why) in [
            (json!({}), "required"),
            (json!({"goal": "  "}), "required"),
            (json!({"goal": 3}), "must be a string"),
            (
                json!({"tasks": [{"context": "x"}]}),
                "tasks[0].goal is required",
            ),
            (json!({"tasks": "x"}), "must be an array"),
            (json!({"goal": "a", "owner": "op"}), "unknown argument"),
            (
                json!({"goal": "x".repeat(MAX_GOAL_CHARS + 1)}),
                "longer than",
            ),
        ] {
            match asked(&bad) {
                Ok(_) => panic!("{bad} was accepted"),
                Err(e) => assert!(e.contains(why), "{bad}: {e}"),
            }
        }
    }
}
