//! Memory (SPEC R5.2; issue 23): what the agent keeps about a principal across sessions. The
//! entries live in the store (`Store::edit_memory`); `scan` says what a write may not carry;
//! `tool` is the `memory` tool the model writes with.
pub mod scan;
pub mod tool;

use crate::redact::Redactor;
use std::borrow::Cow;
use turnkey_storage::{MemoryEdit, MemoryTarget, MemoryWrite};

/// `edit` with the secrets in its new text masked (SPEC R13.8): memory goes into every later
/// prompt. The masked copy, when there is one, lives in `buf`.
pub fn masked<'a>(
    edit: MemoryEdit<'a>,
    redactor: &Redactor,
    buf: &'a mut String,
) -> MemoryEdit<'a> {
    let new_text = match edit {
        MemoryEdit::Add { text }
        | MemoryEdit::Replace { text, .. }
        | MemoryEdit::ReplaceId { text, .. } => text,
        MemoryEdit::Remove { .. } | MemoryEdit::RemoveId(_) => return edit,
    };
    let Cow::Owned(m) = redactor.redact(new_text) else {
        return edit;
    };
    *buf = m;
    let text: &'a str = buf;
    match edit {
        MemoryEdit::Add { .. } => MemoryEdit::Add { text },
        MemoryEdit::Replace { old_text, .. } => MemoryEdit::Replace { old_text, text },
        MemoryEdit::ReplaceId { id, .. } => MemoryEdit::ReplaceId { id, text },
        other => other,
    }
}

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
