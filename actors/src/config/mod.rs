//! The runtime settings the actors obey, deserialized by the web crate from `turnkey.toml`
//! (API.md "Config keys"). Every field has the documented default.
use crate::display::{self, Display};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use turnkey_providers::{Price, Pricing, ProviderConfig};
use turnkey_storage::Session;
mod agent;
mod compression;
mod memory;
mod security;
mod tools;
mod validate;

pub use agent::{AgentConfig, BusyPolicy, LeaseConfig};
pub use compression::{CompressionConfig, CompressionMode, ModelCompression};
pub use memory::{AgentWrites, DelegationConfig, MemoryConfig, SkillsConfig};
pub use security::{LimitsConfig, SecurityConfig};
pub use tools::{
    ApprovalMode, FilesConfig, Isolation, OnShutdown, SttConfig, ToolsConfig,
    DEFAULT_MAX_UPLOAD_BYTES, PRINCIPALS_DIR,
};

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct RuntimeConfig {
    /// `[server] data_dir`: not a key of the runtime's own.
    #[serde(skip)]
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
    /// Uploads and attachments (`[server] max_upload_bytes`): not a key of the runtime's own.
    #[serde(skip)]
    pub files: FilesConfig,
    /// `[stt]`: voice notes transcribed by an OpenAI-compatible `/audio/transcriptions`.
    pub stt: SttConfig,
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
