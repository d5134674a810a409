//! The built-in tool names and what can be wrong with the `[tools]` settings that name them:
//! below `net_guard` (which refuses a bad `fetch_allow`) and `builtin` (which refuses a name).

/// Every built-in tool name, in the order API.md lists them.
pub const BUILTIN_TOOLS: [&str; 6] = [
    "terminal",
    "read_file",
    "write_file",
    "patch",
    "search_files",
    "web_fetch",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolSetupError {
    #[error("tools.enabled: unknown tool {name:?}; built-in tools are {}", BUILTIN_TOOLS.join(", "))]
    UnknownTool { name: String },
    #[error("tools.fetch_allow: {entry:?} is not a host name, IP address or CIDR: {reason}")]
    FetchAllow { entry: String, reason: String },
}
