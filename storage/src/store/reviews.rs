//! Post-delivery reviews (SPEC R10.4, R4.5): one row per review, with who runs it. A review
//! is due after every `every` ended turns of a session; it begins with `review.started`, and
//! ends either by [`Store::finish_review`] (its memory writes, skill proposals, usage and
//! `review.finished` in one commit) or by [`Store::cancel_review`] (nothing written but its
//! usage, `review.cancelled`). A review whose owner died is closed as `interrupted` by the
//! recovery sweep and never run again: what it would have written it had not yet written,
//! because its writes commit only at its end.
use super::memory::{edit_in, Author, ChangedBy, MemoryWrite};
use super::memory_pending::{stage_in, StagedEdit};
use super::quotas::add_principal_usage;
use super::skills::{apply_in, propose_in, NewSkillProposal, SkillChange};
use super::turn_end::{add_totals, insert_usage};
use super::{insert_events, Result, Store, StoreError, WriteTx};
use crate::entity::{admission, review, session};
use crate::ids::{now_ms, parse_id, InstanceId, ReviewId, SessionId, TurnId};
use crate::model::{Event, EventKind, NewEvent, NewUsage, Owner};
use crate::status::AdmissionStatus;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect,
};

/// A review as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Review {
    pub id: ReviewId,
    pub session_id: SessionId,
    pub turn_id: Option<TurnId>,
    pub turns_at: i64,
    /// `running`, `finished`, `cancelled` or `interrupted`.
    pub status: String,
    pub owner: Owner,
    pub started_at: i64,
}

/// What a finished review writes, all in one commit.
#[derive(Clone, Debug, Default)]
pub struct ReviewWrites {
    /// Memory edits of the session's principal: each with the limit of its target.
    pub memory: Vec<(StagedEdit, usize)>,
    /// Stage the memory edits for a person (`write_approval`) instead of writing them.
    pub memory_pending: bool,
    /// Skill changes to record as proposals.
    pub proposals: Vec<NewSkillProposal>,
    /// Skill changes to apply at once (`agent_writes = "direct"`).
    pub skills: Vec<SkillChange>,
    /// The review's model calls.
    pub usage: Vec<NewUsage>,
}

/// How [`Store::finish_review`] ended.
#[derive(Clone, Debug)]
pub enum ReviewEnd {
    /// Committed: the events to publish, and how many writes (or proposals) it made.
    Finished { events: Vec<Event>, actions: usize },
    /// The review was no longer running (cancelled, or closed by recovery): nothing written.
    NotRunning,
}

