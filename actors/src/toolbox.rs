//! The toolbox: builds, once at start-up, the tools a turn may call (the built-ins named in
//! `tools.enabled`) and the schemas the model is offered. The workspace every tool is
//! confined to is created here if missing and fixed as an absolute path.
use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use std::path::PathBuf;
use std::sync::Arc;
use turnkey_providers::ToolSchema;
use turnkey_tools::builtin::{builtin_registry, BuiltinConfig};
use turnkey_tools::Registry;

pub struct Toolbox {
    pub registry: Arc<Registry>,
    pub schemas: Vec<ToolSchema>,
    /// Absolute and canonical.
    pub workspace: PathBuf,
}

pub fn build(config: &RuntimeConfig) -> Result<Toolbox, GatewayError> {
    let ws = &config.tools.workspace;
    std::fs::create_dir_all(ws).map_err(|e| {
        GatewayError::Config(format!(
            "tools.workspace {}: cannot create: {e}",
            ws.display()
        ))
    })?;
    let workspace = ws
        .canonicalize()
        .map_err(|e| GatewayError::Config(format!("tools.workspace {}: {e}", ws.display())))?;
    let registry = builtin_registry(&BuiltinConfig {
        enabled: config.tools.enabled.clone(),
        fetch_allow: config.tools.fetch_allow.clone(),
    })
    .map_err(|e| GatewayError::Config(e.to_string()))?;
    let schemas = registry
        .tools()
        .map(|t| ToolSchema {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            parameters: t.parameters(),
        })
        .collect();
    Ok(Toolbox {
        registry: Arc::new(registry),
        schemas,
        workspace,
    })
}
