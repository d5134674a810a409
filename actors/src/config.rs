//! The runtime settings the actors obey, deserialized by the web crate from `turnkey.toml`
//! (API.md "Config keys"). Every field has the documented default.
use crate::display::{self, Display, ToolProgress};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use turnkey_providers::{Price, Pricing, ProviderConfig};
use turnkey_storage::Session;
use turnkey_tools::mcp::McpServerConfig;
use turnkey_tools::SandboxMode;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct RuntimeConfig {
    pub data_dir: PathBuf,
    pub providers: Vec<ProviderConfig>,
    /// Whether each of `providers` sets `context_window` itself (an answer calls an unset one
    /// the default); none known counts as unset.
    #[serde(skip)]
    pub provider_windows_set: Vec<bool>,
    pub agent: AgentConfig,
    pub tools: ToolsConfig,
    pub lease: LeaseConfig,
    pub compression: CompressionConfig,
    /// `[pricing]`: USD per million tokens by model, over the built-in table.
    pub pricing: BTreeMap<String, Price>,
    /// `[[schedules]]`: inputs admitted on a cron schedule (SPEC R1.5).
    pub schedules: Vec<crate::schedule::ScheduleConfig>,
    /// `[platforms.*]`: the chat platforms served; each is off unless configured.
    pub platforms: crate::platforms::config::PlatformsConfig,
    /// `[memory]`: what the agent keeps per principal across sessions (SPEC R5.2).
    pub memory: MemoryConfig,
    /// `[skills]`: procedures the agent can load on demand (SPEC R5.2).
    pub skills: SkillsConfig,
    /// `[delegation]`: sub-agents started by `delegate_task` (SPEC R1.5).
    pub delegation: DelegationConfig,
    /// `[security]`: the audit log's retention (SPEC R13.8).
    pub security: SecurityConfig,
    /// `[limits]`: per-principal rate limits and quotas (SPEC R13.8).
    pub limits: LimitsConfig,
    /// Uploads and attachments (`[server] max_upload_bytes`).
    pub files: FilesConfig,
    /// `[stt]`: voice notes transcribed by an OpenAI-compatible `/audio/transcriptions`.
    pub stt: SttConfig,
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

/// `[limits]` (API.md "Tenancy and security"): per principal, 0 = unlimited; the operator and
/// the gateway's own internal inputs (reports, schedules) are exempt. Checked before an input
/// is admitted, counted in the database (every replica counts the same).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Inputs admitted in the last 60 s; over it: 429 `rate_limited`.
    pub turns_per_minute: u32,
    /// Turns running at once (across the principal's sessions); over it: 429 `rate_limited`.
    pub concurrent_turns: u32,
    /// Model tokens (input + output) per UTC day; over it: 429 `quota_exceeded`.
    pub tokens_per_day: u64,
}

impl LimitsConfig {
    pub fn any(&self) -> bool {
        self.turns_per_minute > 0 || self.concurrent_turns > 0 || self.tokens_per_day > 0
    }
}

/// `[security]` (API.md "Tenancy and security").
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Configured secret values and well-known key shapes are masked in what a door admits
    /// and in tool results, before they are stored or sent to a model (`redact`).
    pub redact_secrets: bool,
    /// Audit entries older than this many days are deleted (checked hourly).
    pub audit_retention_days: u32,
    /// The key that seals the API keys of providers connected at run time (`/v1/providers`,
    /// the web UI's "Connect a model"): a file holding 32 random bytes in base64, made at the
    /// first connection. Empty: `<data_dir>/secrets.key`. Replicas must share one file.
    pub secrets_key_file: PathBuf,
    /// Secrets known to the process but not in this configuration (the operator token), masked
    /// too. Not a configuration key.
    #[serde(skip)]
    pub extra_secrets: Vec<String>,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            redact_secrets: true,
            audit_retention_days: 90,
            secrets_key_file: PathBuf::new(),
            extra_secrets: Vec::new(),
        }
    }
}

