//! What the OS sandbox (SPEC R13.7) adds to a `terminal` call: runs `true` through the
//! built-in `terminal` tool N times unconfined and N times confined (alternating, so that load
//! drifts hit both alike) and prints p50, p95 and the mean of each, and the difference.
//!
//! `cargo run -p turnkey-tools --release --example sandbox_overhead [-- N]` (N = 200).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use turnkey_tools::{builtin_registry, BuiltinConfig, Caller, Sandbox, SandboxMode, ToolContext};

fn terminal(sandbox: Sandbox) -> Arc<dyn turnkey_tools::Tool> {
    builtin_registry(&BuiltinConfig {
        enabled: vec!["terminal".into()],
        sandbox,
        ..Default::default()
    })
    .unwrap()
    .get("terminal")
    .unwrap()
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn line(name: &str, mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let mean = times.iter().sum::<Duration>().as_secs_f64() * 1000.0 / times.len() as f64;
    let (p50, p95) = (quantile(&times, 0.50), quantile(&times, 0.95));
    println!("{name:<28} p50 {p50:6.2} ms   p95 {p95:6.2} ms   mean {mean:6.2} ms");
    (p50, p95)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("N"))
        .unwrap_or(200);
    let sandbox = Sandbox::new(SandboxMode::Auto, false).unwrap();
    println!("sandbox: {}", sandbox.state().summary());
    let workspace = tempfile::tempdir().unwrap();
    let ctx = ToolContext {
        workspace: std::fs::canonicalize(workspace.path()).unwrap(),
        hidden: None,
        checkpoints: workspace.path().join(".checkpoints"),
        cancel: CancellationToken::new(),
        progress: Arc::new(|_| {}),
        caller: Caller::default(),
    };
    let off = terminal(Sandbox::off());
    let on = terminal(sandbox);
    let args = json!({"command": "true"});
    // Warm-up: page cache, the first fork.
    for _ in 0..10 {
        off.call(args.clone(), &ctx).await;
        on.call(args.clone(), &ctx).await;
    }
    let (mut t_off, mut t_on) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        for (tool, times) in [(&off, &mut t_off), (&on, &mut t_on)] {
            let started = Instant::now();
            let out = tool.call(args.clone(), &ctx).await;
            times.push(started.elapsed());
            assert!(!out.is_error, "{}", out.content);
        }
    }
    println!("{n} calls of `terminal true` each:");
    let (p50_off, p95_off) = line("sandbox off", t_off);
    let (p50_on, p95_on) = line("sandbox auto (confined)", t_on);
    println!(
        "{:<28} p50 {:+6.2} ms   p95 {:+6.2} ms",
        "added by the sandbox",
        p50_on - p50_off,
        p95_on - p95_off
    );
}
