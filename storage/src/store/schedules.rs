//! Scheduled jobs (SPEC R1.5): the `schedules` rows, made through the API or synchronized from
//! the configuration at start-up, and the compare-and-set that records the last due time a
//! scheduler handled. The firing itself is an ordinary admission (request id
//! `schedule:<id>:<due_ms>`), so this table never decides whether an input exists: it only
//! remembers how far the schedule got, for restarts and for the `missed` rule.
use super::{Result, Store, StoreError};
use crate::entity::schedule;
use crate::ids::{now_ms, parse_id, ScheduleId, SessionId};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    TryInsertResult,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What a schedule does about due times that passed while no process ran it (SPEC R1.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissedPolicy {
    /// Run once, for the latest missed due time.
    #[default]
    RunOnce,
    /// Run none of them; continue from the next due time.
    Skip,
}

impl MissedPolicy {
    pub const NAMES: &'static str = "run_once, skip";

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunOnce => "run_once",
            Self::Skip => "skip",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "run_once" => Some(Self::RunOnce),
            "skip" => Some(Self::Skip),
            _ => None,
        }
    }
}

/// Where a schedule came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleSource {
    /// `POST /v1/schedules`; removed only by `DELETE /v1/schedules/{id}`.
    Api,
    /// A `[[schedules]]` table; removed when the table leaves the configuration.
    Config,
    /// The `schedule` tool, on the calling session; removed by the tool or the API.
    Agent,
}

impl ScheduleSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Config => "config",
            Self::Agent => "agent",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "api" => Some(Self::Api),
            "config" => Some(Self::Config),
            "agent" => Some(Self::Agent),
            _ => None,
        }
    }
}

/// A stored schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub id: ScheduleId,
    pub session_id: SessionId,
    /// The session's owner: a firing is admitted as this principal, and only this principal
    /// (and the operator) sees the schedule.
    pub owner: String,
    pub cron: String,
    pub text: String,
    pub missed: MissedPolicy,
    pub source: ScheduleSource,
    pub created_at: i64,
    /// The last due time handled (admitted, or passed over as missed), ms since the epoch.
    pub last_due_at: Option<i64>,
    /// A one-shot schedule's one due time (its `cron` is empty); `None` for a cron schedule.
    pub once_at: Option<i64>,
}

/// A schedule to insert; its `created_at` is the time of the insert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSchedule {
    pub id: ScheduleId,
    pub session_id: SessionId,
    pub owner: String,
    pub cron: String,
    pub text: String,
    pub missed: MissedPolicy,
    pub source: ScheduleSource,
    /// A one-shot schedule's due time (`cron` then empty).
    pub once_at: Option<i64>,
}

/// What synchronizing the configuration's schedules changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigSchedulesSynced {
    pub added: usize,
    pub kept: usize,
    pub removed: usize,
}

fn active(new: NewSchedule, created_at: i64) -> schedule::ActiveModel {
    schedule::ActiveModel {
        id: Set(new.id.to_string()),
        session_id: Set(new.session_id.to_string()),
        owner: Set(new.owner),
        cron: Set(new.cron),
        text: Set(new.text),
        missed: Set(new.missed.as_str().to_owned()),
        source: Set(new.source.as_str().to_owned()),
        created_at: Set(created_at),
        last_due_at: Set(None),
        once_at: Set(new.once_at),
    }
}

fn convert(m: schedule::Model) -> Result<Schedule> {
    Ok(Schedule {
        id: parse_id(&m.id, "schedule id")?,
        session_id: parse_id(&m.session_id, "schedule session id")?,
        owner: m.owner,
        missed: MissedPolicy::parse(&m.missed)
            .ok_or_else(|| StoreError::Corrupt(format!("schedule missed {:?}", m.missed)))?,
        source: ScheduleSource::parse(&m.source)
            .ok_or_else(|| StoreError::Corrupt(format!("schedule source {:?}", m.source)))?,
        cron: m.cron,
        text: m.text,
        created_at: m.created_at,
        last_due_at: m.last_due_at,
        once_at: m.once_at,
    })
}

