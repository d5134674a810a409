//! `delegate_task`: the tool that starts sub-agents, one child session per task, within
//! `delegation.max_depth` and `max_children`; each child's goal is its first admission.
use super::reporting::watch_child;
use super::{admit_goal, title_of, PLATFORM};
use crate::error::GatewayError;
use crate::input::NewSessionRequest;
use crate::turn::prompt;
use crate::work::Wired;
use async_trait::async_trait;
use serde_json::{json, Value};
use turnkey_storage::{NewSession, NewSubagentTask, SessionId, SubagentTask, TaskId};
use turnkey_tools::{Tool, ToolContext, ToolOutput};

/// The longest goal or context, in characters.
const MAX_GOAL_CHARS: usize = 20_000;

/// The system message of a child session.
const CHILD_GUIDANCE: &str = "You are a sub-agent: another agent delegated one task to you. \
Work on it with your tools, then answer with a short report of what you found or did, with \
the facts the other agent needs (paths, numbers, names). Your final answer is the report; \
nobody reads your messages live, so do not ask questions: decide, and say what you assumed.";

pub struct DelegateTask {
    handles: crate::work::Handles,
}

impl DelegateTask {
    pub fn new(handles: crate::work::Handles) -> Self {
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
    crate::work::only_known(args, &["goal", "context", "tasks"])?;
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
    let store_err = crate::work::store_err;
    let session = crate::work::caller_session(w, parent).await?;
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
        history: Vec::new(),
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
        seed: Vec::new(),
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
