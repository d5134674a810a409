//! The admission FIFO (SPEC R2): idempotent admit, claim, mark unknown, and the reads that
//! drain and recovery need. Every status change is a compare-and-set from the state
//! `AdmissionStatus::can_become` allows, committed with the event that announces it.
use super::leases::fence_out;
use super::{
    check_fence, convert, insert_event, insert_events, is_unique_violation, outbox, tail,
    write_event_rows, Result, Store, StoreError, WriteTx,
};
use crate::entity::{admission, lease, session};
use crate::ids::*;
use crate::model::*;
use crate::notify::NoticeKind;
use crate::status::AdmissionStatus;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, UpdateMany,
};
use serde_json::json;

/// What a platform chat is told when its turn's owner died mid-turn.
const UNKNOWN_NOTICE: &str = "⚠️ I was restarted while answering your last message, so I \
cannot tell how far it got. Nothing is re-run on its own: send /retry to run it again.";

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
        // `admission.queued` and the session's `status`.
        const ANNOUNCED: i64 = 2;
        let tx = self.write_tx().await?;
        let sid = new.session_id.to_string();
        // Bump the queue counter first: it locks the session row, so the insert below meets
        // any admission committed by a racing request. The same update takes the
        // seqs of the two events the admission announces (a duplicate rolls it all back).
        let bumped = session::Entity::update_many()
            .col_expr(
                session::Column::LastAdmissionSeq,
                Expr::col(session::Column::LastAdmissionSeq).add(1),
            )
            .col_expr(
                session::Column::LastEventSeq,
                Expr::col(session::Column::LastEventSeq).add(ANNOUNCED),
            )
            .col_expr(session::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(sid.clone()))
            .exec_with_returning(&tx)
            .await?;
        let Some((seq, last_event)) = bumped
            .first()
            .map(|s| (s.last_admission_seq, s.last_event_seq))
        else {
            return Err(StoreError::NotFound(format!("session {sid}")));
        };
        // PostgreSQL: the request id is looked up first, by a plain read. An insert that met
        // the existing row would wait for any transaction updating that row (a claim or a turn
        // end, which then update this session's row, locked here): a deadlock, which the
        // server breaks after `deadlock_timeout` by failing one side. SQLite has one writer
        // and no row locks: there the conflict-guarded insert below is the lookup.
        if tx.get_database_backend() == sea_orm::DbBackend::Postgres {
            if let Some(row) = find_by_request(&tx, &sid, &new.request_id).await? {
                tx.rollback().await?;
                return duplicate_of(convert::admission(row)?, new);
            }
        }
        // One grouped count before the insert gives both the new admission's place in the
        // queue and the `status` event after it.
        let (queued, started) = queue_counts(&tx, new.session_id).await?;
        let id = AdmissionId::new();
        let now = now_ms();
        let row = admission::Model {
            id: id.to_string(),
            session_id: sid.clone(),
            seq,
            request_id: new.request_id.clone(),
            payload_digest: new.payload_digest.clone(),
            payload_json: new.payload.to_string(),
            principal: new.principal.clone(),
            surface: new.surface.clone(),
            status: AdmissionStatus::Queued.as_str().to_owned(),
            owner_instance: None,
            owner_pid: None,
            owner_host: None,
            turn_id: None,
            outcome: None,
            created_at: now,
            started_at: None,
            finished_at: None,
            retry_of: new.retry_of.map(|r| r.to_string()),
            attempt: 1,
            handed_back: None,
        };
        // Every column is given (`Unchanged` values are inserted too): the row written is
        // `row`, so it is returned as is rather than read back. A request id the session has
        // seen inserts nothing (the session row's lock, taken above, makes any racing
        // admission's row visible here): that admission is the answer.
        let inserted = admission::Entity::insert(admission::ActiveModel::from(row.clone()))
            .on_conflict(
                OnConflict::columns([admission::Column::SessionId, admission::Column::RequestId])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(&tx)
            .await?;
        if inserted == 0 {
            let existing = find_by_request(&tx, &sid, &new.request_id).await?;
            tx.rollback().await?;
            return match existing {
                Some(row) => duplicate_of(convert::admission(row)?, new),
                None => Err(StoreError::NotFound(format!(
                    "admission {} of session {sid} after a conflicting insert",
                    new.request_id
                ))),
            };
        }
        let announced = [
            NewEvent {
                session_id: new.session_id,
                kind: EventKind::AdmissionQueued,
                turn_id: None,
                admission_id: Some(id),
                data: json!({"admission_id": id, "seq_in_queue": queued + started + 1}),
            },
            status_of(new.session_id, queued + 1, started > 0).0,
        ];
        let announced: Vec<&NewEvent> = announced.iter().collect();
        let first = last_event - ANNOUNCED + 1;
        let events = write_event_rows(&tx, new.session_id, first, &announced, now).await?;
        crate::notify::send(&tx, NoticeKind::Admitted, new.session_id, None);
        tx.commit().await?;
        Ok(Admitted {
            admission: convert::admission(row)?,
            duplicate: false,
            events,
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
        find_by_request(self.connection(), &session.to_string(), request_id)
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The admission made by retrying `unknown` (`POST /v1/admissions/{id}/retry`), if any.
    pub async fn retry_of(&self, unknown: AdmissionId) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::RetryOf.eq(unknown.to_string()))
            .order_by_asc(admission::Column::Seq)
            .one(self.connection())
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The admission a turn ran for.
    pub async fn admission_of_turn(&self, turn: TurnId) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::TurnId.eq(turn.to_string()))
            .one(self.connection())
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The oldest queued admission of `session`: the FIFO head.
    pub async fn next_queued(&self, session: SessionId) -> Result<Option<Admission>> {
        first_queued(self.connection(), session).await
    }

    pub async fn queue_depth(&self, session: SessionId) -> Result<u64> {
        Ok(admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .count(self.connection())
            .await?)
    }

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

    /// Settles a queued admission as carried by the running turn `turn` of admission
    /// `carried_by` (SPEC R13.4): `queued → terminal` with the outcome
    /// `{result, turn_id, carried_by}` (`result` is `steered` or `coalesced`), committed with
    /// `user` (a steered input's user row of the running turn, if any), `admission.carried` and
    /// `status`. `WrongState` when the admission is no longer queued: then nothing is written.
    pub async fn carry(
        &self,
        fence: &Fence,
        admission: AdmissionId,
        carried: &Carried,
        user: Option<&NewMessage>,
    ) -> Result<(Option<Message>, Vec<Event>)> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let Some(ev) = settle_carried(&tx, fence.session_id, admission, carried).await? else {
            tx.rollback().await?;
            return Err(StoreError::WrongState(admission.to_string()));
        };
        let mut row = None;
        if let Some(msg) = user {
            super::log::insert_message(&tx, fence.session_id, msg).await?;
            let found = crate::entity::message::Entity::find_by_id(msg.id.to_string())
                .one(&tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("message {}", msg.id)))?;
            row = Some(convert::message(found)?);
        }
        let status = insert_status_event(&tx, fence.session_id).await?;
        tx.commit().await?;
        Ok((row, vec![ev, status]))
    }

    /// Input coalescing (`agent.coalesce_ms`): in one fenced transaction, settles each of
    /// `burst` that is still queued as `coalesced` by the started turn of `head`, and makes
    /// `head`'s stored payload text the texts of `head` and of those it carries, newline
    /// separated, so that a retry of `head` after a crash still carries them. Answers the
    /// payload the turn runs with and the `admission.carried` and `status` events.
    pub async fn coalesce(
        &self,
        fence: &Fence,
        head: &Admission,
        turn: TurnId,
        burst: &[Admission],
    ) -> Result<(serde_json::Value, Vec<Event>)> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let carried = Carried {
            result: "coalesced",
            turn_id: turn,
            carried_by: head.id,
        };
        let text = |a: &Admission| a.payload["text"].as_str().unwrap_or_default().to_owned();
        let mut texts = vec![text(head)];
        let mut events = Vec::new();
        for a in burst {
            if let Some(ev) = settle_carried(&tx, fence.session_id, a.id, &carried).await? {
                texts.push(text(a));
                events.push(ev);
            }
        }
        let mut payload = head.payload.clone();
        payload["text"] = texts.join("\n").into();
        if events.is_empty() {
            tx.rollback().await?;
            return Ok((payload, events));
        }
        admission::Entity::update_many()
            .col_expr(
                admission::Column::PayloadJson,
                Expr::value(payload.to_string()),
            )
            .filter(admission::Column::Id.eq(head.id.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()))
            .exec(&tx)
            .await?;
        events.push(insert_status_event(&tx, fence.session_id).await?);
        tx.commit().await?;
        Ok((payload, events))
    }

    /// Every queued admission of `session`, in seq order.
    pub async fn queued_admissions(&self, session: SessionId) -> Result<Vec<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .order_by_asc(admission::Column::Seq)
            .all(self.connection())
            .await?
            .into_iter()
            .map(convert::admission)
            .collect()
    }

    /// A `started` admission whose owner is gone passes to the lease holder, which resumes the
    /// same turn from its durable rows (SPEC R13.1, R13.9): the owner changes and the attempt
    /// counts up, the status and the turn do not. Committed with `turn.resumed` (the reason: a
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
        if !super::leases::release_in(&tx, fence).await? {
            return Err(StoreError::Fenced(fence.session_id.to_string()));
        }
        let status = insert_status_event(&tx, fence.session_id).await?;
        tx.commit().await?;
        Ok(vec![status])
    }

    /// The transcript rows of one turn, in order: what recovery reads to decide whether a
    /// turn whose owner died can be resumed.
    pub async fn turn_messages(&self, session: SessionId, turn: TurnId) -> Result<Vec<Message>> {
        tail::turn_rows(self.connection(), session, turn).await
    }

    /// `started → unknown`: the owner died and the outcome cannot be known (SPEC R2.4). In the
    /// same transaction the turn's open tail is closed, keeping the text already streamed as a
    /// partial answer, so the next input is never merged with it (R10.5). A caller without the
    /// session's lease (`fence` is `None`: the recovery sweep) also fences the dead owner out
    /// of its lease, so that it can never write again. Returns the `turn.unknown` and `status`
    /// events, or nothing when the admission was no longer `started`.
    pub async fn mark_unknown(
        &self,
        id: AdmissionId,
        cause: &UnknownCause,
        fence: Option<&Fence>,
    ) -> Result<Vec<Event>> {
        let tx = self.write_tx().await?;
        if let Some(f) = fence {
            check_fence(&tx, f).await?;
        }
        let Some(row) = admission::Entity::find_by_id(id.to_string())
            .one(&tx)
            .await?
        else {
            return Err(StoreError::NotFound(format!("admission {id}")));
        };
        let a = convert::admission(row)?;
        if !a.status.can_become(AdmissionStatus::Unknown) {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        if let (None, Some(owner)) = (fence, &a.owner) {
            fence_out(&tx, a.session_id, owner).await?;
        }
        let mut partial_answer = false;
        let mut closed = Vec::new();
        if let Some(turn) = a.turn_id {
            let rows = tail::turn_rows(&tx, a.session_id, turn).await?;
            let partial = tail::streamed_after_last_row(&tx, a.session_id, turn, &rows).await?;
            partial_answer = partial.is_some();
            let closure = TailClosure {
                closed_as: ClosedAs::Unknown,
                reason: cause.reason.clone(),
                message: cause.message.clone(),
                partial,
            };
            closed = tail::close_rows(&tx, a.session_id, &rows, turn, id, &closure).await?;
        }
        let outcome = json!({
            "reason": cause.reason,
            "failure_reason": cause.reason,
            "failure_message": cause.message,
            "partial_answer": partial_answer,
            "attempts": a.attempt,
        });
        let res = move_status(AdmissionStatus::Started, AdmissionStatus::Unknown)?
            .col_expr(admission::Column::Outcome, Expr::value(outcome.to_string()))
            .col_expr(admission::Column::FinishedAt, Expr::value(now_ms()))
            .filter(admission::Column::Id.eq(id.to_string()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        let unknown = insert_event(
            &tx,
            &NewEvent {
                session_id: a.session_id,
                kind: EventKind::TurnUnknown,
                turn_id: a.turn_id,
                admission_id: Some(id),
                data: json!({
                    "admission_id": id,
                    "reason": cause.reason,
                    "failure_message": cause.message,
                }),
            },
        )
        .await?;
        let status = insert_status_event(&tx, a.session_id).await?;
        // A chat is told, so that its user does not wait for an answer that will not come.
        outbox::to_session_chat(
            &tx,
            a.session_id,
            a.turn_id,
            format!("unknown:{id}"),
            "notice",
            json!({ "text": UNKNOWN_NOTICE, "admission_id": id }),
        )
        .await?;
        tx.commit().await?;
        closed.extend([unknown, status]);
        Ok(closed)
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

/// `queued → terminal` for an input another admission's turn carries, with the outcome
/// `{result, turn_id, carried_by, final_response: null}` and its `admission.carried` event;
/// `None` when the admission was no longer queued.
async fn settle_carried(
    db: &WriteTx,
    session: SessionId,
    admission: AdmissionId,
    carried: &Carried,
) -> Result<Option<Event>> {
    let outcome = json!({
        "result": carried.result,
        "turn_id": carried.turn_id,
        "carried_by": carried.carried_by,
        "final_response": null,
    });
    let res = move_status(AdmissionStatus::Queued, AdmissionStatus::Terminal)?
        .col_expr(admission::Column::Outcome, Expr::value(outcome.to_string()))
        .col_expr(admission::Column::StartedAt, Expr::value(now_ms()))
        .col_expr(admission::Column::FinishedAt, Expr::value(now_ms()))
        .filter(admission::Column::Id.eq(admission.to_string()))
        .filter(admission::Column::SessionId.eq(session.to_string()))
        .exec(db)
        .await?;
    if res.rows_affected != 1 {
        return Ok(None);
    }
    let ev = insert_event(
        db,
        &NewEvent {
            session_id: session,
            kind: EventKind::AdmissionCarried,
            turn_id: Some(carried.turn_id),
            admission_id: Some(admission),
            data: json!({
                "admission_id": admission,
                "result": carried.result,
                "turn_id": carried.turn_id,
                "carried_by": carried.carried_by,
            }),
        },
    )
    .await?;
    Ok(Some(ev))
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
        events: Vec::new(),
    })
}

/// Appends the `status` event (`{state, queue_depth}`, API.md) that follows every change of a
/// session's queue or running state, read inside the transaction that made the change.
pub(super) async fn insert_status_event(db: &WriteTx, session: SessionId) -> Result<Event> {
    insert_event(db, &status_event(db, session).await?.0).await
}

/// The session's `status` event as its admissions stand in `db` now: `running` while one is
/// started, and how many are queued (one grouped count); and whether it is idle (neither).
pub(super) async fn status_event<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<(NewEvent, bool)> {
    let (queued, started) = queue_counts(db, session).await?;
    Ok(status_of(session, queued, started > 0))
}

/// How many of the session's admissions are queued and how many started, in one grouped
/// count.
pub(super) async fn queue_counts<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<(i64, i64)> {
    #[derive(sea_orm::FromQueryResult)]
    struct Counted {
        status: String,
        n: i64,
    }
    let counts = admission::Entity::find()
        .select_only()
        .column(admission::Column::Status)
        .column_as(admission::Column::Id.count(), "n")
        .filter(admission::Column::SessionId.eq(session.to_string()))
        .filter(admission::Column::Status.is_in([
            AdmissionStatus::Queued.as_str(),
            AdmissionStatus::Started.as_str(),
        ]))
        .group_by(admission::Column::Status)
        .into_model::<Counted>()
        .all(db)
        .await?;
    let of = |status: AdmissionStatus| {
        counts
            .iter()
            .find(|c| c.status == status.as_str())
            .map_or(0, |c| c.n)
    };
    Ok((of(AdmissionStatus::Queued), of(AdmissionStatus::Started)))
}

/// The `status` event (`{state, queue_depth}`, API.md) for these counts, and whether the
/// session is idle (nothing queued, nothing running).
pub(super) fn status_of(session: SessionId, queue_depth: i64, running: bool) -> (NewEvent, bool) {
    let event = NewEvent {
        session_id: session,
        kind: EventKind::Status,
        turn_id: None,
        admission_id: None,
        data: json!({
            "state": if running { "running" } else { "idle" },
            "queue_depth": queue_depth,
        }),
    };
    (event, !running && queue_depth == 0)
}

/// The session's FIFO head (its first `queued` admission) with the numbers of its `queued`
/// and `started` admissions, in one statement: `None` when nothing is queued.
pub(super) async fn head_and_counts<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<Option<(Admission, i64, i64)>> {
    use sea_orm::sea_query::{Query, SubQueryStatement};
    use sea_orm::{FromQueryResult, QueryTrait};
    let count_of = |status: AdmissionStatus| {
        let counted = Query::select()
            .expr(Expr::col(admission::Column::Id).count())
            .from(admission::Entity)
            .and_where(Expr::col(admission::Column::SessionId).eq(session.to_string()))
            .and_where(Expr::col(admission::Column::Status).eq(status.as_str()))
            .to_owned();
        Expr::from(SubQueryStatement::from(counted))
    };
    let head = admission::Entity::find()
        .filter(admission::Column::SessionId.eq(session.to_string()))
        .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
        .order_by_asc(admission::Column::Seq)
        .limit(1)
        .expr_as(count_of(AdmissionStatus::Queued), "queued_n")
        .expr_as(count_of(AdmissionStatus::Started), "started_n")
        .into_query();
    let Some(row) = db.query_one(&head).await? else {
        return Ok(None);
    };
    let admission = convert::admission(admission::Model::from_query_result(&row, "")?)?;
    let queued: i64 = row.try_get("", "queued_n")?;
    let started: i64 = row.try_get("", "started_n")?;
    Ok(Some((admission, queued, started)))
}

/// The admission of `session` with `request_id`, read through `db`.
async fn find_by_request<C: ConnectionTrait>(
    db: &C,
    session: &str,
    request_id: &str,
) -> Result<Option<admission::Model>> {
    Ok(admission::Entity::find()
        .filter(admission::Column::SessionId.eq(session))
        .filter(admission::Column::RequestId.eq(request_id))
        .one(db)
        .await?)
}

/// The session's FIFO head: its queued admission with the lowest seq, read through `db`.
pub(super) async fn first_queued<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<Option<Admission>> {
    admission::Entity::find()
        .filter(admission::Column::SessionId.eq(session.to_string()))
        .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
        .order_by_asc(admission::Column::Seq)
        .one(db)
        .await?
        .map(convert::admission)
        .transpose()
}

/// `queued → started` of `admission` as `turn` inside `db`'s transaction, fenced, with the
/// `turn.started` and `status` events and, when given, the turn's user row (see
/// [`Store::claim`]). `status` is the `status` event after the claim when the caller already
/// counted the queue in this transaction; else it is counted here.
pub(super) async fn claim_in(
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
pub(super) async fn claim_admission_in(
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
    super::log::append_to_session(db, fence.session_id, &user, &[started, status], None).await
}

/// The one update that moves an admission's status (SPEC R2.4): a compare-and-set from `from`
/// to `to`, which `AdmissionStatus::can_become` must allow; a move it does not know is refused
/// before any SQL runs. The caller adds which row and what else the move sets, and reads
/// `rows_affected` (0: the admission was no longer `from`).
pub(super) fn move_status(
    from: AdmissionStatus,
    to: AdmissionStatus,
) -> Result<UpdateMany<admission::Entity>> {
    if !from.can_become(to) {
        return Err(StoreError::WrongState(format!(
            "an admission does not go from {} to {}",
            from.as_str(),
            to.as_str()
        )));
    }
    Ok(admission::Entity::update_many()
        .col_expr(admission::Column::Status, Expr::value(to.as_str()))
        .filter(admission::Column::Status.eq(from.as_str())))
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

#[cfg(test)]
mod tests {
    use super::move_status;
    use crate::status::AdmissionStatus::{self, *};
    use sea_orm::{DbBackend, QueryTrait};

    /// The SQL of a move, or the refusal.
    fn sql(from: AdmissionStatus, to: AdmissionStatus) -> Option<String> {
        move_status(from, to)
            .ok()
            .map(|q| q.build(DbBackend::Sqlite).to_string())
    }

    fn moves_from_to(from: AdmissionStatus, to: AdmissionStatus) {
        let q = sql(from, to).unwrap_or_else(|| panic!("{from:?} → {to:?} refused"));
        let (set, filter) = q.split_once(" WHERE ").expect("a filtered update");
        assert!(
            set.ends_with(&format!(r#"SET "status" = '{}'"#, to.as_str())),
            "{q}"
        );
        assert_eq!(
            filter,
            format!(r#""session_admissions"."status" = '{}'"#, from.as_str()),
            "{q}"
        );
    }

    #[test]
    fn r2_4_queued_becomes_started_when_its_turn_claims_it() {
        moves_from_to(Queued, Started);
    }

    #[test]
    fn r2_4_started_becomes_terminal_when_its_turn_ends() {
        moves_from_to(Started, Terminal);
    }

    #[test]
    fn r2_4_started_becomes_unknown_when_its_owner_is_gone() {
        moves_from_to(Started, Unknown);
    }

    #[test]
    fn r2_4_queued_becomes_terminal_when_a_running_turn_carries_it() {
        moves_from_to(Queued, Terminal);
    }

    #[test]
    fn r2_4_every_other_move_is_refused_before_any_sql() {
        let all = [Queued, Started, Unknown, Terminal];
        let allowed = [
            (Queued, Started),
            (Started, Terminal),
            (Started, Unknown),
            (Queued, Terminal),
        ];
        for from in all {
            for to in all {
                assert_eq!(
                    sql(from, to).is_some(),
                    allowed.contains(&(from, to)),
                    "{from:?} → {to:?}"
                );
            }
        }
    }
}
