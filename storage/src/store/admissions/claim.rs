//! `queued → started` (a claim, with the lease's fence) and a `started` turn passed between
//! owners: given back at shutdown, taken over by the next (SPEC R13.1, R13.9).
use super::status::{insert_status_event, move_status, status_event};
use crate::entity::{admission, lease};
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use crate::store::{check_fence, convert, insert_events, Result, Store, StoreError, WriteTx};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, UpdateMany};
use serde_json::json;

impl Store {
    /// `queued → started` for the lease holder, committed with the `turn.started` and `status`
    /// events.
    pub async fn claim(
        &self,
        fence: &Fence,
        admission: AdmissionId,
        owner: &Owner,
        turn: TurnId,
    ) -> Result<Vec<Event>> {
        let tx = self.write_tx().await?;
        let events = claim_in(&tx, fence, admission, owner, turn, None, None).await?;
        tx.commit().await?;
        Ok(events)
    }

    /// [`claim`](Self::claim), committed with `user`, the turn's user row: the claim and the
    /// user message are one durable fact (the turn has started).
    pub async fn claim_with_user(
        &self,
        fence: &Fence,
        admission: AdmissionId,
        owner: &Owner,
        turn: TurnId,
        user: &NewMessage,
    ) -> Result<Vec<Event>> {
        let tx = self.write_tx().await?;
        let events = claim_in(&tx, fence, admission, owner, turn, Some(user), None).await?;
        tx.commit().await?;
        Ok(events)
    }

    /// A `started` admission whose owner is gone passes to the lease holder, which resumes the
    /// same turn from its durable rows (SPEC R13.1, R13.9): the owner changes and the attempt
    /// counts up (and `crash_resumes` with it, unless the turn was handed back at a graceful
    /// shutdown), the status and the turn do not. Committed with `turn.resumed` (the reason: a
    /// hand-back at shutdown, else a crash), `turn.started` (`resumed: true`) and `status`.
    /// Answers the admission as it now is, and the events.
    pub async fn take_over(
        &self,
        fence: &Fence,
        admission: AdmissionId,
        owner: &Owner,
    ) -> Result<(Admission, Vec<Event>)> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let Some(row) = admission::Entity::find_by_id(admission.to_string())
            .filter(admission::Column::SessionId.eq(fence.session_id.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()))
            .one(&tx)
            .await?
        else {
            return Err(StoreError::WrongState(admission.to_string()));
        };
        let mut a = convert::admission(row)?;
        let turn = a.turn_id.ok_or_else(|| {
            StoreError::Corrupt(format!("started admission {admission} has no turn"))
        })?;
        let reason = a.handed_back.unwrap_or(ResumeReason::Crash);
        a.attempt += 1;
        if reason == ResumeReason::Crash {
            a.crash_resumes += 1;
        }
        a.handed_back = None;
        a.owner = Some(owner.clone());
        lease::Entity::update_many()
            .col_expr(lease::Column::TurnId, Expr::value(turn.to_string()))
            .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
            .exec(&tx)
            .await?;
        owned_by(admission::Entity::update_many(), owner)
            .col_expr(admission::Column::Attempt, Expr::value(a.attempt))
            .col_expr(
                admission::Column::CrashResumes,
                Expr::value(a.crash_resumes),
            )
            .col_expr(
                admission::Column::HandedBack,
                Expr::value(Option::<String>::None),
            )
            .filter(admission::Column::Id.eq(admission.to_string()))
            .exec(&tx)
            .await?;
        let mut events = insert_events(
            &tx,
            &[
                NewEvent {
                    session_id: fence.session_id,
                    kind: EventKind::TurnResumed,
                    turn_id: Some(turn),
                    admission_id: Some(admission),
                    data: json!({
                        "admission_id": admission,
                        "attempt": a.attempt,
                        "reason": reason.as_str(),
                    }),
                },
                NewEvent {
                    session_id: fence.session_id,
                    kind: EventKind::TurnStarted,
                    turn_id: Some(turn),
                    admission_id: Some(admission),
                    data: json!({"turn_id": turn, "admission_id": admission, "resumed": true}),
                },
            ],
        )
        .await?;
        events.push(insert_status_event(&tx, fence.session_id).await?);
        tx.commit().await?;
        Ok((a, events))
    }

    /// A graceful stop gives a `started` turn back unsettled (SPEC R13.9): the admission stays
    /// `started`, records why (`handed_back`), and in the same commit the lease is released,
    /// so that the next owner (another replica now, or this service after its restart) takes
    /// it over and resumes it. Nothing of the turn's tail is closed: the resumed attempt
    /// continues from the rows as they are. `Fenced` when the lease was lost meanwhile.
    pub async fn hand_back(
        &self,
        fence: &Fence,
        admission: AdmissionId,
        reason: ResumeReason,
    ) -> Result<Vec<Event>> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let res = admission::Entity::update_many()
            .col_expr(admission::Column::HandedBack, Expr::value(reason.as_str()))
            .filter(admission::Column::Id.eq(admission.to_string()))
            .filter(admission::Column::SessionId.eq(fence.session_id.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            return Err(StoreError::WrongState(admission.to_string()));
        }
        if !crate::store::leases::release_in(&tx, fence).await? {
            return Err(StoreError::Fenced(fence.session_id.to_string()));
        }
        let status = insert_status_event(&tx, fence.session_id).await?;
        tx.commit().await?;
        Ok(vec![status])
    }
}

