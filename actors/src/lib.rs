//! turnkey's actors and the turn itself. `turn/` holds one file per phase of a turn, in the
//! order SPEC R5–R10 describes them; the rooms around it stand on floors.
//!
//! ## Floors
//!
//! A module uses only its own floor and the floors below it, and no two modules use each other:
//! every path outside tests that names a module of the crate is checked by `tests/layers.rs`
//! (the checker every crate shares), and `docs/architecture.md` shows the same list. A floor names modules; a file belongs to the longest name that is a
//! prefix of its path.
//!
//! 1. leaves: `error`, `display`, `stages`, `instance`, `wakeups`, `failpoints`, `provider_health`, `memory::scan`, `skills::document`, `platforms::chat`, `platforms::client`, `platforms::config`, `platforms::format`, `platforms::split`
//! 2. settings: `limits`, `schedule`, `config`, `redact`, `attachments`, `delegation`, `input`, `toolbox`, `platforms`, `platforms::telegram`, `platforms::slack`, `platforms::webhook`, `platforms::send`
//! 3. plumbing: `delivery`, `compressor`, `tool_exec`, `provider_set`, `deps`, `memory`, `skills`
//! 4. ownership: `lease`, `busy_policy`
//! 5. turn: `turn`, `review`
//! 6. sessions: `session`, `recovery`, `remote_interrupt`, `notifier`
//! 7. doors: `admission`, `scheduler`, `outbox_sender`, `platforms::drafts`, `work`
//! 8. gateway: `gateway`
pub mod admission;
pub mod attachments;
pub mod busy_policy;
pub mod compressor;
pub mod config;
pub mod delegation;
pub mod delivery;
pub mod deps;
pub mod display;
pub mod error;
pub mod failpoints;
pub mod gateway;
pub mod input;
pub mod instance;
pub mod lease;
pub mod limits;
pub mod memory;
pub mod notifier;
pub mod outbox_sender;
pub mod platforms;
pub mod provider_health;
pub mod provider_set;
pub mod recovery;
pub mod redact;
pub mod remote_interrupt;
pub mod review;
pub mod schedule;
pub mod scheduler;
pub mod session;
pub mod skills;
pub mod stages;
pub mod tool_exec;
pub mod toolbox;
pub mod turn;
pub mod wakeups;
pub mod work;

pub use config::RuntimeConfig;
pub use delivery::{EventHub, SharedEvent};
pub use error::GatewayError;
pub use gateway::Gateway;
pub use input::{NewSessionRequest, Receipt, SeedMessage, Submission};
pub use session::SessionState;
