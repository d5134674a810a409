//! `schedules`: scheduled jobs (SPEC R1.5) and the last due time each has handled.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "schedules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    /// The session's owner: the principal a firing is admitted as.
    pub owner: String,
    pub cron: String,
    pub text: String,
    /// `run_once` or `skip`.
    pub missed: String,
    /// `api` or `config`.
    pub source: String,
    pub created_at: i64,
    /// The last due time handled (admitted, or skipped as missed); null before the first.
    pub last_due_at: Option<i64>,
    /// A one-shot schedule's one due time (its `cron` is empty); null for a cron schedule.
    pub once_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
