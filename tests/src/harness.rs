//! Starts the real `turnkey` binary for a test: writes its config into a temp dir, spawns
//! `turnkey serve`, waits for the listening line, and kills/restarts it like a crash would.
use crate::api::Api;
use crate::scripted::ScriptedProvider;
use crate::wait::within;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `--bind` of a start that takes any free port.
const FREE_PORT: &str = "127.0.0.1:0";
/// How long a start may take before the test gives up (migrations included).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The service's default `[agent] max_resumes` (SPEC R13.9): a turn that started no side effect
/// resumes by itself after this many crashes in a row; one more leaves it `unknown`.
pub const DEFAULT_MAX_RESUMES: usize = 2;

/// How long the one-off `cargo build` of a missing binary may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);
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

/// How to configure one turnkey process.
#[derive(Clone, Debug)]
pub struct TurnkeyOptions {
    /// `None`: a SQLite file in the temp dir.
    pub database_url: Option<String>,
    pub provider_base_url: String,
    /// The `api_key` of the scripted provider entry; distinct keys tell processes apart in
    /// the provider's recorded `authorization` headers.
    pub provider_api_key: String,
    /// The `model` of the `[[providers]]` entry.
    pub provider_model: String,
    /// Its `context_window` (32,000 unless a test needs pressure sooner).
    pub provider_context_window: u32,
    /// Extra environment, e.g. `("FAILPOINTS", "admission.after_commit=return")`.
    pub env: Vec<(String, String)>,
    pub lease_ttl_s: u64,
    pub lease_refresh_s: u64,
    pub lease_wait_s: u64,
    /// `[lease] watchdog_s`, written only when not 0.
    pub lease_watchdog_s: u64,
    /// Appended verbatim to turnkey.toml; may add sections (`[agent]`, `[tools]`, ...) but not
    /// repeat `[server]`, `[database]`, `[auth]` or `[lease]`.
    pub extra_toml: String,
    /// Extra keys of the scripted `[[providers]]` entry, e.g. `max_retries = 0`.
    pub provider_toml: String,
    /// The scripted provider's wire: `openai` (the default) or `anthropic`.
    pub provider_kind: String,
    /// The executable to run instead of this build's `turnkey` (the harness's self-test runs
    /// a stand-in); per instance, so tests sharing the test binary are not affected.
    pub binary: Option<PathBuf>,
    /// Whether turnkey.toml has the scripted `[[providers]]` entry (a first run has none).
    pub with_provider: bool,
    /// `server.detect_providers`: none by default, so that no test finds a server another
    /// test (or the machine) runs on a usual port.
    pub detect_providers: Vec<String>,
    /// No `[auth] operator_token`: the service generates one into `data/operator.token`, as on
    /// a first start, and the harness reads it from there.
    pub generated_token: bool,
}

impl TurnkeyOptions {
    /// Defaults for a test against `provider`: short leases so cross-process tests stay fast.
    pub fn new(provider: &ScriptedProvider) -> Self {
        Self::for_base_url(&provider.base_url)
    }

    /// The same defaults against any Chat Completions server, e.g. the local test model.
    pub fn for_base_url(base_url: &str) -> Self {
        Self {
            database_url: None,
            provider_base_url: base_url.to_string(),
            provider_api_key: "sk-test".into(),
            provider_model: "scripted-model".into(),
            provider_context_window: 32_000,
            env: Vec::new(),
            lease_ttl_s: 10,
            lease_refresh_s: 2,
            lease_wait_s: 60,
            lease_watchdog_s: 0,
            extra_toml: String::new(),
            provider_toml: String::new(),
            provider_kind: "openai".into(),
            binary: None,
            with_provider: true,
            detect_providers: Vec::new(),
            generated_token: false,
        }
    }

    /// Leaves the operator token to the service (see [`TurnkeyOptions::generated_token`]).
    pub fn generated_token(mut self) -> Self {
        self.generated_token = true;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn database(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_string());
        self
    }

    pub fn provider_api_key(mut self, key: &str) -> Self {
        self.provider_api_key = key.to_string();
        self
    }

    pub fn provider_model(mut self, model: &str) -> Self {
        self.provider_model = model.to_string();
        self
    }

    pub fn context_window(mut self, tokens: u32) -> Self {
        self.provider_context_window = tokens;
        self
    }

