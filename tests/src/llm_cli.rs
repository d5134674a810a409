//! Simon Willison's `llm` command-line tool as a real stateless client of the OpenAI-compatible
//! endpoint: each `llm -c` resends the conversation so far. Runs the binary of
//! `TURNKEY_LLM_BIN` (`.ci/run` makes a venv with a pinned `llm`) with its own user directory,
//! where a model `turnkey` points at the server. Skipped when the binary is missing, unless
//! `TURNKEY_REQUIRE_LLM=1`, then a failure.
use std::process::Stdio;
use std::time::Duration;

/// One `llm` run may take this long.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

pub struct LlmCli {
    bin: String,
    /// `LLM_USER_PATH`: its model list, keys and conversation log.
    home: tempfile::TempDir,
    pub version: String,
}

impl LlmCli {
    /// The `llm` binary, or `None` after one `skipping: …` line.
    pub async fn find_or_skip(test: &str) -> Option<Self> {
        let bin = std::env::var("TURNKEY_LLM_BIN").unwrap_or_else(|_| "llm".into());
        let probe = tokio::process::Command::new(&bin)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .await;
        let why = match probe {
            Ok(out) if out.status.success() => {
                let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                let home = tempfile::tempdir().unwrap_or_else(|e| panic!("a temp dir: {e}"));
                return Some(Self { bin, home, version });
            }
            Ok(out) => format!(
                "{bin} --version failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!("{bin} cannot run: {e}"),
        };
        if crate::require::flag("TURNKEY_REQUIRE_LLM") {
            panic!("TURNKEY_REQUIRE_LLM=1 but {why}");
        }
        println!(
            "skipping: {test}: {why} (set TURNKEY_LLM_BIN to an llm binary, or \
             TURNKEY_REQUIRE_LLM=1 to fail instead)"
        );
        None
    }

    /// Makes model `turnkey` (`model_name` sent as `model`) at `base_url` (`…/v1`).
    pub fn point_at(&self, base_url: &str, model_name: &str) {
        let yaml = format!(
            "- model_id: turnkey\n  model_name: {model_name}\n  api_base: \"{base_url}\"\n  api_key_name: turnkey\n"
        );
        std::fs::write(self.home.path().join("extra-openai-models.yaml"), yaml)
            .unwrap_or_else(|e| panic!("writing llm's model list: {e}"));
    }

    /// Runs `llm` with `args` and the key `token`; its standard output. Panics with stderr
    /// when it fails.
    pub async fn run(&self, token: &str, args: &[&str]) -> String {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .args(["--key", token])
            .env("LLM_USER_PATH", self.home.path())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env_remove("OPENAI_API_KEY")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("ALL_PROXY")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(RUN_TIMEOUT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("llm ran longer than {RUN_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "llm {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}
