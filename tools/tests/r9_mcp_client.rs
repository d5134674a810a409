//! The MCP client against real servers from PyPI (`mcp-server-time`, `mcp-server-git`, found
//! in `TURNKEY_MCP_BIN_DIR`) and a small fixture server for failures (a crash during a call, a
//! killed server, a cancelled slow call). Without the servers each test prints "skipping: …",
//! unless `TURNKEY_REQUIRE_MCP=1` (CI), where a missing server fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use turnkey_tools::mcp::{McpServer, McpServerConfig};
use turnkey_tools::{Sandbox, SandboxMode, Tool, ToolContext, ToolOutput};

/// The servers run as the gateway runs them: in the OS sandbox, network denied.
fn sandbox() -> Sandbox {
    Sandbox::new(SandboxMode::Auto, false).unwrap()
}

/// The path of a server program, or `None` (after saying so) when the test must skip.
fn server_program(program: &str) -> Option<PathBuf> {
    let required = std::env::var("TURNKEY_REQUIRE_MCP").is_ok_and(|v| v == "1");
    let found = match std::env::var_os("TURNKEY_MCP_BIN_DIR") {
        Some(dir) => Some(Path::new(&dir).join(program)).filter(|p| p.is_file()),
        None => None,
    };
    if found.is_none() {
        assert!(
            !required,
            "TURNKEY_REQUIRE_MCP=1 but {program} is not in TURNKEY_MCP_BIN_DIR"
        );
        println!("skipping: {program} not found (set TURNKEY_MCP_BIN_DIR to the venv's bin)");
    }
    found
}

/// `python3` running the fixture server, or `None` when the test must skip.
fn fixture() -> Option<McpServerConfig> {
    let python = server_program("python3")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_fixture.py");
    Some(McpServerConfig {
        name: "fx".into(),
        command: python.display().to_string(),
        args: vec![script.display().to_string()],
        ..Default::default()
    })
}

fn config(name: &str, program: &Path, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        command: program.display().to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    }
}

fn ctx(dir: &Path) -> ToolContext {
    ToolContext {
        workspace: dir.to_path_buf(),
        hidden: None,
        checkpoints: dir.join("checkpoints"),
        cancel: CancellationToken::new(),
        progress: Arc::new(|_| {}),
        caller: turnkey_tools::Caller::default(),
    }
}

fn tool(server: &McpServer, name: &str) -> Arc<dyn Tool> {
    let names: Vec<&str> = server.tools().iter().map(|t| t.name()).collect();
    server
        .tools()
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| panic!("no tool {name} among {names:?}"))
}

async fn call(tool: &Arc<dyn Tool>, args: Value, dir: &Path) -> ToolOutput {
    tool.call(args, &ctx(dir)).await
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Tess")
        .env("GIT_AUTHOR_EMAIL", "tess@example.com")
        .env("GIT_COMMITTER_NAME", "Tess")
        .env("GIT_COMMITTER_EMAIL", "tess@example.com")
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test]
async fn r9_mcp_time_server_lists_and_answers_get_current_time() {
    let Some(program) = server_program("mcp-server-time") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(config("time", &program, &[]), dir.path(), &sandbox())
        .await
        .unwrap();
    let get = tool(&server, "time__get_current_time");
    assert!(!get.description().is_empty());
    assert_eq!(get.parameters()["type"], "object");
    assert!(
        get.parameters()["properties"]["timezone"].is_object(),
        "{}",
        get.parameters()
    );

    let out = call(&get, json!({"timezone": "UTC"}), dir.path()).await;
    assert!(!out.is_error, "{out:?}");
    let answer: Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(answer["timezone"], "UTC", "{answer}");
    let year = chrono_year(answer["datetime"].as_str().unwrap());
    assert!(year >= 2024, "{answer}");

    // Arguments the server refuses are an error result, not a panic or a dead server.
    let bad = call(&get, json!({"timezone": "Not/AZone"}), dir.path()).await;
    assert!(bad.is_error, "{bad:?}");
    let missing = call(&get, json!({}), dir.path()).await;
    assert!(missing.is_error, "{missing:?}");
    let not_an_object = call(&get, json!(["UTC"]), dir.path()).await;
    assert!(not_an_object.is_error, "{not_an_object:?}");
    assert!(
        !call(&get, json!({"timezone": "UTC"}), dir.path())
            .await
            .is_error
    );
}

/// The year of an RFC 3339 time, read without a date library.
fn chrono_year(datetime: &str) -> i32 {
    datetime[..4].parse().unwrap()
}

