//! Durable approvals (SPEC R9.7, R13.2): a request is a row with `expires_at`, committed with
//! `approval.requested` under the turn's fence; a person's decision or the timeout changes it
//! once, committed with `approval.resolved`. A pending row survives any crash.
use super::{
    check_fence, convert, insert_event, is_unique_violation, outbox, Result, Store, StoreError,
};
use crate::entity::approval;
use crate::ids::*;
use crate::model::*;
use crate::status::{ApprovalDecision, ApprovalStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::json;

impl Store {
    /// The approval request for (`turn`, `call_id`): the existing one when there is one (a
    /// resumed turn waits on the request it made before the crash), else a new pending row
    /// with its `approval.requested` event, which is returned.
    pub async fn request_approval(
        &self,
        fence: &Fence,
        turn: &TurnRef,
        call_id: &str,
        request: &serde_json::Value,
        expires_at: i64,
    ) -> Result<(Approval, Option<Event>)> {
        if let Some(existing) = self.approval_for_call(turn.turn_id, call_id).await? {
            return Ok((existing, None));
        }
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let id = ApprovalId::new();
        let now = now_ms();
        let inserted = approval::Entity::insert(approval::ActiveModel {
            id: Set(id.to_string()),
            session_id: Set(turn.session_id.to_string()),
            turn_id: Set(turn.turn_id.to_string()),
            call_id: Set(call_id.to_owned()),
            request: Set(request.to_string()),
            status: Set(ApprovalStatus::Pending.as_str().to_owned()),
            decided_by: Set(None),
            created_at: Set(now),
            expires_at: Set(expires_at),
            decided_at: Set(None),
        })
        .exec_without_returning(&tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => {
                tx.rollback().await?;
                let existing = self.approval_for_call(turn.turn_id, call_id).await?;
                return existing
                    .map(|a| (a, None))
                    .ok_or_else(|| StoreError::NotFound(format!("approval for {call_id}")));
            }
            Err(e) => return Err(e.into()),
        }
        let mut data = request.clone();
        data["approval_id"] = json!(id);
        data["call_id"] = json!(call_id);
        data["expires_at"] = json!(rfc3339(expires_at));
        let ev = insert_event(
            &tx,
            &NewEvent {
                session_id: turn.session_id,
                kind: EventKind::ApprovalRequested,
                turn_id: Some(turn.turn_id),
                admission_id: Some(turn.admission_id),
                data,
            },
        )
        .await?;
        // A session of a chat platform is asked in its chat, with approve/deny buttons.
        outbox::to_session_chat(
            &tx,
            turn.session_id,
            Some(turn.turn_id),
            format!("approval:{id}"),
            "approval",
            json!({
                "approval_id": id,
                "name": request.get("name"),
                "args": request.get("args"),
                "reason": request.get("reason"),
                "expires_at": expires_at,
            }),
        )
        .await?;
        let row = approval::Entity::find_by_id(id.to_string())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("approval {id}")))?;
        tx.commit().await?;
        Ok((convert::approval(row)?, Some(ev)))
    }

    /// A person decides a pending approval of `session`. `WrongState` when it was already
    /// decided or has expired (API.md: 409); `NotFound` when there is no such approval.
    pub async fn decide_approval(
        &self,
        session: SessionId,
        id: ApprovalId,
        decision: ApprovalDecision,
        decided_by: &str,
    ) -> Result<(Approval, Event)> {
        let status = match decision {
            ApprovalDecision::Approve => ApprovalStatus::Approved,
            ApprovalDecision::Deny => ApprovalStatus::Denied,
        };
        self.resolve(session, id, status, Some(decided_by), decision.as_str())
            .await
    }

    /// A pending approval whose time ran out becomes a denial (`timed_out`), announced as
    /// `approval.resolved` with decision `timeout`. Done by the waiting turn, under its fence.
    pub async fn expire_approval(
        &self,
        fence: &Fence,
        id: ApprovalId,
    ) -> Result<Option<(Approval, Event)>> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let res = approval::Entity::update_many()
            .col_expr(
                approval::Column::Status,
                Expr::value(ApprovalStatus::TimedOut.as_str()),
            )
            .col_expr(approval::Column::DecidedAt, Expr::value(now_ms()))
            .filter(approval::Column::Id.eq(id.to_string()))
            .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
            .filter(approval::Column::ExpiresAt.lte(now_ms()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let a = approval_in(&tx, id).await?;
        let ev = resolved_event(&tx, &a, "timeout").await?;
        tx.commit().await?;
        Ok(Some((a, ev)))
    }

    async fn resolve(
        &self,
        session: SessionId,
        id: ApprovalId,
        status: ApprovalStatus,
        decided_by: Option<&str>,
        decision: &str,
    ) -> Result<(Approval, Event)> {
        let tx = self.write_tx().await?;
        let now = now_ms();
        let res = approval::Entity::update_many()
            .col_expr(approval::Column::Status, Expr::value(status.as_str()))
            .col_expr(approval::Column::DecidedBy, Expr::value(decided_by))
            .col_expr(approval::Column::DecidedAt, Expr::value(now))
            .filter(approval::Column::Id.eq(id.to_string()))
            .filter(approval::Column::SessionId.eq(session.to_string()))
            .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
            .filter(approval::Column::ExpiresAt.gt(now))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            let exists = approval::Entity::find_by_id(id.to_string())
                .filter(approval::Column::SessionId.eq(session.to_string()))
                .one(&tx)
                .await?
                .is_some();
            tx.rollback().await?;
            return Err(if exists {
                StoreError::WrongState(format!("approval {id}"))
            } else {
                StoreError::NotFound(format!("approval {id}"))
            });
        }
        let a = approval_in(&tx, id).await?;
        let ev = resolved_event(&tx, &a, decision).await?;
        crate::notify::send(&tx, crate::notify::NoticeKind::Decision, session, None);
        tx.commit().await?;
        Ok((a, ev))
    }

    pub async fn get_approval(&self, id: ApprovalId) -> Result<Option<Approval>> {
        approval::Entity::find_by_id(id.to_string())
            .one(self.connection())
            .await?
            .map(convert::approval)
            .transpose()
    }

    pub async fn approval_for_call(&self, turn: TurnId, call_id: &str) -> Result<Option<Approval>> {
        approval::Entity::find()
            .filter(approval::Column::TurnId.eq(turn.to_string()))
            .filter(approval::Column::CallId.eq(call_id))
            .one(self.connection())
            .await?
            .map(convert::approval)
            .transpose()
    }

    /// Pending approvals of `session`, oldest first: the open questions a client shows.
    pub async fn pending_approvals(&self, session: SessionId) -> Result<Vec<Approval>> {
        approval::Entity::find()
            .filter(approval::Column::SessionId.eq(session.to_string()))
            .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
            .order_by_asc(approval::Column::CreatedAt)
            .all(self.connection())
            .await?
            .into_iter()
            .map(convert::approval)
            .collect()
    }
}

async fn resolved_event(db: &super::WriteTx, a: &Approval, decision: &str) -> Result<Event> {
    insert_event(
        db,
        &NewEvent {
            session_id: a.session_id,
            kind: EventKind::ApprovalResolved,
            turn_id: Some(a.turn_id),
            admission_id: None,
            data: json!({"approval_id": a.id, "call_id": a.call_id, "decision": decision}),
        },
    )
    .await
}

async fn approval_in<C: sea_orm::ConnectionTrait>(db: &C, id: ApprovalId) -> Result<Approval> {
    approval::Entity::find_by_id(id.to_string())
        .one(db)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("approval {id}")))
        .and_then(convert::approval)
}
