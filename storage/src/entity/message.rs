//! `messages`: the durable transcript, one row per message, ordered by `idx` within a session.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "messages")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    pub idx: i64,
    pub role: String,
    pub content: Option<String>,
    pub api_content: Option<String>,
    pub tool_calls: Option<String>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
    pub turn_id: Option<String>,
    pub admission_id: Option<String>,
    pub display: Option<String>,
    pub platform_message_id: Option<String>,
    pub token_estimate: i64,
    pub created_at: i64,
    pub compressed_epoch: Option<i32>,
    pub summary_epoch: Option<i32>,
    pub summary_after_idx: Option<i64>,
    /// On a rotated child's copy of a kept row: the original row's id (SPEC R6.4).
    pub copied_from: Option<String>,
    /// A user row's attachments: JSON references to `files` rows, never their bytes.
    pub attachments: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
