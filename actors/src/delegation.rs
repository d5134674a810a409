//! What a sub-agent's session is, as rules without I/O (SPEC R1.5): the platform that marks a
//! child session, and the tools a child is not offered. The turn (floor 5) reads them; the
//! sub-agents themselves live in `work::subagent`.
use crate::config::RuntimeConfig;
use turnkey_storage::Session;

/// The platform of a child session: how a turn knows it runs a child.
pub const PLATFORM: &str = "subagent";

/// Whether `session` is a child session.
pub fn is_child(session: &Session) -> bool {
    session.platform == PLATFORM
}

/// The tools a child is not offered (and is refused if it calls them anyway): the memory and
/// schedules speak for the user, whom a child does not hear; delegation stops at the depth
/// limit (children are at depth 1 or more, so at `max_depth` 1 none delegates).
pub fn withheld(config: &RuntimeConfig) -> &'static [&'static str] {
    if config.delegation.max_depth > 1 {
        &["memory", "schedule"]
    } else {
        &["memory", "schedule", "delegate_task"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_5_children_do_not_get_memory_schedule_or_delegation_at_the_limit() {
        let mut cfg = RuntimeConfig::default();
        assert!(withheld(&cfg).contains(&"delegate_task"));
        assert!(withheld(&cfg).contains(&"memory"));
        cfg.delegation.max_depth = 2;
        assert!(!withheld(&cfg).contains(&"delegate_task"));
        assert!(withheld(&cfg).contains(&"schedule"));
    }
}
