//! A queued input cancelled before it ran (SPEC R1.5: an interrupted parent stops a child
//! whose goal is still waiting): `queued → terminal` with `outcome.result = cancelled`.
use super::status::{insert_status_event, move_status};
use crate::entity::admission;
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use crate::store::{insert_event, Result, Store};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, QueryFilter};
use serde_json::json;

impl Store {
    /// Settles `admission` of `session` as cancelled if it is still queued: the outcome
    /// `{result: "cancelled", reason, final_response: null}`, committed with
    /// `admission.cancelled` and `status`. `None` when it was no longer queued (a turn
    /// claimed it first, or it was settled already): then nothing is written. Needs no
    /// lease: the compare-and-set on `queued` is what a claim races against.
    pub async fn cancel_queued_admission(
        &self,
        session: SessionId,
        admission: AdmissionId,
        reason: &str,
    ) -> Result<Option<Vec<Event>>> {
        let tx = self.write_tx().await?;
        let outcome = json!({"result": "cancelled", "reason": reason, "final_response": null});
        let res = move_status(AdmissionStatus::Queued, AdmissionStatus::Terminal)?
            .col_expr(admission::Column::Outcome, Expr::value(outcome.to_string()))
            .col_expr(admission::Column::FinishedAt, Expr::value(now_ms()))
            .filter(admission::Column::Id.eq(admission.to_string()))
            .filter(admission::Column::SessionId.eq(session.to_string()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let cancelled = insert_event(
            &tx,
            &NewEvent {
                session_id: session,
                kind: EventKind::AdmissionCancelled,
                turn_id: None,
                admission_id: Some(admission),
                data: json!({"admission_id": admission, "reason": reason}),
            },
        )
        .await?;
        let status = insert_status_event(&tx, session).await?;
        tx.commit().await?;
        Ok(Some(vec![cancelled, status]))
    }
}
