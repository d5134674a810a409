//! The toolbox: builds, once at start-up, the tools a turn may call (the built-ins named in
//! `tools.enabled`, the gateway's own tools it names (`memory`: made by the gateway, which has
//! the store), and the tools of every `[[tools.mcp]]` server, which it starts) and what the
//! model is offered (`index`: the `tools.always_on` ones whole, the rest behind one `tools`
//! tool). The workspace every tool is confined to is created here if missing and fixed as an
//! absolute path; MCP servers run in it, in the OS sandbox.
pub mod index;

use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use turnkey_providers::ToolSchema;
use turnkey_tools::builtin::{builtin_registry, BuiltinConfig, ToolSetupError};
use turnkey_tools::mcp::{McpServer, McpServerConfig};
use turnkey_tools::{Registry, Sandbox, Tool};

/// Tools the gateway makes itself, named in `tools.enabled` like the built-ins.
pub const GATEWAY_TOOLS: &[&str] = &[
    "memory",
    "skill_view",
    "skill_manage",
    "delegate_task",
    "process",
    "schedule",
];

pub struct Toolbox {
    pub registry: Arc<Registry>,
    pub offer: index::ToolOffer,
    /// Absolute and canonical.
    pub workspace: PathBuf,
}

fn config_error(key: impl Into<String>, reason: impl Into<String>) -> GatewayError {
    GatewayError::Config {
        key: key.into(),
        reason: reason.into(),
    }
}

/// `own` are the gateway's tools that its configuration allows (`[memory] enabled`); each is
/// offered when `tools.enabled` names it.
/// A tool of `own` named like a built-in takes its place (the gateway's `terminal`, which adds
/// `background: true` to the built-in's).
pub async fn build(
    config: &RuntimeConfig,
    own: Vec<Arc<dyn Tool>>,
    sandbox: &Sandbox,
) -> Result<Toolbox, GatewayError> {
    let ws = &config.tools.workspace;
    std::fs::create_dir_all(ws).map_err(|e| {
        config_error(
            "tools.workspace",
            format!("{}: cannot create: {e}", ws.display()),
        )
    })?;
    let workspace = ws
        .canonicalize()
        .map_err(|e| config_error("tools.workspace", format!("{}: {e}", ws.display())))?;
    let enabled = &config.tools.enabled;
    let mut registry = builtin_registry(&BuiltinConfig {
        enabled: enabled
            .iter()
            .filter(|n| !GATEWAY_TOOLS.contains(&n.as_str()))
            .cloned()
            .collect(),
        fetch_allow: config.tools.fetch_allow.clone(),
        sandbox: sandbox.clone(),
    })
    .map_err(|e| {
        let key = match e {
            ToolSetupError::UnknownTool { .. } => "tools.enabled",
            ToolSetupError::FetchAllow { .. } => "tools.fetch_allow",
        };
        let text = e.to_string();
        let reason = text.strip_prefix(&format!("{key}: ")).unwrap_or(&text);
        config_error(key, reason)
    })?;
    for tool in own {
        if enabled.iter().any(|n| n == tool.name()) {
            registry.register(tool);
        }
    }
    for (i, server) in config.tools.mcp.iter().enumerate() {
        add_mcp_server(&mut registry, i, server, &workspace, sandbox).await?;
    }
    let schemas = registry
        .tools()
        .map(|t| ToolSchema {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            parameters: t.parameters(),
        })
        .collect();
    let offer = index::ToolOffer::new(schemas, &config.tools.always_on);
    if !offer.deferred().is_empty() {
        registry.register(Arc::new(index::IndexTool::new(&offer)));
    }
    Ok(Toolbox {
        registry: Arc::new(registry),
        offer,
        workspace,
    })
}

/// Starts the server of `tools.mcp[i]` and registers its tools. A server that does not start
/// stops the gateway's start: its tools would otherwise vanish without a word.
async fn add_mcp_server(
    registry: &mut Registry,
    i: usize,
    config: &McpServerConfig,
    workspace: &Path,
    sandbox: &Sandbox,
) -> Result<(), GatewayError> {
    let key = format!("tools.mcp[{i}]");
    let server = McpServer::start(config.clone(), workspace, sandbox)
        .await
        .map_err(|e| config_error(&key, format!("MCP server {:?}: {e}", config.name)))?;
    for tool in server.tools() {
        if registry.get(tool.name()).is_some() {
            return Err(config_error(
                &key,
                format!(
                    "MCP server {:?}: a tool named {} is already offered",
                    config.name,
                    tool.name()
                ),
            ));
        }
        registry.register(tool.clone());
    }
    let names: Vec<&str> = server.tools().iter().map(|t| t.name()).collect();
    tracing::info!(server = %config.name, pid = ?server.pid().await, tools = ?names, "MCP server started");
    Ok(())
}
