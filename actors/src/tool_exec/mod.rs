//! `ToolExecActor` (SPEC R9.4, R9.5, R9.7, R13.1): runs the pending calls of one tool round.
//! At most `tools.max_workers` run at once; calls start in call order behind a start-order
//! gate; an exclusive tool runs alone. Each call asks for approval first when the policy says
//! so, is recorded `started` before its side effect, and has its result row, `finished` and
//! `tool.completed` committed before anyone sees the result. On interrupt or batch timeout a
//! call that has not started gets a `skipped` result; a running one is told to stop (a
//! `terminal` call's whole process group is killed).
//! `approval` holds what a person decides before a call runs; `record`, what is committed
//! before and after it.
//!
//! An approval waits on `Wakeups` (a decision in this process, or a notice from another replica)
//! with a periodic re-read of the store as a safety net. A sub-agent's approval request and its
//! resolution are also written, in the same commit, to the log of the session that delegated it,
//! so the parent's people see and decide it. A result over `tools.spill_bytes` is spilled to
//! `data_dir/spill`. If the commit of a result fails the round stops and the turn ends
//! `session_persistence_failed`: a result never exists in memory only.
mod approval;
mod record;

use crate::config::ToolsConfig;
use crate::delivery::{DeliveryActor, EventHub, Publish};
use crate::display::ToolProgress;
use crate::wakeups::Wakeups;
use actix::{Actor, Addr, Context, Handler, ResponseFuture};
use approval::Cleared;
use record::{finish, skipped, spill, start};
pub use record::{settle, Settled};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, RwLock, Semaphore};
use tokio_util::sync::CancellationToken;
use turnkey_storage::*;
use turnkey_tools::{Access, Registry, Tool, ToolContext, ToolOutput};

/// A call waits at most this long for the call before it to start (SPEC R9.4).
const START_GATE: Duration = Duration::from_secs(120);
/// A running call shows a sign of life this often (`tool.progress`).
const HEARTBEAT: Duration = Duration::from_secs(5);
/// After a stop, how long a running call gets to wind down before it is abandoned.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Characters of a result shown in `tool.completed`'s preview.
const PREVIEW_CHARS: usize = 200;

/// One call of the round, as `tool_runs` records it.
#[derive(Clone, Debug)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    /// The arguments as the model sent them (JSON text, possibly invalid).
    pub args: String,
    pub status: ToolRunStatus,
    pub decision: Option<ToolRunDecision>,
}

/// The round to run and the turn it belongs to.
pub struct Batch {
    pub turn: TurnRef,
    /// The principal whose input the turn runs (the admission's).
    pub principal: String,
    /// The session's owner: whose workspace its tools work in (`tools.isolation`).
    pub owner: String,
    pub fence: Fence,
    pub calls: Vec<PendingCall>,
    /// Cancelled when the turn must stop.
    pub stop: CancellationToken,
    /// Records a sign of life for the turn's liveness watchdog.
    pub activity: Arc<dyn Fn() + Send + Sync>,
    /// Asked when the turn stops: true when calls that have not started are to be left as
    /// they are for the next process to resume (a graceful shutdown), not settled `skipped`.
    pub park: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Which of `tool.started` and `tool.progress` the turn shows (SPEC R3.1); the run is
    /// recorded `started` either way, and `tool.completed` is always shown.
    pub tool_progress: ToolProgress,
    /// The tool of the turn's call before this round's first, for `tool_progress: new`.
    pub previous_tool: Option<String>,
    /// Tools registered but not offered to this session (a sub-agent's): answered as unknown.
    pub withheld: &'static [&'static str],
}

/// A result could not be made durable: the turn ends, and the in-memory result is not sent to
/// the model (SPEC R9.5).
#[derive(Debug, thiserror::Error)]
#[error("tool result not persisted: {0}")]
pub struct NotPersisted(pub String);

/// Runs a batch; answers with one persisted result row per call, in call order, or `None` for
/// a call left unsettled because the turn is parked (see `Batch::park`).
#[derive(actix::Message)]
#[rtype(result = "Result<Vec<Option<Message>>, NotPersisted>")]
pub struct ExecuteBatch(pub Batch);

/// What every batch shares.
struct Inner {
    store: Store,
    hub: EventHub,
    delivery: Addr<DeliveryActor>,
    registry: Arc<Registry>,
    config: ToolsConfig,
    workspace: PathBuf,
    data_dir: PathBuf,
    wakeups: Wakeups,
    /// Masks secrets in results before they are stored or spilled (SPEC R13.8).
    redactor: crate::redact::Redactor,
}

pub struct ToolExecActor {
    inner: Arc<Inner>,
}

impl ToolExecActor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        hub: EventHub,
        delivery: Addr<DeliveryActor>,
        registry: Arc<Registry>,
        config: ToolsConfig,
        workspace: PathBuf,
        data_dir: PathBuf,
        wakeups: Wakeups,
        redactor: crate::redact::Redactor,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                hub,
                delivery,
                registry,
                config,
                workspace,
                data_dir,
                wakeups,
                redactor,
            }),
        }
    }
}

