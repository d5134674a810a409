//! The `schedule` tool (SPEC R1.5; API.md "Sub-agents, background processes and agent
//! schedules"): the agent creates, lists and deletes schedules of its own session, a `cron`
//! one or a one-shot `in_s` seconds from now, through the same scheduler and store as
//! `POST /v1/schedules` (source `agent`). Each due time is admitted once, with
//! `source: "schedule"`, into the session that made it; so "remind me in 30 minutes" works
//! from any door.
use super::Wired;
use crate::schedule;
use crate::scheduler::SchedulesChanged;
use async_trait::async_trait;
use serde_json::{json, Value};
use turnkey_storage::{now_ms, MissedPolicy, NewSchedule, Schedule, ScheduleId, ScheduleSource};
use turnkey_tools::{Tool, ToolContext, ToolOutput};

/// The furthest a one-shot schedule may be: a year.
const MAX_IN_S: i64 = 366 * 24 * 3600;
/// Schedules one session may hold.
const MAX_PER_SESSION: usize = 50;

pub struct ScheduleTool {
    handles: super::Handles,
}

impl ScheduleTool {
    pub fn new(handles: super::Handles) -> Self {
        Self { handles }
    }
}

#[async_trait]
impl Tool for ScheduleTool {
    fn name(&self) -> &str {
        "schedule"
    }

    fn description(&self) -> &str {
        "Schedule a message to this conversation. `create` with `text` and `in_s` (once, seconds \
         from now: 1800 = in 30 minutes) or `cron` (repeating, 5 fields, UTC: \"0 8 * * 1-5\" = \
         08:00 on weekdays); `list`; `delete` by `id`. When due, `text` arrives as a scheduler \
         message: act on it then."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "list", "delete"]},
                "in_s": {"type": "integer", "minimum": 1, "maximum": MAX_IN_S, "description": "Once, this many seconds from now."},
                "cron": {"type": "string", "description": "Repeating: a cron expression in UTC."},
                "text": {"type": "string", "description": "An instruction to yourself, for when it falls due."},
                "id": {"type": "string", "description": "The schedule to delete."}
            },
            "required": ["action"],
            "additionalProperties": false
        })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let w = match self.handles.get() {
            Ok(w) => w,
            Err(e) => return ToolOutput::error(e),
        };
        ToolOutput::from_result(
            run(w, &args, &ctx.caller.session_id)
                .await
                .map(|v| v.to_string()),
        )
    }
}

/// What `create` asks for, checked.
#[derive(Debug, PartialEq)]
enum When {
    In(i64),
    Cron(String),
}

fn when_of(args: &Value) -> Result<When, String> {
    match (args.get("in_s"), args.get("cron")) {
        (Some(n), None) | (Some(n), Some(Value::Null)) => {
            let n = n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| format!("`in_s` must be a whole number of seconds, not {n}"))?;
            if !(1..=MAX_IN_S).contains(&n) {
                return Err(format!("`in_s` must be between 1 and {MAX_IN_S}, not {n}"));
            }
            Ok(When::In(n))
        }
        (None, Some(c)) | (Some(Value::Null), Some(c)) => {
            let c = c.as_str().ok_or("`cron` must be a string")?;
            schedule::checked_cron(c)
                .map(When::Cron)
                .map_err(|e| e.to_string())
        }
        (Some(_), Some(_)) => Err("give either `in_s` or `cron`, not both".into()),
        (None, None) => Err("`create` needs `in_s` (once) or `cron` (repeating)".into()),
    }
}

fn view(s: &Schedule) -> Value {
    let now = now_ms();
    json!({
        "id": s.id,
        "cron": (!s.cron.is_empty()).then_some(&s.cron),
        "once_at_ms": s.once_at,
        "text": s.text,
        "next_due_in_s": crate::scheduler::next_due_at(s, now).map(|t| (t - now).max(0) / 1000),
    })
}

