//! SPEC R13.7 on this machine's kernel: what a sandboxed child can and cannot do, each
//! refusal next to its positive control (the same act allowed, or in the same place unconfined).
//! On a kernel without Landlock the tests say so in one line and pass, unless
//! `TURNKEY_REQUIRE_SANDBOX=1` (CI) makes that a failure.
use super::*;
use crate::background::{self as bg, ProcessFiles};
use crate::builtin::tests::ctx;
use crate::mcp::{McpServer, McpServerConfig};
use crate::terminal::Terminal;
use crate::{Tool, ToolContext};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::time::Duration;

/// The sandbox as `auto` sets it up here, or `None` (with the reason printed) where the
/// kernel cannot confine.
pub(super) fn confined(network_allowed: bool) -> Option<Sandbox> {
    let sandbox = Sandbox::new(SandboxMode::Auto, network_allowed).unwrap();
    if sandbox.state().enforced {
        return Some(sandbox);
    }
    let why = sandbox.state().reason.clone().unwrap_or_default();
    assert!(
        std::env::var("TURNKEY_REQUIRE_SANDBOX").as_deref() != Ok("1"),
        "TURNKEY_REQUIRE_SANDBOX=1 but this kernel cannot confine: {why}"
    );
    eprintln!("skipped: this kernel cannot confine commands ({why})");
    None
}

