//! Tools the model may call: the `Tool` trait, the context a call runs in, and the `Registry`
//! a turn looks calls up in. The actors crate decides when a call runs (order, approval,
//! durability); this crate decides what a call does and keeps it inside its sandbox.
//!
//! ## Floors
//!
//! A module uses only its own floor and the floors below it, and no two modules use each other
//! (`tests/layers.rs`; `docs/architecture.md` shows the same list). The items of this file
//! (`Tool`, `ToolContext`, `Registry`) stand under every floor.
//!
//! 1. leaves: `args`, `setup`, `spill`, `sandbox`, `confine`, `mcp::config`
//! 2. guards: `checkpoint`, `net_guard`
//! 3. tools: `read`, `edit`, `search`, `terminal`, `web_fetch`
//! 4. servers: `background`, `mcp::process`, `mcp::server`, `mcp::tool`
//! 5. registries: `builtin`, `mcp`
use async_trait::async_trait;

mod args;
pub mod background;
pub mod builtin;
pub mod checkpoint;
pub mod confine;
mod edit;
pub mod mcp;
mod net_guard;
mod read;
mod sandbox;
mod search;
mod setup;
pub mod spill;
mod terminal;
mod web_fetch;

pub use builtin::{builtin_registry, BuiltinConfig, ToolSetupError, BUILTIN_TOOLS};
pub use confine::{Sandbox, SandboxMode, SandboxState};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
pub use web_fetch::{download, DownloadError};

/// What a tool returns to the model. An error is a result too (SPEC R9.6), not a turn failure.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }

    /// `Ok` text is a normal result, `Err` text an error result.
    pub fn from_result(result: Result<String, String>) -> Self {
        match result {
            Ok(content) => Self::ok(content),
            Err(content) => Self::error(content),
        }
    }
}

/// Whether a call may run beside other calls of the same session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Runs in parallel with other parallel calls.
    Parallel,
    /// Runs alone: nothing else of the session's batch runs beside it (file-changing tools).
    Exclusive,
}

/// Receives a progress line from a running call (shown as `tool.progress`).
pub type ProgressSink = Arc<dyn Fn(String) + Send + Sync>;

/// Where and under what conditions one call runs.
#[derive(Clone)]
pub struct ToolContext {
    /// The directory every path is confined to (absolute, canonical).
    pub workspace: PathBuf,
    /// A tree a command may not read beneath, but for `workspace`: the workspace root when
    /// each principal has its own workspace (`tools.isolation = "principal"`); `None` when
    /// the caller works in the root itself.
    pub hidden: Option<PathBuf>,
    /// `data_dir/checkpoints/<turn_id>`: where file-changing tools save what they replace.
    pub checkpoints: PathBuf,
    /// Cancelled when the call must stop (interrupt, batch timeout): a running `terminal`
    /// kills its whole process group.
    pub cancel: CancellationToken,
    pub progress: ProgressSink,
    /// Who the call is for: the calling turn's session and the principal whose input it runs
    /// (a platform chat is its own principal). Tools that keep something per principal (the
    /// memory) read it; the file and command tools do not.
    pub caller: Caller,
}

/// The session and principal a tool call runs for.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub session_id: String,
    pub principal: String,
}

#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments.
    fn parameters(&self) -> serde_json::Value;
    /// Whether a human must approve a call before it runs under `approval = "dangerous"`.
    fn dangerous(&self) -> bool {
        false
    }
    fn access(&self) -> Access {
        Access::Parallel
    }
    /// Runs one call. Invalid arguments, refused paths and failures are error outputs.
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput;
}

/// The tools available to a turn, by name. Fixed for the turn once it starts.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl Registry {
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn tools(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn description(&self) -> &str {
            "echoes its input"
        }
        fn parameters(&self) -> serde_json::Value {
            serde_json::json!({"type": "object"})
        }
        async fn call(&self, args: serde_json::Value, _: &ToolContext) -> ToolOutput {
            ToolOutput::ok(args.to_string())
        }
    }

    #[test]
    fn r9_3_unknown_names_are_not_found() {
        let mut r = Registry::default();
        r.register(Arc::new(Echo));
        assert!(r.get("echo").is_some());
        assert!(r.get("rm").is_none());
        assert_eq!(r.names().collect::<Vec<_>>(), vec!["echo"]);
    }
}
