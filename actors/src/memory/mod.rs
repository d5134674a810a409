//! Memory (SPEC R5.2; issue 23): what the agent keeps about a principal across sessions. The
//! entries live in the store (`Store::edit_memory`); `scan` says what a write may not carry;
//! `tool` is the `memory` tool the model writes with.
pub mod scan;
pub mod tool;

use turnkey_storage::{MemoryTarget, MemoryWrite};

/// Why the store refused a write, as a stable code and a message the model or a person can
/// act on; `None` for a write that was made.
pub fn refusal(written: &MemoryWrite, target: MemoryTarget) -> Option<(&'static str, String)> {
    let store = target.as_str();
    Some(match written {
        MemoryWrite::Done { .. } => return None,
        MemoryWrite::Full {
            chars,
            limit,
            needed,
        } => (
            "memory_full",
            format!(
                "not saved: {store} is full ({chars} of {limit} characters used; this needs \
                 {needed} more). Replace or remove an entry first, or write it shorter."
            ),
        ),
        MemoryWrite::NoMatch => (
            "no_match",
            format!("no entry of {store} contains that `old_text`"),
        ),
        MemoryWrite::Ambiguous { matches } => (
            "ambiguous",
            format!(
                "{matches} entries of {store} contain that `old_text`: give a longer piece \
                 that only one contains"
            ),
        ),
    })
}
