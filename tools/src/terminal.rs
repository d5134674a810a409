//! `terminal {command, timeout_s?}`: `sh -c` in the workspace, in a process group of its own
//! so that a timeout or an interrupt kills everything the command started (SPEC R9.4).
//! Output is capped per stream; the result is JSON with the exit code. The command runs in
//! the OS sandbox (`confine`) unless `tools.sandbox = "off"`.
use crate::args::parse;
use crate::confine::{Limits, Sandbox};
use crate::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

pub(crate) const DEFAULT_TIMEOUT_S: f64 = 120.0;
pub(crate) const MAX_TIMEOUT_S: f64 = 600.0;
/// Bytes kept of each of stdout and stderr (the head; the rest is counted, not kept).
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;
/// Variables passed to the command. The gateway's own environment holds provider keys and
/// tokens, which a command (and so the model) must not be able to print.
pub(crate) const KEPT_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM",
];
/// How long the output readers may still take after the process group is gone: a process
/// that left the group (setsid) may hold the pipes open.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

pub(crate) struct Terminal {
    /// How often a running command reports `running for N s`.
    pub progress_every: Duration,
    /// What confines the command (SPEC R13.7).
    pub sandbox: Sandbox,
}

impl Default for Terminal {
    fn default() -> Self {
        Self {
            progress_every: Duration::from_secs(5),
            sandbox: Sandbox::off(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    timeout_s: Option<f64>,
}

#[async_trait]
impl Tool for Terminal {
    fn name(&self) -> &str {
        "terminal"
    }

    fn description(&self) -> &str {
        "Run a shell command (sh -c) in the workspace: exit_code, stdout, stderr (64 KiB each). \
         timeout_s: default 120, max 600; then it is killed with all it started."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "number"}
            },
            "required": ["command"]
        })
    }

    fn dangerous(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let args = match parse::<Args>(args) {
            Ok(args) => args,
            Err(e) => return ToolOutput::error(e),
        };
        if args.command.trim().is_empty() {
            return ToolOutput::error("invalid arguments: \"command\" is empty");
        }
        let timeout_s = args.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
        if !(timeout_s > 0.0 && timeout_s <= MAX_TIMEOUT_S) {
            return ToolOutput::error(format!(
                "invalid arguments: timeout_s must be more than 0 and at most {MAX_TIMEOUT_S}, got {timeout_s}"
            ));
        }
        self.run(&args.command, Duration::from_secs_f64(timeout_s), ctx)
            .await
    }
}

/// Why the command stopped.
enum End {
    Exited(std::process::ExitStatus),
    TimedOut,
    Interrupted,
}

impl Terminal {
    async fn run(&self, command: &str, timeout: Duration, ctx: &ToolContext) -> ToolOutput {
        if ctx.cancel.is_cancelled() {
            // Interrupted before it started: no side effect at all.
            let result = json!({"exit_code": null, "stdout": "", "stderr": "", "timed_out": false, "killed": "interrupted"});
            return ToolOutput::error(result.to_string());
        }
        let mut cmd = shell(command, &ctx.workspace);
        // Kept until the command is over, then removed with what the command left in it.
        let _tmp = match self.sandbox.confine(
            &mut cmd,
            &ctx.workspace,
            ctx.hidden.as_deref(),
            Limits::COMMAND,
        ) {
            Ok(tmp) => tmp,
            Err(e) => return ToolOutput::error(format!("the command was not started: {e}")),
        };
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if !self.sandbox.is_off() => {
                return ToolOutput::error(format!(
                    "failed to start sh in the sandbox (tools.sandbox = \"{}\"): {e}; the \
                     command did not run",
                    self.sandbox.state().mode.as_str()
                ))
            }
            Err(e) => return ToolOutput::error(format!("failed to start sh: {e}")),
        };
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        // If this future is dropped mid-run (the caller gave up on it), the group still dies.
        let mut group = GroupGuard(pgid);
        let stdout = Capture::start(child.stdout.take());
        let stderr = Capture::start(child.stderr.take());

        let started = Instant::now();
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let first_tick = tokio::time::Instant::now() + self.progress_every;
        let mut ticks = tokio::time::interval_at(first_tick, self.progress_every);
        let end = loop {
            tokio::select! {
                status = child.wait() => match status {
                    Ok(status) => break End::Exited(status),
                    Err(e) => {
                        return ToolOutput::error(format!("waiting for the command failed: {e}"));
                    }
                },
                _ = &mut deadline => break End::TimedOut,
                _ = ctx.cancel.cancelled() => break End::Interrupted,
                _ = ticks.tick() => {
                    (ctx.progress)(format!("running for {} s", started.elapsed().as_secs()));
                }
            }
        };

