//! The platform messages of `delivery_outbox`: one to write, and a row as it stands.
use super::Owner;
use crate::ids::*;
use serde::Serialize;

/// A platform message to write to `delivery_outbox`. `idempotency_key` is unique: writing the
/// same key twice keeps the first row (a retried transaction does not double a reply).
#[derive(Clone, Debug, PartialEq)]
pub struct NewOutbox {
    pub platform: String,
    pub chat_key: String,
    pub session_id: Option<SessionId>,
    pub turn_id: Option<TurnId>,
    pub idempotency_key: String,
    /// `reply` (a turn's answer or ending), `notice` (a command's answer), `approval` (a
    /// request with approve/deny buttons), `draft` (a streamed draft being edited).
    pub kind: String,
    /// `{text, ...}`; an approval adds `approval_id`, `name`, `args`.
    pub payload: serde_json::Value,
}

/// A row of `delivery_outbox` (API.md `GET /v1/outbox`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outbox {
    pub id: String,
    pub platform: String,
    pub chat_key: String,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    pub idempotency_key: String,
    pub kind: String,
    pub payload: serde_json::Value,
    pub status: crate::OutboxStatus,
    pub attempts: i32,
    pub chunks_sent: i32,
    pub platform_message_id: Option<String>,
    pub owner_instance: Option<String>,
    /// The process that marked the row `sending` (instance, pid, host), while it is known.
    pub owner: Option<Owner>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub next_attempt_at: i64,
    pub updated_at: i64,
    pub sent_at: Option<i64>,
}