/// `[delegation]` (API.md "Sub-agents, background processes and agent schedules").
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegationConfig {
    /// Children of one session that have not reported yet, at most.
    pub max_children: u32,
    /// How deep delegation goes: 1 lets a session delegate and its children not.
    pub max_depth: u32,
    /// A child's turn stops after this many model calls (instead of `agent.max_iterations`).
    pub child_max_iterations: u32,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        Self {
            max_children: 5,
            max_depth: 1,
            child_max_iterations: 50,
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

/// `[memory]` (API.md "Memory and skills"): the `memory` tool is offered when `enabled` and
/// `tools.enabled` names it; each principal's notes and user profile are bounded in
/// characters; a post-delivery review (SPEC R10.4) runs after every `review_every` ended
/// turns of a session.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    pub enabled: bool,
    /// The agent's own notes, per principal.
    pub memory_chars: usize,
    /// What it knows about the user, per principal.
    pub profile_chars: usize,
    /// A review after every N ended turns of a session; 0: never.
    pub review_every: u32,
    /// The provider (by name) the review asks; empty: the auxiliary provider, else the primary.
    pub review_provider: String,
    /// The review's memory writes wait in `/v1/memory/pending` for a person.
    pub write_approval: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            memory_chars: 2200,
            profile_chars: 1375,
            review_every: 10,
            review_provider: String::new(),
            write_approval: false,
        }
    }
}

impl MemoryConfig {
    /// The bound of one of a principal's two stores.
    pub fn limit(&self, target: turnkey_storage::MemoryTarget) -> usize {
        match target {
            turnkey_storage::MemoryTarget::Memory => self.memory_chars,
            turnkey_storage::MemoryTarget::Profile => self.profile_chars,
        }
    }
}

/// What an agent's `skill_manage` does (API.md `[skills] agent_writes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentWrites {
    /// No skill changes from agents: `skill_manage` is not offered.
    Off,
    /// Recorded as a proposal a person accepts or refuses.
    #[default]
    Propose,
    /// Applied at once.
    Direct,
}

/// `[skills]` (API.md "Memory and skills"): `SKILL.md` folders under `dir` plus skills stored
/// through the API, indexed into every new session's prompt within `index_chars`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    pub enabled: bool,
    /// `<name>/SKILL.md` folders installed by the operator.
    pub dir: PathBuf,
    /// The budget of the `# Skills` index in the system prompt, in characters.
    pub index_chars: usize,
    pub agent_writes: AgentWrites,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: PathBuf::from("./skills"),
            index_chars: 4000,
            agent_writes: AgentWrites::Propose,
        }
    }
}

/// What a new message does while a turn runs (SPEC R13.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BusyPolicy {
    #[default]
    Queue,
    Interrupt,
    Steer,
}

impl BusyPolicy {
    pub const NAMES: &'static str = "queue, interrupt, steer";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Interrupt => "interrupt",
            Self::Steer => "steer",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "queue" => Some(Self::Queue),
            "interrupt" => Some(Self::Interrupt),
            "steer" => Some(Self::Steer),
            _ => None,
        }
    }

    /// The session's own policy, else the platform's.
    pub fn effective(session: Option<&str>, platform: Self) -> Self {
        session.and_then(Self::parse).unwrap_or(platform)
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub max_iterations: u32,
    pub iteration_budget: u32,
    pub turn_timeout_s: u64,
    pub busy_policy: BusyPolicy,
    /// Queued inputs admitted within this many ms of each other form one turn (0 = off).
    pub coalesce_ms: u64,
    /// Stream model output to clients as it arrives (SPEC R3.1): the default of a turn's
    /// `display.stream`, and whether the model is asked to stream at all.
    pub streaming: bool,
    /// The default of a turn's `display.tool_progress`: `all`, `new` or `off` (SPEC R3.1).
    pub tool_progress: ToolProgress,
    /// The default of a turn's `display.interim`: a platform draft keeps the text written
    /// before a tool round (SPEC R3.1).
    pub interim: bool,
    /// Coalescing window for `message.delta` events, in milliseconds.
    pub delta_flush_ms: u64,
    /// The agent's name in the identity layer of the system prompt.
    pub name: String,
    /// The older name of `lease.watchdog_s`, still read (see [`RuntimeConfig::watchdog_s`]).
    pub liveness_timeout_s: u64,
    /// The same tool call (name and arguments) this many times in one turn halts it.
    pub repeat_guard: u32,
    /// How many crashes in a row a turn that started no side effect is resumed after by itself
    /// (SPEC R13.9); cut once more it is `unknown`. A guard against a turn that kills its own
    /// process; a hand-back at a graceful shutdown does not count. 0 turns resuming off.
    pub max_resumes: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 90,
            iteration_budget: 90,
            turn_timeout_s: 1800,
            busy_policy: BusyPolicy::Queue,
            coalesce_ms: 0,
            streaming: true,
            tool_progress: ToolProgress::All,
            interim: true,
            delta_flush_ms: 150,
            name: "turnkey".into(),
            liveness_timeout_s: 0,
            repeat_guard: 3,
            max_resumes: 2,
        }
    }
}

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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseConfig {
    pub ttl_s: u64,
    pub refresh_s: u64,
    pub wait_s: u64,
    /// The liveness watchdog (SPEC R4.3): a turn with no activity (no byte from the provider's
    /// stream, no provider response, no tool progress) for this long is hard-interrupted as
    /// `turn_inactive`, so a stuck provider or tool does not hold the session (0 = off).
    pub watchdog_s: u64,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            ttl_s: 300,
            refresh_s: 60,
            wait_s: 1800,
            watchdog_s: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionMode {
    #[default]
    InPlace,
    Rotate,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    pub enabled: bool,
    pub threshold: f64,
    pub target_ratio: f64,
    pub protect_first_n: usize,
    pub protect_last_n: usize,
    pub mode: CompressionMode,
    /// Bound on one summary call; past it the compression is abandoned (nothing changes).
    pub timeout_s: u64,
    /// After a failed or useless compression, the session is not compressed again for this
    /// long (the request is still sent when it fits).
    pub cooldown_s: u64,
    /// Per-model overrides (SPEC R6.2): `[compression.models."<model>"]`.
    pub models: BTreeMap<String, ModelCompression>,
    /// Set by `for_model` when the model's own threshold applies: it is used as given, without
    /// the raise for small windows.
    #[serde(skip)]
    pub exact_threshold: bool,
}

/// `[compression.models."<model>"]`: what differs for one model; the rest is the section's.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelCompression {
    /// Used as given (no 0.75 floor for windows under 512K).
    pub threshold: Option<f64>,
    pub target_ratio: Option<f64>,
    pub protect_first_n: Option<usize>,
    pub protect_last_n: Option<usize>,
}

