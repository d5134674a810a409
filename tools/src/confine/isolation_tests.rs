//! SPEC R13.8 on this machine's kernel: with principals isolated, a command of one principal
//! reads and writes its own workspace and the system, and reads nothing else beneath the
//! workspace root — not another principal's files, not the operator's, whatever path leads
//! there (`..`, a symlink, `/proc/self/root`). The positive control: the same commands without
//! the hidden root read both.
use super::tests::confined;
use super::*;
use crate::terminal::Terminal;
use crate::{Tool, ToolContext};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A workspace root with the operator's file, alice's and bob's workspaces and a file each.
fn root() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("operator.txt"), "operator's").unwrap();
    for who in ["alice", "bob"] {
        let home = root.join("principals").join(who);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("plans.txt"), format!("{who}'s plans")).unwrap();
    }
    (dir, root)
}

fn as_alice(root: &std::path::Path, hidden: bool) -> ToolContext {
    ToolContext {
        workspace: root.join("principals").join("alice"),
        hidden: hidden.then(|| root.to_path_buf()),
        checkpoints: root.join("checkpoints"),
        cancel: CancellationToken::new(),
        progress: Arc::new(|_| {}),
        caller: crate::Caller::default(),
    }
}

async fn sh(sandbox: &Sandbox, ctx: &ToolContext, command: &str) -> (bool, String) {
    let terminal = Terminal {
        sandbox: sandbox.clone(),
        ..Terminal::default()
    };
    let out = terminal.call(json!({ "command": command }), ctx).await;
    let v: Value = serde_json::from_str(&out.content).unwrap();
    (
        v["exit_code"].as_i64() == Some(0),
        format!(
            "{}{}",
            v["stdout"].as_str().unwrap_or_default(),
            v["stderr"].as_str().unwrap_or_default()
        ),
    )
}

#[tokio::test]
async fn r13_8_a_principal_reads_its_own_workspace_and_the_system_only() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (_dir, root) = root();
    let alice = as_alice(&root, true);
    let (ok, out) = sh(&sandbox, &alice, "cat plans.txt && echo more > notes.txt && cat /etc/passwd >/dev/null && ls /usr/bin >/dev/null").await;
    assert!(ok, "own files and the system: {out}");
    assert!(root.join("principals/alice/notes.txt").exists());
    let bob = root.join("principals/bob/plans.txt");
    let op = root.join("operator.txt");
    std::os::unix::fs::symlink(&bob, root.join("principals/alice/link")).unwrap();
    for attempt in [
        "cat ../bob/plans.txt".to_owned(),
        format!("cat {}", bob.display()),
        format!("cat {}", op.display()),
        format!("cat /proc/self/root{}", bob.display()),
        "cat link".to_owned(),
        format!("ls {}", root.join("principals").display()),
        format!("ls {}", root.display()),
        "echo x > ../bob/planted.txt".to_owned(),
    ] {
        let (ok, out) = sh(&sandbox, &alice, &attempt).await;
        assert!(!ok, "{attempt} must be refused: {out}");
        assert!(out.contains("Permission denied"), "{attempt}: {out}");
    }
    assert!(!root.join("principals/bob/planted.txt").exists());
}

#[tokio::test]
async fn r13_8_without_a_hidden_root_the_same_reads_succeed() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (_dir, root) = root();
    let alice = as_alice(&root, false);
    for attempt in ["cat ../bob/plans.txt", "cat ../../operator.txt", "ls ../.."] {
        let (ok, out) = sh(&sandbox, &alice, attempt).await;
        assert!(ok, "{attempt}: {out}");
    }
}
