//! Admissions: an input as admitted into a session's queue, how it was claimed or carried,
//! and why a turn is resumed by itself or became `unknown`.
use super::{Event, Owner, Session};
use crate::ids::*;
use crate::status::AdmissionStatus;
use serde::Serialize;

/// Which running turn carried a queued input it did not start (SPEC R13.4).
#[derive(Clone, Debug)]
pub struct Carried {
    /// `steered` or `coalesced`.
    pub result: &'static str,
    pub turn_id: TurnId,
    pub carried_by: AdmissionId,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Admission {
    pub id: AdmissionId,
    pub session_id: SessionId,
    pub seq: i64,
    pub request_id: String,
    pub payload_digest: String,
    pub payload: serde_json::Value,
    pub principal: String,
    pub surface: String,
    pub status: AdmissionStatus,
    pub owner: Option<Owner>,
    pub turn_id: Option<TurnId>,
    pub outcome: Option<serde_json::Value>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The `unknown` admission this one runs again (`POST /v1/admissions/{id}/retry`).
    pub retry_of: Option<AdmissionId>,
    /// Which attempt at the turn this is: 1, and one more each time it was resumed by itself
    /// (SPEC R13.9), after a crash or a hand-back at shutdown.
    pub attempt: i32,
    /// How many of those resumes followed a crash: `[agent] max_resumes` bounds these, not
    /// the hand-backs of a graceful shutdown.
    pub crash_resumes: i32,
    /// Why the last owner handed the `started` turn back without settling it, if it did.
    pub handed_back: Option<ResumeReason>,
}

impl Admission {
    /// Where the input came from (API.md `source`): a person through a door (`user`), or an
    /// internal input of the gateway, named by the prefix of its request id (`schedule:…`;
    /// `subagent:…` and `process:…` for sub-agent reports and process exits).
    pub fn source(&self) -> &'static str {
        source_of(&self.surface, &self.request_id)
    }
}

/// [`Admission::source`] from an admission's surface and request id.
pub fn source_of(surface: &str, request_id: &str) -> &'static str {
    if surface != "internal" {
        return "user";
    }
    match request_id.split_once(':').map(|(p, _)| p) {
        Some("schedule") => "schedule",
        Some("subagent") => "subagent",
        Some("process") => "process",
        _ => "user",
    }
}

/// Why a turn is resumed by itself (SPEC R13.9), as `turn.resumed` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeReason {
    /// Its owner died or lost the lease mid-turn.
    Crash,
    /// Its owner stopped gracefully and handed the turn back at the end of its grace.
    Shutdown,
}

impl ResumeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crash => "crash",
            Self::Shutdown => "shutdown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "crash" => Some(Self::Crash),
            "shutdown" => Some(Self::Shutdown),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct NewAdmission {
    pub session_id: SessionId,
    pub request_id: String,
    pub payload_digest: String,
    pub payload: serde_json::Value,
    pub principal: String,
    pub surface: String,
    pub retry_of: Option<AdmissionId>,
    /// The title the session takes from this input when it has none yet (a person's own title
    /// is never replaced): the first line of a person's first message.
    pub title: Option<String>,
}

/// What `admit` did: a new admission (with its `admission.queued` and `status` events) or the
/// earlier one (no events).
#[derive(Clone, Debug)]
pub struct Admitted {
    pub admission: Admission,
    pub duplicate: bool,
    pub events: Vec<Event>,
    /// The session's own busy policy (`None`: the configured default) as the admission's
    /// commit read it with the session's row; `None` for a duplicate, which changes nothing.
    pub busy_policy: Option<String>,
}

/// An admission claimed together with its session's lease: as it was read before the claim
/// (`queued`), and the committed `turn.started` and `status` events.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub admission: Admission,
    pub events: Vec<Event>,
    /// The session's row as the claim's commit left it: what the turn's context would read
    /// next (its system prompt, model, transcript segment, last prompt size).
    pub session: Session,
}

/// Why a `started` admission became `unknown`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCause {
    /// Stable code: `owner_died`, `lease_lost`.
    pub reason: String,
    /// Human-readable: which owner, and what is known of how it ended.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::source_of;

    #[test]
    fn r1_5_an_internal_input_names_its_source_by_its_request_id() {
        assert_eq!(
            source_of("api", "schedule:x:1"),
            "user",
            "a door's input is the user's"
        );
        assert_eq!(source_of("internal", "schedule:abc:1000"), "schedule");
        assert_eq!(source_of("internal", "subagent:t1"), "subagent");
        assert_eq!(source_of("internal", "process:p1"), "process");
        assert_eq!(source_of("internal", "other"), "user");
    }
}
