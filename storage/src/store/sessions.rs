//! Session rows: creation (always with its system prompt already built, SPEC R5.1) and reads.
use super::{convert, Result, Store};
use crate::entity::session;
use crate::ids::{now_ms, SessionId};
use crate::model::{NewSession, Session};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

impl Store {
    pub async fn create_session(&self, s: NewSession) -> Result<Session> {
        let now = now_ms();
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
            root_id: Set(None),
            transcript_id: Set(None),
        };
        session::Entity::insert(model)
            .exec_without_returning(self.connection())
            .await?;
        self.get_session(s.id)
            .await?
            .ok_or_else(|| super::StoreError::NotFound(format!("session {}", s.id)))
    }

    /// `PATCH /v1/sessions/{id}`: sets the title and/or the busy policy (`Some(None)` clears
    /// it back to the platform's). Answers the updated row, or `None` for a missing session.
    pub async fn update_session(
        &self,
        id: SessionId,
        title: Option<Option<String>>,
        busy_policy: Option<Option<String>>,
    ) -> Result<Option<Session>> {
        let mut q = session::Entity::update_many()
            .col_expr(session::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(id.to_string()));
        if let Some(t) = title {
            q = q.col_expr(session::Column::Title, Expr::value(t));
        }
        if let Some(p) = busy_policy {
            q = q.col_expr(session::Column::BusyPolicy, Expr::value(p));
        }
        q.exec(self.connection()).await?;
        self.get_session(id).await
    }

    pub async fn get_session(&self, id: SessionId) -> Result<Option<Session>> {
        session::Entity::find_by_id(id.to_string())
            .one(self.connection())
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
            .one(self.connection())
            .await?
            .map(convert::session)
            .transpose()
    }

    /// The session whose rows are the live transcript of `root`'s lineage.
    pub async fn canonical_session(&self, root: SessionId) -> Result<SessionId> {
        canonical_of(self.connection(), root).await
    }

    /// Newest first; `owner` limits to one principal's sessions, `before` pages by created_at.
    pub async fn list_sessions(
        &self,
        owner: Option<&str>,
        limit: u64,
        before: Option<i64>,
    ) -> Result<Vec<Session>> {
        // One entry per lineage: a rotated child is reached through its root (SPEC R6.4).
        let mut q = session::Entity::find().filter(session::Column::RootId.is_null());
        if let Some(o) = owner {
            q = q.filter(session::Column::Owner.eq(o));
        }
        if let Some(b) = before {
            q = q.filter(session::Column::CreatedAt.lt(b));
        }
        q.order_by_desc(session::Column::CreatedAt)
            .order_by_desc(session::Column::Id)
            .limit(limit)
            .all(self.connection())
            .await?
            .into_iter()
            .map(convert::session)
            .collect()
    }
}

/// `root`'s canonical session id, as a sub-select for one-statement writes and reads.
pub(super) fn canonical_subquery(root: SessionId) -> sea_orm::sea_query::SelectStatement {
    use sea_orm::sea_query::{ExprTrait, Func, Query};
    Query::select()
        .expr(Func::coalesce([
            Expr::col(session::Column::TranscriptId),
            Expr::col(session::Column::Id),
        ]))
        .from(session::Entity)
        .and_where(Expr::col(session::Column::Id).eq(root.to_string()))
        .to_owned()
}

/// `root`'s canonical session id, read inside the caller's transaction.
pub(super) async fn canonical_of<C: sea_orm::ConnectionTrait>(
    db: &C,
    root: SessionId,
) -> Result<SessionId> {
    let row = session::Entity::find_by_id(root.to_string())
        .one(db)
        .await?
        .ok_or_else(|| super::StoreError::NotFound(format!("session {root}")))?;
    match row.transcript_id {
        Some(t) => t
            .parse()
            .map_err(|_| super::StoreError::Corrupt(format!("session {root}: bad transcript id"))),
        None => Ok(root),
    }
}
