//! Sessions, the principals that own them, and the leases that say which process runs their
//! turns.
use crate::ids::*;
use serde::Serialize;

/// Who runs a turn: a process instance on a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub instance: InstanceId,
    pub pid: i64,
    /// Host name plus PID-namespace token, so that a pid is only compared on the host that owns it.
    pub host: String,
}

/// Proof that a write belongs to the current holder of a session's lease (SPEC R13.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub session_id: SessionId,
    pub instance: InstanceId,
    pub generation: LeaseGeneration,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lease {
    pub session_id: SessionId,
    pub holder: Option<Owner>,
    pub turn_id: Option<TurnId>,
    pub platform: Option<String>,
    pub generation: LeaseGeneration,
    pub acquired_at: i64,
    pub expires_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Session {
    pub id: SessionId,
    pub parent_session_id: Option<SessionId>,
    pub owner: String,
    pub platform: String,
    pub chat_key: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_message: Option<String>,
    pub system_prompt: Option<String>,
    pub workspace_snapshot: Option<String>,
    pub last_event_seq: Seq,
    pub usage: UsageTotals,
    pub created_at: i64,
    pub updated_at: i64,
    /// How many compressions the session has had (0: none).
    pub compression_epoch: i32,
    /// When the last compression committed (ms since the epoch).
    pub compressed_at: Option<i64>,
    /// The session's own busy policy (SPEC R13.4), else the platform's.
    pub busy_policy: Option<String>,
    /// The session's own display behaviour (SPEC R3.1), else the platform's.
    pub display: Option<serde_json::Value>,
    /// A rotated child's lineage root (SPEC R6.4); `None` on a root.
    pub root_id: Option<SessionId>,
    /// On a root: the session holding the live transcript, when rotation moved it.
    pub transcript_id: Option<SessionId>,
    /// The provider's prompt size for the session's last recorded call (SPEC R6.1).
    #[serde(skip)]
    pub last_prompt: Option<PromptUsage>,
}

/// What `PATCH /v1/sessions/{id}` changes: `None` leaves a field as it is, `Some(None)`
/// clears it.
#[derive(Clone, Debug, Default)]
pub struct SessionUpdate {
    pub title: Option<Option<String>>,
    pub busy_policy: Option<Option<String>>,
    /// The session's display object (SPEC R3.1).
    pub display: Option<Option<serde_json::Value>>,
    /// The model its turns run on (`None` inside: the primary provider's). Set on every
    /// segment of the lineage, since a rotation copies it and a turn reads its own segment.
    pub model: Option<Option<String>>,
}

/// A provider's reported prompt size and when it was recorded (ms since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptUsage {
    pub input_tokens: i64,
    pub recorded_at: i64,
}

impl Session {
    /// The lineage root: the key of the admission queue, the event log, the lease and the
    /// counters of every session of the lineage (SPEC R6.4).
    pub fn lineage(&self) -> SessionId {
        self.root_id.unwrap_or(self.id)
    }

    /// On a root: the session whose rows are the live transcript (the canonical session).
    pub fn canonical(&self) -> SessionId {
        self.transcript_id.unwrap_or(self.id)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cost_usd: f64,
}

#[derive(Clone, Debug)]
pub struct NewSession {
    pub id: SessionId,
    pub owner: String,
    pub platform: String,
    pub chat_key: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_message: Option<String>,
    pub system_prompt: String,
    pub workspace_snapshot: Option<String>,
    /// History the session starts with, committed with it (a stateless client's earlier
    /// messages): rows no turn wrote and no turn runs again.
    pub seed: Vec<super::NewMessage>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Principal {
    pub id: String,
    pub name: String,
    pub kind: String,
}
