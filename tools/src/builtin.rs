//! The built-in tools (API.md "Built-in tools") and the registry of those `[tools] enabled`
//! names.
use crate::edit::{Patch, WriteFile};
use crate::net_guard::FetchAllow;
use crate::read::ReadFile;
use crate::search::SearchFiles;
pub use crate::setup::{ToolSetupError, BUILTIN_TOOLS};
use crate::terminal::Terminal;
use crate::web_fetch::WebFetch;
use crate::{Registry, Tool};
use std::sync::Arc;

/// The `[tools]` settings the built-in tools need.
#[derive(Clone, Debug, Default)]
pub struct BuiltinConfig {
    /// `tools.enabled`: which built-in tools the model is offered.
    pub enabled: Vec<String>,
    /// `tools.fetch_allow`: host names, IP addresses or CIDRs `web_fetch` may reach even
    /// though they are private, loopback, link-local or otherwise not global.
    pub fetch_allow: Vec<String>,
    /// What confines `terminal`'s commands (`tools.sandbox`); off by default.
    pub sandbox: crate::confine::Sandbox,
}

/// The registry of the enabled built-in tools. Unknown names and malformed `fetch_allow`
/// entries are errors, so a typo in the configuration fails at start-up.
pub fn builtin_registry(cfg: &BuiltinConfig) -> Result<Registry, ToolSetupError> {
    let allow = FetchAllow::parse(&cfg.fetch_allow)?;
    let mut registry = Registry::default();
    for name in &cfg.enabled {
        let tool: Arc<dyn Tool> = match name.as_str() {
            "terminal" => Arc::new(Terminal {
                sandbox: cfg.sandbox.clone(),
                ..Terminal::default()
            }),
            "read_file" => Arc::new(ReadFile),
            "write_file" => Arc::new(WriteFile),
            "patch" => Arc::new(Patch),
            "search_files" => Arc::new(SearchFiles),
            "web_fetch" => Arc::new(WebFetch::new(allow.clone())),
            other => {
                return Err(ToolSetupError::UnknownTool {
                    name: other.to_owned(),
                })
            }
        };
        registry.register(tool);
    }
    Ok(registry)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{Access, ToolContext};
    use std::sync::Mutex;
    use tokio_util::sync::CancellationToken;

    /// Temporary directories a test context lives in; dropped, they are deleted.
    pub(crate) struct Dirs {
        _workspace: tempfile::TempDir,
        _data: tempfile::TempDir,
        /// A directory outside the workspace, for escape tests.
        pub outside: tempfile::TempDir,
    }

    pub(crate) fn ctx() -> (Dirs, ToolContext) {
        let (dirs, ctx, _) = ctx_with_progress();
        (dirs, ctx)
    }

    /// A context whose progress lines are collected.
    pub(crate) fn ctx_with_progress() -> (Dirs, ToolContext, Arc<Mutex<Vec<String>>>) {
        let workspace = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let ctx = ToolContext {
            workspace: std::fs::canonicalize(workspace.path()).unwrap(),
            hidden: None,
            checkpoints: data.path().join("checkpoints/turn-1"),
            cancel: CancellationToken::new(),
            progress: Arc::new(move |line| sink.lock().unwrap().push(line)),
            caller: crate::Caller::default(),
        };
        let dirs = Dirs {
            _workspace: workspace,
            _data: data,
            outside,
        };
        (dirs, ctx, lines)
    }

    #[test]
    fn r9_3_builtin_registry_offers_the_enabled_tools() {
        let all = BuiltinConfig {
            enabled: BUILTIN_TOOLS.iter().map(|s| s.to_string()).collect(),
            fetch_allow: vec![
                "127.0.0.1".into(),
                "10.0.0.0/8".into(),
                "intranet.local".into(),
            ],
            ..Default::default()
        };
        let registry = builtin_registry(&all).unwrap();
        let mut names: Vec<&str> = registry.names().collect();
        names.sort_unstable();
        let mut expected = BUILTIN_TOOLS.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected);
        for tool in registry.tools() {
            let dangerous = ["terminal", "write_file", "patch", "web_fetch"].contains(&tool.name());
            assert_eq!(tool.dangerous(), dangerous, "{}", tool.name());
            let exclusive = ["write_file", "patch"].contains(&tool.name());
            let access = if exclusive {
                Access::Exclusive
            } else {
                Access::Parallel
            };
            assert_eq!(tool.access(), access, "{}", tool.name());
            let schema = tool.parameters();
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert!(!tool.description().is_empty());
        }

        let some = BuiltinConfig {
            enabled: vec!["read_file".into()],
            ..Default::default()
        };
        let registry = builtin_registry(&some).unwrap();
        assert_eq!(registry.names().collect::<Vec<_>>(), vec!["read_file"]);
    }

    #[test]
    fn r9_3_unknown_enabled_names_and_bad_allow_entries_are_setup_errors() {
        let cfg = BuiltinConfig {
            enabled: vec!["read_file".into(), "rm_rf".into()],
            ..Default::default()
        };
        let err = builtin_registry(&cfg).err().unwrap();
        assert_eq!(
            err,
            ToolSetupError::UnknownTool {
                name: "rm_rf".into()
            }
        );
        assert!(err.to_string().contains("\"rm_rf\""), "{err}");

        for bad in ["10.0.0.0/33", "", "http://x/", "a b"] {
            let cfg = BuiltinConfig {
                enabled: vec![],
                fetch_allow: vec![bad.into()],
                ..Default::default()
            };
            let err = builtin_registry(&cfg).err().unwrap();
            assert!(
                matches!(&err, ToolSetupError::FetchAllow { entry, .. } if entry == bad),
                "{bad}: {err}"
            );
        }
    }
}