        // Whatever the shell left running in its group goes too: no orphan outlives the call.
        group.kill_now();
        if !matches!(end, End::Exited(_)) {
            // SIGKILL cannot be ignored, so this returns promptly; bounded all the same.
            match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "reaping a killed terminal command"),
                Err(_) => tracing::warn!("a killed terminal command did not exit within 5 s"),
            }
        }
        reap_group(pgid).await;
        let stdout = stdout.finish().await;
        let stderr = stderr.finish().await;

        outcome(&end, stdout, stderr, timeout)
    }
}

/// `sh -c command` in `workspace`, in a process group of its own, with only [`KEPT_ENV`] of
/// the gateway's environment and its output piped.
fn shell(command: &str, workspace: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A new group whose id is the shell's pid: killpg reaches every descendant that
        // did not leave the group on purpose.
        .process_group(0)
        .kill_on_drop(true)
        .env_clear();
    for key in KEPT_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    cmd
}

/// The tool's result: the exit code (and signal) or how the command was killed, and what it
/// wrote; an error unless it exited by itself.
fn outcome(end: &End, stdout: String, stderr: String, timeout: Duration) -> ToolOutput {
    let mut result = json!({
        "exit_code": null,
        "stdout": stdout,
        "stderr": stderr,
        "timed_out": matches!(end, End::TimedOut),
    });
    let is_error = match end {
        End::Exited(status) => {
            result["exit_code"] = json!(status.code());
            if let Some(signal) = status.signal() {
                result["signal"] = json!(signal);
            }
            false
        }
        End::TimedOut => {
            result["killed"] = json!(format!("timed out after {} s", timeout.as_secs_f64()));
            true
        }
        End::Interrupted => {
            result["killed"] = json!("interrupted");
            true
        }
    };
    ToolOutput {
        content: result.to_string(),
        is_error,
    }
}

/// Kills the process group when dropped, unless `kill_now` already did.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    /// Kills the group once; later calls and the drop do nothing, so a group id that was
    /// freed and reused by then is never signalled.
    fn kill_now(&mut self) {
        kill_group(self.0.take());
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// SIGKILL to the whole group. "No such process" means the group is already gone.
fn kill_group(pgid: Option<Pid>) {
    let Some(pgid) = pgid else { return };
    match killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(pgid = pgid.as_raw(), error = %e, "killing a terminal process group")
        }
    }
}

/// Reaps the killed group's members that became our children. Orphans are re-parented to
/// init, or to this process when it is init (pid 1 in a container) or a child subreaper; in
/// those two cases nobody else would reap them. Bounded: a zombie held by another parent
/// keeps the group alive, and that is not ours to wait for.
async fn reap_group(pgid: Option<Pid>) {
    let Some(pgid) = pgid else { return };
    let we_adopt = nix::unistd::getpid().as_raw() == 1
        || nix::sys::prctl::get_child_subreaper().unwrap_or(false);
    if !we_adopt {
        return;
    }
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        match waitpid(Pid::from_raw(-pgid.as_raw()), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => {
                // Signal 0 only asks whether any member (zombies included) is left.
                if killpg(pgid, None) == Err(Errno::ESRCH) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(pgid = pgid.as_raw(), error = %e, "reaping a terminal process group");
                return;
            }
        }
    }
}

/// The head of one output stream, plus a count of what did not fit.
#[derive(Default)]
struct Captured {
    head: Vec<u8>,
    total: u64,
}

struct Capture {
    shared: Arc<Mutex<Captured>>,
    reader: Option<JoinHandle<()>>,
}

impl Capture {
    fn start<R: AsyncRead + Unpin + Send + 'static>(stream: Option<R>) -> Self {
        let shared = Arc::new(Mutex::new(Captured::default()));
        let reader = stream.map(|mut stream| {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                // Keep reading past the cap so the command never blocks on a full pipe.
                while let Ok(n @ 1..) = stream.read(&mut buf).await {
                    let mut captured = shared.lock().unwrap_or_else(|p| p.into_inner());
                    let room = OUTPUT_CAP.saturating_sub(captured.head.len()).min(n);
                    captured.head.extend_from_slice(&buf[..room]);
                    captured.total += n as u64;
                }
            })
        });
        Self { shared, reader }
    }

    /// Waits (briefly) for the stream to end and renders what was captured.
    async fn finish(self) -> String {
        if let Some(mut reader) = self.reader {
            if tokio::time::timeout(DRAIN_GRACE, &mut reader)
                .await
                .is_err()
            {
                reader.abort();
            }
        }
        let captured = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let mut text = String::from_utf8_lossy(&captured.head).into_owned();
        let dropped = captured.total - captured.head.len() as u64;
        if dropped > 0 {
            text.push_str(&format!(
                "\n[... truncated: {dropped} more bytes not shown]"
            ));
        }
        text
    }
}

#[cfg(test)]
#[path = "terminal_tests.rs"]
mod tests;