impl Actor for ToolExecActor {
    type Context = Context<Self>;
}

impl Handler<ExecuteBatch> for ToolExecActor {
    type Result = ResponseFuture<Result<Vec<Option<Message>>, NotPersisted>>;

    fn handle(&mut self, msg: ExecuteBatch, _: &mut Context<Self>) -> Self::Result {
        let inner = self.inner.clone();
        Box::pin(async move { run_batch(inner, msg.0).await })
    }
}

/// Why calls that have not started are skipped.
#[derive(Clone, Copy, Debug)]
enum Halt {
    Stopped,
    BatchTimeout,
    Failed,
}

/// State of one running batch.
struct Round {
    inner: Arc<Inner>,
    batch: Batch,
    /// Cancelled on turn stop, batch timeout, or a persistence failure.
    stop: CancellationToken,
    halt: Mutex<Option<Halt>>,
    workers: Semaphore,
    exclusive: RwLock<()>,
    /// `gates[i]` turns true once call `i` started or settled: call `i + 1` may start.
    gates: Vec<watch::Sender<bool>>,
}

impl Round {
    fn halt(&self, why: Halt) {
        if let Ok(mut h) = self.halt.lock() {
            h.get_or_insert(why);
        }
        self.stop.cancel();
    }

    fn skip_reason(&self) -> String {
        let halt = self.halt.lock().ok().and_then(|h| *h);
        match halt {
            Some(Halt::BatchTimeout) => format!(
                "not run: the round of tool calls ran past its {} s limit",
                self.inner.config.batch_timeout_s
            ),
            Some(Halt::Failed) => {
                "not run: an earlier result of this round could not be saved".to_owned()
            }
            Some(Halt::Stopped) | None => "not run: the turn was stopped before it started".into(),
        }
    }
}

async fn run_batch(inner: Arc<Inner>, batch: Batch) -> Result<Vec<Option<Message>>, NotPersisted> {
    let n = batch.calls.len();
    let round = Arc::new(Round {
        workers: Semaphore::new(inner.config.max_workers.max(1)),
        exclusive: RwLock::new(()),
        gates: (0..n).map(|_| watch::channel(false).0).collect(),
        stop: CancellationToken::new(),
        halt: Mutex::new(None),
        inner,
        batch,
    });
    let watcher = {
        let round = round.clone();
        let limit = Duration::from_secs(round.inner.config.batch_timeout_s);
        tokio::spawn(async move {
            tokio::select! {
                _ = round.batch.stop.cancelled() => round.halt(Halt::Stopped),
                _ = tokio::time::sleep(limit) => round.halt(Halt::BatchTimeout),
                _ = round.stop.cancelled() => {}
            }
        })
    };
    let calls = (0..n).map(|i| {
        let round = round.clone();
        async move {
            let result = run_call(&round, i).await;
            round.gates[i].send_replace(true);
            if result.is_err() {
                round.halt(Halt::Failed);
            }
            result
        }
    });
    let results = futures::future::join_all(calls).await;
    watcher.abort();
    results.into_iter().collect()
}

