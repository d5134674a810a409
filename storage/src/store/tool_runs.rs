//! Durable tool runs (SPEC R9.2, R9.5, R13.1): the calls are recorded `planned` in the same
//! transaction as the assistant row that makes them, `started` is committed (with
//! `tool.started`) before the side effect, and the result row, `finished` and `tool.completed`
//! commit together before the model or the UI sees the result. Every write is fenced.
use super::log::insert_message;
use super::{check_fence, convert, insert_event, Result, Store, StoreError};
use crate::entity::{message, tool_run};
use crate::ids::*;
use crate::model::*;
use crate::status::{ToolOutcome, ToolRunDecision, ToolRunStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

impl Store {
    /// Appends the assistant row with its tool calls and records every call `planned`, in one
    /// transaction: nothing runs unless both are durable (SPEC R9.2).
    pub async fn append_tool_calls(
        &self,
        fence: &Fence,
        turn: &TurnRef,
        assistant: &NewMessage,
        runs: &[NewToolRun],
    ) -> Result<Message> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        insert_message(&tx, fence.session_id, assistant).await?;
        let now = now_ms();
        for r in runs {
            tool_run::Entity::insert(tool_run::ActiveModel {
                id: Set(uuid::Uuid::now_v7().to_string()),
                call_id: Set(r.call_id.clone()),
                session_id: Set(turn.session_id.to_string()),
                turn_id: Set(turn.turn_id.to_string()),
                admission_id: Set(Some(turn.admission_id.to_string())),
                tool: Set(r.tool.clone()),
                args: Set(r.args.clone()),
                idx: Set(r.idx),
                status: Set(ToolRunStatus::Planned.as_str().to_owned()),
                outcome: Set(None),
                decision: Set(None),
                decided_by: Set(None),
                result_ref: Set(None),
                created_at: Set(now),
                started_at: Set(None),
                finished_at: Set(None),
            })
            .exec_without_returning(&tx)
            .await?;
        }
        let row = message::Entity::find_by_id(assistant.id.to_string())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("message {}", assistant.id)))?;
        tx.commit().await?;
        convert::message(row)
    }

    /// `planned` (or `unknown`, on a retry) → `started`, committed with `event` (`tool.started`,
    /// unless the turn does not show it) before the side effect. `WrongState` when the run is
    /// anywhere else: it must not start twice.
    pub async fn start_tool_run(
        &self,
        fence: &Fence,
        turn: TurnId,
        call_id: &str,
        event: Option<&NewEvent>,
    ) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let res = tool_run::Entity::update_many()
            .col_expr(
                tool_run::Column::Status,
                Expr::value(ToolRunStatus::Started.as_str()),
            )
            .col_expr(tool_run::Column::StartedAt, Expr::value(now_ms()))
            .filter(tool_run::Column::TurnId.eq(turn.to_string()))
            .filter(tool_run::Column::CallId.eq(call_id))
            .filter(tool_run::Column::Status.is_in([
                ToolRunStatus::Planned.as_str(),
                ToolRunStatus::Unknown.as_str(),
            ]))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            return Err(StoreError::WrongState(format!("tool run {call_id}")));
        }
        let ev = match event {
            Some(event) => Some(insert_event(&tx, event).await?),
            None => None,
        };
        tx.commit().await?;
        Ok(ev)
    }

    /// → `finished` with `outcome`: the result row, the run and `tool.completed` commit
    /// together (SPEC R9.5). From any unfinished state.
    pub async fn finish_tool_run(
        &self,
        fence: &Fence,
        turn: TurnId,
        call_id: &str,
        outcome: ToolOutcome,
        result: &NewMessage,
        event: &NewEvent,
    ) -> Result<(Message, Event)> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let res = tool_run::Entity::update_many()
            .col_expr(
                tool_run::Column::Status,
                Expr::value(ToolRunStatus::Finished.as_str()),
            )
            .col_expr(tool_run::Column::Outcome, Expr::value(outcome.as_str()))
            .col_expr(
                tool_run::Column::ResultRef,
                Expr::value(result.id.to_string()),
            )
            .col_expr(tool_run::Column::FinishedAt, Expr::value(now_ms()))
            .filter(tool_run::Column::TurnId.eq(turn.to_string()))
            .filter(tool_run::Column::CallId.eq(call_id))
            .filter(tool_run::Column::Status.ne(ToolRunStatus::Finished.as_str()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            return Err(StoreError::WrongState(format!("tool run {call_id}")));
        }
        insert_message(&tx, fence.session_id, result).await?;
        let row = message::Entity::find_by_id(result.id.to_string())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("message {}", result.id)))?;
        let ev = insert_event(&tx, event).await?;
        tx.commit().await?;
        Ok((convert::message(row)?, ev))
    }

    /// `started` → `unknown` (a resumed turn found it started without a result), with its
    /// `tool.completed` (status `unknown`) event. A no-op (`None`) for any other state.
    pub async fn mark_tool_run_unknown(
        &self,
        fence: &Fence,
        turn: TurnId,
        call_id: &str,
        event: &NewEvent,
    ) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let res = tool_run::Entity::update_many()
            .col_expr(
                tool_run::Column::Status,
                Expr::value(ToolRunStatus::Unknown.as_str()),
            )
            // A decision answers one unknown: after a retry that was cut again, ask again.
            .col_expr(
                tool_run::Column::Decision,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                tool_run::Column::DecidedBy,
                Expr::value(Option::<String>::None),
            )
            .filter(tool_run::Column::TurnId.eq(turn.to_string()))
            .filter(tool_run::Column::CallId.eq(call_id))
            .filter(tool_run::Column::Status.eq(ToolRunStatus::Started.as_str()))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let ev = insert_event(&tx, event).await?;
        tx.commit().await?;
        Ok(Some(ev))
    }

    /// Records a person's decision on an `unknown` run of `session` (once). `WrongState` when
    /// the run is not `unknown` or was already decided; `NotFound` when there is none.
    pub async fn decide_tool_run(
        &self,
        session: SessionId,
        call_id: &str,
        decision: ToolRunDecision,
        decided_by: &str,
    ) -> Result<ToolRun> {
        let tx = self.write_tx().await?;
        let Some(row) = tool_run::Entity::find()
            .filter(tool_run::Column::SessionId.eq(session.to_string()))
            .filter(tool_run::Column::CallId.eq(call_id))
            .order_by_desc(tool_run::Column::CreatedAt)
            .one(&tx)
            .await?
        else {
            return Err(StoreError::NotFound(format!("tool run {call_id}")));
        };
        let res = tool_run::Entity::update_many()
            .col_expr(tool_run::Column::Decision, Expr::value(decision.as_str()))
            .col_expr(tool_run::Column::DecidedBy, Expr::value(decided_by))
            .filter(tool_run::Column::Id.eq(row.id.clone()))
            .filter(tool_run::Column::Status.eq(ToolRunStatus::Unknown.as_str()))
            .filter(tool_run::Column::Decision.is_null())
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            return Err(StoreError::WrongState(format!("tool run {call_id}")));
        }
        let row = tool_run::Entity::find_by_id(row.id)
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("tool run {call_id}")))?;
        super::audit::insert_audit(
            &tx,
            &super::audit::NewAudit {
                principal: decided_by.to_owned(),
                action: "tool_run.decided".into(),
                target: format!("{session}/{call_id}"),
                detail: serde_json::json!({"decision": decision.as_str(), "tool": row.tool}),
            },
        )
        .await?;
        tx.send_notice(crate::notify::NoticeKind::Decision, session, None);
        tx.commit().await?;
        convert::tool_run(row)
    }

    /// The runs of one turn, in call order within each assistant row.
    pub async fn tool_runs_of_turn(&self, turn: TurnId) -> Result<Vec<ToolRun>> {
        self.runs_in_order(
            tool_run::Entity::find().filter(tool_run::Column::TurnId.eq(turn.to_string())),
        )
        .await
    }

    /// The runs of `session` left `unknown` by a crash and waiting for a person.
    pub async fn unknown_tool_runs(&self, session: SessionId) -> Result<Vec<ToolRun>> {
        self.runs_in_order(
            tool_run::Entity::find()
                .filter(tool_run::Column::SessionId.eq(session.to_string()))
                .filter(tool_run::Column::Status.eq(ToolRunStatus::Unknown.as_str())),
        )
        .await
    }

    async fn runs_in_order(&self, q: sea_orm::Select<tool_run::Entity>) -> Result<Vec<ToolRun>> {
        q.order_by_asc(tool_run::Column::CreatedAt)
            .order_by_asc(tool_run::Column::Idx)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::tool_run)
            .collect()
    }

    /// The latest run of `session` with this call id, whatever its state.
    pub async fn tool_run_in_session(
        &self,
        session: SessionId,
        call_id: &str,
    ) -> Result<Option<ToolRun>> {
        tool_run::Entity::find()
            .filter(tool_run::Column::SessionId.eq(session.to_string()))
            .filter(tool_run::Column::CallId.eq(call_id))
            .order_by_desc(tool_run::Column::CreatedAt)
            .one(self.reader())
            .await?
            .map(convert::tool_run)
            .transpose()
    }

    pub async fn get_tool_run(&self, turn: TurnId, call_id: &str) -> Result<Option<ToolRun>> {
        tool_run::Entity::find()
            .filter(tool_run::Column::TurnId.eq(turn.to_string()))
            .filter(tool_run::Column::CallId.eq(call_id))
            .one(self.reader())
            .await?
            .map(convert::tool_run)
            .transpose()
    }
}