impl Store {
    /// How many turns of `session` have ended (settled admissions that ran a turn).
    pub async fn ended_turns(&self, session: SessionId) -> Result<i64> {
        let n = admission::Entity::find()
            .select_only()
            .column(admission::Column::TurnId)
            .distinct()
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Terminal.as_str()))
            .filter(admission::Column::TurnId.is_not_null())
            .count(self.reader())
            .await?;
        Ok(i64::try_from(n).unwrap_or(i64::MAX))
    }

    /// Begins a review of `session` if one is due: `every` turns or more have ended since the
    /// last review began (whatever became of it). Answers the review and `review.started`.
    pub async fn begin_review_if_due(
        &self,
        session: SessionId,
        turn: Option<TurnId>,
        every: u32,
        owner: &Owner,
    ) -> Result<Option<(Review, Event)>> {
        if every == 0 {
            return Ok(None);
        }
        // Read first: most drains end with no review due, and then write nothing. One actor
        // runs a session's reviews, and the unique (session, turns_at) index stops a second.
        let turns = self.ended_turns(session).await?;
        let last = review::Entity::find()
            .filter(review::Column::SessionId.eq(session.to_string()))
            .order_by_desc(review::Column::TurnsAt)
            .one(self.reader())
            .await?
            .map_or(0, |r| r.turns_at);
        if turns - last < i64::from(every) {
            return Ok(None);
        }
        let tx = self.write_tx().await?;
        let id = ReviewId::new();
        let now = now_ms();
        review::Entity::insert(review::ActiveModel {
            id: Set(id.to_string()),
            session_id: Set(session.to_string()),
            turn_id: Set(turn.map(|t| t.to_string())),
            turns_at: Set(turns),
            status: Set("running".to_owned()),
            owner_instance: Set(owner.instance.to_string()),
            owner_pid: Set(owner.pid),
            owner_host: Set(owner.host.clone()),
            started_at: Set(now),
            ended_at: Set(None),
            actions: Set(0),
            reason: Set(None),
        })
        .exec_without_returning(&tx)
        .await?;
        let data = serde_json::json!({"review_id": id, "turn_id": turn});
        let mut events =
            insert_events(&tx, &[event(session, EventKind::ReviewStarted, data)]).await?;
        tx.commit().await?;
        let started = events
            .pop()
            .ok_or_else(|| StoreError::Corrupt("review.started was not returned".into()))?;
        let review = Review {
            id,
            session_id: session,
            turn_id: turn,
            turns_at: turns,
            status: "running".to_owned(),
            owner: owner.clone(),
            started_at: now,
        };
        Ok(Some((review, started)))
    }

    /// Ends a running review with everything it writes, in one commit; the memory edits are
    /// made as the review in its session (`scope` is the session's principal). An edit the
    /// store refuses now (full, gone) is left out and not counted.
    pub async fn finish_review(
        &self,
        review: &Review,
        scope: &str,
        writes: &ReviewWrites,
    ) -> Result<ReviewEnd> {
        let tx = self.write_tx().await?;
        if !end_running(&tx, review.id, "finished", None).await? {
            tx.rollback().await?;
            return Ok(ReviewEnd::NotRunning);
        }
        let session = review.session_id;
        let author = Author {
            by: ChangedBy::Review,
            session: Some(session),
        };
        let mut events = Vec::new();
        let mut actions = 0usize;
        for (staged, limit) in &writes.memory {
            let Some(edit) = staged.edit() else { continue };
            if writes.memory_pending {
                stage_in(&tx, scope, staged, Some(session)).await?;
                actions += 1;
                continue;
            }
            if let MemoryWrite::Done { event, .. } =
                edit_in(&tx, scope, staged.target, edit, *limit, &author).await?
            {
                events.extend(event.map(|e| *e));
                actions += 1;
            }
        }
        for p in &writes.proposals {
            propose_in(&tx, p).await?;
            actions += 1;
        }
        for c in &writes.skills {
            apply_in(&tx, c).await?;
            actions += 1;
        }
        record_usage(&tx, review, &writes.usage).await?;
        set_actions(&tx, review.id, actions).await?;
        let data = serde_json::json!({"review_id": review.id, "actions": actions});
        events
            .extend(insert_events(&tx, &[event(session, EventKind::ReviewFinished, data)]).await?);
        add_principal_usage(&tx, &session.to_string(), &writes.usage, now_ms()).await?;
        tx.commit().await?;
        Ok(ReviewEnd::Finished { events, actions })
    }

    /// Ends a running review without its writes (`reason`: `input`, `shutdown`, `failed`),
    /// recording what its model calls cost. `None` when it was not running.
    pub async fn cancel_review(
        &self,
        review: &Review,
        reason: &str,
        usage: &[NewUsage],
    ) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        if !end_running(&tx, review.id, "cancelled", Some(reason)).await? {
            tx.rollback().await?;
            return Ok(None);
        }
        record_usage(&tx, review, usage).await?;
        let data = serde_json::json!({"review_id": review.id, "reason": reason});
        let mut evs = insert_events(
            &tx,
            &[event(review.session_id, EventKind::ReviewCancelled, data)],
        )
        .await?;
        add_principal_usage(&tx, &review.session_id.to_string(), usage, now_ms()).await?;
        tx.commit().await?;
        Ok(evs.pop())
    }

    /// Reviews still `running`, oldest first: the recovery sweep judges their owners.
    pub async fn running_reviews(&self) -> Result<Vec<Review>> {
        review::Entity::find()
            .filter(review::Column::Status.eq("running"))
            .order_by_asc(review::Column::StartedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(review_of)
            .collect()
    }

    /// Closes a running review whose owner is gone as `interrupted` (`review.cancelled` with
    /// that reason); it is not run again. `None` when it was not running any more.
    pub async fn interrupt_review(&self, review: &Review) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        if !end_running(&tx, review.id, "interrupted", Some("interrupted")).await? {
            tx.rollback().await?;
            return Ok(None);
        }
        let data = serde_json::json!({"review_id": review.id, "reason": "interrupted"});
        let mut evs = insert_events(
            &tx,
            &[event(review.session_id, EventKind::ReviewCancelled, data)],
        )
        .await?;
        tx.commit().await?;
        Ok(evs.pop())
    }

    /// Every review of `session`, oldest first.
    pub async fn reviews(&self, session: SessionId) -> Result<Vec<Review>> {
        review::Entity::find()
            .filter(review::Column::SessionId.eq(session.to_string()))
            .order_by_asc(review::Column::TurnsAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(review_of)
            .collect()
    }
}

