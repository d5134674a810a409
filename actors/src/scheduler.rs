//! `SchedulerActor` (SPEC R1.5): turns schedules into inputs. It sleeps until the earliest
//! next due time of all schedules (at most `MAX_SLEEP`, so schedules made on another replica
//! are seen too; a change through this process's API wakes it at once), then handles every
//! schedule with `schedule::step`: a due time is admitted through the admission service (`Admissions`) like
//! any door's input (same FIFO, busy policy, limits), with surface `internal`, the session
//! owner as principal and the request id `schedule:<schedule_id>:<due_ms>`. So a due time is
//! admitted at most once, across crashes, replicas and retries. Only once the admission is
//! durable is the due time recorded as handled (`Store::advance_schedule`, a compare-and-set);
//! a refused admission (shutting down, no provider, store error) is logged with its reason
//! and tried again, never recorded as done.
//!
//! This file also holds the operations of `POST/GET/DELETE /v1/schedules` and the start-up
//! synchronization of `[[schedules]]`, which the `Gateway` exposes.
//!
//! "Missed" is relative to the start of the process handling the schedule, not to how late a
//! firing is: a live scheduler that is late still fires. The cost is a narrow race with several
//! replicas: one that starts just as another is about to fire a due time may record it as missed
//! (`skip`) first, and then that due time may not run at all; it is still never admitted twice.
use crate::admission::Admissions;
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::input::{Receipt, Submission};
use crate::schedule::{self, CronSpec, Step};
use actix::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use turnkey_storage::{
    now_ms, MissedPolicy, NewSchedule, Principal, Schedule, ScheduleId, ScheduleSource, SessionId,
};

/// The longest the scheduler sleeps without looking at the store: schedules made or deleted
/// on another replica are seen within this.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// After a refused admission or a store error, the next attempt comes this much later.
const RETRY_AFTER_MS: i64 = 5_000;
/// Waking this long after a due time, not at it, so that the clock has surely passed it.
const WAKE_SLACK_MS: i64 = 5;

/// The surface (door) of every scheduled input.
pub const SURFACE: &str = "internal";

/// Schedules were made or deleted through this process: look again now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SchedulesChanged;

pub struct SchedulerActor {
    deps: Arc<Deps>,
    admission: Admissions,
    /// When this process began to run schedules: a due time at or before it fell due while no
    /// process of ours was watching, i.e. it was missed (SPEC R1.5 `missed`).
    watching_since: i64,
    /// The pending wake-up, cancelled when a change wakes the actor sooner.
    wake: Option<SpawnHandle>,
    /// A pass over the schedules is running; `again` asks for another when it ends.
    busy: bool,
    again: bool,
}

impl SchedulerActor {
    pub fn new(deps: Arc<Deps>, admission: Admissions) -> Self {
        Self {
            deps,
            admission,
            watching_since: now_ms(),
            wake: None,
            busy: false,
            again: false,
        }
    }

    /// Runs one pass over the schedules (unless one runs: then one more after it), then
    /// sleeps until the earliest time anything is due.
    fn pass(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            self.again = true;
            return;
        }
        if let Some(h) = self.wake.take() {
            ctx.cancel_future(h);
        }
        if self.deps.shutdown.is_cancelled() {
            tracing::info!("scheduler stopped: the server is shutting down");
            ctx.stop();
            return;
        }
        self.busy = true;
        let fut = run_pass(
            self.deps.clone(),
            self.admission.clone(),
            self.watching_since,
        );
        ctx.spawn(fut.into_actor(self).map(|wake_at, act, ctx| {
            act.busy = false;
            if std::mem::take(&mut act.again) {
                act.pass(ctx);
                return;
            }
            let delay = wake_at
                .map(|at| at + WAKE_SLACK_MS - now_ms())
                .map_or(MAX_SLEEP, |ms| {
                    Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(MAX_SLEEP)
                });
            act.wake = Some(ctx.run_later(delay, |act, ctx| {
                act.wake = None;
                act.pass(ctx);
            }));
        }));
    }
}

impl Actor for SchedulerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.pass(ctx);
    }
}

impl Handler<SchedulesChanged> for SchedulerActor {
    type Result = ();

    fn handle(&mut self, _: SchedulesChanged, ctx: &mut Context<Self>) {
        self.pass(ctx);
    }
}

