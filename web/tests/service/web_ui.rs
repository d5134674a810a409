//! The web UI's unit tests (`web/ui/test/*.test.mjs`, Node's built-in test runner) run from
//! `cargo test`, so a developer's run covers them too. Without `node` on PATH the test prints
//! "skipping: …", unless `TURNKEY_REQUIRE_NODE=1` (CI, see `.ci/run`), which makes it fail.
use std::path::{Path, PathBuf};
use std::process::Command;

fn required() -> bool {
    std::env::var("TURNKEY_REQUIRE_NODE").is_ok_and(|v| v == "1")
}

/// The test files, by path, so every Node version takes them (directories and globs differ).
fn test_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("ui")
        .join("test");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("web/ui/test/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    files.sort();
    files
}

#[test]
fn r1_1_ui_session_state_unit_tests_pass_under_node() {
    let files = test_files();
    assert!(!files.is_empty(), "no *.test.mjs in web/ui/test/");
    let run = Command::new("node")
        .arg("--test")
        .arg("--test-reporter=tap")
        .args(&files)
        .output();
    let out = match run {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let why = "node is not on PATH (apt-get install nodejs)";
            assert!(!required(), "TURNKEY_REQUIRE_NODE=1 but {why}");
            println!("skipping: the web UI's node tests: {why} (set TURNKEY_REQUIRE_NODE=1 to fail instead)");
            return;
        }
        Err(e) => panic!("node did not start: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node --test failed:\n{stdout}\n{stderr}"
    );
    let passed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.trim().parse::<u32>().ok());
    assert!(passed.is_some_and(|n| n > 0), "no test passed:\n{stdout}");
}
