//! `memory_changes`: every change to a memory entry, with who made it and the text before and
//! after.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "memory_changes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub scope: String,
    pub target: String,
    pub entry_id: String,
    /// `add`, `replace` or `remove`.
    pub action: String,
    /// `tool`, `review` or `api`.
    pub changed_by: String,
    /// The session whose tool call or review made it; null for the API.
    pub session_id: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
