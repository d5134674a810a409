//! The admission FIFO (SPEC R2): idempotent admit and the reads that drain and recovery need.
//! Every status change is a compare-and-set from the state `AdmissionStatus::can_become`
//! allows (`status::move_status`), committed with the event that announces it: a claim and
//! a resumed owner in `claim`, inputs a running turn carries in `carry`, a dead owner's
//! turn in `unknown`, the `status` event and queue counts in `status`.
mod cancel;
mod carry;
mod claim;
mod one_statement;
#[cfg(test)]
pub(super) use one_statement::ADMIT;
mod status;
mod unknown;

use crate::entity::{admission, session};
use crate::ids::*;
use crate::model::*;
use crate::notify::NoticeKind;
use crate::status::AdmissionStatus;
use crate::store::{convert, is_unique_violation, write_event_rows, Result, Store, StoreError};
pub(super) use claim::claim_admission_in;
use sea_orm::sea_query::{Expr, ExprTrait, Func, OnConflict};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::json;
use status::queue_counts;
pub(super) use status::{head_and_counts, move_status, status_event, status_of, StatusMove};

impl Store {
    /// Makes `new` durable, or returns the earlier admission of the same request id. The same
    /// request id with another payload digest is `IdempotencyConflict`.
    pub async fn admit(&self, new: NewAdmission) -> Result<Admitted> {
        self.on_writer(move |s| async move { s.admit_here(new).await })
            .await
    }

    async fn admit_here(&self, new: NewAdmission) -> Result<Admitted> {
        if self.backend() == sea_orm::DbBackend::Postgres {
            if let Some(done) = self.admit_in_one_statement(&new).await {
                return match done {
                    // Lost a race to insert the same request id: the transaction finds the winner's row.
                    Err(StoreError::Db(e)) if is_unique_violation(&e) => {
                        self.admit_in_transaction(&new).await
                    }
                    other => other,
                };
            }
        }
        self.admit_in_transaction(&new).await
    }

    /// The admission as one transaction of several statements (SQLite; on PostgreSQL when the
    /// one statement kept being overtaken).
    async fn admit_in_transaction(&self, new: &NewAdmission) -> Result<Admitted> {
        // Two racing inserts can both miss the lookup on PostgreSQL; the loser sees the unique
        // violation and then finds the winner's row.
        for _ in 0..3 {
            match self.try_admit(new).await {
                Err(StoreError::Db(e)) if is_unique_violation(&e) => continue,
                other => return other,
            }
        }
        self.find_admission_by_request(new.session_id, &new.request_id)
            .await?
            .map(|a| duplicate_of(a, new))
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
        let mut bump = session::Entity::update_many()
            .col_expr(
                session::Column::LastAdmissionSeq,
                Expr::col(session::Column::LastAdmissionSeq).add(1),
            )
            .col_expr(
                session::Column::LastEventSeq,
                Expr::col(session::Column::LastEventSeq).add(ANNOUNCED),
            )
            .col_expr(session::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(sid.clone()));
        if let Some(title) = &new.title {
            // Only an untitled session takes it: a title already there stays.
            bump = bump.col_expr(
                session::Column::Title,
                Func::coalesce([
                    Expr::col(session::Column::Title),
                    Expr::value(title.clone()),
                ])
                .into(),
            );
        }
        let bumped = bump.exec_with_returning(&tx).await?;
        let Some((seq, last_event, busy_policy)) = bumped
            .into_iter()
            .next()
            .map(|s| (s.last_admission_seq, s.last_event_seq, s.busy_policy))
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
        let row = queued_row(new, id, seq, now);
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
        let announced = announced(new, id, queued, started);
        let announced: Vec<&NewEvent> = announced.iter().collect();
        let first = last_event - ANNOUNCED + 1;
        let events = write_event_rows(&tx, new.session_id, first, &announced, now).await?;
        tx.send_notice(NoticeKind::Admitted, new.session_id, None);
        tx.commit().await?;
        Ok(Admitted {
            admission: convert::admission(row)?,
            duplicate: false,
            events,
            busy_policy,
        })
    }

