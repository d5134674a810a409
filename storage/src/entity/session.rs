//! `sessions`: one row per conversation, with the per-session counters.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub parent_session_id: Option<String>,
    pub owner: String,
    pub platform: String,
    pub chat_key: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub system_message: Option<String>,
    pub system_prompt: Option<String>,
    pub workspace_snapshot: Option<String>,
    pub last_event_seq: i64,
    pub last_admission_seq: i64,
    pub last_message_idx: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cost_usd: f64,
    pub created_at: i64,
    pub updated_at: i64,
    pub compression_epoch: i32,
    pub compressed_at: Option<i64>,
    /// `queue`, `interrupt` or `steer`; null: the platform's `agent.busy_policy`.
    pub busy_policy: Option<String>,
    /// The session's own display behaviour (SPEC R3.1), a JSON object; null: the platform's.
    pub display: Option<String>,
    /// A child's lineage root (rotation, SPEC R6.4); null on a root.
    pub root_id: Option<String>,
    /// On a root: the session whose rows are the live transcript; null: the root's own.
    pub transcript_id: Option<String>,
    /// The provider's prompt size for the session's last recorded call, and when it was
    /// recorded (the turn end that recorded it).
    pub last_prompt_tokens: Option<i64>,
    pub last_prompt_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
