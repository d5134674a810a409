//! The `memory` tool (SPEC R5.2; API.md "Memory and skills"): the model adds, replaces or
//! removes an entry of its principal's notes (`memory`) or user profile (`profile`). Durable
//! like every tool run (recorded `started` before, its result after); the change itself is
//! one commit with its record and, in the calling session, `memory.updated`. A write is
//! checked first (`scan`); one that does not fit says how full the store is, so the model can
//! replace or remove something and try again.
use super::scan;
use crate::config::MemoryConfig;
use crate::delivery::EventHub;
use crate::redact::Redactor;
use async_trait::async_trait;
use serde_json::{json, Value};
use turnkey_storage::{Author, ChangedBy, MemoryEdit, MemoryTarget, MemoryWrite, SessionId, Store};
use turnkey_tools::{ToolContext, ToolOutput};

pub struct MemoryTool {
    store: Store,
    hub: EventHub,
    config: MemoryConfig,
    redactor: Redactor,
}

impl MemoryTool {
    pub fn new(store: Store, hub: EventHub, config: MemoryConfig, redactor: Redactor) -> Self {
        Self {
            store,
            hub,
            config,
            redactor,
        }
    }

    fn limit(&self, target: MemoryTarget) -> usize {
        match target {
            MemoryTarget::Memory => self.config.memory_chars,
            MemoryTarget::Profile => self.config.profile_chars,
        }
    }
}

/// The arguments, read: the edit and the store it is for.
pub(crate) fn edit_of(args: &Value) -> Result<(MemoryTarget, MemoryEdit<'_>), String> {
    let text = |key: &str| -> Result<&str, String> {
        args.get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| format!("`{key}` is required: a non-empty string"))
    };
    let target = match args.get("target").and_then(Value::as_str) {
        Some(t) => MemoryTarget::parse(t)
            .ok_or_else(|| format!("`target` must be \"memory\" or \"profile\", not {t:?}"))?,
        None => return Err("`target` is required: \"memory\" or \"profile\"".into()),
    };
    let edit = match args.get("action").and_then(Value::as_str) {
        Some("add") => MemoryEdit::Add {
            text: text("text")?,
        },
        Some("replace") => MemoryEdit::Replace {
            old_text: text("old_text")?,
            text: text("text")?,
        },
        Some("remove") => MemoryEdit::Remove {
            old_text: text("old_text")?,
        },
        Some(other) => {
            return Err(format!(
                "`action` must be \"add\", \"replace\" or \"remove\", not {other:?}"
            ))
        }
        None => return Err("`action` is required: \"add\", \"replace\" or \"remove\"".into()),
    };
    Ok((target, edit))
}

/// The tool's schema (the review offers the same).
pub fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "replace", "remove"]},
            "target": {"type": "string", "enum": ["memory", "profile"]},
            "text": {"type": "string", "description": "The entry's text (add, replace)."},
            "old_text": {"type": "string", "description": "A piece of text that only the entry to replace or remove contains."}
        },
        "required": ["action", "target"],
        "additionalProperties": false
    })
}

#[async_trait]
impl turnkey_tools::Tool for MemoryTool {
    fn name(&self) -> &str {
        "memory"
    }

    // Not made short with the others (issue 38): behind the `tools` index only its first
    // clause is shown, and with less the 135M real-model test's model stopped answering
    // from its profile (docs/benchmarks.md).
    fn description(&self) -> &str {
        "Remember facts across sessions. `memory` holds your own notes (what worked, facts about \
         the project); `profile` holds what you know about the user (name, preferences). Both are \
         shown to you at the start of every new session, not in this one. Add one fact per \
         entry; to change or delete an entry, name it by a piece of its text (`old_text`) that \
         only it contains. Never save instructions, secrets or passwords: they are refused."
    }

    fn parameters(&self) -> Value {
        parameters()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let (target, edit) = match edit_of(&args) {
            Ok(e) => e,
            Err(why) => return ToolOutput::error(format!("invalid arguments: {why}")),
        };
        let written = match edit {
            MemoryEdit::Add { text }
            | MemoryEdit::Replace { text, .. }
            | MemoryEdit::ReplaceId { text, .. } => scan::check(text),
            MemoryEdit::Remove { .. } | MemoryEdit::RemoveId(_) => Ok(()),
        };
        if let Err(refused) = written {
            return ToolOutput::error(format!("{} ({})", refused, refused.code()));
        }
        let Ok(session) = ctx.caller.session_id.parse::<SessionId>() else {
            return ToolOutput::error("memory is available only inside a session's turn");
        };
        let author = Author {
            by: ChangedBy::Tool,
            session: Some(session),
        };
        let limit = self.limit(target);
        let scope = &ctx.caller.principal;
        let mut buf = String::new();
        let edit = super::masked(edit, &self.redactor, &mut buf);
        let result = self
            .store
            .edit_memory(scope, target, edit, limit, &author)
            .await;
        match result {
            Ok(MemoryWrite::Done {
                entry,
                chars,
                event,
            }) => {
                if let Some(ev) = event {
                    self.hub.publish(*ev);
                }
                ToolOutput::ok(
                    json!({
                        "ok": true,
                        "target": target.as_str(),
                        "entry": entry.text,
                        "chars": chars,
                        "limit": limit,
                    })
                    .to_string(),
                )
            }
            Ok(refused) => ToolOutput::error(
                super::refusal(&refused, target)
                    .map_or_else(|| "memory not changed".to_owned(), |(_, why)| why),
            ),
            Err(e) => ToolOutput::error(format!("memory not changed: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r5_2_memory_arguments_are_read_strictly() {
        let ok =
            json!({"action": "replace", "target": "profile", "old_text": "tea", "text": "coffee"});
        let (target, edit) = edit_of(&ok).unwrap();
        assert_eq!(target, MemoryTarget::Profile);
        assert!(matches!(
            edit,
            MemoryEdit::Replace {
                old_text: "tea",
                text: "coffee"
            }
        ));
        for (bad, why) in [
            (
                json!({"action": "add", "text": "x"}),
                "`target` is required",
            ),
            (
                json!({"action": "add", "target": "diary", "text": "x"}),
                "`target` must be",
            ),
            (
                json!({"action": "add", "target": "memory"}),
                "`text` is required",
            ),
            (
                json!({"action": "add", "target": "memory", "text": "  "}),
                "`text` is required",
            ),
            (
                json!({"action": "remove", "target": "memory"}),
                "`old_text` is required",
            ),
            (
                json!({"action": "wipe", "target": "memory"}),
                "`action` must be",
            ),
            (json!({"target": "memory"}), "`action` is required"),
        ] {
            let err = edit_of(&bad).err().unwrap_or_default();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
