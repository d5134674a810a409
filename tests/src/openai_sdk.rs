//! The official `openai` Python package as a client of turnkey's OpenAI-compatible endpoint:
//! runs a small script with the interpreter of `TURNKEY_OPENAI_PYTHON` (`.ci/run` makes a venv
//! with a pinned `openai`). Skipped when that interpreter or the package is missing, unless
//! `TURNKEY_REQUIRE_OPENAI_SDK=1`, then a failure.
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

/// One script may run this long.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Debug)]
pub struct OpenAiSdk {
    python: String,
    pub version: String,
}

fn required() -> bool {
    crate::require::flag("TURNKEY_REQUIRE_OPENAI_SDK")
}

impl OpenAiSdk {
    /// The interpreter with `openai` importable, or `None` after one `skipping: …` line.
    pub async fn find_or_skip(test: &str) -> Option<Self> {
        let python = std::env::var("TURNKEY_OPENAI_PYTHON").unwrap_or_else(|_| "python3".into());
        let probe = tokio::process::Command::new(&python)
            .args(["-c", "import openai; print(openai.__version__)"])
            .stdin(Stdio::null())
            .output()
            .await;
        let why = match probe {
            Ok(out) if out.status.success() => {
                let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                return Some(Self { python, version });
            }
            Ok(out) => format!(
                "{python} cannot import openai: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!("{python} cannot run: {e}"),
        };
        if required() {
            panic!("TURNKEY_REQUIRE_OPENAI_SDK=1 but {why}");
        }
        println!(
            "skipping: {test}: {why} (set TURNKEY_OPENAI_PYTHON to a venv with openai, or \
             TURNKEY_REQUIRE_OPENAI_SDK=1 to fail instead)"
        );
        None
    }

    /// Runs `script` with `base_url` and `api_key` in the environment (`TK_BASE_URL`,
    /// `TK_API_KEY`) plus `env`; the script prints one JSON object as its last stdout line,
    /// which is returned. Panics with stderr when the script fails or prints no JSON.
    pub async fn run(
        &self,
        script: &str,
        base_url: &str,
        api_key: &str,
        env: &[(&str, &str)],
    ) -> Value {
        let mut cmd = tokio::process::Command::new(&self.python);
        cmd.args(["-c", script])
            .env("TK_BASE_URL", base_url)
            .env("TK_API_KEY", api_key)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("ALL_PROXY")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(SCRIPT_TIMEOUT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("the openai script ran longer than {SCRIPT_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.python));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "openai script failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            out.status
        );
        let last = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "openai script printed no JSON ({e}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
            )
        })
    }
}