struct Ran {
    code: Option<i64>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

async fn sh(sandbox: &Sandbox, ctx: &ToolContext, command: &str) -> Ran {
    let terminal = Terminal {
        sandbox: sandbox.clone(),
        ..Terminal::default()
    };
    let out = terminal.call(json!({ "command": command }), ctx).await;
    let v: Value = serde_json::from_str(&out.content)
        .unwrap_or_else(|_| panic!("not a command result: {}", out.content));
    Ran {
        code: v["exit_code"].as_i64(),
        stdout: v["stdout"].as_str().unwrap_or_default().to_owned(),
        stderr: v["stderr"].as_str().unwrap_or_default().to_owned(),
    }
}

fn denied(ran: &Ran) {
    assert!(!ran.ok(), "expected a refusal: {}", ran.stdout);
    assert!(
        ran.stderr.contains("Permission denied")
            || ran.stderr.contains("PermissionError")
            || ran.stderr.contains("Invalid cross-device link"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn r13_7_a_command_writes_in_its_workspace_and_nowhere_else() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (dirs, ctx) = ctx();
    let out = dirs.outside.path().display().to_string();

    let ran = sh(
        &sandbox,
        &ctx,
        "echo in > made.txt && mkdir d && mv made.txt d/ && rm -r d && echo again > kept.txt",
    )
    .await;
    assert!(ran.ok(), "{}", ran.stderr);
    assert_eq!(
        std::fs::read_to_string(ctx.workspace.join("kept.txt")).unwrap(),
        "again\n"
    );

    // A sibling directory, /tmp itself, $HOME: refused, and nothing appears there.
    denied(&sh(&sandbox, &ctx, &format!("echo out > {out}/escaped")).await);
    assert!(!dirs.outside.path().join("escaped").exists());
    let in_tmp = std::env::temp_dir().join(format!("turnkey-escape-{}", std::process::id()));
    denied(&sh(&sandbox, &ctx, &format!("echo out > {}", in_tmp.display())).await);
    assert!(!in_tmp.exists());
    denied(&sh(&sandbox, &ctx, "echo out > \"$HOME/.turnkey-escape-test\"").await);
    if let Some(home) = std::env::var_os("HOME") {
        assert!(!std::path::Path::new(&home)
            .join(".turnkey-escape-test")
            .exists());
    }
    // Removing, renaming, creating a directory outside: refused too.
    std::fs::write(dirs.outside.path().join("victim"), "intact").unwrap();
    denied(&sh(&sandbox, &ctx, &format!("rm -f {out}/victim")).await);
    denied(&sh(&sandbox, &ctx, &format!("mv {out}/victim {out}/moved")).await);
    denied(&sh(&sandbox, &ctx, &format!("mkdir {out}/dir")).await);
    denied(&sh(&sandbox, &ctx, &format!("echo more >> {out}/victim")).await);
    assert_eq!(
        std::fs::read_to_string(dirs.outside.path().join("victim")).unwrap(),
        "intact"
    );

    // The positive control: unconfined, the same write lands.
    let ran = sh(&Sandbox::off(), &ctx, &format!("echo out > {out}/escaped")).await;
    assert!(ran.ok(), "{}", ran.stderr);
    assert!(dirs.outside.path().join("escaped").exists());
}

#[tokio::test]
async fn r13_7_tmpdir_is_writable_private_and_removed_afterwards() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (_dirs, ctx) = ctx();
    let cmd = "echo scratch > \"$TMPDIR/f\" && cat \"$TMPDIR/f\" && stat -c %a \"$TMPDIR\" && echo \"$TMPDIR\"";
    let first = sh(&sandbox, &ctx, cmd).await;
    assert!(first.ok(), "{}", first.stderr);
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines[..2], ["scratch", "700"], "{}", first.stdout);
    let tmp = std::path::PathBuf::from(lines[2]);
    assert_ne!(tmp, std::env::temp_dir());
    assert!(!tmp.starts_with(&ctx.workspace));
    assert!(!tmp.exists(), "the command's temp dir outlived it");
    let second = sh(&sandbox, &ctx, cmd).await;
    assert!(second.ok(), "{}", second.stderr);
    assert_ne!(
        second.stdout.lines().nth(2),
        Some(lines[2]),
        "each command has its own"
    );
    // No other command's temp dir is writable: the system temp dir itself is not.
    denied(&sh(&sandbox, &ctx, "echo x > \"$TMPDIR/../turnkey-sibling\"").await);
}

#[tokio::test]
async fn r13_7_a_command_reads_and_executes_the_system() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (dirs, ctx) = ctx();
    std::fs::write(dirs.outside.path().join("readable"), "visible").unwrap();
    let ran = sh(
        &sandbox,
        &ctx,
        &format!(
            "head -c 1 /etc/passwd >/dev/null && ls /usr/bin >/dev/null && /bin/sh -c 'echo run' \
             && cat {}/readable && head -c 4 /dev/urandom | wc -c && echo x >/dev/null",
            dirs.outside.path().display()
        ),
    )
    .await;
    assert!(ran.ok(), "{}", ran.stderr);
    assert_eq!(ran.stdout, "run\nvisible4\n");
}

#[tokio::test]
async fn r13_7_symlinks_proc_root_and_hard_links_do_not_lead_out() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (dirs, ctx) = ctx();
    let out = dirs.outside.path().display().to_string();
    std::fs::write(dirs.outside.path().join("target"), "intact").unwrap();
    let tricks = [
        format!("ln -s {out}/target link && echo pwned > link"),
        format!("ln -s {out} dirlink && echo pwned > dirlink/new"),
        format!("echo pwned > /proc/self/root{out}/target"),
        format!("echo pwned > /proc/self/root{out}/new"),
    ];
    for trick in &tricks {
        denied(&sh(&sandbox, &ctx, trick).await);
        assert_eq!(
            std::fs::read_to_string(dirs.outside.path().join("target")).unwrap(),
            "intact",
            "{trick}"
        );
        assert!(!dirs.outside.path().join("new").exists(), "{trick}");
        let _ = std::fs::remove_file(ctx.workspace.join("link"));
        let _ = std::fs::remove_file(ctx.workspace.join("dirlink"));
    }
    // A hard link would make an outside file writable from inside (Landlock's "refer").
    let ran = sh(&sandbox, &ctx, &format!("ln {out}/target hard")).await;
    denied(&ran);
    assert!(!ctx.workspace.join("hard").exists());

    // The positive control: unconfined, the symlink and the hard link work.
    let ran = sh(
        &Sandbox::off(),
        &ctx,
        &format!("ln {out}/target hard && ln -s {out}/target link && echo changed > link"),
    )
    .await;
    assert!(ran.ok(), "{}", ran.stderr);
    assert_eq!(
        std::fs::read_to_string(dirs.outside.path().join("target")).unwrap(),
        "changed\n"
    );
}

