//! Busy policy (SPEC R13.4): what a new input does while a turn of its session runs (`queue`,
//! `interrupt`, `steer`): the admission's own (`Submission::busy_policy`), else the session's
//! (`PATCH /v1/sessions/{id}`), else `agent.busy_policy`. Asked by admission when an input
//! arrives and by a running turn at its model boundary (`turn::steer`).
use crate::config::BusyPolicy;
use serde_json::Value;
use turnkey_storage::{SessionId, Store};

/// The session's busy policy, else `default` (`agent.busy_policy`, SPEC R13.4).
pub async fn effective_policy(
    store: &Store,
    default: BusyPolicy,
    session: SessionId,
) -> BusyPolicy {
    let own = match store.get_session(session).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%session, error = %e, "cannot read the session's busy policy");
            None
        }
    };
    BusyPolicy::effective(own.as_ref().and_then(|s| s.busy_policy.as_deref()), default)
}

/// The busy policy an admission was given for itself (`Submission::busy_policy`), if any.
pub fn pinned_policy(payload: &Value) -> Option<BusyPolicy> {
    payload
        .get("busy_policy")
        .and_then(Value::as_str)
        .and_then(BusyPolicy::parse)
}
