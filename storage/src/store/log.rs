//! The two append-only logs of a session: events (what clients replay by seq) and the
//! transcript (what the model sees next). Turn writes are fenced by the lease generation.
//!
//! Appends are cheap by construction: events of a session go in with two statements however many
//! there are (one `UPDATE … RETURNING` of the session's seq, one multi-row `INSERT`), and a turn's
//! rows and events share that update (`append_to_session`). A transcript's live rows are sought
//! through `idx_messages_live` (`session_id, compressed_epoch, idx`), so reading them does not cost
//! the session's age.
use super::{check_fence, convert, insert_events, Result, Store, StoreError};
use crate::entity::{event, message, session};
use crate::ids::*;
use crate::model::*;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};

impl Store {
    /// Group commit: appends every event of `batch` in one transaction. A fenced-out event is
    /// reported in its own slot and does not stop the others from committing.
    pub async fn append_events(
        &self,
        batch: &[(Option<Fence>, NewEvent)],
    ) -> Result<Vec<Result<Event>>> {
        let tx = self.write_tx().await?;
        // Each distinct fence is checked once; a batch is mostly one turn's deltas.
        let mut checked: Vec<(&Fence, bool)> = Vec::new();
        let mut admitted = Vec::with_capacity(batch.len());
        let mut held = Vec::with_capacity(batch.len());
        for (fence, ev) in batch {
            let ok = match fence {
                None => true,
                Some(f) => match checked.iter().find(|(c, _)| *c == f) {
                    Some((_, ok)) => *ok,
                    None => {
                        let ok = match check_fence(&tx, f).await {
                            Ok(()) => true,
                            Err(StoreError::Fenced(_)) => false,
                            Err(e) => return Err(e),
                        };
                        checked.push((f, ok));
                        ok
                    }
                },
            };
            held.push(ok);
            if ok {
                admitted.push(ev.clone());
            }
        }
        let mut committed = insert_events(&tx, &admitted).await?.into_iter();
        tx.commit().await?;
        let mut out = Vec::with_capacity(batch.len());
        for ((_, ev), ok) in batch.iter().zip(held) {
            out.push(match ok {
                true => Ok(committed.next().ok_or_else(|| {
                    StoreError::Corrupt("an appended event was not returned".into())
                })?),
                false => Err(StoreError::Fenced(ev.session_id.to_string())),
            });
        }
        Ok(out)
    }

