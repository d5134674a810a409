//! The admission FIFO (SPEC R2): idempotent admit, claim, mark unknown, and the reads that
//! drain and recovery need. Every status change is a compare-and-set from the state
//! `AdmissionStatus::can_become` allows, committed with the event that announces it.
use super::{check_fence, convert, insert_event, is_unique_violation, Result, Store, StoreError};
use crate::entity::{admission, lease, session};
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use serde_json::json;

impl Store {
    /// Makes `new` durable, or returns the earlier admission of the same request id. The same
    /// request id with another payload digest is `IdempotencyConflict`.
    pub async fn admit(&self, new: NewAdmission) -> Result<Admitted> {
        // Two racing inserts can both miss the lookup on PostgreSQL; the loser sees the unique
        // violation and then finds the winner's row.
        for _ in 0..3 {
            match self.try_admit(&new).await {
                Err(StoreError::Db(e)) if is_unique_violation(&e) => continue,
                other => return other,
            }
        }
        self.find_admission_by_request(new.session_id, &new.request_id)
            .await?
            .map(|a| duplicate_of(a, &new))
            .unwrap_or_else(|| Err(StoreError::NotFound("admission after retry".into())))
    }

    async fn try_admit(&self, new: &NewAdmission) -> Result<Admitted> {
        let tx = self.write_tx().await?;
        let sid = new.session_id.to_string();
        // Bump the queue counter first: it locks the session row, so the duplicate lookup
        // below sees any admission committed by a racing request.
        let bumped = session::Entity::update_many()
            .col_expr(
                session::Column::LastAdmissionSeq,
                Expr::col(session::Column::LastAdmissionSeq).add(1),
            )
            .col_expr(session::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(sid.clone()))
            .exec_with_returning(&tx)
            .await?;
        let Some(seq) = bumped.first().map(|s| s.last_admission_seq) else {
            return Err(StoreError::NotFound(format!("session {sid}")));
        };
        let existing = admission::Entity::find()
            .filter(admission::Column::SessionId.eq(sid.clone()))
            .filter(admission::Column::RequestId.eq(new.request_id.clone()))
            .one(&tx)
            .await?;
        if let Some(row) = existing {
            tx.rollback().await?;
            return duplicate_of(convert::admission(row)?, new);
        }
        let ahead = admission::Entity::find()
            .filter(admission::Column::SessionId.eq(sid.clone()))
            .filter(admission::Column::Status.is_in([
                AdmissionStatus::Queued.as_str(),
                AdmissionStatus::Started.as_str(),
            ]))
            .count(&tx)
            .await?;
        let id = AdmissionId::new();
        let now = now_ms();
        admission::Entity::insert(admission::ActiveModel {
            id: Set(id.to_string()),
            session_id: Set(sid.clone()),
            seq: Set(seq),
            request_id: Set(new.request_id.clone()),
            payload_digest: Set(new.payload_digest.clone()),
            payload_json: Set(new.payload.to_string()),
            principal: Set(new.principal.clone()),
            surface: Set(new.surface.clone()),
            status: Set(AdmissionStatus::Queued.as_str().to_owned()),
            owner_instance: Set(None),
            owner_pid: Set(None),
            owner_host: Set(None),
            turn_id: Set(None),
            outcome: Set(None),
            created_at: Set(now),
            started_at: Set(None),
            finished_at: Set(None),
        })
        .exec_without_returning(&tx)
        .await?;
        let event = insert_event(
            &tx,
            &NewEvent {
                session_id: new.session_id,
                kind: EventKind::AdmissionQueued,
                turn_id: None,
                admission_id: Some(id),
                data: json!({"admission_id": id, "seq_in_queue": ahead + 1}),
            },
        )
        .await?;
        let row = admission::Entity::find_by_id(id.to_string())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("admission {id}")))?;
        tx.commit().await?;
        Ok(Admitted {
            admission: convert::admission(row)?,
            duplicate: false,
            event: Some(event),
        })
    }

    pub async fn get_admission(&self, id: AdmissionId) -> Result<Option<Admission>> {
        admission::Entity::find_by_id(id.to_string())
            .one(self.connection())
            .await?
            .map(convert::admission)
            .transpose()
    }

    pub async fn find_admission_by_request(
        &self,
        session: SessionId,
        request_id: &str,
    ) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::RequestId.eq(request_id))
            .one(self.connection())
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The oldest queued admission of `session`: the FIFO head.
    pub async fn next_queued(&self, session: SessionId) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .order_by_asc(admission::Column::Seq)
            .one(self.connection())
            .await?
            .map(convert::admission)
            .transpose()
    }

    pub async fn queue_depth(&self, session: SessionId) -> Result<u64> {
        Ok(admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .count(self.connection())
            .await?)
    }

    /// `queued → started` for the lease holder, committed with the `turn.started` event.
    pub async fn claim(
        &self,
        fence: &Fence,
        admission: AdmissionId,
        owner: &Owner,
        turn: TurnId,
    ) -> Result<Event> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        // The lease row records which turn its holder runs (SPEC R4.1).
        lease::Entity::update_many()
            .col_expr(lease::Column::TurnId, Expr::value(turn.to_string()))
            .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
            .exec(&tx)
            .await?;
        let res = admission::Entity::update_many()
            .col_expr(
                admission::Column::Status,
                Expr::value(AdmissionStatus::Started.as_str()),
            )
            .col_expr(
                admission::Column::OwnerInstance,
                Expr::value(owner.instance.to_string()),
            )
            .col_expr(admission::Column::OwnerPid, Expr::value(owner.pid))
            .col_expr(
                admission::Column::OwnerHost,
                Expr::value(owner.host.clone()),
            )
            .col_expr(admission::Column::TurnId, Expr::value(turn.to_string()))
            .col_expr(admission::Column::StartedAt, Expr::value(now_ms()))
            .filter(admission::Column::Id.eq(admission.to_string()))
            .filter(admission::Column::SessionId.eq(fence.session_id.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            return Err(StoreError::WrongState(admission.to_string()));
        }
        let ev = insert_event(
            &tx,
            &NewEvent {
                session_id: fence.session_id,
                kind: EventKind::TurnStarted,
                turn_id: Some(turn),
                admission_id: Some(admission),
                data: json!({"turn_id": turn, "admission_id": admission}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(ev)
    }

    /// `started → unknown`: the owner died and the outcome cannot be known (SPEC R2.4). Returns
    /// the `turn.unknown` event, or `None` when the admission was no longer `started`.
    pub async fn mark_unknown(&self, id: AdmissionId, reason: &str) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        let Some(row) = admission::Entity::find_by_id(id.to_string())
            .one(&tx)
            .await?
        else {
            return Err(StoreError::NotFound(format!("admission {id}")));
        };
        let a = convert::admission(row)?;
        if !a.status.can_become(AdmissionStatus::Unknown) {
            tx.rollback().await?;
            return Ok(None);
        }
        let res = admission::Entity::update_many()
            .col_expr(
                admission::Column::Status,
                Expr::value(AdmissionStatus::Unknown.as_str()),
            )
            .col_expr(
                admission::Column::Outcome,
                Expr::value(json!({"reason": reason}).to_string()),
            )
            .filter(admission::Column::Id.eq(id.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let ev = insert_event(
            &tx,
            &NewEvent {
                session_id: a.session_id,
                kind: EventKind::TurnUnknown,
                turn_id: a.turn_id,
                admission_id: Some(id),
                data: json!({"admission_id": id, "reason": reason}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Some(ev))
    }

    /// Every admission in `started`, for recovery to judge whose owner is gone.
    pub async fn started_admissions(&self, session: Option<SessionId>) -> Result<Vec<Admission>> {
        let mut q = admission::Entity::find()
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()));
        if let Some(s) = session {
            q = q.filter(admission::Column::SessionId.eq(s.to_string()));
        }
        q.order_by_asc(admission::Column::Seq)
            .all(self.connection())
            .await?
            .into_iter()
            .map(convert::admission)
            .collect()
    }

    /// Sessions with anything queued, for the drain at start-up and the periodic sweep.
    pub async fn sessions_with_queued(&self) -> Result<Vec<SessionId>> {
        let rows: Vec<String> = admission::Entity::find()
            .select_only()
            .column(admission::Column::SessionId)
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .distinct()
            .into_tuple()
            .all(self.connection())
            .await?;
        rows.iter().map(|s| parse_id(s, "session id")).collect()
    }
}

fn duplicate_of(existing: Admission, new: &NewAdmission) -> Result<Admitted> {
    if existing.payload_digest != new.payload_digest {
        return Err(StoreError::IdempotencyConflict {
            request_id: new.request_id.clone(),
        });
    }
    Ok(Admitted {
        admission: existing,
        duplicate: true,
        event: None,
    })
}
