//! Session rows: creation (always with its system prompt already built, SPEC R5.1) and reads.
use super::{convert, is_unique_violation, Result, Store, StoreError};
use crate::entity::{session, session_key};
use crate::ids::{now_ms, SessionId};
use crate::model::{NewSession, Session, SessionUpdate};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

/// How often a keyed create retries after losing a race (each retry reads the winner's row).
const KEYED_CREATE_ATTEMPTS: usize = 3;

impl Store {
    pub async fn create_session(&self, s: NewSession) -> Result<Session> {
        let id = s.id;
        if s.seed.is_empty() {
            insert_session(self.writer(), s).await?;
        } else {
            // The session and the history it starts with, in one commit.
            let tx = self.write_tx().await?;
            insert_session(&tx, s).await?;
            tx.commit().await?;
        }
        self.get_session(id)
            .await?
            .ok_or_else(|| super::StoreError::NotFound(format!("session {id}")))
    }

    /// Names `session` as the one `principal` reaches through `door` under `key` from now on
    /// (a key already naming another session is moved to this one: the newest wins).
    pub async fn remember_session_key(
        &self,
        principal: &str,
        door: &str,
        key: &str,
        session: SessionId,
    ) -> Result<()> {
        use sea_orm::sea_query::OnConflict;
        session_key::Entity::insert(session_key::ActiveModel {
            principal: Set(principal.to_owned()),
            door: Set(door.to_owned()),
            key: Set(key.to_owned()),
            session_id: Set(session.to_string()),
            created_at: Set(now_ms()),
        })
        .on_conflict(
            OnConflict::columns([
                session_key::Column::Principal,
                session_key::Column::Door,
                session_key::Column::Key,
            ])
            .update_columns([
                session_key::Column::SessionId,
                session_key::Column::CreatedAt,
            ])
            .to_owned(),
        )
        .exec_without_returning(self.writer())
        .await?;
        Ok(())
    }

    /// The session `principal` reached through `door` under `key`, if one was made.
    pub async fn find_keyed_session(
        &self,
        principal: &str,
        door: &str,
        key: &str,
    ) -> Result<Option<Session>> {
        let row = session_key::Entity::find_by_id((
            principal.to_owned(),
            door.to_owned(),
            key.to_owned(),
        ))
        .one(self.reader())
        .await?;
        let Some(row) = row else { return Ok(None) };
        let id: SessionId = row.session_id.parse().map_err(|_| {
            StoreError::Corrupt(format!("session key names a bad id {:?}", row.session_id))
        })?;
        match self.get_session(id).await? {
            Some(s) => Ok(Some(s)),
            None => Err(StoreError::Corrupt(format!(
                "session key names session {id}, which does not exist"
            ))),
        }
    }

