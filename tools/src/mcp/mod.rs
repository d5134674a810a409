//! MCP tools (`[[tools.mcp]]`): each configured stdio server is started once, its tools are
//! listed and offered as `SERVER__TOOL`, and a call of one is sent to the server as
//! `tools/call` (rmcp is the client). Calls go through the same executor as the built-ins.
mod config;
mod process;
mod server;
mod tool;

use crate::confine::Sandbox;
use crate::Tool;
pub use config::{McpError, McpServerConfig, CALL_TIMEOUT, NAME_SEPARATOR, START_TIMEOUT};
use std::path::Path;
use std::sync::Arc;

/// A started server and the tools it offers. The tools keep the server running; when the
/// last of them is dropped, the server is stopped.
pub struct McpServer {
    server: Arc<server::Server>,
    tools: Vec<Arc<dyn Tool>>,
}

impl McpServer {
    /// Starts the server in `workdir`, confined by `sandbox` (and so again after a crash),
    /// initializes it and lists its tools. A tool whose name cannot be offered to a model is
    /// left out with a warning.
    pub async fn start(
        config: McpServerConfig,
        workdir: &Path,
        sandbox: &Sandbox,
    ) -> Result<Self, McpError> {
        let (server, listed) = server::Server::start(config, workdir, sandbox).await?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for listed in listed {
            let remote = listed.name.clone();
            match tool::McpTool::new(server.clone(), listed) {
                Ok(t) if tools.iter().any(|other| other.name() == t.name()) => {
                    tracing::warn!(server = %server.name(), tool = %remote,
                        "MCP tool left out: another tool of the server has the name {}", t.name());
                }
                Ok(t) => tools.push(Arc::new(t)),
                Err(why) => {
                    tracing::warn!(server = %server.name(), tool = %remote, "MCP tool left out: {why}");
                }
            }
        }
        Ok(Self { server, tools })
    }

    pub fn name(&self) -> &str {
        self.server.name()
    }

    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The process id of the server's current process.
    pub async fn pid(&self) -> Option<u32> {
        self.server.pid().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, command: &str) -> McpServerConfig {
        McpServerConfig {
            name: name.into(),
            command: command.into(),
            ..Default::default()
        }
    }

    #[test]
    fn r9_entries_need_a_safe_name_and_a_command() {
        assert_eq!(entry("time", "mcp-server-time").invalid_field(), None);
        assert_eq!(entry("my-git_2", "x").invalid_field(), None);
        assert_eq!(entry("", "x").invalid_field().map(|f| f.0), Some("name"));
        assert_eq!(entry("a.b", "x").invalid_field().map(|f| f.0), Some("name"));
        assert_eq!(entry("a b", "x").invalid_field().map(|f| f.0), Some("name"));
        assert_eq!(
            entry("t", " ").invalid_field().map(|f| f.0),
            Some("command")
        );
    }

    #[tokio::test]
    async fn r9_a_missing_command_is_a_start_error_naming_it() {
        let dir = std::env::temp_dir();
        let err = McpServer::start(
            entry("nope", "/nonexistent/mcp-server"),
            &dir,
            &Sandbox::off(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("cannot start `/nonexistent/mcp-server`"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn r9_a_server_that_exits_at_once_is_a_handshake_error_with_its_stderr() {
        let dir = std::env::temp_dir();
        let mut cfg = entry("dies", "sh");
        cfg.args = vec!["-c".into(), "echo boom >&2; exit 3".into()];
        let err = McpServer::start(cfg, &dir, &Sandbox::off())
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("handshake failed"), "{err}");
        assert!(err.contains("exited with status 3"), "{err}");
        assert!(err.contains("boom"), "{err}");
    }
}