async fn run(w: &Wired, args: &Value, caller: &str) -> Result<Value, String> {
    super::only_known(args, &["action", "in_s", "cron", "text", "id"])
        .map_err(|e| format!("invalid arguments: {e}"))?;
    let deps = &w.deps;
    let store_err = super::store_err;
    let row = super::caller_session(w, caller).await?;
    let session = row.lineage();
    let mine = |s: &Schedule| s.session_id == session;
    match args.get("action").and_then(Value::as_str) {
        Some("create") => {
            let when = when_of(args).map_err(|e| format!("invalid arguments: {e}"))?;
            let text = args
                .get("text")
                .and_then(Value::as_str)
                .ok_or("invalid arguments: `text` is required: what arrives when it falls due")?;
            let text =
                schedule::checked_text(text).map_err(|e| format!("invalid arguments: {e}"))?;
            let held = deps
                .store
                .list_schedules(Some(&row.owner))
                .await
                .map_err(store_err)?
                .iter()
                .filter(|s| mine(s))
                .count();
            if held >= MAX_PER_SESSION {
                return Err(format!(
                    "this conversation already has {held} schedules (at most {MAX_PER_SESSION}); delete some first"
                ));
            }
            let (cron, once_at) = match when {
                When::In(s) => (String::new(), Some(now_ms() + s * 1000)),
                When::Cron(c) => (c, None),
            };
            let made = deps
                .store
                .create_schedule(NewSchedule {
                    id: ScheduleId::new(),
                    session_id: session,
                    owner: row.owner.clone(),
                    cron,
                    text,
                    missed: MissedPolicy::RunOnce,
                    source: ScheduleSource::Agent,
                    once_at,
                })
                .await
                .map_err(store_err)?;
            tracing::info!(schedule = %made.id, %session, cron = %made.cron, once_at = ?made.once_at, "schedule created by the agent");
            w.scheduler.do_send(SchedulesChanged);
            Ok(json!({"created": view(&made)}))
        }
        Some("list") => {
            let list = deps
                .store
                .list_schedules(Some(&row.owner))
                .await
                .map_err(store_err)?;
            Ok(json!({"schedules": list.iter().filter(|s| mine(s)).map(view).collect::<Vec<_>>()}))
        }
        Some("delete") => {
            let id: ScheduleId = args
                .get("id")
                .and_then(Value::as_str)
                .and_then(|s| s.trim().parse().ok())
                .ok_or("invalid arguments: `id` is required: a schedule id from `list`")?;
            let found = deps.store.get_schedule(id).await.map_err(store_err)?;
            let Some(s) = found.filter(|s| mine(s)) else {
                return Err(format!("no schedule {id} in this conversation"));
            };
            if s.source == ScheduleSource::Config {
                return Err(format!(
                    "schedule {id} comes from the server's configuration; only its operator can remove it"
                ));
            }
            deps.store.delete_schedule(id).await.map_err(store_err)?;
            w.scheduler.do_send(SchedulesChanged);
            Ok(json!({"deleted": id}))
        }
        Some(other) => Err(format!(
            "invalid arguments: `action` must be \"create\", \"list\" or \"delete\", not {other:?}"
        )),
        None => Err("invalid arguments: `action` is required: create, list or delete".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_5_a_schedule_is_once_or_cron_never_both() {
        assert_eq!(when_of(&json!({"in_s": 1800})), Ok(When::In(1800)));
        assert_eq!(when_of(&json!({"in_s": 60.0})), Ok(When::In(60)));
        assert_eq!(
            when_of(&json!({"cron": " 0 8 * * 1-5 "})),
            Ok(When::Cron("0 8 * * 1-5".into()))
        );
        for (bad, why) in [
            (json!({"in_s": 0}), "between"),
            (json!({"in_s": 1.5}), "whole number"),
            (json!({"in_s": MAX_IN_S + 1}), "between"),
            (json!({"cron": "nonsense"}), "cron"),
            (json!({"in_s": 5, "cron": "* * * * *"}), "not both"),
            (json!({}), "needs"),
        ] {
            match when_of(&bad) {
                Ok(w) => panic!("{bad} gave {w:?}"),
                Err(e) => assert!(e.contains(why), "{bad}: {e}"),
            }
        }
    }
}
