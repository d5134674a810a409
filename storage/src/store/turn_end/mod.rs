//! Closing a turn in one transaction (SPEC R10.3–R10.4): tail rows, usage ledger and session
//! totals, the closing of an open tail, the terminal receipt and the closing events (with the
//! session's new `status`), and the reply to the session's chat (if it has one) either all
//! commit or none do.
mod one_statement;
#[cfg(test)]
pub(super) use one_statement::TURN_END;

use super::admissions::{move_status, status_event};
use super::leases::release_in;
use super::log::{append_to_session, insert_message};
use super::quotas::add_principal_usage;
use super::{check_fence, outbox, tail, Result, SessionBumpFn, Store, StoreError, WriteTx};
use crate::entity::{admission, session, usage};
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, UpdateMany,
};

impl Store {
    /// `started → terminal` for the lease holder, with everything that closes the turn.
    pub async fn commit_turn_end(&self, fence: &Fence, end: &TurnEnd) -> Result<Vec<Event>> {
        Ok(self.turn_end_on_writer(fence, end, false).await?.0)
    }

    /// [`commit_turn_end`](Self::commit_turn_end), and in the same commit the session's lease
    /// is given up if nothing is queued behind the turn (nor running): the drain that ends
    /// with this turn needs no commit of its own to release. Answers whether it was released.
    pub async fn commit_turn_end_and_release(
        &self,
        fence: &Fence,
        end: &TurnEnd,
    ) -> Result<(Vec<Event>, bool)> {
        self.turn_end_on_writer(fence, end, true).await
    }

    async fn turn_end_on_writer(
        &self,
        fence: &Fence,
        end: &TurnEnd,
        release_when_idle: bool,
    ) -> Result<(Vec<Event>, bool)> {
        let (fence, end) = (fence.clone(), end.clone());
        self.on_writer(move |s| async move {
            if s.backend() == sea_orm::DbBackend::Postgres {
                let one = s.turn_end_in_one_statement(&fence, &end, release_when_idle);
                if let Some(done) = one.await? {
                    return Ok(done);
                }
            }
            s.turn_end(&fence, &end, release_when_idle).await
        })
        .await
    }

    async fn turn_end(
        &self,
        fence: &Fence,
        end: &TurnEnd,
        release_when_idle: bool,
    ) -> Result<(Vec<Event>, bool)> {
        let tx = self.write_tx().await?;
        // On SQLite (one writer, no row locks) the fence is checked last, by the statement that
        // releases the lease when the session is idle: nothing here is visible before the
        // commit, and a transaction whose lease was lost rolls back whole whatever it wrote
        // first. A write that fails because a new holder settled the turn meanwhile reports the
        // lost lease, as a check made first would have. On PostgreSQL the lease row is locked
        // first, as every other fenced transaction does (lease, then admission, then session
        // rows): taking it last could deadlock with a new holder's recovery of this turn.
        let fence_first = tx.get_database_backend() == sea_orm::DbBackend::Postgres;
        if fence_first {
            check_fence(&tx, fence).await?;
        }
        let (events, idle) = match write_turn_end(&tx, fence, end).await {
            Ok(written) => written,
            Err(e) => {
                return match check_fence(&tx, fence).await {
                    Err(fenced @ StoreError::Fenced(_)) => Err(fenced),
                    _ => Err(e),
                };
            }
        };
        let released = release_when_idle && idle;
        if released {
            if !release_in(&tx, fence).await? {
                return Err(StoreError::Fenced(fence.session_id.to_string()));
            }
        } else if !fence_first {
            check_fence(&tx, fence).await?;
        }
        let sid = fence.session_id.to_string();
        add_principal_usage(&tx, &sid, &end.usage, now_ms()).await?;
        tx.commit().await?;
        Ok((events, released))
    }
}

