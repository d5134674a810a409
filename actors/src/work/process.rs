//! Background processes (SPEC R1.5, R13.10): `terminal` with `background: true` starts the
//! command under the wrapper of `turnkey_tools::background` and returns `{process_id}` at
//! once; `process` polls, reads the log of, or kills one of the session's processes.
//!
//! The row is written before the command starts (so any crash leaves a row to account for),
//! the pid and its start time after (with `process.started`). A watcher task follows it: as
//! its parent while this gateway started it, by polling `/proc` after a restart. When it ends,
//! the end is recorded once (`exited` with the wrapper's exit code, `killed` when `process
//! kill` or a graceful stop ended it, `unknown` when the wrapper left no exit code), then the
//! report is admitted into the session (request id `process:<process_id>`) and announced with
//! `process.exited`, once.
//!
//! A restarted gateway keeps watching a process that is still running (same boot, same pid,
//! same start time) and reports its real exit. One that ended meanwhile is reported from its
//! exit file; one whose machine rebooted, or whose record is gone, is reported `unknown`,
//! once. Processes are watched on the host that started them: a replica on another host
//! leaves them to it.
use super::report::{self, Report, END};
use super::Wired;
use crate::config::OnShutdown;
use crate::deps::Deps;
use crate::error::GatewayError;
use async_trait::async_trait;
use dashmap::DashMap;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use turnkey_storage::{BackgroundProcess, NewBackgroundProcess, ProcessEnd, ProcessId, SessionId};
use turnkey_tools::background::{self as bg, ProcessFiles};
use turnkey_tools::{Access, Tool, ToolContext, ToolOutput};

/// How often a watcher looks at its process (and bounds its log).
const POLL: Duration = Duration::from_millis(500);
/// How long `kill` waits after SIGTERM before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);
/// Bytes of output carried in a report, and answered by `process log`.
const TAIL_BYTES: u64 = 4_000;
const LOG_BYTES: u64 = 16 * 1024;
/// The longest command, in characters.
const MAX_COMMAND_CHARS: usize = 10_000;

/// The processes this gateway watches, with whether a kill was asked for each.
#[derive(Clone, Default)]
pub struct Watched(Arc<DashMap<ProcessId, bool>>);

/// The request id of a process's report.
pub fn request_id(id: ProcessId) -> String {
    format!("process:{id}")
}

fn files_of(p: &BackgroundProcess) -> ProcessFiles {
    ProcessFiles::new(PathBuf::from(&p.dir))
}

/// The built-in `terminal` confined by `sandbox`, to wrap; `None` if the tools crate has none.
pub fn builtin_terminal(sandbox: &turnkey_tools::Sandbox) -> Option<Arc<dyn Tool>> {
    let config = turnkey_tools::BuiltinConfig {
        enabled: vec!["terminal".into()],
        fetch_allow: Vec::new(),
        sandbox: sandbox.clone(),
    };
    turnkey_tools::builtin_registry(&config)
        .ok()?
        .get("terminal")
}

/// `terminal`, with `background: true` added: the built-in runs everything else.
pub struct BackgroundTerminal {
    inner: Arc<dyn Tool>,
    handles: super::Handles,
}

impl BackgroundTerminal {
    pub fn new(inner: Arc<dyn Tool>, handles: super::Handles) -> Self {
        Self { inner, handles }
    }
}