#[tokio::test]
async fn r9_mcp_git_server_reads_a_temp_repository() {
    let Some(program) = server_program("mcp-server-git") else {
        return;
    };
    let repo = tempfile::tempdir().unwrap();
    git(repo.path(), &["init", "-q"]);
    std::fs::write(repo.path().join("notes.txt"), "first\n").unwrap();
    git(repo.path(), &["add", "notes.txt"]);
    git(repo.path(), &["commit", "-q", "-m", "add the first note"]);
    std::fs::write(repo.path().join("untracked.txt"), "new\n").unwrap();

    let server = McpServer::start(config("git", &program, &[]), repo.path(), &sandbox())
        .await
        .unwrap();
    let repo_path = repo.path().display().to_string();
    let log = call(
        &tool(&server, "git__git_log"),
        json!({"repo_path": repo_path}),
        repo.path(),
    )
    .await;
    assert!(!log.is_error, "{log:?}");
    assert!(log.content.contains("add the first note"), "{log:?}");
    let status = call(
        &tool(&server, "git__git_status"),
        json!({"repo_path": repo_path}),
        repo.path(),
    )
    .await;
    assert!(!status.is_error, "{status:?}");
    assert!(status.content.contains("untracked.txt"), "{status:?}");

    let wrong = call(
        &tool(&server, "git__git_log"),
        json!({"repo_path": repo.path().join("missing").display().to_string()}),
        repo.path(),
    )
    .await;
    assert!(wrong.is_error, "{wrong:?}");
}

#[tokio::test]
async fn r9_mcp_read_only_hint_decides_dangerous() {
    let Some(cfg) = fixture() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(cfg, dir.path(), &sandbox()).await.unwrap();
    assert!(!tool(&server, "fx__echo").dangerous(), "readOnlyHint: true");
    assert!(tool(&server, "fx__crash").dangerous(), "no hint");
    let out = call(
        &tool(&server, "fx__echo"),
        json!({"text": "hi"}),
        dir.path(),
    )
    .await;
    assert_eq!(out, ToolOutput::ok("echo: hi"));
}

#[tokio::test]
async fn r9_mcp_server_dying_during_a_call_is_an_error_and_the_next_call_restarts_it() {
    let Some(cfg) = fixture() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(cfg, dir.path(), &sandbox()).await.unwrap();
    let first_pid = server.pid().await.unwrap();

    let out = call(&tool(&server, "fx__crash"), json!({}), dir.path()).await;
    assert!(out.is_error, "{out:?}");
    assert!(out.content.contains("stopped during the call"), "{out:?}");
    assert!(out.content.contains("exited with status 3"), "{out:?}");
    assert!(out.content.contains("crashing on purpose"), "{out:?}");

    let echo = tool(&server, "fx__echo");
    let again = call(&echo, json!({"text": "back"}), dir.path()).await;
    assert_eq!(again, ToolOutput::ok("echo: back"));
    assert_ne!(server.pid().await.unwrap(), first_pid, "a new process");
}

#[tokio::test]
async fn r9_mcp_killed_server_is_restarted_by_the_next_call() {
    let Some(program) = server_program("mcp-server-time") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(config("time", &program, &[]), dir.path(), &sandbox())
        .await
        .unwrap();
    let pid = server.pid().await.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Give the client a moment to see the pipe close; a call racing the death may fail,
    // but never twice: the call after a failure starts the server again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let get = tool(&server, "time__get_current_time");
    let out = call(&get, json!({"timezone": "UTC"}), dir.path()).await;
    let out = if out.is_error {
        assert!(out.content.contains("stopped"), "{out:?}");
        call(&get, json!({"timezone": "UTC"}), dir.path()).await
    } else {
        out
    };
    assert!(!out.is_error, "{out:?}");
    assert!(out.content.contains("UTC"), "{out:?}");
    assert_ne!(server.pid().await.unwrap(), pid);
}

#[tokio::test]
async fn r9_mcp_cancel_stops_waiting_for_a_slow_call() {
    let Some(cfg) = fixture() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::start(cfg, dir.path(), &sandbox()).await.unwrap();
    let ctx = ctx(dir.path());
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let began = Instant::now();
    let out = tool(&server, "fx__sleep")
        .call(json!({"seconds": 30}), &ctx)
        .await;
    assert!(out.is_error, "{out:?}");
    assert!(out.content.contains("cancelled"), "{out:?}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    // The server is still usable.
    let echo = call(&tool(&server, "fx__echo"), json!({"text": "x"}), dir.path()).await;
    assert_eq!(echo, ToolOutput::ok("echo: x"));
}