/// A listener the sandboxed command tries to reach; answers how many connections it took.
fn listener() -> (u16, std::thread::JoinHandle<usize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut n = 0;
        while std::time::Instant::now() < until {
            match l.accept() {
                Ok(_) => n += 1,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
            if n > 0 {
                break;
            }
        }
        n
    });
    (port, handle)
}

fn connect(port: u16) -> String {
    format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('connected')\""
    )
}

#[tokio::test]
async fn r13_7_network_is_denied_unless_allowed() {
    let (Some(denied_net), Some(allowed)) = (confined(false), confined(true)) else {
        return;
    };
    assert!(denied_net.state().network_denied && denied_net.state().seccomp);
    let (_dirs, ctx) = ctx();

    let (port, accepted) = listener();
    denied(&sh(&denied_net, &ctx, &connect(port)).await);
    let ran = sh(&allowed, &ctx, &connect(port)).await;
    assert_eq!(ran.stdout, "connected\n", "{}", ran.stderr);
    assert_eq!(
        accepted.join().unwrap(),
        1,
        "only the allowed command got through"
    );

    for family in [
        "AF_INET, socket.SOCK_DGRAM",
        "AF_INET6, socket.SOCK_STREAM",
        "AF_NETLINK, socket.SOCK_RAW",
    ] {
        let make =
            format!("python3 -c \"import socket; socket.socket(socket.{family}); print('made')\"");
        denied(&sh(&denied_net, &ctx, &make).await);
        let ran = sh(&allowed, &ctx, &make).await;
        assert_eq!(ran.stdout, "made\n", "{family}: {}", ran.stderr);
    }
    // Unix sockets stay (tools talk over them).
    let unix = "python3 -c \"import socket; a, b = socket.socketpair(); s = socket.socket(socket.AF_UNIX); print('unix')\"";
    let ran = sh(&denied_net, &ctx, unix).await;
    assert_eq!(ran.stdout, "unix\n", "{}", ran.stderr);
}

/// Each of the two network guards refuses a TCP connect on its own: Landlock's TCP rules
/// with no seccomp filter, and the seccomp filter on a kernel without TCP rules.
#[tokio::test]
async fn r13_7_landlock_tcp_rules_and_seccomp_each_deny_the_network() {
    let Some(real) = confined(false) else {
        return;
    };
    let (_dirs, ctx) = ctx();
    let mut no_seccomp = real.kernel().clone();
    no_seccomp.seccomp_filter = false;
    let mut no_tcp_rules = real.kernel().clone();
    no_tcp_rules.landlock_abi = 3;
    if real.kernel().landlock_abi >= rules::NET_ABI {
        let landlock_only = Sandbox::with_kernel(SandboxMode::Auto, false, no_seccomp).unwrap();
        assert!(landlock_only.state().network_rules && !landlock_only.state().seccomp);
        let (port, accepted) = listener();
        let ran = sh(&landlock_only, &ctx, &connect(port)).await;
        denied(&ran);
        // The socket was made (no seccomp), the connect refused.
        assert!(ran.stderr.contains("create_connection"), "{}", ran.stderr);
        let udp = "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print('made')\"";
        assert_eq!(sh(&landlock_only, &ctx, udp).await.stdout, "made\n");
        drop(accepted);
    }
    let seccomp_only = Sandbox::with_kernel(SandboxMode::Auto, false, no_tcp_rules).unwrap();
    assert!(!seccomp_only.state().network_rules && seccomp_only.state().seccomp);
    let (port, accepted) = listener();
    denied(&sh(&seccomp_only, &ctx, &connect(port)).await);
    drop(accepted);
}

