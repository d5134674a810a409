//! Fenced turn leases (SPEC R4, R13.3). One row per session that is never deleted: release
//! clears the holder but keeps the generation, so a generation is never handed out twice.
use super::{convert, is_unique_violation, Result, Store, StoreError};
use crate::entity::lease;
use crate::ids::*;
use crate::model::*;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};

/// What to write into the lease row when it is taken.
#[derive(Clone, Debug)]
pub struct LeaseClaim<'a> {
    pub session: SessionId,
    pub owner: &'a Owner,
    pub platform: &'a str,
    pub ttl_ms: i64,
}

impl Store {
    /// Takes the lease if it is free, expired, or `holder_is_dead` says its holder is gone.
    /// Returns the fence for the new generation, or `None` when someone alive holds it.
    pub async fn try_acquire_lease(
        &self,
        claim: LeaseClaim<'_>,
        holder_is_dead: &(dyn Fn(&Owner) -> bool + Sync),
    ) -> Result<Option<Fence>> {
        match self.try_acquire_inner(&claim, holder_is_dead).await {
            Err(StoreError::Db(e)) if is_unique_violation(&e) => Ok(None),
            other => other,
        }
    }

    async fn try_acquire_inner(
        &self,
        c: &LeaseClaim<'_>,
        holder_is_dead: &(dyn Fn(&Owner) -> bool + Sync),
    ) -> Result<Option<Fence>> {
        let tx = self.write_tx().await?;
        let sid = c.session.to_string();
        let now = now_ms();
        let row = lease::Entity::find_by_id(sid.clone()).one(&tx).await?;
        let generation = match row {
            None => {
                lease::Entity::insert(lease::ActiveModel {
                    session_id: Set(sid),
                    holder_instance: Set(Some(c.owner.instance.to_string())),
                    holder_pid: Set(Some(c.owner.pid)),
                    host: Set(Some(c.owner.host.clone())),
                    turn_id: Set(None),
                    platform: Set(Some(c.platform.to_owned())),
                    generation: Set(1),
                    acquired_at: Set(now),
                    expires_at: Set(now + c.ttl_ms),
                })
                .exec_without_returning(&tx)
                .await?;
                1
            }
            Some(row) => {
                let current = convert::lease(row.clone())?;
                let free = match &current.holder {
                    None => true,
                    Some(h) => current.expires_at <= now || holder_is_dead(h),
                };
                if !free {
                    tx.rollback().await?;
                    return Ok(None);
                }
                let next = row.generation + 1;
                let res = lease::Entity::update_many()
                    .col_expr(
                        lease::Column::HolderInstance,
                        Expr::value(c.owner.instance.to_string()),
                    )
                    .col_expr(lease::Column::HolderPid, Expr::value(c.owner.pid))
                    .col_expr(lease::Column::Host, Expr::value(c.owner.host.clone()))
                    .col_expr(lease::Column::TurnId, Expr::value(Option::<String>::None))
                    .col_expr(lease::Column::Platform, Expr::value(c.platform.to_owned()))
                    .col_expr(lease::Column::Generation, Expr::value(next))
                    .col_expr(lease::Column::AcquiredAt, Expr::value(now))
                    .col_expr(lease::Column::ExpiresAt, Expr::value(now + c.ttl_ms))
                    .filter(lease::Column::SessionId.eq(sid))
                    .filter(lease::Column::Generation.eq(row.generation))
                    .exec(&tx)
                    .await?;
                if res.rows_affected != 1 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                next
            }
        };
        tx.commit().await?;
        Ok(Some(Fence {
            session_id: c.session,
            instance: c.owner.instance,
            generation: LeaseGeneration(generation),
        }))
    }

    /// Extends the lease by `ttl_ms` from now. `Fenced` when the generation lost it.
    pub async fn refresh_lease(&self, fence: &Fence, ttl_ms: i64) -> Result<()> {
        let res = lease::Entity::update_many()
            .col_expr(lease::Column::ExpiresAt, Expr::value(now_ms() + ttl_ms))
            .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
            .filter(lease::Column::HolderInstance.eq(fence.instance.to_string()))
            .filter(lease::Column::Generation.eq(fence.generation.0))
            .exec(self.connection())
            .await?;
        if res.rows_affected == 1 {
            Ok(())
        } else {
            Err(StoreError::Fenced(fence.session_id.to_string()))
        }
    }

    /// Gives the lease up. Releasing a lease that was already lost is not an error: there is
    /// nothing of ours left to release.
    pub async fn release_lease(&self, fence: &Fence) -> Result<bool> {
        let res = lease::Entity::update_many()
            .col_expr(
                lease::Column::HolderInstance,
                Expr::value(Option::<String>::None),
            )
            .col_expr(lease::Column::HolderPid, Expr::value(Option::<i64>::None))
            .col_expr(lease::Column::Host, Expr::value(Option::<String>::None))
            .col_expr(lease::Column::TurnId, Expr::value(Option::<String>::None))
            .col_expr(lease::Column::ExpiresAt, Expr::value(0i64))
            .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
            .filter(lease::Column::HolderInstance.eq(fence.instance.to_string()))
            .filter(lease::Column::Generation.eq(fence.generation.0))
            .exec(self.connection())
            .await?;
        let released = res.rows_affected == 1;
        if released {
            // Sent after the one-statement commit: the lease is free either way, and a lost
            // notice only costs a waiting replica its next lease poll.
            let kind = crate::notify::NoticeKind::Released;
            if let Err(e) =
                crate::notify::send(self.connection(), kind, fence.session_id, None).await
            {
                tracing::warn!(session = %fence.session_id, error = %e, "lease release notice not sent");
            }
        }
        Ok(released)
    }

    pub async fn get_lease(&self, session: SessionId) -> Result<Option<Lease>> {
        lease::Entity::find_by_id(session.to_string())
            .one(self.connection())
            .await?
            .map(convert::lease)
            .transpose()
    }
}

/// Takes the lease of `session` away from `owner`, who is judged dead: clears the holder and
/// moves the generation on, so every fenced write `owner` may still attempt fails. A lease held
/// by anyone else is left alone.
pub(super) async fn fence_out<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
    owner: &Owner,
) -> Result<()> {
    lease::Entity::update_many()
        .col_expr(
            lease::Column::HolderInstance,
            Expr::value(Option::<String>::None),
        )
        .col_expr(lease::Column::HolderPid, Expr::value(Option::<i64>::None))
        .col_expr(lease::Column::Host, Expr::value(Option::<String>::None))
        .col_expr(lease::Column::TurnId, Expr::value(Option::<String>::None))
        .col_expr(
            lease::Column::Generation,
            Expr::col(lease::Column::Generation).add(1),
        )
        .col_expr(lease::Column::ExpiresAt, Expr::value(0i64))
        .filter(lease::Column::SessionId.eq(session.to_string()))
        .filter(lease::Column::HolderInstance.eq(owner.instance.to_string()))
        .exec(db)
        .await?;
    Ok(())
}
