//! Tools the model may call: the `Tool` trait and the `Registry` a turn looks calls up in.
//! Built-in tools (terminal, files, search, fetch) and sandboxing arrive with the tool-round
//! issue; until then the registry holds only what is registered explicitly.
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a tool returns to the model. An error is a result too (SPEC R9.6), not a turn failure.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
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
    async fn call(&self, args: serde_json::Value) -> ToolOutput;
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
        async fn call(&self, args: serde_json::Value) -> ToolOutput {
            ToolOutput {
                content: args.to_string(),
                is_error: false,
            }
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
