//! SeaORM entities, one per table. They stay plain: every query that
//! gives them meaning lives in the `Store` (see `store/`).
pub mod admission;
pub mod api_token;
pub mod approval;
pub mod background_process;
pub mod chat_session;
pub mod compression_lock;
pub mod event;
pub mod inbound_update;
pub mod interrupt_request;
pub mod lease;
pub mod memory_change;
pub mod memory_entry;
pub mod memory_pending;
pub mod message;
pub mod outbox;
pub mod principal;
pub mod review;
pub mod schedule;
pub mod session;
pub mod session_key;
pub mod skill;
pub mod skill_proposal;
pub mod skill_use;
pub mod subagent_task;
pub mod tool_run;
pub mod usage;
