//! `session_admissions`: the durable per-session FIFO of admitted inputs and their receipts.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "session_admissions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    pub seq: i64,
    pub request_id: String,
    pub payload_digest: String,
    pub payload_json: String,
    pub principal: String,
    pub surface: String,
    pub status: String,
    pub owner_instance: Option<String>,
    pub owner_pid: Option<i64>,
    pub owner_host: Option<String>,
    pub turn_id: Option<String>,
    pub outcome: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The `unknown` admission this one runs again, when made by a retry.
    pub retry_of: Option<String>,
    /// 1 for the first attempt at the turn; each resume by itself (SPEC R13.9) adds one.
    pub attempt: i32,
    /// Why the last owner gave the `started` turn back unsettled (`shutdown`), if it did.
    pub handed_back: Option<String>,
    /// How many of those resumes followed a crash (bounded by `[agent] max_resumes`).
    pub crash_resumes: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
