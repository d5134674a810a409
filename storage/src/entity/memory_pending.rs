//! `memory_pending`: a memory write a review made under `write_approval`, waiting for a person.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_pending")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub scope: String,
    pub target: String,
    /// `add`, `replace` or `remove`.
    pub action: String,
    pub text: Option<String>,
    pub old_text: Option<String>,
    pub session_id: Option<String>,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    pub created_at: i64,
    pub decided_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
