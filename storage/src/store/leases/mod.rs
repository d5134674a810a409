//! Fenced turn leases (SPEC R4, R13.3). One row per session that is never deleted: release
//! clears the holder but keeps the generation, so a generation is never handed out twice.
//!
//! Lease first, then claim (a departure from DESIGN's "claim, take the lease"): a drain takes the
//! session's lease and claims the FIFO head under it. Claiming first would let two processes claim
//! seq 1 and seq 2 of one session and run them out of order once the lease changed hands. Under
//! this order a `started` admission always belongs to the lease holder, which makes recovery
//! exact: a `started` admission whose owner no longer holds a live lease is an orphan. The commit
//! that takes a lease writes the turn it claims into the lease row (cleared when there is no head
//! to claim), so the take is the claim's fence check.
mod one_statement;
mod release;
#[cfg(test)]
pub(super) use one_statement::TAKE_AND_CLAIM;
pub(super) use release::{fence_out, release_in};

use super::admissions::{claim_admission_in, head_and_counts, status_of};
use super::{convert, is_unique_violation, Result, Store, StoreError};
use crate::entity::lease;
use crate::ids::*;
use crate::model::*;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, UpdateMany,
};
use std::sync::Arc;

/// What to write into the lease row when it is taken.
#[derive(Clone, Debug)]
pub struct LeaseClaim {
    pub session: SessionId,
    pub owner: Owner,
    pub platform: &'static str,
    pub ttl_ms: i64,
}

/// Says whether a lease's holder is provably gone (its lease may be taken before its TTL).
pub type HolderIsDead = Arc<dyn Fn(&Owner) -> bool + Send + Sync>;

/// How the commit that takes a lease also claims the session's FIFO head: as which turn, and
/// the user row that the claimed input becomes (built from it inside the transaction), so that
/// the lease, the claim, `turn.started` and the user message are one durable fact.
#[derive(Clone)]
pub struct ClaimAs {
    pub turn: TurnId,
    pub user_row: Arc<dyn Fn(&Admission) -> NewMessage + Send + Sync>,
}

impl Store {
    /// Takes the lease if it is free, expired, or `holder_is_dead` says its holder is gone.
    /// Returns the fence for the new generation, or `None` when someone alive holds it.
    pub async fn try_acquire_lease(
        &self,
        claim: LeaseClaim,
        holder_is_dead: HolderIsDead,
    ) -> Result<Option<Fence>> {
        Ok(self
            .try_acquire_lease_and_claim(claim, holder_is_dead, None)
            .await?
            .map(|(fence, _)| fence))
    }

    /// [`try_acquire_lease`](Self::try_acquire_lease), and with `turn`, in the same commit, the
    /// claim of the session's FIFO head as that turn with its user row (see
    /// [`Store::claim_with_user`]) when nothing of the session is `started` (a started
    /// admission belongs to an earlier holder: the drain settles it first). A drain that finds
    /// one queued input thus takes the lease, claims it and records its message in one commit.
    pub async fn try_acquire_lease_and_claim(
        &self,
        claim: LeaseClaim,
        holder_is_dead: HolderIsDead,
        turn: Option<ClaimAs>,
    ) -> Result<Option<(Fence, Option<Claimed>)>> {
        self.on_writer(move |s| async move {
            if let (sea_orm::DbBackend::Postgres, Some(how)) = (s.backend(), turn.as_ref()) {
                if let Some(done) = s.take_and_claim_in_one_statement(&claim, how).await? {
                    return Ok(Some(done));
                }
            }
            match s
                .try_acquire_inner(&claim, &*holder_is_dead, turn.as_ref())
                .await
            {
                Err(StoreError::Db(e)) if is_unique_violation(&e) => Ok(None),
                other => other,
            }
        })
        .await
    }