#[async_trait]
impl Tool for BackgroundTerminal {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        "Run a shell command (sh -c) in the workspace: exit_code, stdout, stderr (64 KiB each). \
         timeout_s: default 120, max 600. background: true returns a process_id now and the \
         exit later."
    }

    fn parameters(&self) -> Value {
        let mut p = self.inner.parameters();
        if let Some(props) = p.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert("background".into(), json!({"type": "boolean"}));
        }
        p
    }

    fn dangerous(&self) -> bool {
        self.inner.dangerous()
    }

    fn access(&self) -> Access {
        self.inner.access()
    }

    async fn call(&self, mut args: Value, ctx: &ToolContext) -> ToolOutput {
        let background = match args.as_object_mut().and_then(|o| o.remove("background")) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(other) => {
                return ToolOutput::error(format!(
                    "invalid arguments: `background` must be true or false, not {other}"
                ))
            }
        };
        if !background {
            return self.inner.call(args, ctx).await;
        }
        let w = match self.handles.get() {
            Ok(w) => w,
            Err(e) => return ToolOutput::error(e),
        };
        let command = match args.get("command").and_then(Value::as_str) {
            Some(c) if !c.trim().is_empty() => c.to_owned(),
            _ => return ToolOutput::error("invalid arguments: \"command\" is required"),
        };
        if command.chars().count() > MAX_COMMAND_CHARS {
            return ToolOutput::error(format!(
                "invalid arguments: \"command\" is longer than {MAX_COMMAND_CHARS} characters"
            ));
        }
        match start(w, ctx, &command).await {
            Ok(p) => ToolOutput::ok(
                json!({
                    "process_id": p.process_id,
                    "status": "running",
                    "note": "Started in the background. Its exit code and the end of its output \
                             arrive later as a message from the gateway; do not wait for it.",
                })
                .to_string(),
            ),
            Err(e) => ToolOutput::error(e),
        }
    }
}

/// Writes the row, starts the wrapper, records its pid, and sets a watcher on it.
async fn start(w: &Wired, ctx: &ToolContext, command: &str) -> Result<BackgroundProcess, String> {
    let deps = &w.deps;
    let row = super::caller_session(w, &ctx.caller.session_id).await?;
    let session = row.lineage();
    let running = deps
        .store
        .running_background_count(session)
        .await
        .map_err(super::store_err)?;
    let max = deps.config.tools.background_max;
    if running >= u64::from(max) {
        return Err(format!(
            "this session already runs {running} background processes (tools.background_max \
             is {max}); wait for one to end or kill one with the process tool"
        ));
    }
    let id = ProcessId::new();
    let dir = deps.config.data_dir.join("processes").join(id.to_string());
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = dir.canonicalize().unwrap_or(dir);
    let p = deps
        .store
        .create_background_process(NewBackgroundProcess {
            id,
            session_id: session,
            owner: row.owner.clone(),
            command: command.to_owned(),
            dir: dir.display().to_string(),
            boot_id: bg::boot_id(),
            watcher: deps.instance.owner.clone(),
        })
        .await
        .map_err(super::store_err)?;
    let files = files_of(&p);
    let started = match bg::start(
        command,
        &ctx.workspace,
        ctx.hidden.as_deref(),
        &files,
        &deps.sandbox,
    ) {
        Ok(s) => s,
        Err(e) => {
            let end = ProcessEnd {
                status: "unknown".into(),
                exit_code: None,
                tail: format!("the command could not be started: {e}"),
            };
            // It never ran: its end is recorded and reported like any other.
            if let Ok(p) = deps.store.end_background_process(id, &end).await {
                w.processes.0.insert(id, false);
                let w = w.clone();
                actix::spawn(async move { report_ended(&w, p).await });
            }
            return Err(format!("the command could not be started: {e}"));
        }
    };
    w.processes.0.insert(id, false);
    match deps
        .store
        .record_background_pid(&p, started.pid, started.pid_start)
        .await
    {
        Ok(ev) => deps.hub.publish(ev),
        // The wrapper's pid file names it for a restarted gateway all the same.
        Err(e) => tracing::warn!(process = %id, error = %e, "cannot record a background pid"),
    }
    tracing::info!(process = %id, %session, pid = started.pid, "background process started");
    let p = BackgroundProcess {
        pid: Some(started.pid),
        pid_start: started.pid_start,
        ..p
    };
    let watched = p.clone();
    let w2 = w.clone();
    actix::spawn(async move { watch(w2, watched, Some(started.child)).await });
    Ok(p)
}

/// Follows `p` until it ends (as its parent with `child`, else by polling), then records and
/// reports its end.
async fn watch(w: Wired, p: BackgroundProcess, child: Option<tokio::process::Child>) {
    let files = files_of(&p);
    let max_log = w.deps.config.tools.background_log_bytes;
    let mut ticks = tokio::time::interval(POLL);
    match child {
        Some(mut child) => loop {
            tokio::select! {
                r = child.wait() => {
                    if let Err(e) = r {
                        tracing::warn!(process = %p.process_id, error = %e, "waiting for a background process");
                    }
                    break;
                }
                _ = ticks.tick() => bound(&files, max_log),
            }
        },
        None => loop {
            ticks.tick().await;
            bound(&files, max_log);
            let pid = p.pid.or_else(|| files.written_pid());
            if !pid.is_some_and(|pid| bg::alive(pid, p.pid_start)) {
                break;
            }
        },
    }
    let killed = w.processes.0.get(&p.process_id).is_some_and(|k| *k);
    let end = end_of(&files, killed);
    finish(&w, &p, end).await;
}