    /// Runs `path` instead of this build's `turnkey` (see [`TurnkeyOptions::binary`]).
    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_path_buf());
        self
    }

    pub fn extra_toml(mut self, toml: &str) -> Self {
        self.extra_toml.push_str(toml);
        self
    }

    /// No `[[providers]]` entry; `serve` asks `detect` (base URLs) for a local server instead.
    pub fn first_run(mut self, detect: &[&str]) -> Self {
        self.with_provider = false;
        self.detect_providers = detect.iter().map(|u| (*u).to_owned()).collect();
        self
    }

    /// Speaks to the scripted provider over `kind`'s wire (`openai` or `anthropic`).
    pub fn provider_kind(mut self, kind: &str) -> Self {
        self.provider_kind = kind.to_string();
        self
    }

    pub fn provider_toml(mut self, toml: &str) -> Self {
        self.provider_toml.push_str(toml);
        self.provider_toml.push('\n');
        self
    }
}

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
        write_config(&config_path, dir.path(), &database_url, &token, &options);
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

fn write_config(path: &Path, dir: &Path, database_url: &str, token: &str, o: &TurnkeyOptions) {
    let token = if o.generated_token {
        String::new()
    } else {
        format!("operator_token = \"{token}\"")
    };
    let toml = format!(
        r#"[server]
data_dir = "{data}"
detect_providers = {detect:?}

[database]
url = "{database_url}"

[auth]
{token}

{provider}
[lease]
ttl_s = {ttl}
refresh_s = {refresh}
wait_s = {wait}
{watchdog}
{memory}
{extra}
"#,
        data = dir.join("data").display(),
        detect = o.detect_providers,
        provider = if o.with_provider {
            format!(
                r#"[[providers]]
name = "scripted"
kind = "{kind}"
base_url = "{base}"
api_key = "{api_key}"
model = "{model}"
context_window = {window}
{provider_extra}"#,
                kind = o.provider_kind,
                base = o.provider_base_url,
                window = o.provider_context_window,
                api_key = o.provider_api_key,
                model = o.provider_model,
                provider_extra = o.provider_toml,
            )
        } else {
            String::new()
        },
        ttl = o.lease_ttl_s,
        refresh = o.lease_refresh_s,
        wait = o.lease_wait_s,
        watchdog = if o.lease_watchdog_s == 0 {
            String::new()
        } else {
            format!("watchdog_s = {}\n", o.lease_watchdog_s)
        },
        // The post-delivery review (every 10 turns by default) would take a scripted reply
        // meant for a turn; tests of the review turn it on with their own `[memory]`.
        memory = if o.extra_toml.contains("[memory]") {
            ""
        } else {
            "[memory]\nreview_every = 0\n"
        },
        extra = o.extra_toml,
    );
    std::fs::write(path, toml).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// True when a source file of the service is newer than `binary`: `cargo test -p turnkey-tests`
/// does not rebuild another package's binary, and a stale one would test old code.
fn sources_newer_than(binary: &Path) -> bool {
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
        return true;
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf);
    let Some(workspace) = workspace else {
        return false;
    };
    let mut stack: Vec<PathBuf> = [
        "web",
        "actors",
        "storage",
        "providers",
        "tools",
        "migration",
    ]
    .iter()
    .map(|c| workspace.join(c).join("src"))
    // The web UI's files are compiled into the binary.
    .chain([
        workspace.join("web").join("ui"),
        workspace.join("Cargo.lock"),
    ])
    .collect();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        } else if meta.modified().map(|m| m > built).unwrap_or(false) {
            return true;
        }
    }
    false
}

/// The `turnkey` binary of this build: `TURNKEY_BIN` if set, else `target/<profile>/turnkey`
/// next to the test executable, (re)built once with cargo if it is missing or older than the sources.
pub fn turnkey_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(locate_or_build).clone()
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("TURNKEY_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("test executable has no target/<profile> dir")?
        .to_path_buf();
    let binary = profile_dir.join("turnkey");
    if binary.exists() && !sources_newer_than(&binary) {
        return Ok(binary);
    }
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    let target_dir = profile_dir.parent().ok_or("no target dir")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace dir")?;
    let mut cmd = Command::new(cargo);
    // `--workspace`, not `-p turnkey-web`: the features of the dependencies are then those of
    // `cargo test --workspace`, whose build this one reuses; with `-p` they differ, and the
    // two builds would rebuild each other's dependencies every time.
    cmd.current_dir(workspace)
        .args(["build", "--workspace", "--bin", "turnkey"])
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("building turnkey: {cmd:?}");
    let mut build = cmd.spawn().map_err(|e| format!("cannot run cargo: {e}"))?;
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        match build.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Ok(None) => {
                // Bounded: a build that takes this long is stuck (or waits on a lock forever).
                if let Err(e) = build.kill() {
                    eprintln!("cannot stop cargo: {e}");
                }
                return Err(format!("building turnkey took over {BUILD_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("waiting for cargo: {e}")),
        }
    };
    if !status.success() || !binary.exists() {
        return Err(format!(
            "`cargo build --workspace --bin turnkey` failed ({status}); {} is missing",
            binary.display()
        ));
    }
    Ok(binary)
}