    async fn try_acquire_inner(
        &self,
        c: &LeaseClaim,
        holder_is_dead: &(dyn Fn(&Owner) -> bool + Send + Sync),
        turn: Option<&ClaimAs>,
    ) -> Result<Option<(Fence, Option<Claimed>)>> {
        let tx = self.write_tx().await?;
        let sid = c.session.to_string();
        let now = now_ms();
        let mut takeover = false;
        // The turn the commit means to claim is recorded in the take itself (SPEC R4.1); if
        // there turns out to be nothing to claim, it is cleared again below.
        let marked = turn.map(|t| t.turn);
        // The common case, a lease released by its last holder, is one conditional update.
        let free = with_holder(lease::Entity::update_many(), c, marked, now)
            .col_expr(
                lease::Column::Generation,
                Expr::col(lease::Column::Generation).add(1),
            )
            .filter(lease::Column::SessionId.eq(sid.clone()))
            .filter(lease::Column::HolderInstance.is_null())
            .exec_with_returning(&tx)
            .await?;
        let generation = if let Some(taken) = free.first() {
            taken.generation
        } else {
            // No row yet, or a holder: read it to judge whether that holder is gone.
            match lease::Entity::find_by_id(sid.clone()).one(&tx).await? {
                None => {
                    lease::Entity::insert(lease::ActiveModel {
                        session_id: Set(sid),
                        holder_instance: Set(Some(c.owner.instance.to_string())),
                        holder_pid: Set(Some(c.owner.pid)),
                        host: Set(Some(c.owner.host.clone())),
                        turn_id: Set(marked.map(|t| t.to_string())),
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
                    takeover = current.holder.is_some();
                    let next = row.generation + 1;
                    let res = with_holder(lease::Entity::update_many(), c, marked, now)
                        .col_expr(lease::Column::Generation, Expr::value(next))
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
            }
        };
        let fence = Fence {
            session_id: c.session,
            instance: c.owner.instance,
            generation: LeaseGeneration(generation),
        };
        let claimed = match turn {
            Some(turn) => claim_head(&tx, &fence, &c.owner, turn).await?,
            None => None,
        };
        tx.commit().await?;
        if takeover {
            crate::metrics::STORE
                .lease_takeovers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(Some((fence, claimed)))
    }

    /// Extends the lease by `ttl_ms` from now. `Fenced` when the generation lost it.
    pub async fn refresh_lease(&self, fence: &Fence, ttl_ms: i64) -> Result<()> {
        let tx = self.write_tx().await?;
        let res = lease::Entity::update_many()
            .col_expr(lease::Column::ExpiresAt, Expr::value(now_ms() + ttl_ms))
            .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
            .filter(lease::Column::HolderInstance.eq(fence.instance.to_string()))
            .filter(lease::Column::Generation.eq(fence.generation.0))
            .exec(&tx)
            .await?;
        tx.commit().await?;
        if res.rows_affected == 1 {
            Ok(())
        } else {
            Err(StoreError::Fenced(fence.session_id.to_string()))
        }
    }

    /// Gives the lease up. Releasing a lease that was already lost is not an error: there is
    /// nothing of ours left to release.
    pub async fn release_lease(&self, fence: &Fence) -> Result<bool> {
        let tx = self.write_tx().await?;
        let released = release_in(&tx, fence).await?;
        tx.commit().await?;
        Ok(released)
    }

    pub async fn get_lease(&self, session: SessionId) -> Result<Option<Lease>> {
        lease::Entity::find_by_id(session.to_string())
            .one(self.reader())
            .await?
            .map(convert::lease)
            .transpose()
    }
}

/// Claims the FIFO head of `fence`'s session as `turn` inside `db`'s transaction, unless an
/// admission of the session is `started` or none is queued.
async fn claim_head(
    db: &super::WriteTx,
    fence: &Fence,
    owner: &Owner,
    how: &ClaimAs,
) -> Result<Option<Claimed>> {
    // One statement reads the head with the counts that say whether it may be claimed
    // (nothing started) and give the `status` event after the claim.
    let head = head_and_counts(db, fence.session_id).await?;
    let Some((admission, queued, _)) = head.filter(|(_, _, started)| *started == 0) else {
        // The take recorded `how.turn`, which will not run: the holder runs no turn yet.
        unmark_turn(db, fence).await?;
        return Ok(None);
    };
    let user = (how.user_row)(&admission);
    // SQLite's one writer sees no commit between this count and the claim's; on PostgreSQL
    // an admission may commit in between, so there the claim counts again once it holds the
    // session's row (`status_event`).
    let status = (db.get_database_backend() != sea_orm::DbBackend::Postgres)
        .then(|| status_of(fence.session_id, queued - 1, true).0);
    let (events, session) = claim_admission_in(
        db,
        fence,
        admission.id,
        owner,
        how.turn,
        Some(&user),
        status,
    )
    .await?;
    Ok(Some(Claimed {
        admission,
        events,
        session: convert::session(session)?,
    }))
}

/// Clears the turn recorded in the lease `fence` has just taken in `db`'s transaction.
async fn unmark_turn(db: &super::WriteTx, fence: &Fence) -> Result<()> {
    lease::Entity::update_many()
        .col_expr(lease::Column::TurnId, Expr::value(Option::<String>::None))
        .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
        .filter(lease::Column::Generation.eq(fence.generation.0))
        .exec(db)
        .await?;
    Ok(())
}

/// A lease update that makes `c`'s owner the holder from `now`, running `turn` (the caller
/// moves the generation).
fn with_holder(
    q: UpdateMany<lease::Entity>,
    c: &LeaseClaim,
    turn: Option<TurnId>,
    now: i64,
) -> UpdateMany<lease::Entity> {
    q.col_expr(
        lease::Column::HolderInstance,
        Expr::value(c.owner.instance.to_string()),
    )
    .col_expr(lease::Column::HolderPid, Expr::value(c.owner.pid))
    .col_expr(lease::Column::Host, Expr::value(c.owner.host.clone()))
    .col_expr(
        lease::Column::TurnId,
        Expr::value(turn.map(|t| t.to_string())),
    )
    .col_expr(lease::Column::Platform, Expr::value(c.platform.to_owned()))
    .col_expr(lease::Column::AcquiredAt, Expr::value(now))
    .col_expr(lease::Column::ExpiresAt, Expr::value(now + c.ttl_ms))
}
