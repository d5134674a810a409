//! Inputs a running turn carries (SPEC R13.4): steered into it at a model boundary, or
//! coalesced into its first message; each settles `queued → terminal` with `admission.carried`.
use super::status::{insert_status_event, move_status};
use crate::entity::admission;
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use crate::store::{check_fence, convert, insert_event, Result, Store, StoreError, WriteTx};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;

impl Store {
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
            crate::store::log::insert_message(&tx, fence.session_id, msg).await?;
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