/// `queued → started` of `admission` as `turn` inside `db`'s transaction, fenced, with the
/// `turn.started` and `status` events and, when given, the turn's user row (see
/// [`Store::claim`]). `status` is the `status` event after the claim when the caller already
/// counted the queue in this transaction; else it is counted here.
pub(in crate::store) async fn claim_in(
    db: &WriteTx,
    fence: &Fence,
    admission: AdmissionId,
    owner: &Owner,
    turn: TurnId,
    user: Option<&NewMessage>,
    status: Option<NewEvent>,
) -> Result<Vec<Event>> {
    // The lease row records which turn its holder runs (SPEC R4.1); writing it under the
    // fence's filter is also the fence check.
    let fenced = lease::Entity::update_many()
        .col_expr(lease::Column::TurnId, Expr::value(turn.to_string()))
        .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
        .filter(lease::Column::HolderInstance.eq(fence.instance.to_string()))
        .filter(lease::Column::Generation.eq(fence.generation.0))
        .exec(db)
        .await?;
    if fenced.rows_affected != 1 {
        return Err(StoreError::Fenced(fence.session_id.to_string()));
    }
    Ok(
        claim_admission_in(db, fence, admission, owner, turn, user, status)
            .await?
            .0,
    )
}

/// [`claim_in`] without the lease write: for the transaction that has just taken the lease
/// with `turn` recorded in it (the take is the fence check). Answers the events and the
/// session's row as the claim leaves it.
pub(in crate::store) async fn claim_admission_in(
    db: &WriteTx,
    fence: &Fence,
    admission: AdmissionId,
    owner: &Owner,
    turn: TurnId,
    user: Option<&NewMessage>,
    status: Option<NewEvent>,
) -> Result<(Vec<Event>, crate::entity::session::Model)> {
    let res = owned_by(
        move_status(AdmissionStatus::Queued, AdmissionStatus::Started)?,
        owner,
    )
    .col_expr(admission::Column::TurnId, Expr::value(turn.to_string()))
    .col_expr(admission::Column::StartedAt, Expr::value(now_ms()))
    .filter(admission::Column::Id.eq(admission.to_string()))
    .filter(admission::Column::SessionId.eq(fence.session_id.to_string()))
    .exec(db)
    .await?;
    if res.rows_affected != 1 {
        return Err(StoreError::WrongState(admission.to_string()));
    }
    let started = NewEvent {
        session_id: fence.session_id,
        kind: EventKind::TurnStarted,
        turn_id: Some(turn),
        admission_id: Some(admission),
        data: json!({"turn_id": turn, "admission_id": admission}),
    };
    let status = match status {
        Some(known) => known,
        None => status_event(db, fence.session_id).await?.0,
    };
    let user: Vec<&NewMessage> = user.into_iter().collect();
    crate::store::log::append_to_session(db, fence.session_id, &user, &[started, status], None)
        .await
}

/// An admission update that records `owner` as the process running its turn.
fn owned_by(q: UpdateMany<admission::Entity>, owner: &Owner) -> UpdateMany<admission::Entity> {
    q.col_expr(
        admission::Column::OwnerInstance,
        Expr::value(owner.instance.to_string()),
    )
    .col_expr(admission::Column::OwnerPid, Expr::value(owner.pid))
    .col_expr(
        admission::Column::OwnerHost,
        Expr::value(owner.host.clone()),
    )
}
