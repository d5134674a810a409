//! Typed domain records the `Store` returns: parsed once from their rows, so that nothing
//! above the store handles raw status strings or unparsed ids.
mod admission;
mod event;
mod outbox;
mod session;
mod tool_run;
mod transcript;

pub use admission::*;
pub use event::*;
pub use outbox::*;
pub use session::*;
pub use tool_run::*;
pub use transcript::*;
