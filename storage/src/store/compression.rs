//! Compression's durable facts (SPEC R6.4): the per-session compression lock, and the swap that
//! takes rows out of the wire copy and writes their summary. The swap is one fenced transaction
//! with its `compression.completed` event: either the transcript changed and said so, or
//! nothing changed. No row is ever deleted; history stays readable.
use super::log::insert_message;
use super::{check_fence, insert_event, is_unique_violation, Result, Store, StoreError};
use crate::entity::{admission, compression_lock, message, session};
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};

/// Bound on the ids in one `IN (…)` list (SQLite allows 32,766 parameters a statement).
pub(super) const IDS_PER_STATEMENT: usize = 500;

/// One row a compression takes out of the wire copy.
#[derive(Clone, Copy, Debug)]
pub struct Replaced {
    pub id: MessageId,
    pub idx: i64,
    /// An earlier compression's summary (it sits outside the index order on the wire).
    pub summary: bool,
}

/// True while the turn `holder` names is `started` (a holder that is not a turn id counts as
/// running: only its TTL frees it).
async fn holder_runs<C: ConnectionTrait>(db: &C, holder: &str) -> Result<bool> {
    if uuid::Uuid::parse_str(holder).is_err() {
        return Ok(true);
    }
    let row = admission::Entity::find()
        .filter(admission::Column::TurnId.eq(holder))
        .one(db)
        .await?;
    Ok(row.is_some_and(|a| a.status == AdmissionStatus::Started.as_str()))
}

/// One compression's swap, as the compressor decided it.
#[derive(Clone, Debug)]
pub struct Compaction {
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub admission_id: AdmissionId,
    /// The session's `compression_epoch` the plan was made against; the swap refuses to commit
    /// over a newer one (`WrongState`).
    pub base_epoch: i32,
    /// Rows leaving the wire copy (the summary of an earlier epoch among them, if any). The
    /// others are every live row between the lowest and the highest of their indexes.
    pub compressed: Vec<Replaced>,
    /// The summary row; its `summary_epoch` is set to `base_epoch + 1` here.
    pub summary: NewMessage,
    /// `compression.completed`'s data.
    pub event_data: serde_json::Value,
}

/// What the swap committed.
#[derive(Clone, Debug)]
pub struct CompactionDone {
    pub epoch: i32,
    pub summary: Message,
    pub event: Event,
}

