//! Newtypes for identifiers and counters, parsed once at the edge and carried typed everywhere.
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// A chat session.
    SessionId
);
uuid_id!(
    /// One admitted input (a row of `session_admissions`).
    AdmissionId
);
uuid_id!(
    /// One turn: the run of one admission.
    TurnId
);
uuid_id!(
    /// One transcript row.
    MessageId
);
uuid_id!(
    /// One running process of turnkey; a restart is a new instance.
    InstanceId
);
uuid_id!(
    /// One pending human approval.
    ApprovalId
);
uuid_id!(
    /// One scheduled job (SPEC R1.5).
    ScheduleId
);
uuid_id!(
    /// One entry of a principal's memory or user profile (SPEC R5.2).
    MemoryEntryId
);
uuid_id!(
    /// One recorded change of a memory entry.
    MemoryChangeId
);
uuid_id!(
    /// One memory write of a review waiting for a person (`write_approval`).
    MemoryPendingId
);
uuid_id!(
    /// One skill change an agent proposed.
    SkillProposalId
);
uuid_id!(
    /// One post-delivery review (SPEC R10.4).
    ReviewId
);
uuid_id!(
    /// One task delegated to a child session (SPEC R1.5).
    TaskId
);
uuid_id!(
    /// One command running in the background (SPEC R1.5).
    ProcessId
);

/// A per-session event sequence number: unique and increasing, without gaps.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Seq(pub i64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The fencing token of a turn lease: bumped by every acquisition, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseGeneration(pub i64);

impl fmt::Display for LeaseGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

pub(crate) fn parse_id<T: FromStr>(
    s: &str,
    what: &'static str,
) -> Result<T, crate::error::StoreError> {
    s.parse()
        .map_err(|_| crate::error::StoreError::Corrupt(format!("{what} is not a valid id: {s:?}")))
}

/// Milliseconds since the Unix epoch, the unit of every stored time.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// RFC 3339 rendering of a stored time, for the API.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
