//! Starts the real `turnkey` binary for a test: writes its config into a temp dir, spawns
//! `turnkey serve`, waits for the listening line, and kills/restarts it like a crash would.
mod binary;
mod options;

pub use binary::turnkey_binary;
pub use options::TurnkeyOptions;

use crate::api::Api;
use crate::wait::within;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `--bind` of a start that takes any free port.
const FREE_PORT: &str = "127.0.0.1:0";
/// How long a start may take before the test gives up (migrations included).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The service's default `[agent] max_resumes` (SPEC R13.9): a turn that started no side effect
/// resumes by itself after this many crashes in a row; one more leaves it `unknown`.
pub const DEFAULT_MAX_RESUMES: usize = 2;

/// Environment that must not leak from the developer's shell into the service under test.
const SCRUBBED_ENV: &[&str] = &[
    "DATABASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "FAILPOINTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// A running (or killed) turnkey process with its own temp dir.
pub struct Turnkey {
    /// `http://127.0.0.1:PORT` of the current process.
    pub url: String,
    pub token: String,
    pub database_url: String,
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    options: TurnkeyOptions,
    child: Option<Child>,
    starts: u32,
    stdout: Arc<Mutex<Vec<String>>>,
    /// `--bind` of the next start.
    bind: String,
}

impl Turnkey {
    /// Starts a process; panics (with its log) if it does not print its listening line in time.
    pub async fn start(options: TurnkeyOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("turnkey-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create temp dir: {e}"));
        let database_url = options
            .database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}/turnkey.db?mode=rwc", dir.path().display()));
        let token = format!("tk-test-{}", uuid::Uuid::new_v4().simple());
        let config_path = dir.path().join("turnkey.toml");
        options::write_config(&config_path, dir.path(), &database_url, &token, &options);
        let mut tk = Self {
            url: String::new(),
            token,
            database_url,
            dir,
            config_path,
            options,
            child: None,
            starts: 0,
            stdout: Arc::new(Mutex::new(Vec::new())),
            bind: FREE_PORT.to_owned(),
        };
        let env = tk.options.env.clone();
        if let Err(e) = tk.spawn(&env).await {
            panic!("{e}\n{}", tk.log_tail(200));
        }
        if tk.options.generated_token {
            let file = tk.dir.path().join("data").join("operator.token");
            tk.token = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
                .trim()
                .to_owned();
        }
        tk
    }

    /// An API client for the current process with the operator token.
    pub fn api(&self) -> Api {
        Api::new(&self.url, Some(&self.token))
    }

    /// Kills the current process if it still runs and starts a new one on the same dir and
    /// database, with the environment given at start.
    pub async fn restart(&mut self) {
        let env = self.options.env.clone();
        self.restart_with_env(&env).await;
    }

    /// Like `restart`, with this extra environment instead of the original one.
    pub async fn restart_with_env(&mut self, env: &[(String, String)]) {
        self.kill();
        if let Err(e) = self.spawn(env).await {
            panic!("restart failed: {e}\n{}", self.log_tail(200));
        }
    }

    /// Restarts with `env` (which sets a failpoint that kills the process) and waits, bounded,
    /// until it dies there. Work the start-up itself picks up (recovery resuming a turn) may
    /// reach the failpoint before the process prints its listening line, so that is not
    /// required here; a process that neither dies nor lives past `timeout` fails the test.
    pub async fn restart_to_die_at(
        &mut self,
        env: &[(String, String)],
        point: &str,
        timeout: Duration,
    ) {
        self.kill();
        if let Err(e) = self.spawn(env).await {
            // Died before listening: that is the failpoint if the log says so.
            let log = self.stderr();
            let this_start = log.rsplit("=== start #").next().unwrap_or_default();
            if !this_start.contains(&format!("failpoint {point}: SIGKILL")) {
                panic!("restart failed: {e}\n{}", self.log_tail(200));
            }
            return;
        }
        if self.wait_exit(timeout).await.is_none() {
            panic!(
                "turnkey did not die at failpoint {point}\n{}",
                self.log_tail(200)
            );
        }
    }

    /// Kills the current process and starts a new one on the same address (and dir and
    /// database), as a client that keeps its URL sees a server restart.
    pub async fn restart_at_same_address(&mut self) {
        self.kill();
        self.start_again_at_same_address().await;
    }

    /// Starts a new process on the address of the last one, which must have stopped (killed,
    /// terminated or exited).
    pub async fn start_again_at_same_address(&mut self) {
        let addr = self
            .url
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("no address to restart at: {:?}", self.url))
            .to_owned();
        self.bind = addr;
        let env = self.options.env.clone();
        let started = self.spawn(&env).await;
        self.bind = FREE_PORT.to_owned();
        if let Err(e) = started {
            panic!(
                "restart at {} failed: {e}\n{}",
                self.url,
                self.log_tail(200)
            );
        }
    }

    /// SIGKILL and reap; a process that already died is only reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                // ESRCH only means it died between the check and the signal.
                if let Err(e) = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL) {
                    eprintln!("SIGKILL turnkey: {e}");
                }
            }
            if let Err(e) = child.wait() {
                eprintln!("waiting for turnkey: {e}");
            }
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit; SIGKILL if it does not come.
    pub async fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let pid = self.child.as_ref().map(|c| Pid::from_raw(c.id() as i32))?;
        if let Err(e) = kill(pid, Signal::SIGTERM) {
            eprintln!("SIGTERM turnkey: {e}");
        }
        let status = self.wait_exit(timeout).await;
        if status.is_none() {
            self.kill();
        }
        status
    }

    /// Waits (bounded) until the process exits on its own, e.g. at a failpoint.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        // A failed `try_wait` ends the wait with no status, as the bound passing does.
        let status = within(timeout, || {
            let answer = child.try_wait();
            async move {
                match answer {
                    Ok(None) => None,
                    Ok(Some(status)) => Some(Some(status)),
                    Err(_) => Some(None),
                }
            }
        })
        .await
        .flatten();
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// SIGSTOP: the process stays alive but runs nothing, its sockets and database connections
    /// open, as in a VM pause, a long GC stop or a debugger; [`resume`](Self::resume) goes on.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    fn signal(&self, signal: Signal) {
        let pid = self
            .child
            .as_ref()
            .map(|c| Pid::from_raw(c.id() as i32))
            .unwrap_or_else(|| panic!("no turnkey process to send {signal} to"));
        kill(pid, signal).unwrap_or_else(|e| panic!("{signal} turnkey: {e}"));
    }

    /// Everything the process (all its starts) wrote to stderr so far: its log.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    /// Whether the current process is still alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The last `lines` lines of stderr (all starts) followed by stdout of the last start.
    pub fn log_tail(&self, lines: usize) -> String {
        let stderr = std::fs::read_to_string(self.stderr_path()).unwrap_or_default();
        let err_lines: Vec<&str> = stderr.lines().collect();
        let from = err_lines.len().saturating_sub(lines);
        let stdout = self.stdout.lock().map(|s| s.join("\n")).unwrap_or_default();
        format!(
            "--- turnkey stderr ({}) ---\n{}\n--- turnkey stdout ---\n{}",
            self.stderr_path().display(),
            err_lines[from..].join("\n"),
            stdout
        )
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("turnkey.stderr.log")
    }

    async fn spawn(&mut self, env: &[(String, String)]) -> Result<(), String> {
        let binary = match &self.options.binary {
            Some(path) => path.clone(),
            None => turnkey_binary()?,
        };
        self.starts += 1;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stderr_path())
            .map_err(|e| format!("cannot open log: {e}"))?;
        writeln!(log, "=== start #{} env {:?} ===", self.starts, env)
            .map_err(|e| format!("cannot write log: {e}"))?;
        let mut cmd = Command::new(&binary);
        cmd.arg("serve")
            .arg("--config")
            .arg(&self.config_path)
            .arg("--bind")
            .arg(&self.bind)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        for key in SCRUBBED_ENV {
            cmd.env_remove(key);
        }
        for (key, _) in std::env::vars() {
            if key.starts_with("TURNKEY__") {
                cmd.env_remove(key);
            }
        }
        cmd.env("NO_PROXY", "127.0.0.1,localhost")
            .env("NO_COLOR", "1")
            .env(
                "RUST_LOG",
                std::env::var("TURNKEY_TEST_LOG").unwrap_or("info".into()),
            );
        for (key, value) in env {
            cmd.env(key, value);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        self.child = Some(child);
        let ready = read_stdout(stdout, self.stdout.clone(), self.starts);
        match tokio::time::timeout(START_TIMEOUT, ready).await {
            Ok(Ok(Ok(addr))) => {
                self.url = format!("http://{addr}");
                Ok(())
            }
            Ok(Ok(Err(e))) => {
                // Reap it so the exit status shows in the message.
                let status = self.wait_exit(Duration::from_secs(5)).await;
                Err(format!("turnkey did not start: {e} (exit: {status:?})"))
            }
            Ok(Err(_)) => Err("turnkey stdout reader vanished".into()),
            Err(_) => {
                self.kill();
                Err(format!(
                    "turnkey printed no `listening on http://` line within {START_TIMEOUT:?}"
                ))
            }
        }
    }
}

impl Drop for Turnkey {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail(150));
        }
    }
}

/// Reads stdout on a thread: every line goes into `sink`; the first listening line resolves
/// the returned receiver with its address; end of output before that resolves it with an error.
fn read_stdout(
    stdout: std::process::ChildStdout,
    sink: Arc<Mutex<Vec<String>>>,
    start: u32,
) -> tokio::sync::oneshot::Receiver<Result<String, String>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("turnkey-stdout".into())
        .spawn(move || {
            let mut tx = Some(tx);
            if let Ok(mut lines) = sink.lock() {
                lines.push(format!("=== start #{start} ==="));
            }
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split("listening on http://").nth(1) {
                    if let Some(tx) = tx.take() {
                        // The receiver may have timed out already; nothing else to tell.
                        drop(tx.send(Ok(addr.trim().trim_end_matches('/').to_string())));
                    }
                }
                if let Ok(mut lines) = sink.lock() {
                    lines.push(line);
                }
            }
            if let Some(tx) = tx.take() {
                drop(tx.send(Err("stdout closed before the listening line".into())));
            }
        });
    if let Err(e) = spawned {
        eprintln!("cannot spawn stdout reader: {e}");
    }
    rx
}
