//! `skill_view` and `skill_manage` (API.md "Memory and skills"). The prompt carries only each
//! skill's name and description; `skill_view` loads a body (or a file beside it) when the
//! model decides to follow one, and counts the use. `skill_manage` records a proposal a
//! person decides (`agent_writes = "propose"`), or changes the skill at once (`"direct"`).
use super::catalog::Catalog;
use super::manage::{self, Refused};
use crate::config::AgentWrites;
use async_trait::async_trait;
use serde_json::{json, Value};
use turnkey_storage::{SessionId, SkillChange, Store};
use turnkey_tools::{ToolContext, ToolOutput};

pub struct SkillView {
    catalog: Catalog,
    store: Store,
}

impl SkillView {
    pub fn new(catalog: Catalog, store: Store) -> Self {
        Self { catalog, store }
    }
}

#[async_trait]
impl turnkey_tools::Tool for SkillView {
    fn name(&self) -> &str {
        "skill_view"
    }

    fn description(&self) -> &str {
        "Load a skill (listed under # Skills): its SKILL.md, or with `path` a file beside it."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The skill's name, as listed."},
                "path": {"type": "string", "description": "A file under the skill's folder, relative."}
            },
            "required": ["name"],
            "additionalProperties": false
        })
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return ToolOutput::error("invalid arguments: `name` is required: a skill's name");
        };
        let path = match args.get("path") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) => Some(p.as_str()),
            Some(_) => return ToolOutput::error("invalid arguments: `path` must be a string"),
        };
        let text = match self.catalog.get(name).await {
            Ok(Some(t)) => t,
            Ok(None) => {
                return ToolOutput::error(format!(
                    "there is no skill {name:?}; the skills are listed under # Skills"
                ))
            }
            Err(e) => return ToolOutput::error(format!("skills are unavailable: {e}")),
        };
        let out = match path {
            Some(p) => match self.catalog.file(name, p).await {
                Ok(body) => body,
                Err(why) => return ToolOutput::error(why),
            },
            None if text.files.is_empty() => text.content,
            None => format!(
                "{}\n\nFiles beside it (skill_view with `path`): {}",
                text.content.trim_end(),
                text.files.join(", ")
            ),
        };
        if let Err(e) = self.store.record_skill_use(name).await {
            // The count is a statistic: the model still gets the skill.
            tracing::warn!(skill = name, error = %e, "could not count a skill's use");
        }
        ToolOutput::ok(out)
    }
}

pub struct SkillManage {
    catalog: Catalog,
    store: Store,
    writes: AgentWrites,
}

impl SkillManage {
    pub fn new(catalog: Catalog, store: Store, writes: AgentWrites) -> Self {
        Self {
            catalog,
            store,
            writes,
        }
    }
}

/// The tool's schema, shared with the review (which offers the same tool).
pub fn manage_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["create", "patch", "delete"]},
            "name": {"type": "string", "description": "The skill's name: a-z, 0-9, '-', '_', '.'."},
            "description": {"type": "string", "description": "When the skill is useful, in one line (create; patch to change it)."},
            "content": {"type": "string", "description": "The skill's steps in Markdown (create)."},
            "old": {"type": "string", "description": "Text of the skill to replace (patch); it must be there once."},
            "new": {"type": "string", "description": "What replaces `old` (patch)."}
        },
        "required": ["action", "name"],
        "additionalProperties": false
    })
}

pub const MANAGE_DESCRIPTION: &str =
    "Create, patch or delete a skill: a procedure that worked (steps, commands, pitfalls) \
     for later sessions. A change may wait for a person's approval.";

#[async_trait]
impl turnkey_tools::Tool for SkillManage {
    fn name(&self) -> &str {
        "skill_manage"
    }

    fn description(&self) -> &str {
        MANAGE_DESCRIPTION
    }

    fn parameters(&self) -> Value {
        manage_parameters()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let session = ctx.caller.session_id.parse::<SessionId>().ok();
        let proposal = match manage::plan(&args, session) {
            Ok(p) => p,
            Err(why) => return ToolOutput::error(format!("invalid arguments: {why}")),
        };
        // Checked against the skills now, proposal or not: a person should not be asked to
        // approve a change that cannot apply.
        let change = match manage::change_of(&self.catalog, &proposal).await {
            Ok(c) => c,
            Err(e) => return ToolOutput::error(format!("{e} ({})", e.code())),
        };
        match self.writes {
            AgentWrites::Off => ToolOutput::error("skill changes by the agent are off"),
            AgentWrites::Propose => match self.store.propose_skill(&proposal).await {
                Ok(made) => ToolOutput::ok(
                    json!({
                        "ok": true,
                        "proposed": true,
                        "proposal_id": made.id,
                        "note": "recorded as a proposal: it takes effect when a person approves it",
                    })
                    .to_string(),
                ),
                Err(e) => ToolOutput::error(format!("not recorded: {e}")),
            },
            AgentWrites::Direct => match apply(&self.store, &change).await {
                Ok(()) => ToolOutput::ok(
                    json!({"ok": true, "applied": true, "name": proposal.name}).to_string(),
                ),
                Err(e) => ToolOutput::error(format!("{e} ({})", e.code())),
            },
        }
    }
}

/// Makes `change` in the store.
pub async fn apply(store: &Store, change: &SkillChange) -> Result<(), Refused> {
    match change {
        SkillChange::Put {
            name,
            description,
            content,
        } => {
            store.put_skill(name, description, content).await?;
        }
        SkillChange::Delete { name } => {
            store.delete_skill(name).await?;
        }
    }
    Ok(())
}
