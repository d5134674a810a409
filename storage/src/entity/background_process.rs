//! `background_processes`: one command started in the background (SPEC R1.5, R13.10), what
//! identifies it across a restart of the gateway, and whether its exit was reported.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "background_processes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    pub owner: String,
    pub command: String,
    pub dir: String,
    pub pid: Option<i64>,
    pub pid_start: Option<i64>,
    pub boot_id: String,
    pub watcher_instance: String,
    pub watcher_pid: i64,
    pub watcher_host: String,
    /// `running`, `exited`, `killed` or `unknown`.
    pub status: String,
    pub exit_code: Option<i64>,
    pub tail: Option<String>,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub reported_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