impl Store {
    /// Takes the compression lock of `session` for `holder` (a turn id) until `ttl_ms` from
    /// now. A lock is taken over when its holder is the same, its time is up, or its holder is
    /// a turn that no longer runs (it ended, or its process died and it was marked `unknown`),
    /// so a crash mid-summary never blocks the session for the rest of the TTL. False when a
    /// running turn holds it.
    pub async fn take_compression_lock(
        &self,
        session: SessionId,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<bool> {
        let sid = session.to_string();
        let now = now_ms();
        let expires = now.saturating_add(ttl_ms);
        let tx = self.write_tx().await?;
        let current = compression_lock::Entity::find_by_id(sid.clone())
            .one(&tx)
            .await?;
        let Some(current) = current else {
            let inserted = compression_lock::Entity::insert(compression_lock::ActiveModel {
                session_id: Set(sid),
                holder: Set(holder.to_owned()),
                expires_at: Set(expires),
            })
            .exec_without_returning(&tx)
            .await;
            return match inserted {
                Ok(_) => {
                    tx.commit().await?;
                    Ok(true)
                }
                // Another replica inserted it first (PostgreSQL): theirs.
                Err(e) if is_unique_violation(&e) => Ok(false),
                Err(e) => Err(e.into()),
            };
        };
        let free = current.holder == holder
            || current.expires_at <= now
            || !holder_runs(&tx, &current.holder).await?;
        if !free {
            tx.rollback().await?;
            return Ok(false);
        }
        // Conditional on the holder read above, so a concurrent taker cannot both win.
        let taken = compression_lock::Entity::update_many()
            .col_expr(compression_lock::Column::Holder, Expr::value(holder))
            .col_expr(compression_lock::Column::ExpiresAt, Expr::value(expires))
            .filter(compression_lock::Column::SessionId.eq(sid))
            .filter(compression_lock::Column::Holder.eq(current.holder))
            .exec(&tx)
            .await?;
        tx.commit().await?;
        Ok(taken.rows_affected == 1)
    }

    /// Gives the lock back if `holder` still has it.
    pub async fn release_compression_lock(&self, session: SessionId, holder: &str) -> Result<()> {
        compression_lock::Entity::delete_many()
            .filter(compression_lock::Column::SessionId.eq(session.to_string()))
            .filter(compression_lock::Column::Holder.eq(holder))
            .exec(self.writer())
            .await?;
        Ok(())
    }

    /// The swap of one compression, for the lease holder: marks `compressed` with the new
    /// epoch, appends the summary, bumps the session's epoch and commits
    /// `compression.completed`, all in one transaction.
    pub async fn commit_compression(
        &self,
        fence: &Fence,
        c: &Compaction,
    ) -> Result<CompactionDone> {
        let sid = c.session_id.to_string();
        let epoch = c.base_epoch.saturating_add(1);
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let bumped = session::Entity::update_many()
            .col_expr(session::Column::CompressionEpoch, Expr::value(epoch))
            .col_expr(session::Column::CompressedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(sid.clone()))
            .filter(session::Column::CompressionEpoch.eq(c.base_epoch))
            .exec(&tx)
            .await?;
        if bumped.rows_affected != 1 {
            tx.rollback().await?;
            return Err(StoreError::WrongState(format!(
                "session {sid}: compression epoch is no longer {}",
                c.base_epoch
            )));
        }
        // The plain rows are a contiguous run of live rows: one range update marks them (an id
        // list of hundreds is slow to plan on PostgreSQL); a count that differs from the plan
        // means the transcript is not what the plan saw.
        // The rows live in the canonical session (the root's own unless a rotation moved them).
        let canon = super::canonical::canonical_of(&tx, c.session_id)
            .await?
            .to_string();
        let plain: Vec<&Replaced> = c.compressed.iter().filter(|r| !r.summary).collect();
        let mut marked = 0;
        if let (Some(lo), Some(hi)) = (
            plain.iter().map(|r| r.idx).min(),
            plain.iter().map(|r| r.idx).max(),
        ) {
            let res = message::Entity::update_many()
                .col_expr(message::Column::CompressedEpoch, Expr::value(epoch))
                .filter(message::Column::SessionId.eq(canon.clone()))
                .filter(message::Column::CompressedEpoch.is_null())
                .filter(message::Column::SummaryEpoch.is_null())
                .filter(message::Column::Idx.between(lo, hi))
                .exec(&tx)
                .await?;
            marked += res.rows_affected;
        }
        let summaries: Vec<String> = c
            .compressed
            .iter()
            .filter(|r| r.summary)
            .map(|r| r.id.to_string())
            .collect();
        for chunk in summaries.chunks(IDS_PER_STATEMENT) {
            let res = message::Entity::update_many()
                .col_expr(message::Column::CompressedEpoch, Expr::value(epoch))
                .filter(message::Column::SessionId.eq(canon.clone()))
                .filter(message::Column::CompressedEpoch.is_null())
                .filter(message::Column::Id.is_in(chunk.iter().cloned()))
                .exec(&tx)
                .await?;
            marked += res.rows_affected;
        }
        let expected = c.compressed.len() as u64;
        if marked != expected {
            tx.rollback().await?;
            return Err(StoreError::WrongState(format!(
                "session {sid}: the plan replaces {expected} rows but {marked} matched; the \
                 transcript changed under it"
            )));
        }
        let mut summary = c.summary.clone();
        summary.summary_epoch = Some(epoch);
        insert_message(&tx, c.session_id, &summary).await?;
        let row = message::Entity::find_by_id(summary.id.to_string())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("message {}", summary.id)))?;
        let mut data = c.event_data.clone();
        if let Some(obj) = data.as_object_mut() {
            obj.insert("epoch".into(), epoch.into());
        }
        let event = insert_event(
            &tx,
            &NewEvent {
                session_id: c.session_id,
                kind: EventKind::CompressionCompleted,
                turn_id: Some(c.turn_id),
                admission_id: Some(c.admission_id),
                data,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(CompactionDone {
            epoch,
            summary: super::convert::message(row)?,
            event,
        })
    }

    /// The prompt size the provider reported for this session's last recorded call, and when
    /// that call was recorded: `(input_tokens, created_at)`.
    pub async fn last_prompt_usage(&self, session: SessionId) -> Result<Option<(i64, i64)>> {
        Ok(self
            .get_session(session)
            .await?
            .and_then(|s| s.last_prompt)
            .map(|p| (p.input_tokens, p.recorded_at)))
    }
}