impl Store {
    /// Stores a new schedule and answers it as stored.
    pub async fn create_schedule(&self, new: NewSchedule) -> Result<Schedule> {
        let id = new.id;
        schedule::Entity::insert(active(new, now_ms()))
            .exec_without_returning(self.writer())
            .await?;
        self.get_schedule(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("schedule {id}")))
    }

    pub async fn get_schedule(&self, id: ScheduleId) -> Result<Option<Schedule>> {
        schedule::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .map(convert)
            .transpose()
    }

    /// Every schedule, oldest first; `owner` limits them to one principal's sessions.
    pub async fn list_schedules(&self, owner: Option<&str>) -> Result<Vec<Schedule>> {
        let mut q = schedule::Entity::find();
        if let Some(o) = owner {
            q = q.filter(schedule::Column::Owner.eq(o));
        }
        q.order_by_asc(schedule::Column::CreatedAt)
            .order_by_asc(schedule::Column::Id)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert)
            .collect()
    }

    /// Deletes a schedule; answers whether it existed. Admissions it already made stay.
    pub async fn delete_schedule(&self, id: ScheduleId) -> Result<bool> {
        let res = schedule::Entity::delete_many()
            .filter(schedule::Column::Id.eq(id.to_string()))
            .exec(self.writer())
            .await?;
        Ok(res.rows_affected == 1)
    }

    /// Makes the `config` schedules exactly `wanted`, in one transaction: a wanted one that is
    /// stored already keeps its row (and so its `last_due_at`: ids are derived from the
    /// content, so a restart finds the same ones), a new one is inserted, and a stored one
    /// that is no longer wanted is deleted. Schedules made through the API are not touched.
    pub async fn sync_config_schedules(
        &self,
        wanted: Vec<NewSchedule>,
    ) -> Result<ConfigSchedulesSynced> {
        let tx = self.write_tx().await?;
        let stored: BTreeSet<String> = schedule::Entity::find()
            .filter(schedule::Column::Source.eq(ScheduleSource::Config.as_str()))
            .all(&tx)
            .await?
            .into_iter()
            .map(|m| m.id)
            .collect();
        let wanted_ids: BTreeSet<String> = wanted.iter().map(|w| w.id.to_string()).collect();
        let gone: Vec<String> = stored.difference(&wanted_ids).cloned().collect();
        let mut synced = ConfigSchedulesSynced::default();
        if !gone.is_empty() {
            synced.removed = schedule::Entity::delete_many()
                .filter(schedule::Column::Id.is_in(gone))
                .exec(&tx)
                .await?
                .rows_affected as usize;
        }
        let now = now_ms();
        for new in wanted {
            if stored.contains(&new.id.to_string()) {
                synced.kept += 1;
                continue;
            }
            // Another replica starting with the same file may insert it first.
            let inserted = insert_if_absent(&tx, active(new, now)).await?;
            if inserted {
                synced.added += 1;
            } else {
                synced.kept += 1;
            }
        }
        tx.commit().await?;
        Ok(synced)
    }

    /// Records that the schedule handled its due time `due`, only if its last handled due time
    /// is still `seen` (compare-and-set): a replica that read an older state, or a schedule
    /// deleted meanwhile, changes nothing. Answers whether this call moved it.
    pub async fn advance_schedule(
        &self,
        id: ScheduleId,
        seen: Option<i64>,
        due: i64,
    ) -> Result<bool> {
        let mut q = schedule::Entity::update_many()
            .col_expr(schedule::Column::LastDueAt, Expr::value(due))
            .filter(schedule::Column::Id.eq(id.to_string()));
        q = match seen {
            Some(s) if s >= due => return Ok(false),
            Some(s) => q.filter(schedule::Column::LastDueAt.eq(s)),
            None => q.filter(schedule::Column::LastDueAt.is_null()),
        };
        Ok(q.exec(self.writer()).await?.rows_affected == 1)
    }
}

/// Inserts `row` unless its id exists; answers whether it did.
async fn insert_if_absent<C: ConnectionTrait>(db: &C, row: schedule::ActiveModel) -> Result<bool> {
    let res = schedule::Entity::insert(row)
        .on_conflict_do_nothing_on([schedule::Column::Id])
        .exec_without_returning(db)
        .await?;
    Ok(matches!(res, TryInsertResult::Inserted(n) if n > 0))
}
