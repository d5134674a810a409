//! The process of one MCP server: spawned with a scrubbed environment, its stderr kept as a
//! short tail for error messages, its exit status recorded, and killed when dropped. It runs in
//! the OS sandbox (`confine`): it may write in its working directory and a temp dir of its
//! own, removed once it has exited.
//!
//! turnkey spawns the child itself and hands rmcp only the pipes (rather than using rmcp's
//! child-process transport) so that a dead server's exit status and last stderr lines can be
//! told to the model, and so that stopping it never depends on a task spawned at drop time.
use super::{McpError, McpServerConfig};
use crate::confine::{Limits, PrivateTmp, Sandbox};
use crate::terminal::KEPT_ENV;
use std::collections::VecDeque;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

/// Lines of stderr kept, and the longest kept line, for error messages.
const STDERR_LINES: usize = 8;
const STDERR_LINE_CHARS: usize = 400;
/// After its stdin closes, how long a stopping server may take to exit before it is killed
/// (the MCP stdio shutdown sequence).
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A running server process. Dropping it closes nothing by itself but arms the stop: the
/// watcher waits [`EXIT_GRACE`] for the server to exit on its own, then kills it.
pub(super) struct ServerProcess {
    pub pid: Option<u32>,
    exit: watch::Receiver<Option<String>>,
    stderr: StderrTail,
    _stop: DropGuard,
}

/// The pipes rmcp talks over.
pub(super) type Pipes = (ChildStdout, ChildStdin);

impl ServerProcess {
    pub(super) fn spawn(
        config: &McpServerConfig,
        workdir: &Path,
        sandbox: &Sandbox,
    ) -> Result<(Self, Pipes), McpError> {
        let mut cmd = tokio::process::Command::new(&config.command);
        cmd.args(&config.args)
            .current_dir(workdir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: a Ctrl-C meant for the gateway does not kill the server under a
            // running call; the gateway stops it.
            .process_group(0)
            .kill_on_drop(true)
            // The gateway's environment holds provider keys and tokens; a server gets the
            // basics and what its entry sets.
            .env_clear();
        for key in KEPT_ENV {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        cmd.envs(&config.env);
        let spawn_error = |source: std::io::Error| McpError::Spawn {
            command: config.command.clone(),
            source,
        };
        let tmp = sandbox
            .confine(&mut cmd, workdir, None, Limits::SERVER)
            .map_err(|e| spawn_error(std::io::Error::other(e)))?;
        let mut child = cmd.spawn().map_err(spawn_error)?;
        let missing = || spawn_error(std::io::Error::other("a standard stream was not piped"));
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = StderrTail::default();
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(stderr.clone().collect(pipe, config.name.clone()));
        }
        let pid = child.id();
        let stop = CancellationToken::new();
        let (exit_tx, exit) = watch::channel(None);
        tokio::spawn(watch_exit(child, stop.clone(), exit_tx, tmp));
        let process = Self {
            pid,
            exit,
            stderr,
            _stop: stop.drop_guard(),
        };
        Ok((process, (stdout, stdin)))
    }

    pub(super) fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// How the server ended, waiting up to `wait` for the exit status (a closed pipe is
    /// usually seen a moment before the process is reaped), with its last stderr lines.
    pub(super) async fn ending(&self, wait: Duration) -> String {
        let mut exit = self.exit.clone();
        let status = tokio::time::timeout(wait, exit.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|s| s.clone()));
        let status = status.unwrap_or_else(|| "closed its connection".into());
        match self.stderr.text() {
            Some(tail) => format!("{status}; stderr: {tail}"),
            None => status,
        }
    }
}

/// Waits for the server to exit, or on stop for it to exit within [`EXIT_GRACE`] and then
/// kills it; publishes a description of the exit status. The server's temp dir goes once it
/// has exited.
async fn watch_exit(
    mut child: Child,
    stop: CancellationToken,
    exit: watch::Sender<Option<String>>,
    _tmp: Option<PrivateTmp>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        () = stop.cancelled() => match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            Ok(status) => status,
            Err(_) => match child.kill().await {
                Ok(()) => child.wait().await,
                Err(e) => Err(e),
            },
        },
    };
    // Nobody listens once the server handle is gone: nothing to tell then.
    exit.send_replace(Some(describe(status)));
}

fn describe(status: std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => format!("exited ({s})"),
        },
        Err(e) => format!("exited (status unknown: {e})"),
    }
}

/// The last lines a server wrote to stderr (its log and its traceback when it crashes).
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    async fn collect(self, pipe: ChildStderr, server: String) {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %server, "mcp server stderr: {line}");
            let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
            if line.trim().is_empty() {
                continue;
            }
            if let Ok(mut tail) = self.0.lock() {
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        }
    }

    fn text(&self) -> Option<String> {
        let tail = self.0.lock().ok()?;
        (!tail.is_empty()).then(|| tail.iter().cloned().collect::<Vec<_>>().join(" | "))
    }
}