fn bound(files: &ProcessFiles, max: u64) {
    if let Err(e) = files.bound_log(max) {
        tracing::warn!(dir = %files.dir.display(), error = %e, "cannot bound a background log");
    }
}

/// How a process whose wrapper ended, ended.
fn end_of(files: &ProcessFiles, killed: bool) -> ProcessEnd {
    let exit_code = files.exit_code();
    let status = match (exit_code, killed) {
        (_, true) => "killed",
        (Some(_), false) => "exited",
        (None, false) => "unknown",
    };
    ProcessEnd {
        status: status.into(),
        exit_code,
        tail: files.tail(TAIL_BYTES),
    }
}

/// Records the end (retrying while the store fails) and reports it.
async fn finish(w: &Wired, p: &BackgroundProcess, end: ProcessEnd) {
    let mut wait = Duration::from_millis(200);
    let ended = loop {
        match w
            .deps
            .store
            .end_background_process(p.process_id, &end)
            .await
        {
            Ok(ended) => break ended,
            Err(e) => {
                tracing::warn!(process = %p.process_id, error = %e, "cannot record a background process's end; retrying");
                if w.deps.shutdown.is_cancelled() {
                    // The next start finds it ended (exit file) or unknown.
                    return;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    };
    tracing::info!(process = %p.process_id, status = %ended.status, exit_code = ?ended.exit_code, "background process ended");
    report_ended(w, ended).await;
}

/// The report's text as the model reads it.
fn report_text(p: &BackgroundProcess) -> String {
    let code = p
        .exit_code
        .map_or_else(|| "none".to_owned(), |c| c.to_string());
    let what = match p.status.as_str() {
        "exited" => format!("It exited with code {code}."),
        "killed" => "It was killed (process kill, or the gateway stopped).".to_owned(),
        _ => "Its outcome cannot be known: the gateway lost track of it (a restart of the \
              machine, or its record is gone). It was not started again."
            .to_owned(),
    };
    let tail = p.tail.as_deref().unwrap_or_default();
    let output = if tail.trim().is_empty() {
        "(no output)".to_owned()
    } else {
        format!("Last output:\n{tail}")
    };
    format!(
        "[turnkey:process-report process_id={} status={} exit_code={code}]\nCommand: {}\n{what}\n\n{output}\n{END}",
        p.process_id, p.status, p.command
    )
}

/// Admits the report of an ended process and announces it, once. A refused admission is left
/// for the sweep.
async fn report_ended(w: &Wired, p: BackgroundProcess) {
    if let Err(e) = try_report(w, &p).await {
        tracing::warn!(process = %p.process_id, error = %e, code = e.code(), "process report not admitted yet; the sweep tries again");
    }
}

async fn try_report(w: &Wired, p: &BackgroundProcess) -> Result<(), GatewayError> {
    let receipt = report::admit(
        w,
        Report {
            session: p.session_id,
            owner: p.owner.clone(),
            request_id: request_id(p.process_id),
            text: report_text(p),
        },
    )
    .await?;
    if let Some(ev) = w
        .deps
        .store
        .record_process_report(p, receipt.admission_id)
        .await?
    {
        w.deps.hub.publish(ev);
    }
    w.processes.0.remove(&p.process_id);
    Ok(())
}

/// Every process not yet reported: ended ones are reported; running ones whose watcher died
/// on this host are taken over (or found ended, or unknown after a reboot).
pub async fn sweep(w: &Wired) {
    let list = match w.deps.store.unreported_background_processes().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the unreported background processes");
            return;
        }
    };
    let me = &w.deps.instance;
    for p in list {
        if p.status != "running" {
            // Ended, its report not in: admit it (a watcher doing the same at this moment gets
            // the same admission back; the report is recorded once).
            report_ended(w, p).await;
            continue;
        }
        if p.watcher.instance == me.id() || !me.is_dead(&p.watcher) {
            continue;
        }
        // Its watcher (a gateway on this host) is gone.
        if !w
            .deps
            .store
            .take_over_background_process(p.process_id, p.watcher.instance, &me.owner)
            .await
            .unwrap_or(false)
        {
            continue;
        }
        let files = files_of(&p);
        let same_boot = p.boot_id == bg::boot_id() && !p.boot_id.is_empty();
        let pid = p.pid.or_else(|| files.written_pid());
        let start = p.pid_start.or_else(|| pid.and_then(bg::start_time));
        let running = same_boot && pid.is_some_and(|pid| bg::alive(pid, start));
        if running {
            tracing::info!(process = %p.process_id, pid = ?pid, "watching a background process a stopped gateway started");
            w.processes.0.insert(p.process_id, false);
            let p = BackgroundProcess {
                pid,
                pid_start: start,
                ..p
            };
            let w2 = w.clone();
            actix::spawn(async move { watch(w2, p, None).await });
        } else {
            // Its exit file, if the wrapper wrote one (also across a reboot), else unknown.
            finish(w, &p, end_of(&files, false)).await;
        }
    }
}

/// A graceful stop: with `background_on_shutdown = "stop"`, ends every process this gateway
/// watches and records it `killed`; its report is admitted by the next start.
pub async fn stop_all(w: &Wired) {
    if w.deps.config.tools.background_on_shutdown == OnShutdown::Leave {
        return;
    }
    let ids: Vec<ProcessId> = w.processes.0.iter().map(|e| *e.key()).collect();
    for id in ids {
        let Ok(Some(p)) = w.deps.store.get_background_process(id).await else {
            continue;
        };
        match kill(w, &p).await {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!(process = %id, "background process stopped with the gateway")
            }
            Err(e) => {
                tracing::warn!(process = %id, error = %e, "cannot record a stopped background process")
            }
        }
    }
}

