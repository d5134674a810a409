//! `reviews`: one post-delivery review (SPEC R10.4) and who runs it.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "reviews")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    pub turn_id: Option<String>,
    /// How many turns of the session had completed when it began.
    pub turns_at: i64,
    /// `running`, `finished`, `cancelled` or `interrupted`.
    pub status: String,
    pub owner_instance: String,
    pub owner_pid: i64,
    pub owner_host: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub actions: i64,
    pub reason: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
