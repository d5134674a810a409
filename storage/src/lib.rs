//! turnkey's durable facts. SeaORM entities, typed domain records and the `Store`: one typed
//! function per durable fact (admit, claim, settle, mark unknown, fenced lease, transcript,
//! events). SQL dialect differences stay inside this crate.
//!
//! ## Floors
//!
//! A module uses only its own floor and the floors below it, and no two modules use each other
//! (`tests/layers.rs`; `docs/architecture.md` shows the same list):
//!
//! 1. leaves: `error`, `ids`, `metrics`, `entity`, `status`
//! 2. records: `model`, `notify`
//! 3. connections: `store::sqlite`, `store::writer`, `store::reader`, `store::convert`
//! 4. store: `store`
pub mod entity;
mod error;
pub mod ids;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod status;
mod store;

pub use ids::*;
pub use model::*;
pub use status::{
    AdmissionStatus, ApprovalDecision, ApprovalStatus, OutboxStatus, ToolOutcome, ToolRunDecision,
    ToolRunStatus, TurnResult,
};
pub use store::{
    day_of, hash_token, next_day_at, ApiToken, AuditEntry, ConnectedProvider, Deleted, NewAudit,
    NewToken, StoredFile, TokenGrant, LAST_USED_GRAIN_MS,
};
pub use store::{
    Author, ChangedBy, MemoryChange, MemoryEdit, MemoryEntry, MemoryTarget, MemoryWrite,
};
pub use store::{
    BackgroundProcess, NewBackgroundProcess, NewSubagentTask, ProcessEnd, SubagentTask,
};
pub use store::{
    ClaimAs, Compaction, CompactionDone, HolderIsDead, Inbound, InterruptRequest, InterruptStatus,
    LeaseClaim, Replaced, Rotation, RotationDone, Store, StoreError,
};
pub use store::{ConfigSchedulesSynced, MissedPolicy, NewSchedule, Schedule, ScheduleSource};
pub use store::{
    NewSkillProposal, PendingDecided, PendingMemory, ProposalDecided, Review, ReviewEnd,
    ReviewWrites, SkillChange, SkillProposal, SkillUse, StagedEdit, StoredSkill,
};
