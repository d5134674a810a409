//! `delivery_outbox` (SPEC R13.5): a platform message is a row before it is a request. Rows are
//! written in the transaction of the fact that causes them (a turn's end, an approval request),
//! so a crash can neither lose a reply nor write one for a turn that did not end. The sender
//! marks a row `sending` (committed) before it calls the platform and `sent` after, so a row
//! found `sending` after a crash is `unknown`: it may have reached the chat, and it is not sent
//! again blindly.
use super::{convert, Result, Store};
use crate::entity::{outbox, session};
use crate::ids::*;
use crate::model::*;
use crate::status::OutboxStatus;
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use std::collections::BTreeMap;

impl Store {
    /// Writes one platform message on its own (a command's answer, a refusal). `false` when
    /// its idempotency key was written before; the first row stands.
    pub async fn enqueue_outbox(&self, row: &NewOutbox) -> Result<bool> {
        enqueue_in(self.connection(), row).await
    }

    /// Rows newest first, optionally of one status (API.md `GET /v1/outbox`).
    pub async fn list_outbox(
        &self,
        status: Option<OutboxStatus>,
        limit: u64,
    ) -> Result<Vec<Outbox>> {
        let mut q = outbox::Entity::find();
        if let Some(s) = status {
            q = q.filter(outbox::Column::Status.eq(s.as_str()));
        }
        q.order_by_desc(outbox::Column::CreatedAt)
            .order_by_desc(outbox::Column::Id)
            .limit(limit)
            .all(self.connection())
            .await?
            .into_iter()
            .map(convert::outbox)
            .collect()
    }

    /// How many rows are in each status (for `/metrics`).
    pub async fn count_outbox(&self) -> Result<BTreeMap<OutboxStatus, u64>> {
        let mut counts = BTreeMap::new();
        for status in [
            OutboxStatus::Pending,
            OutboxStatus::Sending,
            OutboxStatus::Sent,
            OutboxStatus::Failed,
            OutboxStatus::Unknown,
        ] {
            let n = outbox::Entity::find()
                .filter(outbox::Column::Status.eq(status.as_str()))
                .count(self.connection())
                .await?;
            counts.insert(status, n);
        }
        Ok(counts)
    }
}

/// Inserts `row` unless its idempotency key exists; `true` when it was inserted.
pub(crate) async fn enqueue_in<C: ConnectionTrait>(db: &C, row: &NewOutbox) -> Result<bool> {
    let now = now_ms();
    let inserted = outbox::Entity::insert(outbox::ActiveModel {
        // v7: time-ordered, so a chat's rows sort in the order they were written.
        id: Set(uuid::Uuid::now_v7().to_string()),
        platform: Set(row.platform.clone()),
        chat_key: Set(row.chat_key.clone()),
        session_id: Set(row.session_id.map(|s| s.to_string())),
        idempotency_key: Set(row.idempotency_key.clone()),
        kind: Set(row.kind.clone()),
        payload: Set(row.payload.to_string()),
        status: Set(OutboxStatus::Pending.as_str().to_owned()),
        attempts: Set(0),
        platform_message_id: Set(None),
        created_at: Set(now),
        next_attempt_at: Set(now),
        sent_at: Set(None),
        turn_id: Set(row.turn_id.map(|t| t.to_string())),
        owner_instance: Set(None),
        last_error: Set(None),
        updated_at: Set(now),
        chunks_sent: Set(0),
    })
    .on_conflict(
        OnConflict::column(outbox::Column::IdempotencyKey)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    Ok(inserted == 1)
}

/// A message for `session`'s chat, if the session (or its lineage root) belongs to one:
/// written in the caller's transaction. Sessions of the API doors have no chat; for them
/// this writes nothing and answers `false`.
pub(crate) async fn to_session_chat<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
    turn: Option<TurnId>,
    idempotency_key: String,
    kind: &str,
    payload: serde_json::Value,
) -> Result<bool> {
    let Some((platform, chat_key)) = session_chat(db, session).await? else {
        return Ok(false);
    };
    enqueue_in(
        db,
        &NewOutbox {
            platform,
            chat_key,
            session_id: Some(session),
            turn_id: turn,
            idempotency_key,
            kind: kind.to_owned(),
            payload,
        },
    )
    .await
}

/// The platform and chat key of `session`'s lineage root, when it has a chat.
async fn session_chat<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<Option<(String, String)>> {
    let Some(row) = session::Entity::find_by_id(session.to_string())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let row = match &row.root_id {
        Some(root) => session::Entity::find_by_id(root.clone()).one(db).await?,
        None => Some(row),
    };
    Ok(row.and_then(|r| r.chat_key.map(|k| (r.platform, k))))
}
