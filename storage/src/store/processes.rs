//! Background processes (SPEC R1.5, R13.10): a row is written before the command starts, so
//! a gateway that dies at any point leaves a row to account for it; the pid, the kernel's
//! start time of that pid and the boot id follow once it runs (with `process.started`). Its
//! end is recorded once (`running` → `exited`, `killed` or `unknown`, with the exit code and
//! the output's tail: the durable report), then admitted into the session under the request
//! id `process:<process_id>`, and only then marked reported, with `process.exited`, once.
use super::{announce_once, insert_events, Result, Store, StoreError};
use crate::entity::background_process as bp;
use crate::ids::{now_ms, parse_id, AdmissionId, InstanceId, ProcessId, SessionId};
use crate::model::{Event, EventKind, NewEvent, Owner};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
};
use serde::Serialize;

/// A background process as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BackgroundProcess {
    pub process_id: ProcessId,
    pub session_id: SessionId,
    #[serde(skip)]
    pub owner: String,
    pub command: String,
    /// Holds `log` and, once the command ended, `exit`.
    #[serde(skip)]
    pub dir: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    #[serde(skip)]
    pub pid_start: Option<i64>,
    #[serde(skip)]
    pub boot_id: String,
    /// The gateway process watching it.
    #[serde(skip)]
    pub watcher: Owner,
    /// `running`, `exited`, `killed` or `unknown`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail: Option<String>,
    pub started_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<i64>,
}

/// A process about to be started.
#[derive(Clone, Debug)]
pub struct NewBackgroundProcess {
    pub id: ProcessId,
    pub session_id: SessionId,
    pub owner: String,
    pub command: String,
    pub dir: String,
    pub boot_id: String,
    pub watcher: Owner,
}

/// How a background process ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessEnd {
    /// `exited`, `killed` or `unknown`.
    pub status: String,
    pub exit_code: Option<i64>,
    pub tail: String,
}