impl CompressionConfig {
    /// The settings for requests to `model`: its `[compression.models."<model>"]` entry over
    /// the section's own values.
    pub fn for_model(&self, model: &str) -> CompressionConfig {
        let mut c = self.clone();
        if let Some(m) = self.models.get(model) {
            if let Some(t) = m.threshold {
                c.threshold = t;
                c.exact_threshold = true;
            }
            c.target_ratio = m.target_ratio.unwrap_or(c.target_ratio);
            c.protect_first_n = m.protect_first_n.unwrap_or(c.protect_first_n);
            c.protect_last_n = m.protect_last_n.unwrap_or(c.protect_last_n);
        }
        c
    }
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 0.50,
            target_ratio: 0.20,
            protect_first_n: 3,
            protect_last_n: 20,
            mode: CompressionMode::InPlace,
            timeout_s: 60,
            cooldown_s: 300,
            models: BTreeMap::new(),
            exact_threshold: false,
        }
    }
}

impl RuntimeConfig {
    /// How a turn on `session` (the lineage root, which keeps the session's display) is shown
    /// (SPEC R3.1): the `input`'s `display` over the session's, over the table of the session's
    /// platform, over `[agent]`.
    pub fn display(&self, session: &Session, input: Option<&Value>) -> Display {
        let global = Display {
            stream: self.agent.streaming,
            tool_progress: self.agent.tool_progress,
            interim: self.agent.interim,
        };
        let table = self
            .platforms
            .settings(&session.platform)
            .map(|p| p.display())
            .unwrap_or_default();
        display::resolve(global, table, session.display.as_ref(), input)
    }

    /// The price table the usage ledger charges by: built in, with `[pricing]` over it.
    pub fn pricing(&self) -> Pricing {
        Pricing::new(&self.pricing)
    }

    /// The liveness watchdog's limit in seconds, 0 when off: `lease.watchdog_s`, or its older
    /// name `agent.liveness_timeout_s`. When both are set the smaller wins: each asks that a
    /// turn silent that long be stopped, and the stricter request keeps both promises.
    pub fn watchdog_s(&self) -> u64 {
        match (self.lease.watchdog_s, self.agent.liveness_timeout_s) {
            (0, older) => older,
            (new, 0) => new,
            (new, older) => new.min(older),
        }
    }

