//! `subagent_tasks`: one task delegated to a child session (SPEC R1.5, R13.10), and whether
//! its report was admitted into the parent.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "subagent_tasks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub parent_session_id: String,
    pub child_session_id: String,
    pub owner: String,
    pub goal: String,
    pub context: Option<String>,
    pub depth: i64,
    /// `running`, `completed`, `failed`, `interrupted` or `unknown`.
    pub status: String,
    pub result: Option<String>,
    pub created_at: i64,
    pub reported_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