#[tokio::test]
async fn r13_7_a_confined_command_has_no_new_privileges_and_its_limits() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (_dirs, ctx) = ctx();
    let show = "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; grep -E '^Max (cpu time|file size|processes)' /proc/self/limits";
    let ran = sh(&sandbox, &ctx, show).await;
    assert!(ran.ok(), "{}", ran.stderr);
    let text: Vec<String> = ran
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(text.contains(&"NoNewPrivs: 1".to_owned()), "{text:?}");
    assert!(text.contains(&"Seccomp: 2".to_owned()), "{text:?}");
    assert!(
        text.contains(&"Max cpu time 900 900 seconds".to_owned()),
        "{text:?}"
    );
    assert!(
        text.contains(&format!("Max file size {0} {0} bytes", 4u64 << 30)),
        "{text:?}"
    );
    assert!(
        text.contains(&"Max processes 4096 4096 processes".to_owned()),
        "{text:?}"
    );
    // The positive control: unconfined, none of it.
    let ran = sh(&Sandbox::off(), &ctx, show).await;
    assert!(ran.stdout.contains("NoNewPrivs:\t0"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("900"), "{}", ran.stdout);
}

#[tokio::test]
async fn r13_7_the_file_size_limit_stops_a_runaway_write() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (_dirs, ctx) = ctx();
    let small = Limits {
        file_bytes: Some(4096),
        ..Limits::COMMAND
    };
    let run = |limits: Limits| {
        let prepared = sandbox
            .prepare(&Grant {
                writable: &[&ctx.workspace],
                hidden: None,
                limits,
            })
            .unwrap();
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg("head -c 100000 /dev/zero > big")
            .current_dir(&ctx.workspace);
        prepared.apply_to(&mut cmd);
        cmd
    };
    let status = run(small).status().await.unwrap();
    assert!(!status.success());
    assert_eq!(
        std::fs::metadata(ctx.workspace.join("big")).unwrap().len(),
        4096
    );
    let status = run(Limits::COMMAND).status().await.unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::metadata(ctx.workspace.join("big")).unwrap().len(),
        100_000
    );
}

#[tokio::test]
async fn r13_7_a_background_command_and_its_wrapper_are_confined() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (dirs, ctx) = ctx();
    let data = tempfile::tempdir().unwrap();
    let files = ProcessFiles::new(std::fs::canonicalize(data.path()).unwrap().join("p"));
    std::fs::create_dir_all(&files.dir).unwrap();
    let out = dirs.outside.path().display();
    let command = format!(
        "echo in > bg.txt; echo tmp > \"$TMPDIR/t\" && echo tmp-ok; \
         grep NoNewPrivs /proc/$PPID/status; echo out > {out}/bg || echo refused"
    );
    let mut started = bg::start(&command, &ctx.workspace, None, &files, &sandbox).unwrap();
    started.child.wait().await.unwrap();
    assert_eq!(files.exit_code(), Some(0));
    let log = files.tail(4096);
    assert!(log.contains("tmp-ok"), "{log}");
    // The wrapper (the command's parent) has no new privileges either.
    assert!(log.contains("NoNewPrivs:\t1"), "{log}");
    assert!(
        log.contains("Permission denied") && log.contains("refused"),
        "{log}"
    );
    assert!(ctx.workspace.join("bg.txt").exists());
    assert!(!dirs.outside.path().join("bg").exists());
    assert!(
        !files.dir.join("tmp").exists(),
        "the wrapper removes the temp dir"
    );

    // The positive control: unconfined, the same command writes outside.
    let files = ProcessFiles::new(files.dir.with_file_name("q"));
    std::fs::create_dir_all(&files.dir).unwrap();
    let mut started = bg::start(&command, &ctx.workspace, None, &files, &Sandbox::off()).unwrap();
    started.child.wait().await.unwrap();
    assert!(
        dirs.outside.path().join("bg").exists(),
        "{}",
        files.tail(4096)
    );
}

