//! Memory (SPEC R5.2; issue 23): what the agent keeps about a principal across sessions. The
//! entries live in the store (`Store::edit_memory`); `scan` says what a write may not carry;
//! `tool` is the `memory` tool the model writes with.
pub mod scan;
pub mod tool;
