//! `skill_proposals`: a skill change an agent proposed, for a person to decide.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "skill_proposals")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// `create`, `patch` or `delete`.
    pub action: String,
    pub name: String,
    pub description: Option<String>,
    pub content: Option<String>,
    pub old: Option<String>,
    pub new: Option<String>,
    pub session_id: Option<String>,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    pub created_at: i64,
    pub decided_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
