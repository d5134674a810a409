//! turnkey's durable facts. SeaORM entities, typed domain records and the `Store`: one typed
//! function per durable fact (admit, claim, settle, mark unknown, fenced lease, transcript,
//! events). SQL dialect differences stay inside this crate.
pub mod entity;
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
