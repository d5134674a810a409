//! Which session of a lineage holds its live transcript now (SPEC R6.4): the root itself
//! until a rotation moves the transcript to a child (`transcript_id`).
use super::Result;
use crate::entity::session;
use crate::ids::SessionId;
use sea_orm::sea_query::Expr;
use sea_orm::EntityTrait;

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