    /// Checks values that would make the runtime misbehave; the error names the key.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, why: &str| Err((k.to_owned(), why.to_owned()));
        if self.lease.ttl_s == 0 {
            return bad("lease.ttl_s", "must be greater than 0");
        }
        if self.lease.refresh_s == 0 || self.lease.refresh_s >= self.lease.ttl_s {
            return bad(
                "lease.refresh_s",
                "must be greater than 0 and less than lease.ttl_s",
            );
        }
        if self.agent.max_iterations == 0 {
            return bad("agent.max_iterations", "must be greater than 0");
        }
        if self.agent.iteration_budget == 0 {
            return bad("agent.iteration_budget", "must be greater than 0");
        }
        if !(0.0..=1.0).contains(&self.compression.threshold) || self.compression.threshold == 0.0 {
            return bad("compression.threshold", "must be in (0, 1]");
        }
        if !(0.0..1.0).contains(&self.compression.target_ratio) {
            return bad("compression.target_ratio", "must be in [0, 1)");
        }
        for (model, m) in &self.compression.models {
            let key = |field: &str| format!("compression.models.{model:?}.{field}");
            if m.threshold.is_some_and(|t| !(t > 0.0 && t <= 1.0)) {
                return bad(&key("threshold"), "must be in (0, 1]");
            }
            if m.target_ratio.is_some_and(|r| !(0.0..1.0).contains(&r)) {
                return bad(&key("target_ratio"), "must be in [0, 1)");
            }
        }
        if self.compression.timeout_s == 0 {
            return bad("compression.timeout_s", "must be greater than 0");
        }
        if self.agent.max_resumes > 100 {
            return bad("agent.max_resumes", "must be 100 or less");
        }
        if self.agent.repeat_guard < 2 {
            return bad("agent.repeat_guard", "must be 2 or more");
        }
        if self.tools.max_workers == 0 {
            return bad("tools.max_workers", "must be greater than 0");
        }
        let review = &self.memory.review_provider;
        if !review.is_empty() && !self.providers.iter().any(|p| &p.name == review) {
            return bad(
                "memory.review_provider",
                "must name one of the [[providers]] (or be empty: the auxiliary, else the primary)",
            );
        }
        if self.security.audit_retention_days == 0 {
            return bad("security.audit_retention_days", "must be greater than 0");
        }
        if self.delegation.max_children == 0 {
            return bad("delegation.max_children", "must be greater than 0");
        }
        if self.delegation.child_max_iterations == 0 {
            return bad("delegation.child_max_iterations", "must be greater than 0");
        }
        if self.tools.background_log_bytes < 4096 {
            return bad("tools.background_log_bytes", "must be at least 4096");
        }
        if self.skills.enabled && self.skills.index_chars == 0 {
            return bad("skills.index_chars", "must be greater than 0");
        }
        self.platforms.validate()?;
        for (model, price) in &self.pricing {
            if let Some(field) = price.invalid_field() {
                return bad(
                    &format!("pricing.{model:?}.{field}"),
                    "must be a number >= 0 (USD per million tokens)",
                );
            }
        }
        for (i, server) in self.tools.mcp.iter().enumerate() {
            if let Some((field, why)) = server.invalid_field() {
                return bad(&format!("tools.mcp[{i}].{field}"), &why);
            }
            if self.tools.mcp[..i].iter().any(|s| s.name == server.name) {
                return bad(
                    &format!("tools.mcp[{i}].name"),
                    &format!("{:?} is the name of another MCP server", server.name),
                );
            }
        }
        crate::schedule::check_config(&self.schedules)?;
        for (i, p) in self.providers.iter().enumerate() {
            if p.base_url.is_empty() {
                return bad(&format!("providers[{i}].base_url"), "must not be empty");
            }
            if p.model.is_empty() {
                return bad(&format!("providers[{i}].model"), "must not be empty");
            }
            // An answer must leave room for the request in the window.
            if p.max_output_tokens
                .is_some_and(|m| m == 0 || m >= p.context_window)
            {
                return bad(
                    &format!("providers[{i}].max_output_tokens"),
                    &format!(
                        "must be at least 1 and less than context_window ({})",
                        p.context_window
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn r13_8_each_principal_gets_a_folder_of_its_own_and_the_operator_the_root() {
        let tools = ToolsConfig::default();
        let root = Path::new("/srv/ws");
        assert_eq!(
            tools.workspace_of(root, "operator"),
            (root.to_path_buf(), None)
        );
        let (a, hidden) = tools.workspace_of(root, "telegram:42");
        assert_eq!(hidden.as_deref(), Some(root));
        assert!(
            a.to_string_lossy()
                .starts_with("/srv/ws/principals/telegram_42-"),
            "{}",
            a.display()
        );
        // Ids that are the same once made safe still get different folders.
        let (b, _) = tools.workspace_of(root, "telegram_42");
        assert_ne!(a, b);
        // Nothing in an id leads out of the folder.
        let (c, _) = tools.workspace_of(root, "../../etc");
        assert_eq!(c.parent(), Some(root.join("principals").as_path()));
        let shared = ToolsConfig {
            isolation: Isolation::Shared,
            ..ToolsConfig::default()
        };
        assert_eq!(
            shared.workspace_of(root, "telegram:42"),
            (root.to_path_buf(), None)
        );
    }
}