    /// Events after `since`, in seq order, at most `limit`.
    pub async fn events_since(
        &self,
        session: SessionId,
        since: Seq,
        limit: u64,
    ) -> Result<Vec<Event>> {
        event::Entity::find()
            .filter(event::Column::SessionId.eq(session.to_string()))
            .filter(event::Column::Seq.gt(since.0))
            .order_by_asc(event::Column::Seq)
            .limit(limit)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::event)
            .collect()
    }

    /// The seq of the first event of `admission` in its session's log (its `admission.queued`),
    /// where a reader following that input's turn starts.
    pub async fn first_event_of_admission(
        &self,
        session: SessionId,
        admission: AdmissionId,
    ) -> Result<Option<Seq>> {
        Ok(event::Entity::find()
            .filter(event::Column::SessionId.eq(session.to_string()))
            .filter(event::Column::AdmissionId.eq(admission.to_string()))
            .order_by_asc(event::Column::Seq)
            .one(self.reader())
            .await?
            .map(|row| Seq(row.seq)))
    }

    /// Appends one transcript row for the lease holder.
    pub async fn append_message(&self, fence: &Fence, msg: &NewMessage) -> Result<Message> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        insert_message(&tx, fence.session_id, msg).await?;
        let row = message::Entity::find_by_id(msg.id.to_string())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("message {}", msg.id)))?;
        tx.commit().await?;
        convert::message(row)
    }

    /// The text of the result row of tool call `call_id` of `turn` in `root`'s lineage (the
    /// root's rows or its canonical session's), if it was written.
    pub async fn tool_result(
        &self,
        root: SessionId,
        turn: TurnId,
        call_id: &str,
    ) -> Result<Option<String>> {
        use sea_orm::Condition;
        Ok(message::Entity::find()
            .filter(
                Condition::any()
                    .add(message::Column::SessionId.eq(root.to_string()))
                    .add(
                        message::Column::SessionId
                            .in_subquery(super::canonical::canonical_subquery(root)),
                    ),
            )
            .filter(message::Column::TurnId.eq(turn.to_string()))
            .filter(message::Column::ToolCallId.eq(call_id))
            .filter(message::Column::Role.eq(MessageRole::Tool.as_str()))
            .one(self.reader())
            .await?
            .and_then(|m| m.content))
    }

    /// The live transcript of `root`'s lineage: the canonical session's rows (SPEC R6.4).
    pub async fn transcript(&self, root: SessionId) -> Result<Vec<Message>> {
        message::Entity::find()
            .filter(
                message::Column::SessionId.in_subquery(super::canonical::canonical_subquery(root)),
            )
            .order_by_asc(message::Column::Idx)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::message)
            .collect()
    }

    /// The rows of the canonical session `canonical` after `after_idx` that compression has
    /// not taken out, in order: what was appended to a transcript since a reader last saw its
    /// row `after_idx`. Rows change in place only under a new compression epoch, so a reader
    /// that saw the same epoch needs no more than these (`turn::transcript`). Rows compression
    /// replaced are never sent again, so a reader that keeps what it read holds no more than
    /// the live context.
    pub async fn live_transcript_after(
        &self,
        canonical: SessionId,
        after_idx: i64,
    ) -> Result<Vec<Message>> {
        message::Entity::find()
            .filter(message::Column::SessionId.eq(canonical.to_string()))
            .filter(message::Column::Idx.gt(after_idx))
            .filter(message::Column::CompressedEpoch.is_null())
            .order_by_asc(message::Column::Idx)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::message)
            .collect()
    }

    /// What each turn of `sessions` cost, by turn id: the sums of its usage rows (every
    /// provider call, fallbacks and compression summaries included).
    pub async fn usage_by_turn(
        &self,
        sessions: &[SessionId],
    ) -> Result<std::collections::HashMap<String, TurnUsage>> {
        use crate::entity::usage;
        if sessions.is_empty() {
            return Ok(Default::default());
        }
        // PostgreSQL sums a BIGINT as NUMERIC: cast back, on both backends alike.
        let total = |c: usage::Column, ty: &'static str| {
            Expr::from(sea_orm::sea_query::Func::cast_as(
                sea_orm::sea_query::Func::sum(Expr::col(c)),
                sea_orm::sea_query::Alias::new(ty),
            ))
        };
        // Read by name: the store's own SQLite rows are keyed by column name, not position.
        #[derive(sea_orm::FromQueryResult)]
        struct Summed {
            turn_id: String,
            input_tokens: i64,
            output_tokens: i64,
            cache_read_tokens: i64,
            cost_usd: f64,
        }
        let rows: Vec<Summed> = usage::Entity::find()
            .select_only()
            .column(usage::Column::TurnId)
            .column_as(total(usage::Column::InputTokens, "BIGINT"), "input_tokens")
            .column_as(
                total(usage::Column::OutputTokens, "BIGINT"),
                "output_tokens",
            )
            .column_as(
                total(usage::Column::CacheReadTokens, "BIGINT"),
                "cache_read_tokens",
            )
            .column_as(
                total(usage::Column::CostUsd, "DOUBLE PRECISION"),
                "cost_usd",
            )
            .filter(usage::Column::SessionId.is_in(sessions.iter().map(|s| s.to_string())))
            .group_by(usage::Column::TurnId)
            .into_model::<Summed>()
            .all(self.reader())
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                (
                    r.turn_id,
                    TurnUsage {
                        input_tokens: r.input_tokens,
                        output_tokens: r.output_tokens,
                        cache_read_tokens: r.cache_read_tokens,
                        cost_usd: r.cost_usd,
                    },
                )
            })
            .collect())
    }

    /// How each turn of `sessions` went, by turn id, from its events (`turn.resumed`,
    /// `turn.finished`): what a client showed live, for a transcript read later. One pass
    /// over the sessions' logs, filtered by kind in the database.
    pub async fn turn_endings(
        &self,
        sessions: &[SessionId],
    ) -> Result<std::collections::HashMap<String, TurnEnding>> {
        let mut endings = std::collections::HashMap::<String, TurnEnding>::new();
        if sessions.is_empty() {
            return Ok(endings);
        }
        let kinds = [EventKind::TurnResumed, EventKind::TurnFinished].map(EventKind::as_str);
        let rows = event::Entity::find()
            .filter(event::Column::SessionId.is_in(sessions.iter().map(|s| s.to_string())))
            .filter(event::Column::Kind.is_in(kinds))
            .filter(event::Column::TurnId.is_not_null())
            .order_by_asc(event::Column::SessionId)
            .order_by_asc(event::Column::Seq)
            .all(self.reader())
            .await?;
        for row in rows {
            let ev = convert::event(row)?;
            let Some(turn) = ev.turn_id else { continue };
            let ending = endings.entry(turn.to_string()).or_default();
            let text = |k: &str| ev.data[k].as_str().map(str::to_owned);
            match ev.kind {
                EventKind::TurnResumed => ending.resumes.push(TurnResume {
                    attempt: ev.data["attempt"].as_i64().unwrap_or(2),
                    reason: text("reason").unwrap_or_default(),
                }),
                _ => ending.stop_reason = text("stop_reason"),
            }
        }
        Ok(endings)
    }

    /// The readable history of `root`'s lineage (SPEC R6.4): every segment's rows, oldest
    /// segment first, each message once (a child's copies of kept rows are left out; their
    /// originals are listed in the segment that wrote them).
    pub async fn lineage_messages(&self, root: SessionId) -> Result<Vec<Message>> {
        let rid = root.to_string();
        let segments: Vec<String> = session::Entity::find()
            .filter(
                session::Column::Id
                    .eq(rid.clone())
                    .or(session::Column::RootId.eq(rid)),
            )
            .order_by_asc(session::Column::CreatedAt)
            .order_by_asc(session::Column::Id)
            .all(self.reader())
            .await?
            .into_iter()
            .map(|s| s.id)
            .collect();
        let order: std::collections::HashMap<&str, usize> = segments
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        let mut rows = message::Entity::find()
            .filter(message::Column::SessionId.is_in(segments.iter().cloned()))
            .filter(message::Column::CopiedFrom.is_null())
            .all(self.reader())
            .await?;
        rows.sort_by_key(|m| (order.get(m.session_id.as_str()).copied(), m.idx));
        rows.into_iter().map(convert::message).collect()
    }

    /// The rows of exactly `session` (one segment of a rotated lineage).
    pub async fn list_messages(&self, session: SessionId) -> Result<Vec<Message>> {
        message::Entity::find()
            .filter(message::Column::SessionId.eq(session.to_string()))
            .order_by_asc(message::Column::Idx)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::message)
            .collect()
    }
}

