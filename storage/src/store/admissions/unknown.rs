//! `started → unknown` (SPEC R2.4, R10.5): the owner died, the outcome cannot be known; the
//! turn's open tail is closed and a chat is told, never re-run on its own.
//!
//! Without a fence (the recovery sweep) the same transaction fences the dead owner out of its
//! lease (holder cleared, generation + 1), so a paused owner can never write again and the session
//! reads `idle` at once. The outcome records `reason`, `failure_reason`, `failure_message` and
//! `partial_answer`. An unknown admission stays unknown: `POST /v1/admissions/{id}/retry` admits
//! its stored payload again as a new admission (`retry_of`, request id `retry-of:<id>`).
use super::status::{insert_status_event, move_status};
use crate::entity::admission;
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use crate::store::leases::fence_out;
use crate::store::{check_fence, convert, insert_event, outbox, tail, Result, Store, StoreError};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;

/// What a platform chat is told when its turn's owner died mid-turn.
const UNKNOWN_NOTICE: &str = "⚠️ I was restarted while answering your last message, so I \
cannot tell how far it got. Nothing is re-run on its own: send /retry to run it again.";

impl Store {
    /// The transcript rows of one turn, in order: what recovery reads to decide whether a
    /// turn whose owner died can be resumed.
    pub async fn turn_messages(&self, session: SessionId, turn: TurnId) -> Result<Vec<Message>> {
        tail::turn_rows(self.reader(), session, turn).await
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
}
