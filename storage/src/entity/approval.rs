//! `approvals`: durable human approval requests for risky tool calls.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "approvals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    pub turn_id: String,
    pub call_id: String,
    pub request: String,
    pub status: String,
    pub decided_by: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
