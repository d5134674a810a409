//! `[agent]` and `[lease]`: how a turn runs and how long a session's lease lives.
use crate::display::ToolProgress;
use serde::{Deserialize, Serialize};

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
