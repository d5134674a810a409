//! Platform chats (SPEC R1.3, R13.5): which session a chat talks to now (`chat_sessions`), and
//! which session each platform update went to (`inbound_updates`). A redelivered update finds
//! its row and reaches the same session, even after `/new` moved the chat on, so its admission
//! is the same (same session, same request id) and it runs once.
use super::outbox::enqueue_in;
use super::sessions::insert_session;
use super::{convert, is_unique_violation, Result, Store, StoreError};
use crate::entity::{admission, chat_session, inbound_update};
use crate::ids::{now_ms, SessionId};
use crate::model::{Admission, NewOutbox, NewSession, Session};
use crate::status::AdmissionStatus;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
};

/// How often a racing write retries (each retry reads the winner's row first).
const RACE_ATTEMPTS: usize = 3;

/// Where an inbound update went.
#[derive(Clone, Debug, PartialEq)]
pub struct Inbound {
    pub session_id: SessionId,
    /// `false` for a redelivery: the update was recorded before.
    pub first: bool,
    /// What handling it produced, when recorded (JSON).
    pub result: Option<serde_json::Value>,
}

impl Store {
    /// The session `chat_key` talks to now, if it has one.
    pub async fn chat_session(&self, chat_key: &str) -> Result<Option<Session>> {
        let Some(row) = chat_session::Entity::find_by_id(chat_key.to_owned())
            .one(self.reader())
            .await?
        else {
            return Ok(None);
        };
        let id: SessionId = parse_session(&row.session_id)?;
        self.get_session(id).await?.map(Some).ok_or_else(|| {
            StoreError::Corrupt(format!("chat {chat_key} names missing session {id}"))
        })
    }

    /// The session update `(platform, external_id)` of `chat_key` goes to: the one recorded for
    /// it (a redelivery), else the chat's current session, made from `new` if the chat has
    /// none. Race-free across requests and replicas: concurrent deliveries of one update, or
    /// first messages of one chat, agree on one session.
    pub async fn inbound_session(
        &self,
        platform: &str,
        external_id: &str,
        chat_key: &str,
        new: NewSession,
    ) -> Result<Inbound> {
        self.inbound_with(platform, external_id, chat_key, Some(&new))
            .await?
            .ok_or_else(|| StoreError::Corrupt("an inbound update without a session".into()))
    }

    /// [`Store::inbound_session`] for a chat that has a session already (or an update seen
    /// before); `None` when the chat has none yet, so that the caller prepares a new session
    /// (its prompt, memory and skills) only for a chat's first message.
    pub async fn inbound_if_bound(
        &self,
        platform: &str,
        external_id: &str,
        chat_key: &str,
    ) -> Result<Option<Inbound>> {
        self.inbound_with(platform, external_id, chat_key, None)
            .await
    }

    async fn inbound_with(
        &self,
        platform: &str,
        external_id: &str,
        chat_key: &str,
        new: Option<&NewSession>,
    ) -> Result<Option<Inbound>> {
        for _ in 0..RACE_ATTEMPTS {
            if let Some(seen) = self.inbound(platform, external_id).await? {
                return Ok(Some(seen));
            }
            let tx = self.write_tx().await?;
            let current = chat_session::Entity::find_by_id(chat_key.to_owned())
                .one(&tx)
                .await?;
            let session_id = match (current, new) {
                (Some(row), _) => parse_session(&row.session_id)?,
                (None, None) => {
                    tx.rollback().await?;
                    return Ok(None);
                }
                (None, Some(new)) => {
                    insert_session(&tx, new.clone()).await?;
                    if let Err(e) = bind_chat(&tx, chat_key, platform, new.id, false).await {
                        tx.rollback().await?;
                        if is_unique_race(&e) {
                            continue;
                        }
                        return Err(e);
                    }
                    new.id
                }
            };
            if let Err(e) = record(&tx, platform, external_id, chat_key, session_id, None).await {
                tx.rollback().await?;
                if is_unique_race(&e) {
                    continue;
                }
                return Err(e);
            }
            tx.commit().await?;
            return Ok(Some(Inbound {
                session_id,
                first: true,
                result: None,
            }));
        }
        self.inbound(platform, external_id)
            .await?
            .map(Some)
            .ok_or_else(|| StoreError::NotFound(format!("inbound {platform} {external_id}")))
    }