fn event(session: SessionId, kind: EventKind, data: serde_json::Value) -> NewEvent {
    NewEvent {
        session_id: session,
        kind,
        turn_id: None,
        admission_id: None,
        data,
    }
}

/// Moves review `id` from `running` to `status`; false when it was not running.
async fn end_running(
    tx: &WriteTx,
    id: ReviewId,
    status: &str,
    reason: Option<&str>,
) -> Result<bool> {
    let res = review::Entity::update_many()
        .col_expr(review::Column::Status, Expr::value(status))
        .col_expr(review::Column::EndedAt, Expr::value(now_ms()))
        .col_expr(
            review::Column::Reason,
            Expr::value(reason.map(str::to_owned)),
        )
        .filter(review::Column::Id.eq(id.to_string()))
        .filter(review::Column::Status.eq("running"))
        .exec(tx)
        .await?;
    Ok(res.rows_affected == 1)
}

async fn set_actions(tx: &WriteTx, id: ReviewId, actions: usize) -> Result<()> {
    review::Entity::update_many()
        .col_expr(
            review::Column::Actions,
            Expr::value(i64::try_from(actions).unwrap_or(i64::MAX)),
        )
        .filter(review::Column::Id.eq(id.to_string()))
        .exec(tx)
        .await?;
    Ok(())
}

/// The review's model calls in the usage ledger (under the review's id as their turn) and in
/// the session's totals. The session's last prompt size stays the last turn's: it decides
/// the next turn's compression, which a review's prompt says nothing about.
async fn record_usage(tx: &WriteTx, review: &Review, calls: &[NewUsage]) -> Result<()> {
    if calls.is_empty() {
        return Ok(());
    }
    let sid = review.session_id.to_string();
    insert_usage(tx, &review.id.to_string(), &sid, calls, now_ms()).await?;
    add_totals(session::Entity::update_many(), calls)
        .filter(session::Column::Id.eq(sid))
        .exec(tx)
        .await?;
    Ok(())
}

fn review_of(m: review::Model) -> Result<Review> {
    Ok(Review {
        id: parse_id(&m.id, "review id")?,
        session_id: parse_id(&m.session_id, "session id")?,
        turn_id: m
            .turn_id
            .as_deref()
            .map(|t| parse_id(t, "turn id"))
            .transpose()?,
        turns_at: m.turns_at,
        status: m.status,
        owner: Owner {
            instance: parse_id::<InstanceId>(&m.owner_instance, "instance id")?,
            pid: m.owner_pid,
            host: m.owner_host,
        },
        started_at: m.started_at,
    })
}