/// Inserts `msg` at the next transcript index of `root`'s canonical session (the root itself
/// unless rotation moved the transcript, SPEC R6.4), inside the caller's transaction. One
/// statement picks the canonical session and bumps its index.
pub(super) async fn insert_message<C: ConnectionTrait>(
    db: &C,
    root: SessionId,
    msg: &NewMessage,
) -> Result<i64> {
    insert_row(db, root, msg, None).await
}

/// `insert_message`, recording which row this one copies (a rotated child's kept rows).
pub(super) async fn insert_row<C: ConnectionTrait>(
    db: &C,
    root: SessionId,
    msg: &NewMessage,
    copied_from: Option<MessageId>,
) -> Result<i64> {
    let bumped = session::Entity::update_many()
        .col_expr(
            session::Column::LastMessageIdx,
            Expr::col(session::Column::LastMessageIdx).add(1),
        )
        .col_expr(session::Column::UpdatedAt, Expr::value(now_ms()))
        .filter(session::Column::Id.in_subquery(super::canonical::canonical_subquery(root)))
        .exec_with_returning(db)
        .await?;
    let (sid, idx) = bumped
        .first()
        .map(|s| (s.id.clone(), s.last_message_idx))
        .ok_or_else(|| StoreError::NotFound(format!("session {root}")))?;
    message::Entity::insert(message_row(sid, idx, msg, copied_from)?)
        .exec_without_returning(db)
        .await?;
    Ok(idx)
}

