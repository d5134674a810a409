//! Durable approvals (SPEC R9.7, R13.2): a request is a row with `expires_at`, committed with
//! `approval.requested` under the turn's fence; a person's decision or the timeout changes it
//! once, committed with `approval.resolved`. A pending row survives any crash.
//!
//! A sub-agent's approval is its people's too (SPEC R1.5): both events are also written, in the
//! same commit, to the log of the session that delegated it (the top of its `parent_session_id`
//! chain), with `session_id` naming the child; its chat is asked with buttons; and a decision
//! sent to that session reaches the child's approval (`Store::delegating_session`).
use super::{
    check_fence, convert, insert_event, is_unique_violation, outbox, Result, Store, StoreError,
};
use crate::entity::{approval, session};
use crate::ids::*;
use crate::model::*;
use crate::status::{ApprovalDecision, ApprovalStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::json;

impl Store {
    /// The approval request for (`turn`, `call_id`): the existing one when there is one (a
    /// resumed turn waits on the request it made before the crash), else a new pending row
    /// with its `approval.requested` event (and its copy in the delegating session's log, for a
    /// sub-agent), which are returned.
    pub async fn request_approval(
        &self,
        fence: &Fence,
        turn: &TurnRef,
        call_id: &str,
        request: &serde_json::Value,
        expires_at: i64,
    ) -> Result<(Approval, Vec<Event>)> {
        if let Some(existing) = self.approval_for_call(turn.turn_id, call_id).await? {
            return Ok((existing, Vec::new()));
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
                    .map(|a| (a, Vec::new()))
                    .ok_or_else(|| StoreError::NotFound(format!("approval for {call_id}")));
            }
            Err(e) => return Err(e.into()),
        }
        let mut data = request.clone();
        data["approval_id"] = json!(id);
        data["call_id"] = json!(call_id);
        data["expires_at"] = json!(rfc3339(expires_at));
        let top = delegating_session(&tx, turn.session_id).await?;
        let events = insert_relayed(
            &tx,
            NewEvent {
                session_id: turn.session_id,
                kind: EventKind::ApprovalRequested,
                turn_id: Some(turn.turn_id),
                admission_id: Some(turn.admission_id),
                data,
            },
            top,
        )
        .await?;
        // A session of a chat platform is asked in its chat, with approve/deny buttons; a
        // sub-agent in the chat of the session that delegated it.
        let (asked, asked_turn) = match top {
            Some(top) => (top, None),
            None => (turn.session_id, Some(turn.turn_id)),
        };
        outbox::to_session_chat(
            &tx,
            asked,
            asked_turn,
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
        Ok((convert::approval(row)?, events))
    }

    /// A person decides a pending approval of `session`. `WrongState` when it was already
    /// decided or has expired (API.md: 409); `NotFound` when there is no such approval.
    /// Answers its `approval.resolved` (and the relayed copy, for a sub-agent's).
    pub async fn decide_approval(
        &self,
        session: SessionId,
        id: ApprovalId,
        decision: ApprovalDecision,
        decided_by: &str,
    ) -> Result<(Approval, Vec<Event>)> {
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
    ) -> Result<Option<(Approval, Vec<Event>)>> {
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
        let events = resolved_events(&tx, &a, "timeout").await?;
        tx.commit().await?;
        Ok(Some((a, events)))
    }

    async fn resolve(
        &self,
        session: SessionId,
        id: ApprovalId,
        status: ApprovalStatus,
        decided_by: Option<&str>,
        decision: &str,
    ) -> Result<(Approval, Vec<Event>)> {
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
        let events = resolved_events(&tx, &a, decision).await?;
        if let Some(by) = decided_by {
            super::audit::insert_audit(
                &tx,
                &super::audit::NewAudit {
                    principal: by.to_owned(),
                    action: "approval.decided".into(),
                    target: id.to_string(),
                    detail: json!({
                        "decision": decision,
                        "session_id": a.session_id,
                        "tool": a.request.get("name"),
                    }),
                },
            )
            .await?;
        }
        tx.send_notice(crate::notify::NoticeKind::Decision, session, None);
        tx.commit().await?;
        Ok((a, events))
    }

    pub async fn get_approval(&self, id: ApprovalId) -> Result<Option<Approval>> {
        approval::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .map(convert::approval)
            .transpose()
    }

    pub async fn approval_for_call(&self, turn: TurnId, call_id: &str) -> Result<Option<Approval>> {
        approval::Entity::find()
            .filter(approval::Column::TurnId.eq(turn.to_string()))
            .filter(approval::Column::CallId.eq(call_id))
            .one(self.reader())
            .await?
            .map(convert::approval)
            .transpose()
    }

    /// The session at the top of `session`'s `parent_session_id` chain (its lineage root),
    /// when `session` is a sub-agent's: where its approvals are asked and may be decided.
    pub async fn delegating_session(&self, session: SessionId) -> Result<Option<SessionId>> {
        delegating_session(self.reader(), session).await
    }

    /// Pending approvals of `session`, oldest first: the open questions a client shows.
    pub async fn pending_approvals(&self, session: SessionId) -> Result<Vec<Approval>> {
        approval::Entity::find()
            .filter(approval::Column::SessionId.eq(session.to_string()))
            .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
            .order_by_asc(approval::Column::CreatedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::approval)
            .collect()
    }
}

async fn resolved_events(db: &super::WriteTx, a: &Approval, decision: &str) -> Result<Vec<Event>> {
    insert_relayed(
        db,
        NewEvent {
            session_id: a.session_id,
            kind: EventKind::ApprovalResolved,
            turn_id: Some(a.turn_id),
            admission_id: None,
            data: json!({"approval_id": a.id, "call_id": a.call_id, "decision": decision}),
        },
        delegating_session(db, a.session_id).await?,
    )
    .await
}

/// Inserts `event`, and for a sub-agent's session (`top` is the session that delegated it)
/// its copy in `top`'s log with `session_id` naming the child (its turn and admission ids are
/// the child's, so they stay in `data` only).
async fn insert_relayed(
    db: &super::WriteTx,
    event: NewEvent,
    top: Option<SessionId>,
) -> Result<Vec<Event>> {
    let child = event.session_id;
    let mut events = vec![insert_event(db, &event).await?];
    if let Some(top) = top {
        let mut data = event.data.clone();
        data["session_id"] = json!(child);
        data["turn_id"] = json!(event.turn_id);
        let relayed = NewEvent {
            session_id: top,
            kind: event.kind,
            turn_id: None,
            admission_id: None,
            data,
        };
        events.push(insert_event(db, &relayed).await?);
    }
    Ok(events)
}

/// The lineage root of the session at the top of `session`'s `parent_session_id` chain, when
/// `session` is a sub-agent's; `None` for a session nobody delegated.
pub(in crate::store) async fn delegating_session<C: sea_orm::ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<Option<SessionId>> {
    // Depth is bounded by `delegation.max_depth`; the bound here only guards a corrupt chain.
    const MAX_CHAIN: usize = 32;
    let mut at = session;
    let mut top = None;
    for _ in 0..MAX_CHAIN {
        let Some(row) = session::Entity::find_by_id(at.to_string()).one(db).await? else {
            break;
        };
        match row.parent_session_id {
            Some(parent) => {
                at = parse_id(&parent, "parent session id")?;
                top = Some(at);
            }
            None => {
                return match (top, row.root_id) {
                    (Some(_), Some(root)) => Ok(Some(parse_id(&root, "root session id")?)),
                    (top, _) => Ok(top),
                };
            }
        }
    }
    Ok(top)
}

async fn approval_in<C: sea_orm::ConnectionTrait>(db: &C, id: ApprovalId) -> Result<Approval> {
    approval::Entity::find_by_id(id.to_string())
        .one(db)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("approval {id}")))
        .and_then(convert::approval)
}