/// Kills the running background processes of `session` (its deletion), each with its group,
/// and records them `killed`.
pub async fn kill_session(w: &Wired, session: SessionId) -> Result<(), GatewayError> {
    for p in w.deps.store.background_processes(session).await? {
        if kill(w, &p).await? {
            tracing::info!(process = %p.process_id, %session, "background process killed with its session");
        }
    }
    Ok(())
}

/// Kills `p` with its group if it runs, and records it `killed` (its watcher, marked first,
/// leaves the end to this). Answers whether it ran.
async fn kill(w: &Wired, p: &BackgroundProcess) -> Result<bool, GatewayError> {
    if p.status != "running" {
        return Ok(false);
    }
    w.processes.0.insert(p.process_id, true);
    if let Some(pid) = p.pid.or_else(|| files_of(p).written_pid()) {
        bg::kill_group(pid, p.pid_start, KILL_GRACE).await;
    }
    w.deps
        .store
        .end_background_process(p.process_id, &end_of(&files_of(p), true))
        .await?;
    Ok(true)
}

/// `process {action, process_id}`.
pub struct ProcessTool {
    handles: super::Handles,
}

impl ProcessTool {
    pub fn new(handles: super::Handles) -> Self {
        Self { handles }
    }
}

#[async_trait]
impl Tool for ProcessTool {
    fn name(&self) -> &str {
        "process"
    }

    fn description(&self) -> &str {
        "Watch or kill a background process. One of this session, started by terminal with \
         background: true: `poll` its status and exit code, read the \
         end of its `log`, or `kill` it with its process group."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["poll", "log", "kill"]},
                "process_id": {"type": "string"}
            },
            "required": ["action", "process_id"],
            "additionalProperties": false
        })
    }

    fn dangerous(&self) -> bool {
        false
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let w = match self.handles.get() {
            Ok(w) => w,
            Err(e) => return ToolOutput::error(e),
        };
        ToolOutput::from_result(process_call(w, &args, ctx).await.map(|v| v.to_string()))
    }
}