    /// `/new` sent as update `(platform, external_id)`: the chat moves to a fresh session made
    /// from `new`, recorded with the update, so a redelivered `/new` answers the same session
    /// instead of making another.
    pub async fn renew_chat_session(
        &self,
        platform: &str,
        external_id: &str,
        chat_key: &str,
        new: NewSession,
    ) -> Result<Inbound> {
        for _ in 0..RACE_ATTEMPTS {
            if let Some(seen) = self.inbound(platform, external_id).await? {
                return Ok(seen);
            }
            let tx = self.write_tx().await?;
            insert_session(&tx, new.clone()).await?;
            bind_chat(&tx, chat_key, platform, new.id, true).await?;
            let result = serde_json::json!({ "new_session": new.id });
            if let Err(e) =
                record(&tx, platform, external_id, chat_key, new.id, Some(&result)).await
            {
                tx.rollback().await?;
                if is_unique_race(&e) {
                    continue;
                }
                return Err(e);
            }
            tx.commit().await?;
            return Ok(Inbound {
                session_id: new.id,
                first: true,
                result: Some(result),
            });
        }
        self.inbound(platform, external_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("inbound {platform} {external_id}")))
    }

    /// A chat command's update `(platform, external_id)`, recorded before by
    /// [`Store::inbound_session`], is done: its `result` is set (only if still unset, so a
    /// racing twin cannot overwrite it) and its `answer` is written to the outbox, in one
    /// transaction. A redelivery then finds the result and acts no more; a crash before this
    /// commit leaves the result unset, so the redelivery acts again.
    pub async fn complete_command(
        &self,
        platform: &str,
        external_id: &str,
        result: &serde_json::Value,
        answer: &NewOutbox,
    ) -> Result<()> {
        let tx = self.write_tx().await?;
        inbound_update::Entity::update_many()
            .col_expr(
                inbound_update::Column::Result,
                Expr::value(result.to_string()),
            )
            .filter(inbound_update::Column::Platform.eq(platform))
            .filter(inbound_update::Column::ExternalId.eq(external_id))
            .filter(inbound_update::Column::Result.is_null())
            .exec(&tx)
            .await?;
        enqueue_in(&tx, answer).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The newest `unknown` admission of `session` (what a chat's `/retry` runs again).
    pub async fn last_unknown_admission(&self, session: SessionId) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Unknown.as_str()))
            .order_by_desc(admission::Column::Seq)
            .one(self.reader())
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The record of update `(platform, external_id)`, if it was seen.
    pub async fn inbound(&self, platform: &str, external_id: &str) -> Result<Option<Inbound>> {
        let Some(row) =
            inbound_update::Entity::find_by_id((platform.to_owned(), external_id.to_owned()))
                .one(self.reader())
                .await?
        else {
            return Ok(None);
        };
        Ok(Some(Inbound {
            session_id: parse_session(&row.session_id)?,
            first: false,
            result: row
                .result
                .as_deref()
                .map(|r| {
                    serde_json::from_str(r)
                        .map_err(|e| StoreError::Corrupt(format!("inbound result: {e}")))
                })
                .transpose()?,
        }))
    }
}

fn parse_session(id: &str) -> Result<SessionId> {
    id.parse()
        .map_err(|_| StoreError::Corrupt(format!("bad session id {id:?}")))
}

fn is_unique_race(e: &StoreError) -> bool {
    matches!(e, StoreError::Db(db) if is_unique_violation(db))
}

/// Points `chat_key` at `session`: insert only (a first message), or insert-or-replace (`/new`).
async fn bind_chat<C: ConnectionTrait>(
    db: &C,
    chat_key: &str,
    platform: &str,
    session: SessionId,
    replace: bool,
) -> Result<()> {
    let now = now_ms();
    let row = chat_session::ActiveModel {
        chat_key: Set(chat_key.to_owned()),
        platform: Set(platform.to_owned()),
        session_id: Set(session.to_string()),
        created_at: Set(now),
        updated_at: Set(now),
    };
    let insert = chat_session::Entity::insert(row);
    let insert = if replace {
        insert.on_conflict(
            OnConflict::column(chat_session::Column::ChatKey)
                .update_columns([
                    chat_session::Column::SessionId,
                    chat_session::Column::UpdatedAt,
                ])
                .to_owned(),
        )
    } else {
        insert
    };
    insert.exec_without_returning(db).await?;
    Ok(())
}

async fn record<C: ConnectionTrait>(
    db: &C,
    platform: &str,
    external_id: &str,
    chat_key: &str,
    session: SessionId,
    result: Option<&serde_json::Value>,
) -> Result<()> {
    inbound_update::Entity::insert(inbound_update::ActiveModel {
        platform: Set(platform.to_owned()),
        external_id: Set(external_id.to_owned()),
        chat_key: Set(chat_key.to_owned()),
        session_id: Set(session.to_string()),
        result: Set(result.map(|r| r.to_string())),
        created_at: Set(now_ms()),
    })
    .exec_without_returning(db)
    .await?;
    Ok(())
}
