//! Interrupt requests across replicas (SPEC R13.6): written by the replica that got the POST,
//! each with a NOTIFY to the replica running the turn, which settles them `done` (it signalled
//! the turn) or `missed` (the turn had already ended), with a NOTIFY back to the asker.
use super::{Result, Store, StoreError};
use crate::entity::interrupt_request;
use crate::ids::*;
use crate::notify::{self, NoticeKind};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

/// Where an interrupt request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptStatus {
    Pending,
    /// The running turn was signalled.
    Done,
    /// The turn was no longer running where it was asked to stop.
    Missed,
}

impl InterruptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
            Self::Missed => "missed",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        match s {
            "pending" => Ok(Self::Pending),
            "done" => Ok(Self::Done),
            "missed" => Ok(Self::Missed),
            other => Err(StoreError::Corrupt(format!("interrupt status {other:?}"))),
        }
    }
}

/// One row of `interrupt_requests`.
#[derive(Clone, Debug)]
pub struct InterruptRequest {
    pub id: String,
    pub session_id: SessionId,
    pub turn_id: TurnId,
    /// The replica that held the session's lease when it was asked.
    pub target: InstanceId,
    pub origin: InstanceId,
    pub reason: String,
    pub status: InterruptStatus,
    pub created_at: i64,
}

fn convert(row: interrupt_request::Model) -> Result<InterruptRequest> {
    Ok(InterruptRequest {
        session_id: parse_id(&row.session_id, "interrupt session_id")?,
        turn_id: parse_id(&row.turn_id, "interrupt turn_id")?,
        target: parse_id(&row.target_instance, "interrupt target_instance")?,
        origin: parse_id(&row.origin_instance, "interrupt origin_instance")?,
        status: InterruptStatus::parse(&row.status)?,
        id: row.id,
        reason: row.reason,
        created_at: row.created_at,
    })
}

impl Store {
    /// Asks `target`, which runs `turn` of `session`, to interrupt it; committed with the
    /// notice that wakes it.
    pub async fn request_interrupt(
        &self,
        session: SessionId,
        turn: TurnId,
        target: InstanceId,
        reason: &str,
    ) -> Result<InterruptRequest> {
        let tx = self.write_tx().await?;
        let id = uuid::Uuid::now_v7().to_string();
        interrupt_request::Entity::insert(interrupt_request::ActiveModel {
            id: Set(id.clone()),
            session_id: Set(session.to_string()),
            turn_id: Set(turn.to_string()),
            target_instance: Set(target.to_string()),
            origin_instance: Set(notify::origin().to_string()),
            reason: Set(reason.to_owned()),
            status: Set(InterruptStatus::Pending.as_str().to_owned()),
            created_at: Set(now_ms()),
            settled_at: Set(None),
        })
        .exec_without_returning(&tx)
        .await?;
        tx.send_notice(NoticeKind::Interrupt, session, Some(turn));
        let row = interrupt_request::Entity::find_by_id(id.clone())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("interrupt request {id}")))?;
        tx.commit().await?;
        convert(row)
    }

    pub async fn get_interrupt_request(&self, id: &str) -> Result<Option<InterruptRequest>> {
        interrupt_request::Entity::find_by_id(id.to_owned())
            .one(self.reader())
            .await?
            .map(convert)
            .transpose()
    }

    /// Pending requests for `turn`, oldest first.
    pub async fn pending_interrupts_of_turn(&self, turn: TurnId) -> Result<Vec<InterruptRequest>> {
        self.pending_interrupts(interrupt_request::Column::TurnId, turn.to_string())
            .await
    }

    /// Pending requests addressed to `target`, oldest first: what a replica sweeps when its
    /// notices may have been missed.
    pub async fn pending_interrupts_for(
        &self,
        target: InstanceId,
    ) -> Result<Vec<InterruptRequest>> {
        self.pending_interrupts(
            interrupt_request::Column::TargetInstance,
            target.to_string(),
        )
        .await
    }

    /// Pending requests whose `column` is `value`, oldest first.
    async fn pending_interrupts(
        &self,
        column: interrupt_request::Column,
        value: String,
    ) -> Result<Vec<InterruptRequest>> {
        interrupt_request::Entity::find()
            .filter(column.eq(value))
            .filter(interrupt_request::Column::Status.eq(InterruptStatus::Pending.as_str()))
            .order_by_asc(interrupt_request::Column::CreatedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert)
            .collect()
    }

    /// Settles every pending request for `turn` as `status` (`Done` or `Missed`), committed
    /// with the notice that tells the askers. Answers how many were settled.
    pub async fn settle_interrupts(
        &self,
        session: SessionId,
        turn: TurnId,
        status: InterruptStatus,
    ) -> Result<u64> {
        let tx = self.write_tx().await?;
        let res = interrupt_request::Entity::update_many()
            .col_expr(
                interrupt_request::Column::Status,
                Expr::value(status.as_str()),
            )
            .col_expr(interrupt_request::Column::SettledAt, Expr::value(now_ms()))
            .filter(interrupt_request::Column::TurnId.eq(turn.to_string()))
            .filter(interrupt_request::Column::Status.eq(InterruptStatus::Pending.as_str()))
            .exec(&tx)
            .await?;
        if res.rows_affected > 0 {
            tx.send_notice(NoticeKind::Interrupted, session, Some(turn));
        }
        tx.commit().await?;
        Ok(res.rows_affected)
    }
}