/// Everything [`Store::commit_turn_end`] writes but the fence check and the release: answers
/// the events and whether the session is idle after the turn.
async fn write_turn_end(
    tx: &super::WriteTx,
    fence: &Fence,
    end: &TurnEnd,
) -> Result<(Vec<Event>, bool)> {
    // Without a tail to close, the rows go in last, with the closing events (one update of the
    // session row for both); a tail's closing rows follow the turn's own, so those go first.
    let rows_first = end.close_tail.is_some();
    if rows_first {
        for m in &end.messages {
            insert_message(tx, fence.session_id, m).await?;
        }
    }
    let mut events = Vec::with_capacity(end.events.len() + 1);
    if let Some(closure) = &end.close_tail {
        let closed =
            tail::close_tail(tx, fence.session_id, end.turn_id, end.admission_id, closure).await?;
        events.extend(closed);
    }
    let sid = fence.session_id.to_string();
    let now = now_ms();
    if !end.usage.is_empty() {
        // The turn's calls in one insert, in call order (time-ordered ids). The session's
        // totals and last prompt size (SPEC R6.1) ride on the update that moves its event
        // seq on (`usage_totals`).
        insert_usage(tx, &end.turn_id.to_string(), &sid, &end.usage, now).await?;
    }
    let res = move_status(AdmissionStatus::Started, AdmissionStatus::Terminal)?
        .col_expr(
            admission::Column::Outcome,
            Expr::value(end.outcome.to_string()),
        )
        .col_expr(admission::Column::FinishedAt, Expr::value(now))
        .filter(admission::Column::Id.eq(end.admission_id.to_string()))
        .exec(tx)
        .await?;
    if res.rows_affected != 1 {
        return Err(StoreError::WrongState(end.admission_id.to_string()));
    }
    let (status, idle) = status_event(tx, fence.session_id).await?;
    let mut closing = end.events.clone();
    closing.push(status);
    let totals = |q: UpdateMany<session::Entity>| usage_totals(q, &end.usage, now);
    let also = (!end.usage.is_empty()).then_some(&totals as &SessionBumpFn<'_>);
    let rows: Vec<&NewMessage> = if rows_first {
        Vec::new()
    } else {
        end.messages.iter().collect()
    };
    let (closed, _) = append_to_session(tx, fence.session_id, &rows, &closing, also).await?;
    events.extend(closed);
    if let Some(text) = &end.reply {
        outbox::to_session_chat(
            tx,
            fence.session_id,
            Some(end.turn_id),
            format!("reply:{}", end.admission_id),
            "reply",
            serde_json::json!({ "text": text }),
        )
        .await?;
    }
    Ok((events, idle))
}

/// Adds a turn's calls to the session's usage totals and records the last call's prompt size
/// as the session's last (SPEC R6.1).
fn usage_totals(
    q: UpdateMany<session::Entity>,
    calls: &[NewUsage],
    now: i64,
) -> UpdateMany<session::Entity> {
    let q = add_totals(q, calls);
    match calls.last() {
        Some(last) => q
            .col_expr(
                session::Column::LastPromptTokens,
                Expr::value(last.input_tokens),
            )
            .col_expr(session::Column::LastPromptAt, Expr::value(now)),
        None => q,
    }
}

/// `calls` in the usage ledger, in one insert, in call order (time-ordered ids), under
/// `turn_id` (a turn's, or a review's id). The owner's daily counter is not touched here:
/// see [`super::quotas::add_principal_usage`], the last write before the commit.
pub(crate) async fn insert_usage(
    tx: &WriteTx,
    turn_id: &str,
    session_id: &str,
    calls: &[NewUsage],
    now: i64,
) -> Result<()> {
    let rows = calls.iter().map(|u| usage::ActiveModel {
        id: Set(uuid::Uuid::now_v7().to_string()),
        turn_id: Set(turn_id.to_owned()),
        session_id: Set(session_id.to_owned()),
        provider: Set(u.provider.clone()),
        model: Set(u.model.clone()),
        input_tokens: Set(u.input_tokens),
        output_tokens: Set(u.output_tokens),
        cache_read_tokens: Set(u.cache_read_tokens),
        cache_write_tokens: Set(u.cache_write_tokens),
        cost_usd: Set(u.cost_usd),
        created_at: Set(now),
    });
    usage::Entity::insert_many(rows.collect::<Vec<_>>())
        .exec_without_returning(tx)
        .await?;
    Ok(())
}

/// Adds `calls` to a session's token and cost totals.
pub(crate) fn add_totals(
    q: UpdateMany<session::Entity>,
    calls: &[NewUsage],
) -> UpdateMany<session::Entity> {
    let sum = |f: fn(&NewUsage) -> i64| calls.iter().map(f).sum::<i64>();
    let cost: f64 = calls.iter().map(|u| u.cost_usd).sum();
    q.col_expr(
        session::Column::InputTokens,
        Expr::col(session::Column::InputTokens).add(sum(|u| u.input_tokens)),
    )
    .col_expr(
        session::Column::OutputTokens,
        Expr::col(session::Column::OutputTokens).add(sum(|u| u.output_tokens)),
    )
    .col_expr(
        session::Column::CacheReadTokens,
        Expr::col(session::Column::CacheReadTokens).add(sum(|u| u.cache_read_tokens)),
    )
    .col_expr(
        session::Column::CostUsd,
        Expr::col(session::Column::CostUsd).add(cost),
    )
}
