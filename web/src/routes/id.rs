//! `Id<T>`: a path segment that must be an id, taken as `web::Path<Id<SessionId>>` (or a tuple
//! of them). A segment that does not parse answers 400 `invalid_id` naming what it should have
//! been (`the session id "x" is not a UUID`), through the one `PathConfig` error handler
//! (`error::path_config`), so no handler parses ids by hand.
use crate::error::not_an_id;
use serde::{de, Deserialize, Deserializer};
use std::str::FromStr;
use turnkey_storage::{
    AdmissionId, ApprovalId, MemoryEntryId, MemoryPendingId, ScheduleId, SessionId,
    SkillProposalId, TurnId,
};

/// An id of kind `T` from the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Id<T>(pub T);

impl<T> Id<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

/// What an id names, for the error message.
pub trait IdKind: FromStr {
    const WHAT: &'static str;
}

impl IdKind for SessionId {
    const WHAT: &'static str = "session";
}
impl IdKind for AdmissionId {
    const WHAT: &'static str = "admission";
}
impl IdKind for ApprovalId {
    const WHAT: &'static str = "approval";
}
impl IdKind for TurnId {
    const WHAT: &'static str = "turn";
}
impl IdKind for ScheduleId {
    const WHAT: &'static str = "schedule";
}
impl IdKind for MemoryEntryId {
    const WHAT: &'static str = "memory entry";
}
impl IdKind for MemoryPendingId {
    const WHAT: &'static str = "pending memory write";
}
impl IdKind for SkillProposalId {
    const WHAT: &'static str = "skill proposal";
}

/// An outbox row's id (`POST /v1/outbox/{id}/resend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboxRowId(pub uuid::Uuid);

impl FromStr for OutboxRowId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

impl IdKind for OutboxRowId {
    const WHAT: &'static str = "outbox row";
}

impl<'de, T: IdKind> Deserialize<'de> for Id<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        raw.parse()
            .map(Id)
            .map_err(|_| de::Error::custom(not_an_id(T::WHAT, &raw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NOT_AN_ID;

    #[test]
    fn r2_2_an_id_parses_or_says_what_it_should_have_been() {
        let s = SessionId::new();
        let ok: Id<SessionId> = serde_json::from_value(serde_json::json!(s.to_string())).unwrap();
        assert_eq!(ok.into_inner(), s);
        let e = serde_json::from_value::<Id<TurnId>>(serde_json::json!("nope"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, format!("the turn id \"nope\"{NOT_AN_ID}"));
    }
}