/// Runs call `i` to a persisted result row (`None`: left for the next process, see `park`).
async fn run_call(round: &Round, i: usize) -> Result<Option<Message>, NotPersisted> {
    let call = &round.batch.calls[i];
    let offered = !round.batch.withheld.contains(&call.name.as_str());
    let Some(tool) = round.inner.registry.get(&call.name).filter(|_| offered) else {
        // SPEC R9.3: an unknown name is answered, never dispatched.
        let text = format!(
            "unknown tool: {:?} is not available in this session",
            call.name
        );
        return finish(round, call, ToolOutcome::Error, error_json(&text), None)
            .await
            .map(Some);
    };
    let args = match parse_args(&call.args) {
        Ok(a) => a,
        Err(why) => {
            let text = format!("invalid arguments: {why}");
            return finish(round, call, ToolOutcome::Error, error_json(&text), None)
                .await
                .map(Some);
        }
    };
    match approval::clearance(round, call, tool.as_ref(), &args).await? {
        Cleared::Run => {}
        Cleared::Answer(outcome, text) => {
            return finish(round, call, outcome, error_json(&text), None)
                .await
                .map(Some)
        }
        Cleared::Stopped => return skipped(round, call).await,
    }
    // The start-order gate: call i starts only after call i - 1 started (or settled), unless
    // that takes longer than START_GATE.
    if i > 0 {
        let mut prev = round.gates[i - 1].subscribe();
        tokio::select! {
            _ = prev.wait_for(|started| *started) => {}
            _ = tokio::time::sleep(START_GATE) => {}
            _ = round.stop.cancelled() => {}
        }
    }
    let _slot = tokio::select! {
        p = round.workers.acquire() => p.ok(),
        _ = round.stop.cancelled() => None,
    };
    // Held to the end of the call: an exclusive tool runs alone.
    let (_shared, _alone) = match (round.stop.is_cancelled(), tool.access()) {
        (true, _) => (None, None),
        (false, Access::Parallel) => (Some(round.exclusive.read().await), None),
        (false, Access::Exclusive) => (None, Some(round.exclusive.write().await)),
    };
    if round.stop.is_cancelled() {
        return skipped(round, call).await;
    }
    let previous = match i {
        0 => round.batch.previous_tool.as_deref(),
        _ => Some(round.batch.calls[i - 1].name.as_str()),
    };
    let shown = round.batch.tool_progress.shows_start(&call.name, previous);
    start(round, call, &args, shown).await?;
    round.gates[i].send_replace(true);
    let began = Instant::now();
    let output = execute(round, call, tool.as_ref(), args).await;
    crate::kill_point!("tool.before_result");
    let outcome = if output.is_error {
        ToolOutcome::Error
    } else {
        ToolOutcome::Ok
    };
    let content = if output.is_error {
        error_json(&output.content)
    } else {
        output.content
    };
    // Masked before anything of it is written: the row, the spill file, the event's preview
    // and every later model request are made from this (SPEC R13.8).
    let content = round.inner.redactor.redact(&content).into_owned();
    let content = spill(round, call, content);
    finish(round, call, outcome, content, Some(began.elapsed()))
        .await
        .map(Some)
}
/// The arguments as a JSON object; an empty string is `{}` (some models send that).
fn parse_args(raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!("expected a JSON object, got {other}")),
        Err(e) => Err(format!("not valid JSON ({e})")),
    }
}

/// An error result as the model gets it.
pub fn error_json(text: &str) -> String {
    json!({ "error": text }).to_string()
}

/// Runs the tool with heartbeats; a stop reaches it through `ctx.cancel`, and a call that does
/// not wind down within `STOP_GRACE` of the stop is abandoned with an error result.
async fn execute(round: &Round, call: &PendingCall, tool: &dyn Tool, args: Value) -> ToolOutput {
    let progress = progress_sink(round, call);
    let (workspace, hidden) = round
        .inner
        .config
        .workspace_of(&round.inner.workspace, &round.batch.owner);
    // A principal's own folder is made on its first call; the root exists since start-up.
    if hidden.is_some() {
        if let Err(e) = std::fs::create_dir_all(&workspace) {
            return ToolOutput::error(format!(
                "the workspace {} is not available: {e}",
                workspace.display()
            ));
        }
    }
    let ctx = ToolContext {
        workspace,
        hidden,
        checkpoints: round
            .inner
            .data_dir
            .join("checkpoints")
            .join(round.batch.turn.turn_id.to_string()),
        cancel: round.stop.child_token(),
        progress: progress.clone(),
        caller: turnkey_tools::Caller {
            session_id: round.batch.turn.session_id.to_string(),
            principal: round.batch.principal.clone(),
        },
    };
    let began = Instant::now();
    let work = tool.call(args, &ctx);
    tokio::pin!(work);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = beat.tick() => {
                (round.batch.activity)();
                progress(format!("running for {} s", began.elapsed().as_secs()));
            }
            _ = round.stop.cancelled() => break,
        }
    }
    match tokio::time::timeout(STOP_GRACE, work).await {
        Ok(out) => out,
        Err(_) => ToolOutput::error(format!(
            "stopped: the call did not end within {} s of the turn's stop",
            STOP_GRACE.as_secs()
        )),
    }
}

/// Publishes a tool's progress lines as `tool.progress` (a live view: a lost one is logged).
fn progress_sink(round: &Round, call: &PendingCall) -> turnkey_tools::ProgressSink {
    let delivery = round.inner.delivery.clone();
    let fence = round.batch.fence.clone();
    let turn = round.batch.turn.clone();
    let call_id = call.call_id.clone();
    let activity = round.batch.activity.clone();
    let shown = round.batch.tool_progress.shows_progress();
    Arc::new(move |message: String| {
        activity();
        if !shown {
            return;
        }
        delivery.do_send(Publish {
            fence: Some(fence.clone()),
            event: NewEvent {
                session_id: turn.session_id,
                kind: EventKind::ToolProgress,
                turn_id: Some(turn.turn_id),
                admission_id: Some(turn.admission_id),
                data: json!({ "call_id": call_id, "message": message }),
            },
        });
    })
}

/// Large results go to `data_dir/spill`; the model gets the head, the tail and the path. A
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r9_1_arguments_must_be_a_json_object() {
        assert_eq!(parse_args(""), Ok(json!({})));
        assert_eq!(parse_args("{\"a\":1}"), Ok(json!({"a": 1})));
        assert!(parse_args("[1]").is_err());
        assert!(parse_args("{oops").unwrap_err().contains("not valid JSON"));
    }
}
