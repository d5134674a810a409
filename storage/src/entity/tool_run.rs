//! `tool_runs`: the readback that answers "did this tool call run?".
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "tool_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub call_id: String,
    pub session_id: String,
    pub turn_id: String,
    pub tool: String,
    pub args: String,
    pub status: String,
    pub result_ref: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub admission_id: Option<String>,
    /// Position of the call in its assistant message: results are filled back in this order.
    pub idx: i64,
    /// How a `finished` run ended: ok, error, skipped, denied.
    pub outcome: Option<String>,
    /// A person's answer to an `unknown` run: retry or skip.
    pub decision: Option<String>,
    pub decided_by: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