async fn process_call(w: &Wired, args: &Value, ctx: &ToolContext) -> Result<Value, String> {
    super::only_known(args, &["action", "process_id"])
        .map_err(|e| format!("invalid arguments: {e}"))?;
    let action = args.get("action").and_then(Value::as_str).unwrap_or("");
    let id: ProcessId = args
        .get("process_id")
        .and_then(Value::as_str)
        .and_then(|s| s.trim().parse().ok())
        .ok_or("invalid arguments: `process_id` is required: an id terminal returned")?;
    let lineage = super::caller_session(w, &ctx.caller.session_id)
        .await?
        .lineage();
    let p = w
        .deps
        .store
        .get_background_process(id)
        .await
        .map_err(super::store_err)?
        .filter(|p| p.session_id == lineage)
        .ok_or_else(|| format!("no background process {id} in this session"))?;
    let files = files_of(&p);
    match action {
        "poll" => Ok(json!({
            "process_id": p.process_id, "command": p.command, "status": p.status,
            "exit_code": p.exit_code, "log_bytes": files.log_bytes(),
            "running_for_s": (p.ended_at.unwrap_or_else(turnkey_storage::now_ms) - p.started_at) / 1000,
        })),
        "log" => Ok(json!({
            "process_id": p.process_id, "status": p.status, "log": files.tail(LOG_BYTES),
        })),
        "kill" => {
            if p.status != "running" {
                return Ok(
                    json!({"process_id": p.process_id, "status": p.status, "note": "it had already ended"}),
                );
            }
            let me = &w.deps.instance;
            if p.watcher.host != me.owner.host {
                return Err(format!(
                    "process {id} runs on another host ({}); kill it from a session served there",
                    p.watcher.host
                ));
            }
            w.processes.0.insert(id, true);
            let pid = p.pid.or_else(|| files.written_pid());
            let signalled = match pid {
                Some(pid) => bg::kill_group(pid, p.pid_start, KILL_GRACE).await,
                None => false,
            };
            if p.watcher.instance != me.id() {
                // Another live gateway on this host watches it: it records the exit.
                return Ok(json!({"process_id": id, "signalled": signalled}));
            }
            Ok(json!({
                "process_id": id, "signalled": signalled, "status": "killed",
                "note": "Its report arrives as a message from the gateway.",
            }))
        }
        other => Err(format!(
            "invalid arguments: `action` must be \"poll\", \"log\" or \"kill\", not {other:?}"
        )),
    }
}

/// The processes of a session, for `GET /v1/sessions/{id}/processes`.
pub async fn list(deps: &Deps, session: SessionId) -> Result<Vec<BackgroundProcess>, GatewayError> {
    Ok(deps.store.background_processes(session).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: &str, exit_code: Option<i64>, tail: &str) -> BackgroundProcess {
        BackgroundProcess {
            process_id: ProcessId::new(),
            session_id: SessionId::new(),
            owner: "op".into(),
            command: "make test".into(),
            dir: "/tmp/x".into(),
            pid: Some(1),
            pid_start: None,
            boot_id: String::new(),
            watcher: crate::instance::Instance::current().owner,
            status: status.into(),
            exit_code,
            tail: Some(tail.into()),
            started_at: 0,
            ended_at: Some(1),
            reported_at: None,
        }
    }

    #[test]
    fn r1_5_process_reports_say_how_it_ended_and_are_marked_internal() {
        let t = report_text(&row("exited", Some(2), "FAILED: 3 tests\n"));
        assert!(t.starts_with("[turnkey:process-report process_id="), "{t}");
        assert!(t.contains("status=exited exit_code=2"), "{t}");
        assert!(
            t.contains("exited with code 2") && t.contains("FAILED: 3 tests"),
            "{t}"
        );
        assert!(t.ends_with(END), "{t}");
        let t = report_text(&row("unknown", None, ""));
        assert!(
            t.contains("cannot be known") && t.contains("(no output)"),
            "{t}"
        );
        let t = report_text(&row("killed", Some(143), "x"));
        assert!(t.contains("was killed"), "{t}");
    }

    #[test]
    fn r1_5_an_end_without_an_exit_file_is_unknown_unless_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ProcessFiles::new(dir.path());
        assert_eq!(end_of(&files, false).status, "unknown");
        assert_eq!(end_of(&files, true).status, "killed");
        std::fs::write(dir.path().join("exit"), "7").expect("write");
        let end = end_of(&files, false);
        assert_eq!((end.status.as_str(), end.exit_code), ("exited", Some(7)));
    }
}