    /// The session keyed `(principal, door, key)`, created from `new` when there is none yet.
    /// Race-free across requests and processes: the session row and its key row commit in
    /// one transaction, and the key's primary key lets one creator win; a loser's
    /// transaction (its session row too) rolls back and it reads the winner's session.
    /// Answers the session and whether this call created it.
    pub async fn keyed_session(
        &self,
        principal: &str,
        door: &str,
        key: &str,
        new: NewSession,
    ) -> Result<(Session, bool)> {
        for _ in 0..KEYED_CREATE_ATTEMPTS {
            if let Some(s) = self.find_keyed_session(principal, door, key).await? {
                return Ok((s, false));
            }
            let tx = self.write_tx().await?;
            let id = new.id;
            insert_session(&tx, new.clone()).await?;
            let inserted = session_key::Entity::insert(session_key::ActiveModel {
                principal: Set(principal.to_owned()),
                door: Set(door.to_owned()),
                key: Set(key.to_owned()),
                session_id: Set(id.to_string()),
                created_at: Set(now_ms()),
            })
            .exec_without_returning(&tx)
            .await;
            match inserted {
                Ok(_) => {
                    tx.commit().await?;
                    let s = self
                        .get_session(id)
                        .await?
                        .ok_or_else(|| StoreError::NotFound(format!("session {id}")))?;
                    return Ok((s, true));
                }
                Err(e) if is_unique_violation(&e) => {
                    tx.rollback().await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.find_keyed_session(principal, door, key)
            .await?
            .map(|s| (s, false))
            .ok_or_else(|| StoreError::NotFound(format!("session keyed {door}/{key}")))
    }

    /// `PATCH /v1/sessions/{id}`: sets what `change` names (`Some(None)` clears a field back
    /// to the platform's). Answers the updated row, or `None` for a missing session.
    pub async fn update_session(
        &self,
        id: SessionId,
        change: SessionUpdate,
    ) -> Result<Option<Session>> {
        let mut q = session::Entity::update_many()
            .col_expr(session::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(id.to_string()));
        if let Some(t) = change.title {
            q = q.col_expr(session::Column::Title, Expr::value(t));
        }
        if let Some(p) = change.busy_policy {
            q = q.col_expr(session::Column::BusyPolicy, Expr::value(p));
        }
        if let Some(d) = change.display {
            q = q.col_expr(
                session::Column::Display,
                Expr::value(d.map(|d| d.to_string())),
            );
        }
        q.exec(self.writer()).await?;
        if let Some(m) = change.model {
            // The root and its segments together: a rotation copies the model, and a turn
            // reads the segment it runs in.
            session::Entity::update_many()
                .col_expr(session::Column::Model, Expr::value(m))
                .filter(
                    Condition::any()
                        .add(session::Column::Id.eq(id.to_string()))
                        .add(session::Column::RootId.eq(id.to_string())),
                )
                .exec(self.writer())
                .await?;
        }
        self.get_session(id).await
    }

    pub async fn get_session(&self, id: SessionId) -> Result<Option<Session>> {
        session::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .map(convert::session)
            .transpose()
    }

    /// The session a platform chat maps to, if one exists.
    pub async fn find_session_by_chat_key(
        &self,
        platform: &str,
        chat_key: &str,
    ) -> Result<Option<Session>> {
        session::Entity::find()
            .filter(session::Column::Platform.eq(platform))
            .filter(session::Column::ChatKey.eq(chat_key))
            .order_by_asc(session::Column::CreatedAt)
            .one(self.reader())
            .await?
            .map(convert::session)
            .transpose()
    }

    /// Newest first; `owner` limits to one principal's sessions, `before` pages by created_at.
    pub async fn list_sessions(
        &self,
        owner: Option<&str>,
        limit: u64,
        before: Option<i64>,
    ) -> Result<Vec<Session>> {
        let mut q = session::Entity::find();
        if let Some(o) = owner {
            q = q.filter(session::Column::Owner.eq(o));
        }
        self.newest_roots(q, limit, before).await
    }

    /// The lineage roots `q` finds, newest first, created before `before` when given, at most
    /// `limit`: one entry per lineage, a rotated child being reached through its root (SPEC
    /// R6.4). The list and the search of `GET /v1/sessions` both end here.
    pub(super) async fn newest_roots(
        &self,
        q: sea_orm::Select<session::Entity>,
        limit: u64,
        before: Option<i64>,
    ) -> Result<Vec<Session>> {
        let mut q = q.filter(session::Column::RootId.is_null());
        if let Some(b) = before {
            q = q.filter(session::Column::CreatedAt.lt(b));
        }
        q.order_by_desc(session::Column::CreatedAt)
            .order_by_desc(session::Column::Id)
            .limit(limit)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::session)
            .collect()
    }
}

/// Inserts a new session row inside the caller's connection or transaction.
pub(super) async fn insert_session<C: ConnectionTrait>(db: &C, mut s: NewSession) -> Result<()> {
    let now = now_ms();
    let id = s.id;
    let seed = std::mem::take(&mut s.seed);
    let model = session::ActiveModel {
        id: Set(s.id.to_string()),
        parent_session_id: Set(None),
        owner: Set(s.owner),
        platform: Set(s.platform),
        chat_key: Set(s.chat_key),
        title: Set(s.title),
        model: Set(s.model),
        system_message: Set(s.system_message),
        system_prompt: Set(Some(s.system_prompt)),
        workspace_snapshot: Set(s.workspace_snapshot),
        last_event_seq: Set(0),
        last_admission_seq: Set(0),
        last_message_idx: Set(0),
        input_tokens: Set(0),
        output_tokens: Set(0),
        cache_read_tokens: Set(0),
        cost_usd: Set(0.0),
        created_at: Set(now),
        updated_at: Set(now),
        compression_epoch: Set(0),
        compressed_at: Set(None),
        busy_policy: Set(None),
        display: Set(None),
        root_id: Set(None),
        transcript_id: Set(None),
        last_prompt_tokens: Set(None),
        last_prompt_at: Set(None),
    };
    session::Entity::insert(model)
        .exec_without_returning(db)
        .await?;
    for row in &seed {
        super::log::insert_message(db, id, row).await?;
    }
    Ok(())
}
