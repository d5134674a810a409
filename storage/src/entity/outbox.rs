//! `delivery_outbox`: platform replies written before they are sent, so a crash neither loses
//! nor doubles them.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "delivery_outbox")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub platform: String,
    pub chat_key: String,
    pub session_id: Option<String>,
    pub idempotency_key: String,
    pub kind: String,
    pub payload: String,
    pub status: String,
    pub attempts: i32,
    pub platform_message_id: Option<String>,
    pub created_at: i64,
    pub next_attempt_at: i64,
    pub sent_at: Option<i64>,
    /// The turn whose end wrote this row, if a turn did.
    pub turn_id: Option<String>,
    /// The instance that marked the row `sending`.
    pub owner_instance: Option<String>,
    pub last_error: Option<String>,
    pub updated_at: i64,
    /// How many chunks of a split message are out already.
    pub chunks_sent: i32,
    /// The pid and host token of the process that marked the row `sending`.
    pub owner_pid: Option<i64>,
    pub owner_host: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
