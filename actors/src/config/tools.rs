//! `[tools]`, uploads and `[stt]`: what the agent can run and read, where, and how a chat's
//! files reach it.
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use turnkey_tools::mcp::McpServerConfig;
use turnkey_tools::SandboxMode;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    Off,
    #[default]
    Dangerous,
    Always,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    pub workspace: PathBuf,
    pub enabled: Vec<String>,
    /// Enabled tools offered with their whole schema in every request; the other enabled tools
    /// are listed in the `tools` tool, through which the model reads and calls them (a shorter
    /// prompt for every call), unless there is only one. A name not enabled is ignored.
    pub always_on: Vec<String>,
    pub approval: ApprovalMode,
    pub approval_timeout_s: u64,
    pub max_workers: usize,
    pub batch_timeout_s: u64,
    /// Results larger than this many bytes are spilled to `data_dir/spill`; the model gets a
    /// head, a tail and the path.
    pub spill_bytes: usize,
    /// Hosts or CIDRs `web_fetch` may reach despite the private-address guard.
    pub fetch_allow: Vec<String>,
    /// `[[tools.mcp]]`: stdio MCP servers started at start-up; their tools are `NAME__TOOL`.
    pub mcp: Vec<McpServerConfig>,
    /// Background processes (`terminal` with `background: true`) running per session, at most.
    pub background_max: u32,
    /// A background process's log is kept within this many bytes (its end is kept).
    pub background_log_bytes: u64,
    /// `stop` or `leave`: what a graceful stop does with background processes.
    pub background_on_shutdown: OnShutdown,
    /// `auto`, `landlock` or `off`: the OS sandbox of commands and MCP servers (SPEC R13.7).
    pub sandbox: SandboxMode,
    /// Whether sandboxed commands and MCP servers may open network connections.
    pub sandbox_network: bool,
    /// `principal` (a workspace of its own per principal under the root; the operator's
    /// sessions keep the root) or `shared` (one for all).
    pub isolation: Isolation,
    /// An attached text file up to this many bytes is shown to the model in its message (and
    /// saved in the workspace, as every attached file); a larger one is named by its path.
    /// 0: every file is only named.
    pub inline_text_bytes: usize,
}

/// Whose files a session's tools see (`tools.isolation`, SPEC R13.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    #[default]
    Principal,
    Shared,
}

/// Where the sessions of principals other than the operator work, under the workspace root.
pub const PRINCIPALS_DIR: &str = "principals";

impl ToolsConfig {
    /// The workspace of the sessions `owner` owns, under `root` (the workspace root, absolute),
    /// and the tree its commands may not read beyond it (`root`, when principals are isolated).
    /// The operator's sessions, and every session with `isolation = "shared"`, work in `root`.
    pub fn workspace_of(&self, root: &std::path::Path, owner: &str) -> (PathBuf, Option<PathBuf>) {
        if self.isolation == Isolation::Shared || owner == "operator" {
            return (root.to_path_buf(), None);
        }
        (
            root.join(PRINCIPALS_DIR).join(principal_dir(owner)),
            Some(root.to_path_buf()),
        )
    }
}

/// A principal's folder name: its id made safe for a path (letters, digits, `-`, `_`; at most
/// 48 of them), and a short digest of the whole id so that two ids never share one.
fn principal_dir(owner: &str) -> String {
    use sha2::{Digest, Sha256};
    let safe: String = owner
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(48)
        .collect();
    let digest = hex::encode(&Sha256::digest(owner.as_bytes())[..4]);
    format!("{safe}-{digest}")
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            workspace: PathBuf::from("./workspace"),
            enabled: [
                "terminal",
                "read_file",
                "write_file",
                "patch",
                "search_files",
                "web_fetch",
                "memory",
                "skill_view",
                "skill_manage",
                "delegate_task",
                "process",
                "schedule",
            ]
            .map(String::from)
            .to_vec(),
            always_on: ["terminal", "read_file", "write_file", "patch"]
                .map(String::from)
                .to_vec(),
            approval: ApprovalMode::Dangerous,
            approval_timeout_s: 300,
            max_workers: 8,
            batch_timeout_s: 420,
            spill_bytes: 32 * 1024,
            fetch_allow: Vec::new(),
            mcp: Vec::new(),
            background_max: 4,
            background_log_bytes: 1024 * 1024,
            background_on_shutdown: OnShutdown::Stop,
            sandbox: SandboxMode::Auto,
            sandbox_network: false,
            isolation: Isolation::Principal,
            inline_text_bytes: 16 * 1024,
        }
    }
}

/// What a graceful stop does with background processes (`tools.background_on_shutdown`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnShutdown {
    /// End them with their process group; their report says `killed`.
    #[default]
    Stop,
    /// Leave them running; the next start keeps watching them and reports their real exit.
    Leave,
}

/// Uploads and attachments (API.md "Attachments").
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// The largest file accepted, uploaded or inline (`[server] max_upload_bytes`); above
    /// it: 413 `too_large`, nothing stored.
    pub max_upload_bytes: usize,
}

/// 20 MiB: a phone photo or a long PDF, and what providers accept for one image.
pub const DEFAULT_MAX_UPLOAD_BYTES: usize = 20 * 1024 * 1024;

impl Default for FilesConfig {
    fn default() -> Self {
        Self {
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
        }
    }
}

/// `[stt]`: speech to text for the voice notes and audio files chats send. Off unless
/// `base_url` is set; then an audio file is sent to `{base_url}/audio/transcriptions`
/// (OpenAI's shape: a multipart form with `file` and `model`) and its text joins the message.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SttConfig {
    /// An OpenAI-compatible base URL up to and including `/v1`; empty: no transcription.
    pub base_url: String,
    #[serde(skip_serializing)]
    pub api_key: Option<turnkey_providers::Secret>,
    /// The variable holding the key, when `api_key` is not set.
    pub api_key_env: Option<String>,
    pub model: String,
    /// Bound on one transcription.
    pub timeout_s: u64,
}

impl Default for SttConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            api_key: None,
            api_key_env: None,
            model: "whisper-1".into(),
            timeout_s: 60,
        }
    }
}

impl SttConfig {
    pub fn on(&self) -> bool {
        !self.base_url.trim().is_empty()
    }

    /// `api_key`, else the variable `api_key_env` names.
    pub fn resolved_api_key(&self) -> Option<turnkey_providers::Secret> {
        turnkey_providers::Secret::resolve(self.api_key.as_ref(), self.api_key_env.as_deref())
    }
}
