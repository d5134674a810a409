//! `openapi-spec-validator` (PyPI) as the judge of the server's OpenAPI document: the program
//! named by `TURNKEY_OPENAPI_VALIDATOR` (`.ci/run` makes a venv with a pinned version). Skipped
//! when it is missing, unless `TURNKEY_REQUIRE_OPENAPI_VALIDATOR=1`, then a failure.
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

/// One validation may run this long.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// A line of the validator's report is cut after this many characters.
const REPORT_LINE_CHARS: usize = 600;

pub struct OpenApiValidator {
    program: String,
    pub version: String,
}

fn required() -> bool {
    crate::require::flag("TURNKEY_REQUIRE_OPENAPI_VALIDATOR")
}

impl OpenApiValidator {
    /// The validator, or `None` after one `skipping: …` line.
    pub async fn find_or_skip(test: &str) -> Option<Self> {
        let program = std::env::var("TURNKEY_OPENAPI_VALIDATOR")
            .unwrap_or_else(|_| "openapi-spec-validator".into());
        let probe = tokio::time::timeout(
            RUN_TIMEOUT,
            tokio::process::Command::new(&program)
                .arg("--version")
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await;
        let why = match probe {
            Ok(Ok(out)) if out.status.success() => {
                let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                return Some(Self { program, version });
            }
            Ok(Ok(out)) => format!(
                "{program} --version failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Ok(Err(e)) => format!("{program} cannot run: {e}"),
            Err(_) => format!("{program} --version did not answer within {RUN_TIMEOUT:?}"),
        };
        if required() {
            panic!("TURNKEY_REQUIRE_OPENAPI_VALIDATOR=1 but {why}");
        }
        println!(
            "skipping: {test}: {why} (set TURNKEY_OPENAPI_VALIDATOR to openapi-spec-validator, \
             or TURNKEY_REQUIRE_OPENAPI_VALIDATOR=1 to fail instead)"
        );
        None
    }

    /// Writes `doc` to a temporary file and validates it: `Err` with the validator's report
    /// when the document is not valid.
    pub async fn validate(&self, doc: &Value) -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let path = dir.path().join("openapi.json");
        let text = serde_json::to_vec_pretty(doc).map_err(|e| format!("serialize: {e}"))?;
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
        let out = tokio::time::timeout(
            RUN_TIMEOUT,
            tokio::process::Command::new(&self.program)
                .args(["--validation-errors", "all"])
                .arg(&path)
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| format!("{} ran longer than {RUN_TIMEOUT:?}", self.program))?
        .map_err(|e| format!("cannot run {}: {e}", self.program))?;
        if out.status.success() {
            return Ok(());
        }
        // The validator may quote the whole document; its first lines say what is wrong.
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Err(report
            .lines()
            .map(|l| match l.char_indices().nth(REPORT_LINE_CHARS) {
                Some((cut, _)) => format!("{}…", &l[..cut]),
                None => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"))
    }
}
