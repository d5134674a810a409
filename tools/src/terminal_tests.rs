//! Tests of the `terminal` tool: results, caps, timeouts, and that a kill takes the whole
//! process group with it.
use super::*;
use crate::builtin::tests::{ctx, ctx_with_progress};
use std::path::Path;

fn result(out: &ToolOutput) -> Value {
    serde_json::from_str(&out.content).unwrap()
}

/// Members of process group `pgid` still in the process table, as (pid, state).
fn group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            found.push((pid, fields[0].chars().next().unwrap_or('?')));
        }
    }
    found
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn read_pgid(ws: &Path) -> Option<i32> {
    std::fs::read_to_string(ws.join("pgid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[tokio::test]
async fn r9_6_terminal_returns_exit_code_and_output() {
    let (_dirs, ctx) = ctx();
    let out = Terminal::default()
        .call(
            json!({"command": "echo hi; echo oops >&2; pwd; exit 3"}),
            &ctx,
        )
        .await;
    assert!(!out.is_error, "a non-zero exit is a normal result: {out:?}");
    let r = result(&out);
    assert_eq!(r["exit_code"], 3);
    assert_eq!(
        r["stdout"],
        format!("hi\n{}\n", ctx.workspace.display()),
        "runs in the workspace"
    );
    assert_eq!(r["stderr"], "oops\n");
    assert_eq!(r["timed_out"], false);
}

#[tokio::test]
async fn r9_6_terminal_does_not_pass_the_gateway_environment() {
    let (_dirs, ctx) = ctx();
    // cargo runs tests with CARGO_* variables set: they stand in for the gateway's secrets.
    // (Setting a variable here would race with the other tests' threads reading theirs.)
    let hidden: Vec<String> = std::env::vars()
        .map(|(key, _)| key)
        .filter(|key| key.starts_with("CARGO"))
        .collect();
    assert!(!hidden.is_empty());
    let out = Terminal::default()
        .call(json!({"command": "env"}), &ctx)
        .await;
    let r = result(&out);
    let stdout = r["stdout"].as_str().unwrap();
    for key in &hidden {
        assert!(
            !stdout.contains(&format!("{key}=")),
            "{key} leaked: {stdout}"
        );
    }
    assert!(stdout.contains("PATH="), "PATH is kept: {stdout}");
}

#[tokio::test]
async fn r9_6_terminal_caps_each_stream() {
    let (_dirs, ctx) = ctx();
    let out = Terminal::default()
        .call(
            json!({"command": "head -c 100000 /dev/zero | tr '\\0' a; echo small >&2"}),
            &ctx,
        )
        .await;
    let r = result(&out);
    let stdout = r["stdout"].as_str().unwrap();
    assert!(stdout.starts_with(&"a".repeat(OUTPUT_CAP)));
    assert!(
        stdout.ends_with("\n[... truncated: 34464 more bytes not shown]"),
        "{}",
        &stdout[OUTPUT_CAP..]
    );
    assert_eq!(r["stderr"], "small\n");
}

#[tokio::test]
async fn r9_4_terminal_times_out_and_kills() {
    let (_dirs, ctx) = ctx();
    let started = Instant::now();
    let out = Terminal::default()
        .call(
            json!({"command": "echo before; sleep 30", "timeout_s": 0.5}),
            &ctx,
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.is_error);
    let r = result(&out);
    assert_eq!(r["timed_out"], true);
    assert_eq!(r["killed"], "timed out after 0.5 s");
    assert_eq!(r["exit_code"], Value::Null);
    assert_eq!(r["stdout"], "before\n", "output so far is kept");
}

#[tokio::test]
async fn r9_4_terminal_kill_takes_the_whole_process_group() {
    // As a subreaper this test process adopts the killed shell's orphans, as the gateway does
    // when it is pid 1 in a container, so even zombies must be gone afterwards.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let (_dirs, ctx) = ctx();
    let ws = ctx.workspace.clone();
    let cancel = ctx.cancel.clone();
    let call = tokio::spawn(async move {
        Terminal::default()
            .call(
                json!({"command": "sleep 1000 & (sleep 1000 &) ; echo $$ > pgid; wait"}),
                &ctx,
            )
            .await
    });
    wait_for("the pgid file", || read_pgid(&ws).is_some()).await;
    let pgid = read_pgid(&ws).unwrap();
    // The shell and both sleeps (one of them already orphaned by its subshell).
    wait_for("three group members", || group_members(pgid).len() >= 3).await;

    cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap();
    assert!(out.is_error);
    let r = result(&out);
    assert_eq!(r["killed"], "interrupted");
    assert_eq!(r["timed_out"], false);
    wait_for("the group to be gone", || group_members(pgid).is_empty()).await;
}

#[tokio::test]
async fn r9_4_terminal_background_jobs_do_not_outlive_the_call() {
    let (_dirs, ctx) = ctx();
    let started = Instant::now();
    let out = Terminal::default()
        .call(json!({"command": "sleep 1000 & echo $$"}), &ctx)
        .await;
    // The background sleep holds stdout open; the call still returns at once.
    assert!(started.elapsed() < Duration::from_secs(5));
    let r = result(&out);
    assert_eq!(r["exit_code"], 0);
    let pgid: i32 = r["stdout"].as_str().unwrap().trim().parse().unwrap();
    wait_for("no running group member", || {
        group_members(pgid).iter().all(|(_, state)| *state == 'Z')
    })
    .await;
}

#[tokio::test]
async fn r9_4_terminal_reports_progress_while_running() {
    let (_dirs, ctx, lines) = ctx_with_progress();
    let terminal = Terminal {
        progress_every: Duration::from_millis(300),
        ..Terminal::default()
    };
    let out = terminal.call(json!({"command": "sleep 1.1"}), &ctx).await;
    assert_eq!(result(&out)["exit_code"], 0);
    let lines = lines.lock().unwrap().clone();
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.starts_with("running for ")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn r9_6_terminal_argument_errors_are_clear() {
    let (_dirs, ctx) = ctx();
    let cases = [
        (json!({}), r#"invalid arguments: missing field "command""#),
        (
            json!({"command": "  "}),
            r#"invalid arguments: "command" is empty"#,
        ),
        (
            json!({"command": "true", "timeout_s": 601}),
            "timeout_s must be",
        ),
        (
            json!({"command": "true", "timeout_s": 0}),
            "timeout_s must be",
        ),
        (
            json!({"command": "true", "timeout": 5}),
            r#"unknown field "timeout""#,
        ),
    ];
    for (args, expected) in cases {
        let out = Terminal::default().call(args.clone(), &ctx).await;
        assert!(out.is_error, "{args}");
        assert!(out.content.contains(expected), "{args}: {}", out.content);
    }
}

#[tokio::test]
async fn r9_6_terminal_spawn_failure_is_an_error_result() {
    let (_dirs, mut ctx) = ctx();
    ctx.workspace = ctx.workspace.join("gone");
    let out = Terminal::default()
        .call(json!({"command": "true"}), &ctx)
        .await;
    assert!(out.is_error);
    assert!(
        out.content.starts_with("failed to start sh: "),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn r9_4_terminal_cancelled_before_start_runs_nothing() {
    let (_dirs, ctx) = ctx();
    ctx.cancel.cancel();
    let out = Terminal::default()
        .call(json!({"command": "touch ran"}), &ctx)
        .await;
    assert!(out.is_error);
    assert_eq!(result(&out)["killed"], "interrupted");
    assert!(!ctx.workspace.join("ran").exists());
}

#[tokio::test]
async fn r9_4_terminal_dropped_mid_run_kills_its_group() {
    let (_dirs, ctx) = ctx();
    let ws = ctx.workspace.clone();
    let call = tokio::spawn(async move {
        Terminal::default()
            .call(
                json!({"command": "echo $$ > pgid; sleep 1000 & wait"}),
                &ctx,
            )
            .await
    });
    wait_for("the pgid file", || read_pgid(&ws).is_some()).await;
    let pgid = read_pgid(&ws).unwrap();
    wait_for("two group members", || group_members(pgid).len() >= 2).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    wait_for("no running group member", || {
        group_members(pgid).iter().all(|(_, state)| *state == 'Z')
    })
    .await;
}