/// The row of `msg` at `idx` of session `sid`'s transcript.
fn message_row(
    sid: String,
    idx: i64,
    msg: &NewMessage,
    copied_from: Option<MessageId>,
) -> Result<message::ActiveModel> {
    let role = msg
        .role
        .ok_or_else(|| StoreError::Corrupt("message without a role".into()))?;
    Ok(message::ActiveModel {
        id: Set(msg.id.to_string()),
        session_id: Set(sid),
        idx: Set(idx),
        role: Set(role.as_str().to_owned()),
        content: Set(msg.content.clone()),
        api_content: Set(msg.api_content.clone()),
        tool_calls: Set(msg.tool_calls.as_ref().map(|v| v.to_string())),
        tool_call_id: Set(msg.tool_call_id.clone()),
        name: Set(msg.name.clone()),
        turn_id: Set(msg.turn_id.map(|t| t.to_string())),
        admission_id: Set(msg.admission_id.map(|a| a.to_string())),
        display: Set(msg.display.as_ref().map(|v| v.to_string())),
        platform_message_id: Set(msg.platform_message_id.clone()),
        token_estimate: Set(msg.token_estimate),
        created_at: Set(now_ms()),
        compressed_epoch: Set(None),
        summary_epoch: Set(msg.summary_epoch),
        summary_after_idx: Set(msg.summary_after_idx),
        copied_from: Set(copied_from.map(|m| m.to_string())),
        attachments: Set(msg.attachments.as_ref().map(|v| v.to_string())),
    })
}

/// Appends `msgs` to `root`'s transcript and `evs` to its event log inside the caller's
/// transaction, with `also`'s changes to the root row. While the transcript is the root's own
/// (no rotation moved it, SPEC R6.4), one `UPDATE … RETURNING` moves both the message index and
/// the event seq on, so a turn's user row and `turn.started`, or its answer and closing events,
/// cost three statements however many rows they are. Every event must be of `root`. Answers
/// the events and the root's row as this transaction leaves it.
pub(super) async fn append_to_session(
    db: &super::WriteTx,
    root: SessionId,
    msgs: &[&NewMessage],
    evs: &[NewEvent],
    also: Option<&super::SessionBumpFn<'_>>,
) -> Result<(Vec<Event>, session::Model)> {
    if let Some(other) = evs.iter().find(|e| e.session_id != root) {
        return Err(StoreError::Corrupt(format!(
            "event of session {} appended to session {root}",
            other.session_id
        )));
    }
    let (nm, ne) = (count(msgs.len()), count(evs.len()));
    let now = now_ms();
    let mut bump = session::Entity::update_many()
        .col_expr(
            session::Column::LastEventSeq,
            Expr::col(session::Column::LastEventSeq).add(ne),
        )
        .col_expr(session::Column::UpdatedAt, Expr::value(now));
    if nm > 0 {
        bump = bump.col_expr(
            session::Column::LastMessageIdx,
            Expr::case(
                Expr::col(session::Column::TranscriptId).is_null(),
                Expr::col(session::Column::LastMessageIdx).add(nm),
            )
            .finally(Expr::col(session::Column::LastMessageIdx))
            .into(),
        );
    }
    if let Some(also) = also {
        bump = also(bump);
    }
    let row = bump
        .filter(session::Column::Id.eq(root.to_string()))
        .exec_with_returning(db)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::NotFound(format!("session {root}")))?;
    if nm > 0 {
        let (sid, last) = match row.transcript_id.clone() {
            None => (row.id.clone(), row.last_message_idx),
            // A rotated transcript: its own row keeps its index.
            Some(child) => {
                let bumped = session::Entity::update_many()
                    .col_expr(
                        session::Column::LastMessageIdx,
                        Expr::col(session::Column::LastMessageIdx).add(nm),
                    )
                    .col_expr(session::Column::UpdatedAt, Expr::value(now))
                    .filter(session::Column::Id.eq(child.clone()))
                    .exec_with_returning(db)
                    .await?;
                let last = bumped
                    .first()
                    .map(|s| s.last_message_idx)
                    .ok_or_else(|| StoreError::NotFound(format!("session {child}")))?;
                (child, last)
            }
        };
        let rows = msgs
            .iter()
            .zip(last - nm + 1..)
            .map(|(m, idx)| message_row(sid.clone(), idx, m, None))
            .collect::<Result<Vec<_>>>()?;
        message::Entity::insert_many(rows)
            .exec_without_returning(db)
            .await?;
    }
    if ne == 0 {
        return Ok((Vec::new(), row));
    }
    let evs: Vec<&NewEvent> = evs.iter().collect();
    let first = row.last_event_seq - ne + 1;
    let events = super::write_event_rows(db, root, first, &evs, now).await?;
    Ok((events, row))
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