/// Handles every schedule once; answers the earliest time (ms) something is due next.
async fn run_pass(deps: Arc<Deps>, admission: Admissions, watching_since: i64) -> Option<i64> {
    let schedules = match deps.store.list_schedules(None).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "scheduler cannot read the schedules; trying again");
            return Some(now_ms() + RETRY_AFTER_MS);
        }
    };
    let mut earliest: Option<i64> = None;
    for s in schedules {
        if deps.shutdown.is_cancelled() {
            return None;
        }
        let next = handle_one(&deps, &admission, &s, watching_since).await;
        earliest = match (earliest, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    earliest
}

/// Handles one schedule at the current time; answers when it wants to be looked at again.
async fn handle_one(
    deps: &Deps,
    admission: &Admissions,
    s: &Schedule,
    watching_since: i64,
) -> Option<i64> {
    if let Some(at) = s.once_at {
        return handle_once(deps, admission, s, at).await;
    }
    let cron = match CronSpec::parse(&s.cron) {
        Ok(c) => c,
        Err(reason) => {
            // Checked when it was made; a row that no longer parses is reported, not guessed.
            tracing::error!(schedule = %s.id, cron = %s.cron, %reason, "schedule has a bad cron expression");
            return None;
        }
    };
    let now = now_ms();
    let due = match schedule::step(
        &cron,
        s.missed,
        s.created_at,
        s.last_due_at,
        watching_since,
        now,
    ) {
        Step::Wait { next_due } => return next_due,
        Step::Skip { due } => {
            tracing::info!(schedule = %s.id, due, "missed due time passed over (missed = skip)");
            return record(deps, s, due, now).await;
        }
        Step::Fire { due } => due,
    };
    match fire(deps, admission, s, due).await {
        Ok(Some(receipt)) => {
            tracing::info!(
                schedule = %s.id, due, admission = %receipt.admission_id,
                duplicate = receipt.duplicate, "scheduled input admitted"
            );
            record(deps, s, due, now).await
        }
        // Deleted meanwhile: nothing more to do for it.
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(
                schedule = %s.id, due, reason = %e, code = e.code(),
                "scheduled input not admitted; the due time stays open and is tried again"
            );
            Some(now_ms() + RETRY_AFTER_MS)
        }
    }
}

/// A one-shot schedule (`in_s` of the `schedule` tool): admitted once at `at` (late if the
/// process was down then: a reminder is still wanted), then deleted. The admission's request
/// id makes a second firing (a crash before the delete, another replica) the same input.
async fn handle_once(deps: &Deps, admission: &Admissions, s: &Schedule, at: i64) -> Option<i64> {
    if s.last_due_at.is_none() {
        if now_ms() < at {
            return Some(at);
        }
        match fire(deps, admission, s, at).await {
            Ok(Some(receipt)) => {
                tracing::info!(
                    schedule = %s.id, due = at, admission = %receipt.admission_id,
                    duplicate = receipt.duplicate, "one-shot scheduled input admitted"
                );
            }
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(
                    schedule = %s.id, due = at, reason = %e, code = e.code(),
                    "one-shot scheduled input not admitted; tried again"
                );
                return Some(now_ms() + RETRY_AFTER_MS);
            }
        }
    }
    match deps.store.delete_schedule(s.id).await {
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(schedule = %s.id, error = %e, "cannot delete a fired one-shot schedule; trying again");
            Some(now_ms() + RETRY_AFTER_MS)
        }
    }
}

/// Admits the input of due time `due`, or answers `None` when the schedule was deleted since
/// it was read. An input already admitted under the same request id (by another replica, or
/// before a crash) is answered by its receipt: it is not admitted twice.
async fn fire(
    deps: &Deps,
    admission: &Admissions,
    s: &Schedule,
    due: i64,
) -> Result<Option<Receipt>, GatewayError> {
    if deps.shutdown.is_cancelled() {
        return Err(GatewayError::ShuttingDown);
    }
    // A deletion that landed after the pass read the schedule stops this firing.
    if deps.store.get_schedule(s.id).await?.is_none() {
        return Ok(None);
    }
    let principal = crate::admission::principal_of_owner(&deps.store, &s.owner).await?;
    let submission = Submission {
        text: s.text.clone(),
        request_id: Some(schedule::request_id(s.id, due)),
        surface: SURFACE.into(),
        ..Default::default()
    };
    let submitted = admission.submit(principal, s.session_id, submission).await;
    submitted.map(Some)
}

/// Records `due` as handled, unless someone else moved the schedule first (then the next pass
/// reads what they did). Answers when to look at the schedule again.
async fn record(deps: &Deps, s: &Schedule, due: i64, now: i64) -> Option<i64> {
    match deps.store.advance_schedule(s.id, s.last_due_at, due).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(schedule = %s.id, due, "schedule moved on elsewhere (another replica, or deleted)");
        }
        Err(e) => {
            tracing::warn!(schedule = %s.id, due, error = %e, "cannot record the handled due time; trying again");
            return Some(now_ms() + RETRY_AFTER_MS);
        }
    }
    CronSpec::parse(&s.cron)
        .ok()
        .and_then(|c| c.next_after(due.max(now)))
}

