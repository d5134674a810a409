//! What configures and bounds an MCP server: the `[[tools.mcp]]` entry, the time bounds of a
//! start and a call, and what can go wrong starting one. Below the server and its tools, which
//! all use them.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Between the server's name and the tool's in the name offered to the model.
pub const NAME_SEPARATOR: &str = "__";
/// Bound on one call, restart of a dead server included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on starting a server: spawn, `initialize`, and again on `tools/list`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[[tools.mcp]]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Prefix of its tools' names: letters, digits, `_` and `-`; unique.
    pub name: String,
    /// The program, found on `PATH` unless a path is given.
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for the server, beside the few basics it inherits (`PATH`, `HOME`, …);
    /// the rest of the gateway's environment (provider keys) is not passed.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl McpServerConfig {
    /// The first invalid field of the entry, with the reason.
    pub fn invalid_field(&self) -> Option<(&'static str, String)> {
        if self.name.is_empty() {
            return Some(("name", "must not be empty".into()));
        }
        if !self
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Some((
                "name",
                format!(
                    "{:?}: only letters, digits, _ and - (it prefixes the tool names)",
                    self.name
                ),
            ));
        }
        if self.command.trim().is_empty() {
            return Some(("command", "must not be empty".into()));
        }
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("the MCP handshake failed: {reason} (the server {ending})")]
    Initialize { reason: String, ending: String },
    #[error("listing its tools failed: {0}")]
    ListTools(String),
}