    pub async fn get_admission(&self, id: AdmissionId) -> Result<Option<Admission>> {
        admission::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .map(convert::admission)
            .transpose()
    }

    pub async fn find_admission_by_request(
        &self,
        session: SessionId,
        request_id: &str,
    ) -> Result<Option<Admission>> {
        find_by_request(self.reader(), &session.to_string(), request_id)
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The admission made by retrying `unknown` (`POST /v1/admissions/{id}/retry`), if any.
    pub async fn retry_of(&self, unknown: AdmissionId) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::RetryOf.eq(unknown.to_string()))
            .order_by_asc(admission::Column::Seq)
            .one(self.reader())
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The admission a turn ran for.
    pub async fn admission_of_turn(&self, turn: TurnId) -> Result<Option<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::TurnId.eq(turn.to_string()))
            .one(self.reader())
            .await?
            .map(convert::admission)
            .transpose()
    }

    /// The oldest queued admission of `session`: the FIFO head.
    pub async fn next_queued(&self, session: SessionId) -> Result<Option<Admission>> {
        first_queued(self.reader(), session).await
    }

    pub async fn queue_depth(&self, session: SessionId) -> Result<u64> {
        Ok(admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .count(self.reader())
            .await?)
    }

    /// Every queued admission of `session`, in seq order.
    pub async fn queued_admissions(&self, session: SessionId) -> Result<Vec<Admission>> {
        admission::Entity::find()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
            .order_by_asc(admission::Column::Seq)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::admission)
            .collect()
    }

    /// Every admission in `started`, for recovery to judge whose owner is gone.
    pub async fn started_admissions(&self, session: Option<SessionId>) -> Result<Vec<Admission>> {
        let mut q = admission::Entity::find()
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()));
        if let Some(s) = session {
            q = q.filter(admission::Column::SessionId.eq(s.to_string()));
        }
        q.order_by_asc(admission::Column::Seq)
            .all(self.reader())
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
            .all(self.reader())
            .await?;
        rows.iter().map(|s| parse_id(s, "session id")).collect()
    }
}

/// The row of `new`, admitted as the session's `seq`th input: `queued`, no owner yet.
fn queued_row(new: &NewAdmission, id: AdmissionId, seq: i64, now: i64) -> admission::Model {
    admission::Model {
        id: id.to_string(),
        session_id: new.session_id.to_string(),
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
        crash_resumes: 0,
    }
}

/// The two events an admission commits: `admission.queued` with its place and the input
/// itself ([`input_of`]), and the session's `status` after it, from the queue's counts before it.
fn announced(new: &NewAdmission, id: AdmissionId, queued: i64, started: i64) -> [NewEvent; 2] {
    let mut data = input_of(new);
    data["admission_id"] = json!(id);
    data["seq_in_queue"] = json!(queued + started + 1);
    [
        NewEvent {
            session_id: new.session_id,
            kind: EventKind::AdmissionQueued,
            turn_id: None,
            admission_id: Some(id),
            data,
        },
        status_of(new.session_id, queued + 1, started > 0).0,
    ]
}

/// What `admission.queued` says of the input besides its place (API.md), so every follower
/// shows an input from any door at once: its normalized text, its file references (never the
/// bytes: the payload holds references only) when it has any, and its source.
fn input_of(new: &NewAdmission) -> serde_json::Value {
    let mut data = json!({
        "text": new.payload["text"].as_str().unwrap_or_default(),
        "source": source_of(&new.surface, &new.request_id),
    });
    if let Some(files) = new
        .payload
        .get("attachments")
        .filter(|a| a.as_array().is_some_and(|l| !l.is_empty()))
    {
        data["attachments"] = files.clone();
    }
    data
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
        busy_policy: None,
    })
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