#[tokio::test]
async fn r13_7_an_mcp_server_process_is_confined() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (dirs, ctx) = ctx();
    let out = dirs.outside.path().display();
    // Not a real server: it does its writes and exits, so the start fails after them.
    let server = McpServerConfig {
        name: "writer".into(),
        command: "sh".into(),
        args: vec![
            "-c".into(),
            format!("echo in > marker; echo t > \"$TMPDIR/t\" && echo tmp > tmp-ok; echo out > {out}/mcp; exit 3"),
        ],
        ..Default::default()
    };
    let err = McpServer::start(server.clone(), &ctx.workspace, &sandbox)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("exited with status 3") && err.contains("Permission denied"),
        "{err}"
    );
    assert!(ctx.workspace.join("marker").exists());
    assert!(ctx.workspace.join("tmp-ok").exists());
    assert!(!dirs.outside.path().join("mcp").exists());

    let err = McpServer::start(server, &ctx.workspace, &Sandbox::off())
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("exited with status 3"), "{err}");
    assert!(dirs.outside.path().join("mcp").exists(), "positive control");
}

#[test]
fn r13_7_the_state_says_what_is_confined_and_landlock_mode_refuses_to_pretend() {
    let none = Kernel {
        landlock_abi: 0,
        landlock_missing: "Landlock is not in this kernel".into(),
        seccomp_filter: false,
        seccomp_missing: "no seccomp".into(),
    };
    let err = Sandbox::with_kernel(SandboxMode::Landlock, false, none.clone()).unwrap_err();
    assert!(
        err.to_string().contains("Landlock is not in this kernel"),
        "{err}"
    );
    let auto = Sandbox::with_kernel(SandboxMode::Auto, false, none.clone()).unwrap();
    assert!(!auto.state().enforced && !auto.state().network_denied);
    assert!(
        auto.state().summary().starts_with("NOT confined"),
        "{}",
        auto.state().summary()
    );
    let off = Sandbox::with_kernel(SandboxMode::Off, false, none).unwrap();
    assert!(off.state().complete() && !off.state().enforced);
    assert!(off.state().summary().starts_with("off"));

    let old = Kernel {
        landlock_abi: 3,
        seccomp_filter: false,
        seccomp_missing: "no seccomp".into(),
        ..Kernel::default()
    };
    // Files confined but the network cannot be denied: landlock mode refuses, unless allowed.
    assert!(Sandbox::with_kernel(SandboxMode::Landlock, false, old.clone()).is_err());
    let allowed = Sandbox::with_kernel(SandboxMode::Landlock, true, old).unwrap();
    assert_eq!(
        allowed.state().summary(),
        "landlock ABI 3, network allowed (tools.sandbox_network), seccomp off"
    );

    let full = Kernel {
        landlock_abi: 6,
        seccomp_filter: true,
        ..Kernel::default()
    };
    let s = Sandbox::with_kernel(SandboxMode::Landlock, false, full).unwrap();
    assert_eq!(
        s.state().summary(),
        "landlock ABI 6, network denied (landlock TCP rules and seccomp), seccomp on"
    );
}

#[tokio::test]
async fn r13_7_a_sandbox_that_cannot_be_prepared_runs_nothing() {
    let Some(sandbox) = confined(false) else {
        return;
    };
    let (_dirs, mut ctx) = ctx();
    let gone = ctx.workspace.join("gone");
    ctx.workspace = gone.clone();
    let terminal = Terminal {
        sandbox,
        ..Terminal::default()
    };
    let out = terminal
        .call(json!({"command": "echo ran > ../ran"}), &ctx)
        .await;
    assert!(out.is_error, "{}", out.content);
    assert!(out.content.contains("not started"), "{}", out.content);
    assert!(!gone.with_file_name("ran").exists());
}
