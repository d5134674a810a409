//! `[memory]`, `[skills]` and `[delegation]`: what the agent keeps across sessions and the
//! sub-agents it starts.
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
