//! Delegated tasks (SPEC R1.5, R13.10): a task is born with its child session and
//! `subagent.started` in one commit; the child's goal is an ordinary admission of the child
//! (request id `subagent:<task_id>`), so its turn is a turn like any other. When that
//! admission is terminal the task is *settled* (`running` → the report's status, with the
//! report's text: the durable report), then the report is admitted into the parent under the
//! same request id, and only then is the task marked reported, with `subagent.finished` on the
//! parent, in one commit that happens once.
use super::sessions::insert_session;
use super::{announce_once, insert_events, Result, Store, StoreError};
use crate::entity::{session, subagent_task};
use crate::ids::{now_ms, parse_id, AdmissionId, SessionId, TaskId};
use crate::model::{Event, EventKind, NewEvent, NewSession};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
};
use serde::Serialize;

/// A delegated task as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubagentTask {
    pub task_id: TaskId,
    pub parent_session_id: SessionId,
    pub child_session_id: SessionId,
    #[serde(skip)]
    pub owner: String,
    pub goal: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    pub depth: i64,
    /// `running`, `completed`, `failed`, `interrupted` or `unknown`.
    pub status: String,
    /// The report as admitted into the parent (once settled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    pub created_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<i64>,
}

/// A task to create, with its child session.
#[derive(Clone, Debug)]
pub struct NewSubagentTask {
    pub id: TaskId,
    pub parent_session_id: SessionId,
    pub goal: String,
    pub context: Option<String>,
    pub depth: i64,
    /// The child session; its owner is the task's.
    pub child: NewSession,
}

impl Store {
    /// Creates the child session (its `parent_session_id` the parent), the task `running` and
    /// `subagent.started` on the parent, in one commit.
    pub async fn create_subagent_task(
        &self,
        new: NewSubagentTask,
    ) -> Result<(SubagentTask, Event)> {
        let tx = self.write_tx().await?;
        let child = new.child.id;
        let owner = new.child.owner.clone();
        insert_session(&tx, new.child).await?;
        session::Entity::update_many()
            .col_expr(
                session::Column::ParentSessionId,
                Expr::value(new.parent_session_id.to_string()),
            )
            .filter(session::Column::Id.eq(child.to_string()))
            .exec(&tx)
            .await?;
        let now = now_ms();
        let row = subagent_task::ActiveModel {
            id: Set(new.id.to_string()),
            parent_session_id: Set(new.parent_session_id.to_string()),
            child_session_id: Set(child.to_string()),
            owner: Set(owner.clone()),
            goal: Set(new.goal.clone()),
            context: Set(new.context.clone()),
            depth: Set(new.depth),
            status: Set("running".into()),
            result: Set(None),
            created_at: Set(now),
            reported_at: Set(None),
        };
        subagent_task::Entity::insert(row)
            .exec_without_returning(&tx)
            .await?;
        let data = serde_json::json!({
            "task_id": new.id, "child_session_id": child, "goal": new.goal,
        });
        let mut evs = insert_events(
            &tx,
            &[NewEvent {
                session_id: new.parent_session_id,
                kind: EventKind::SubagentStarted,
                turn_id: None,
                admission_id: None,
                data,
            }],
        )
        .await?;
        tx.commit().await?;
        let event = evs
            .pop()
            .ok_or_else(|| StoreError::NotFound("subagent.started event".into()))?;
        Ok((
            SubagentTask {
                task_id: new.id,
                parent_session_id: new.parent_session_id,
                child_session_id: child,
                owner,
                goal: new.goal,
                context: new.context,
                depth: new.depth,
                status: "running".into(),
                result: None,
                created_at: now,
                reported_at: None,
            },
            event,
        ))
    }

    pub async fn get_subagent_task(&self, id: TaskId) -> Result<Option<SubagentTask>> {
        subagent_task::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .map(task_of)
            .transpose()
    }

    /// The task whose child session is `child`, if `child` is one.
    pub async fn subagent_task_of_child(&self, child: SessionId) -> Result<Option<SubagentTask>> {
        subagent_task::Entity::find()
            .filter(subagent_task::Column::ChildSessionId.eq(child.to_string()))
            .one(self.reader())
            .await?
            .map(task_of)
            .transpose()
    }

    /// The tasks `parent` delegated, oldest first.
    pub async fn subagent_tasks(&self, parent: SessionId) -> Result<Vec<SubagentTask>> {
        subagent_task::Entity::find()
            .filter(subagent_task::Column::ParentSessionId.eq(parent.to_string()))
            .order_by_asc(subagent_task::Column::CreatedAt)
            .order_by_asc(subagent_task::Column::Id)
            .all(self.reader())
            .await?
            .into_iter()
            .map(task_of)
            .collect()
    }

    /// How many tasks of `parent` have not reported yet (they count against `max_children`).
    pub async fn open_subagent_count(&self, parent: SessionId) -> Result<u64> {
        Ok(subagent_task::Entity::find()
            .filter(subagent_task::Column::ParentSessionId.eq(parent.to_string()))
            .filter(subagent_task::Column::ReportedAt.is_null())
            .count(self.reader())
            .await?)
    }

    /// Every task whose report was not admitted yet, oldest first.
    pub async fn unreported_subagent_tasks(&self) -> Result<Vec<SubagentTask>> {
        subagent_task::Entity::find()
            .filter(subagent_task::Column::ReportedAt.is_null())
            .order_by_asc(subagent_task::Column::CreatedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(task_of)
            .collect()
    }

    /// `running` → `status` with the report's text, once: a task already settled keeps what
    /// it was settled with. Answers the task as it is now.
    pub async fn settle_subagent_task(
        &self,
        id: TaskId,
        status: &str,
        result: &str,
    ) -> Result<SubagentTask> {
        subagent_task::Entity::update_many()
            .col_expr(subagent_task::Column::Status, Expr::value(status))
            .col_expr(subagent_task::Column::Result, Expr::value(result))
            .filter(subagent_task::Column::Id.eq(id.to_string()))
            .filter(subagent_task::Column::Status.eq("running"))
            .exec(self.writer())
            .await?;
        self.get_subagent_task(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("task {id}")))
    }

    /// Records that the settled task's report was admitted into the parent as `admission`,
    /// with `subagent.finished` there, once: `None` when it was recorded already.
    pub async fn record_subagent_report(
        &self,
        task: &SubagentTask,
        admission: AdmissionId,
    ) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        let moved = subagent_task::Entity::update_many()
            .col_expr(subagent_task::Column::ReportedAt, Expr::value(now_ms()))
            .filter(subagent_task::Column::Id.eq(task.task_id.to_string()))
            .filter(subagent_task::Column::ReportedAt.is_null())
            .exec(&tx)
            .await?
            .rows_affected;
        let data = serde_json::json!({
            "task_id": task.task_id, "status": task.status, "admission_id": admission,
            "child_session_id": task.child_session_id,
        });
        let event = NewEvent {
            session_id: task.parent_session_id,
            kind: EventKind::SubagentFinished,
            turn_id: None,
            admission_id: Some(admission),
            data,
        };
        announce_once(tx, moved, event).await
    }
}

fn task_of(m: subagent_task::Model) -> Result<SubagentTask> {
    Ok(SubagentTask {
        task_id: parse_id(&m.id, "task id")?,
        parent_session_id: parse_id(&m.parent_session_id, "parent session id")?,
        child_session_id: parse_id(&m.child_session_id, "child session id")?,
        owner: m.owner,
        goal: m.goal,
        context: m.context,
        depth: m.depth,
        status: m.status,
        result: m.result,
        created_at: m.created_at,
        reported_at: m.reported_at,
    })
}
