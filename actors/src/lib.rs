//! turnkey's actors and the turn itself. Admission, the per-session actors and their registry,
//! delivery and recovery live at the top; `turn/` holds one file per phase of a turn, in the
//! order SPEC R5–R10 describes them.
pub mod admission;
pub mod compressor;
pub mod config;
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
pub mod notifier;
pub mod outbox_sender;
pub mod platforms;
pub mod provider_health;
pub mod recovery;
pub mod registry;
pub mod remote_interrupt;
pub mod schedule;
pub mod scheduler;
pub mod session;
pub mod stages;
pub mod tool_exec;
pub mod toolbox;
pub mod turn;
pub mod wakeups;

pub use config::RuntimeConfig;
pub use delivery::EventHub;
pub use error::GatewayError;
pub use gateway::Gateway;
pub use input::{NewSessionRequest, Receipt, Submission};
pub use session::SessionState;
