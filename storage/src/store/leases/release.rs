//! Giving a lease up: the holder cleared by its owner (`release_in`, also when a turn hands
//! its admission back) or taken from an owner judged dead (`fence_out`). Below both the lease
//! takers in `mod.rs` and the admission moves that release.
use crate::entity::lease;
use crate::ids::*;
use crate::model::*;
use crate::store::{Result, WriteTx};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, UpdateMany};

/// A lease update that clears the holder (the generation stays unless the caller moves it).
fn without_holder(q: UpdateMany<lease::Entity>) -> UpdateMany<lease::Entity> {
    q.col_expr(
        lease::Column::HolderInstance,
        Expr::value(Option::<String>::None),
    )
    .col_expr(lease::Column::HolderPid, Expr::value(Option::<i64>::None))
    .col_expr(lease::Column::Host, Expr::value(Option::<String>::None))
    .col_expr(lease::Column::TurnId, Expr::value(Option::<String>::None))
    .col_expr(lease::Column::ExpiresAt, Expr::value(0i64))
}

/// Gives the lease up inside `db`'s transaction; false when `fence` no longer held it.
pub(in crate::store) async fn release_in(db: &WriteTx, fence: &Fence) -> Result<bool> {
    let res = without_holder(lease::Entity::update_many())
        .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
        .filter(lease::Column::HolderInstance.eq(fence.instance.to_string()))
        .filter(lease::Column::Generation.eq(fence.generation.0))
        .exec(db)
        .await?;
    let released = res.rows_affected == 1;
    if released {
        // A replica waiting for this lease tries at once (PostgreSQL; delivered at commit).
        let kind = crate::notify::NoticeKind::Released;
        db.send_notice(kind, fence.session_id, None);
    }
    Ok(released)
}

/// Takes the lease of `session` away from `owner`, who is judged dead: clears the holder and
/// moves the generation on, so every fenced write `owner` may still attempt fails. A lease held
/// by anyone else is left alone.
pub(in crate::store) async fn fence_out<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
    owner: &Owner,
) -> Result<()> {
    without_holder(lease::Entity::update_many())
        .col_expr(
            lease::Column::Generation,
            Expr::col(lease::Column::Generation).add(1),
        )
        .filter(lease::Column::SessionId.eq(session.to_string()))
        .filter(lease::Column::HolderInstance.eq(owner.instance.to_string()))
        .exec(db)
        .await?;
    Ok(())
}
