//! Schema migrations for turnkey. One file per migration; a migration that has shipped is never
//! edited, only followed by a new one.
//!
//! ## Floors
//!
//! Migrations use no module of the crate (each names the tables it changes with its own
//! `DeriveIden` enums), checked by `tests/layers.rs` like every crate's:
//!
//! 1. migrations: `m2026*`
pub use sea_orm_migration::prelude::*;

mod m20261202_000001_initial;
mod m20261203_000001_admission_retry;
mod m20261203_000002_tool_runs;
mod m20261203_000003_compression;
mod m20261203_000004_busy_policy;
mod m20261203_000005_rotation;
mod m20261204_000001_session_keys;
mod m20261205_000001_platforms;
mod m20261205_000002_schedules;
mod m20261205_000003_outbox_owner;
mod m20261206_000001_interrupt_requests;
mod m20261207_000001_usage_by_session;
mod m20261207_000002_admissions_by_session_status;
mod m20261208_000001_last_prompt_on_session;
mod m20261209_000001_resume_attempts;
mod m20261210_000001_session_display;
mod m20261211_000001_memory;
mod m20261212_000001_skills_and_reviews;
mod m20261213_000001_work;
mod m20261214_000001_tenancy;
mod m20261215_000001_files;
mod m20261216_000001_search;
mod m20261217_000001_connected_providers;
mod m20261218_000001_usage_shards;
mod m20261218_000002_live_messages;
mod m20261219_000001_overtaken;
mod m20261220_000001_crash_resumes;
mod m20261221_000001_response_deletions;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261202_000001_initial::Migration),
            Box::new(m20261203_000001_admission_retry::Migration),
            Box::new(m20261203_000002_tool_runs::Migration),
            Box::new(m20261203_000003_compression::Migration),
            Box::new(m20261203_000004_busy_policy::Migration),
            Box::new(m20261203_000005_rotation::Migration),
            Box::new(m20261204_000001_session_keys::Migration),
            Box::new(m20261205_000001_platforms::Migration),
            Box::new(m20261205_000002_schedules::Migration),
            Box::new(m20261205_000003_outbox_owner::Migration),
            Box::new(m20261206_000001_interrupt_requests::Migration),
            Box::new(m20261207_000001_usage_by_session::Migration),
            Box::new(m20261207_000002_admissions_by_session_status::Migration),
            Box::new(m20261208_000001_last_prompt_on_session::Migration),
            Box::new(m20261209_000001_resume_attempts::Migration),
            Box::new(m20261210_000001_session_display::Migration),
            Box::new(m20261211_000001_memory::Migration),
            Box::new(m20261212_000001_skills_and_reviews::Migration),
            Box::new(m20261213_000001_work::Migration),
            Box::new(m20261214_000001_tenancy::Migration),
            Box::new(m20261215_000001_files::Migration),
            Box::new(m20261216_000001_search::Migration),
            Box::new(m20261217_000001_connected_providers::Migration),
            Box::new(m20261218_000001_usage_shards::Migration),
            Box::new(m20261218_000002_live_messages::Migration),
            Box::new(m20261219_000001_overtaken::Migration),
            Box::new(m20261220_000001_crash_resumes::Migration),
            Box::new(m20261221_000001_response_deletions::Migration),
        ]
    }
}