impl Store {
    /// Writes the row of a process about to start (`running`, no pid yet).
    pub async fn create_background_process(
        &self,
        new: NewBackgroundProcess,
    ) -> Result<BackgroundProcess> {
        let id = new.id;
        let row = bp::ActiveModel {
            id: Set(new.id.to_string()),
            session_id: Set(new.session_id.to_string()),
            owner: Set(new.owner),
            command: Set(new.command),
            dir: Set(new.dir),
            pid: Set(None),
            pid_start: Set(None),
            boot_id: Set(new.boot_id),
            watcher_instance: Set(new.watcher.instance.to_string()),
            watcher_pid: Set(new.watcher.pid),
            watcher_host: Set(new.watcher.host),
            status: Set("running".into()),
            exit_code: Set(None),
            tail: Set(None),
            started_at: Set(now_ms()),
            ended_at: Set(None),
            reported_at: Set(None),
        };
        bp::Entity::insert(row)
            .exec_without_returning(self.writer())
            .await?;
        self.get_background_process(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("process {id}")))
    }

    /// Records the pid of a started process, with `process.started`, in one commit.
    pub async fn record_background_pid(
        &self,
        p: &BackgroundProcess,
        pid: i64,
        pid_start: Option<i64>,
    ) -> Result<Event> {
        let tx = self.write_tx().await?;
        bp::Entity::update_many()
            .col_expr(bp::Column::Pid, Expr::value(pid))
            .col_expr(bp::Column::PidStart, Expr::value(pid_start))
            .filter(bp::Column::Id.eq(p.process_id.to_string()))
            .exec(&tx)
            .await?;
        let data = serde_json::json!({"process_id": p.process_id, "command": p.command});
        let mut evs = insert_events(
            &tx,
            &[NewEvent {
                session_id: p.session_id,
                kind: EventKind::ProcessStarted,
                turn_id: None,
                admission_id: None,
                data,
            }],
        )
        .await?;
        tx.commit().await?;
        evs.pop()
            .ok_or_else(|| StoreError::NotFound("process.started event".into()))
    }

    pub async fn get_background_process(&self, id: ProcessId) -> Result<Option<BackgroundProcess>> {
        bp::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .map(process_of)
            .transpose()
    }

    /// The background processes of `session`, oldest first.
    pub async fn background_processes(&self, session: SessionId) -> Result<Vec<BackgroundProcess>> {
        bp::Entity::find()
            .filter(bp::Column::SessionId.eq(session.to_string()))
            .order_by_asc(bp::Column::StartedAt)
            .order_by_asc(bp::Column::Id)
            .all(self.reader())
            .await?
            .into_iter()
            .map(process_of)
            .collect()
    }

    /// How many processes of `session` are still running (the per-session cap).
    pub async fn running_background_count(&self, session: SessionId) -> Result<u64> {
        Ok(bp::Entity::find()
            .filter(bp::Column::SessionId.eq(session.to_string()))
            .filter(bp::Column::Status.eq("running"))
            .count(self.reader())
            .await?)
    }

    /// Every process whose end was not reported yet, oldest first.
    pub async fn unreported_background_processes(&self) -> Result<Vec<BackgroundProcess>> {
        bp::Entity::find()
            .filter(bp::Column::ReportedAt.is_null())
            .order_by_asc(bp::Column::StartedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(process_of)
            .collect()
    }

    /// Makes `watcher` the process's watcher, if `seen` still is (compare-and-set: of two
    /// gateways that find it orphaned, one watches). Answers whether this call moved it.
    pub async fn take_over_background_process(
        &self,
        id: ProcessId,
        seen: InstanceId,
        watcher: &Owner,
    ) -> Result<bool> {
        let res = bp::Entity::update_many()
            .col_expr(
                bp::Column::WatcherInstance,
                Expr::value(watcher.instance.to_string()),
            )
            .col_expr(bp::Column::WatcherPid, Expr::value(watcher.pid))
            .col_expr(bp::Column::WatcherHost, Expr::value(watcher.host.clone()))
            .filter(bp::Column::Id.eq(id.to_string()))
            .filter(bp::Column::WatcherInstance.eq(seen.to_string()))
            .filter(bp::Column::Status.eq("running"))
            .exec(self.writer())
            .await?;
        Ok(res.rows_affected == 1)
    }

    /// `running` → how it ended, once: a process already ended keeps what was recorded.
    /// Answers the process as it is now.
    pub async fn end_background_process(
        &self,
        id: ProcessId,
        end: &ProcessEnd,
    ) -> Result<BackgroundProcess> {
        bp::Entity::update_many()
            .col_expr(bp::Column::Status, Expr::value(end.status.clone()))
            .col_expr(bp::Column::ExitCode, Expr::value(end.exit_code))
            .col_expr(bp::Column::Tail, Expr::value(end.tail.clone()))
            .col_expr(bp::Column::EndedAt, Expr::value(now_ms()))
            .filter(bp::Column::Id.eq(id.to_string()))
            .filter(bp::Column::Status.eq("running"))
            .exec(self.writer())
            .await?;
        self.get_background_process(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("process {id}")))
    }

    /// Records that the ended process's report was admitted as `admission`, with
    /// `process.exited`, once: `None` when it was recorded already.
    pub async fn record_process_report(
        &self,
        p: &BackgroundProcess,
        admission: AdmissionId,
    ) -> Result<Option<Event>> {
        let tx = self.write_tx().await?;
        let moved = bp::Entity::update_many()
            .col_expr(bp::Column::ReportedAt, Expr::value(now_ms()))
            .filter(bp::Column::Id.eq(p.process_id.to_string()))
            .filter(bp::Column::ReportedAt.is_null())
            .exec(&tx)
            .await?
            .rows_affected;
        let data = serde_json::json!({
            "process_id": p.process_id, "exit_code": p.exit_code, "status": p.status,
            "admission_id": admission,
        });
        let event = NewEvent {
            session_id: p.session_id,
            kind: EventKind::ProcessExited,
            turn_id: None,
            admission_id: Some(admission),
            data,
        };
        announce_once(tx, moved, event).await
    }
}

fn process_of(m: bp::Model) -> Result<BackgroundProcess> {
    Ok(BackgroundProcess {
        process_id: parse_id(&m.id, "process id")?,
        session_id: parse_id(&m.session_id, "session id")?,
        owner: m.owner,
        command: m.command,
        dir: m.dir,
        pid: m.pid,
        pid_start: m.pid_start,
        boot_id: m.boot_id,
        watcher: Owner {
            instance: parse_id::<InstanceId>(&m.watcher_instance, "instance id")?,
            pid: m.watcher_pid,
            host: m.watcher_host,
        },
        status: m.status,
        exit_code: m.exit_code,
        tail: m.tail,
        started_at: m.started_at,
        ended_at: m.ended_at,
        reported_at: m.reported_at,
    })
}
