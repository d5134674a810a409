//! Tool-round benchmark: what the durable tool round costs beside the tools themselves. The
//! scripted provider answers instantly with tool calls, then with text; a round is timed by
//! the provider, from the end of the response that asked for the calls to the arrival of the
//! request that carries their results. That span is turnkey's own work: the assistant row and
//! every call recorded `planned` (one commit), then per call `started` + `tool.started` and the
//! result row + `finished` + `tool.completed` (two commits), all fsynced. Prints figures; it is
//! a measurement, not a test.
//!
//! `cargo bench -p turnkey-tests --bench tool_round` (env: BENCH_ROUNDS, default 100;
//! BENCH_DATABASE_URL to run on PostgreSQL instead of a fresh SQLite file).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::stats::percentile;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

fn rounds() -> usize {
    std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

fn calls(n: usize, name: &str, args: Value) -> Reply {
    Reply::ToolCalls(
        (0..n)
            .map(|i| (format!("c{i}"), name.to_string(), args.clone()))
            .collect(),
    )
}

/// Runs `turns` turns of one tool round each (`round` gives the calls) on one session and
/// returns each round's span in milliseconds.
async fn measure(
    tk: &Turnkey,
    provider: &ScriptedProvider,
    turns: usize,
    round: Reply,
) -> Vec<f64> {
    let api = tk.api();
    let session = api.create_session_id().await;
    let before = provider.request_count();
    for i in 0..turns {
        provider.push(round.clone());
        provider.push(Reply::text("done"));
        let a = api.submit_accepted(&session, &format!("round {i}")).await;
        let adm = api.wait_terminal(&a, Duration::from_secs(120)).await;
        assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    }
    let reqs = provider.requests();
    let mut spans: Vec<f64> = reqs[before..]
        .chunks(2)
        .filter_map(|pair| {
            let asked = pair.first()?.finished_at?;
            let answered = pair.get(1)?.received_at;
            Some((answered - asked).as_secs_f64() * 1000.0)
        })
        .collect();
    spans.sort_by(|a, b| a.total_cmp(b));
    spans
}

fn report(label: &str, spans: &[f64]) {
    println!(
        "{label:<44} n {:>4}  p50 {:>8.1} ms  p95 {:>8.1} ms  max {:>8.1} ms",
        spans.len(),
        percentile(spans, 0.50),
        percentile(spans, 0.95),
        spans.last().copied().unwrap_or(0.0)
    );
}

fn main() {
    let n = rounds();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let provider = ScriptedProvider::start();
        let mut options = TurnkeyOptions::new(&provider).extra_toml(
            "[agent]\ndelta_flush_ms = 20\nrepeat_guard = 1000\n[tools]\napproval = \"off\"\n",
        );
        if let Ok(url) = std::env::var("BENCH_DATABASE_URL") {
            options = options.database(&url);
        }
        let tk = Turnkey::start(options).await;
        std::fs::write(tk.dir.path().join("workspace").join("f.txt"), "x").expect("file");
        let backend = if std::env::var("BENCH_DATABASE_URL").is_ok() {
            "postgresql"
        } else {
            "sqlite"
        };
        println!("tool_round on {backend}, {n} rounds each");
        let read = json!({"path": "f.txt"});
        report(
            "1 x read_file (persist + events, one call)",
            &measure(&tk, &provider, n, calls(1, "read_file", read.clone())).await,
        );
        report(
            "8 x read_file (one round)",
            &measure(&tk, &provider, n, calls(8, "read_file", read)).await,
        );
        let sleepers = calls(8, "terminal", json!({"command": "sleep 1"}));
        report(
            "8 x terminal `sleep 1` (one round, parallel)",
            &measure(&tk, &provider, n.min(10), sleepers).await,
        );
    });
}