/// Starts the scheduler after making the configuration's `[[schedules]]` the stored `config`
/// schedules (a removed table stops firing; a kept one keeps its history). A table naming a
/// session that does not exist stops start-up with its key.
pub async fn start(
    deps: Arc<Deps>,
    admission: Admissions,
) -> Result<Addr<SchedulerActor>, GatewayError> {
    let checked = schedule::check_config(&deps.config.schedules)
        .map_err(|(key, reason)| GatewayError::Config { key, reason })?;
    let mut wanted = Vec::with_capacity(checked.len());
    for (i, c) in checked.into_iter().enumerate() {
        let session =
            deps.store
                .get_session(c.session_id)
                .await?
                .ok_or_else(|| GatewayError::Config {
                    key: format!("schedules[{i}].session_id"),
                    reason: format!("there is no session {}", c.session_id),
                })?;
        wanted.push(NewSchedule {
            id: c.id,
            session_id: c.session_id,
            owner: session.owner,
            cron: c.cron,
            text: c.text,
            missed: c.missed,
            source: ScheduleSource::Config,
            once_at: None,
        });
    }
    let synced = deps.store.sync_config_schedules(wanted).await?;
    tracing::info!(
        added = synced.added,
        kept = synced.kept,
        removed = synced.removed,
        "configured schedules synchronized"
    );
    let actor = SchedulerActor::new(deps, admission);
    // Logged here, before the server listens, so that the line is there once it does.
    tracing::info!(watching_since = actor.watching_since, "scheduler started");
    Ok(actor.start())
}

/// What `POST /v1/schedules` asks for, its session id already parsed.
#[derive(Clone, Debug)]
pub struct ScheduleRequest {
    pub session_id: SessionId,
    pub cron: String,
    pub text: String,
    pub missed: MissedPolicy,
}

/// Makes a schedule on a session `principal` may act on (someone else's is not found).
pub async fn create(
    deps: &Deps,
    scheduler: &Addr<SchedulerActor>,
    principal: &Principal,
    req: ScheduleRequest,
) -> Result<Schedule, GatewayError> {
    let session = crate::admission::authorize(&deps.store, principal, req.session_id).await?;
    let cron = schedule::checked_cron(&req.cron)?;
    let text = schedule::checked_text(&req.text)?;
    let made = deps
        .store
        .create_schedule(NewSchedule {
            id: ScheduleId::new(),
            session_id: req.session_id,
            owner: session.owner,
            cron,
            text,
            missed: req.missed,
            source: ScheduleSource::Api,
            once_at: None,
        })
        .await?;
    tracing::info!(schedule = %made.id, session = %made.session_id, cron = %made.cron, "schedule created");
    scheduler.do_send(SchedulesChanged);
    Ok(made)
}

/// The schedules `principal` may see: all for the operator, else those on its own sessions.
pub async fn list(deps: &Deps, principal: &Principal) -> Result<Vec<Schedule>, GatewayError> {
    let owner = (principal.kind != "operator").then_some(principal.id.as_str());
    Ok(deps.store.list_schedules(owner).await?)
}

/// Deletes a schedule `principal` may see; future due times stop, admissions made stay. A
/// schedule from the configuration is removed by removing its table (it would come back on
/// the next start otherwise).
pub async fn delete(
    deps: &Deps,
    scheduler: &Addr<SchedulerActor>,
    principal: &Principal,
    id: ScheduleId,
) -> Result<(), GatewayError> {
    let not_found = || GatewayError::NotFound(format!("schedule {id}"));
    let s = deps.store.get_schedule(id).await?.ok_or_else(not_found)?;
    if principal.kind != "operator" && s.owner != principal.id {
        return Err(not_found());
    }
    if s.source == ScheduleSource::Config {
        return Err(GatewayError::Conflict {
            code: "config_schedule",
            message: format!(
                "schedule {id} comes from a [[schedules]] table of the configuration; remove \
                 the table and restart to delete it"
            ),
        });
    }
    if !deps.store.delete_schedule(id).await? {
        return Err(not_found());
    }
    tracing::info!(schedule = %id, "schedule deleted");
    scheduler.do_send(SchedulesChanged);
    Ok(())
}

/// The next due time still to come for `s` at `now` (none when it never falls due again).
pub fn next_due_at(s: &Schedule, now: i64) -> Option<i64> {
    if let Some(at) = s.once_at {
        return s.last_due_at.is_none().then_some(at);
    }
    let handled_until = s.last_due_at.unwrap_or(s.created_at);
    CronSpec::parse(&s.cron)
        .ok()?
        .next_after(handled_until.max(now))
}
