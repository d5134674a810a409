//! Load benchmark: many sessions run turns at once against the instant scripted provider, so
//! what is measured is turnkey's own overhead (admission, lease, transcript, events, delivery).
//! Prints turns/s and latency percentiles; it is a measurement, not a test.
//!
//! Also prints the server's CPU time per turn and RSS (from `/proc`), statements and commits per
//! turn and the mean time per stage (from `/metrics`), and the machine's raw limits measured in
//! the same run: fsyncs/s, rows/s of a batched insert, and statement round trips/s (with the
//! CPU each costs) through the same database stack.
//!
//! `cargo bench -p turnkey-tests --bench turn_load` (env: BENCH_SESSIONS, BENCH_TURNS,
//! BENCH_DATABASE_URL to run on PostgreSQL instead of a fresh SQLite file; TURNKEY_BIN to
//! measure another build of the server).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use turnkey_tests::bench;
use turnkey_tests::stats::percentile;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `turns` turns one after another on one session; returns each turn's latency from
/// submit to its `turn.finished` event as seen by a live SSE subscriber.
async fn run_session(base: String, token: String, turns: usize, deadline: Instant) -> Vec<f64> {
    let http = reqwest::Client::new();
    let auth = format!("Bearer {token}");
    let session: Value = http
        .post(format!("{base}/v1/sessions"))
        .header("authorization", &auth)
        .json(&json!({"title": "bench"}))
        .send()
        .await
        .expect("create session")
        .json()
        .await
        .expect("session json");
    let sid = session["id"].as_str().expect("id").to_owned();
    let resp = http
        .get(format!("{base}/v1/sessions/{sid}/events"))
        .header("authorization", &auth)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("sse");
    let mut events = resp.bytes_stream().eventsource();
    let mut out = Vec::with_capacity(turns);
    for i in 0..turns {
        if Instant::now() > deadline {
            break;
        }
        let t0 = Instant::now();
        let text = format!("bench turn {i}");
        let admission = bench::submit(&http, &base, &auth, &sid, &text, &format!("b{i}")).await;
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(60), events.next())
                .await
                .expect("event within 60 s")
                .expect("stream open")
                .expect("event");
            if ev.event != "turn.finished" {
                continue;
            }
            let event: Value = serde_json::from_str(&ev.data).expect("json");
            if event["admission_id"] == admission.as_str() {
                assert_eq!(
                    event["data"]["result"], "completed",
                    "bench turn failed: {event}"
                );
                break;
            }
        }
        out.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    out
}

/// Mean seconds of a histogram over the run, from its `_sum` and `_count` deltas.
fn mean_ms(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
    series: &str,
    labels: &str,
) -> Option<(f64, f64)> {
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let sum = bench::delta(before, after, &format!("{series}_sum{braces}"))?;
    let count = bench::delta(before, after, &format!("{series}_count{braces}"))?;
    (count > 0.0).then(|| (sum / count * 1000.0, count))
}

fn main() {
    let sessions = env_usize("BENCH_SESSIONS", 64);
    let turns = env_usize("BENCH_TURNS", 10);
    let database_url = std::env::var("BENCH_DATABASE_URL").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let provider = bench::instant_provider();
        let tk = bench::start_server(&provider, database_url.as_deref()).await;
        let pid = tk.pid().expect("server pid");
        // The machine's raw limits, measured now, in the same place the server writes.
        let fsyncs = bench::fsyncs_per_second(tk.dir.path(), Duration::from_secs(2));
        let rows = bench::batched_rows_per_second(tk.dir.path(), database_url.as_deref()).await;
        let (trips, trip_cpu_us) = bench::statement_round_trips(
            tk.dir.path(),
            database_url.as_deref(),
            Duration::from_secs(2),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(300);
        let metrics_before = bench::scrape(&tk.url).await;
        let cpu_before = bench::cpu_seconds(pid).unwrap_or(0.0);
        let started = Instant::now();
        let tasks: Vec<_> = (0..sessions)
            .map(|_| {
                tokio::spawn(run_session(
                    tk.url.clone(),
                    tk.token.clone(),
                    turns,
                    deadline,
                ))
            })
            .collect();
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.expect("session task"));
        }
        let wall = started.elapsed().as_secs_f64();
        let cpu = bench::cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
        let rss = bench::rss_mib(pid).unwrap_or(0.0);
        let metrics_after = bench::scrape(&tk.url).await;
        lat.sort_by(|a, b| a.total_cmp(b));
        let mut provider_ms: Vec<f64> = provider
            .requests()
            .iter()
            .filter_map(|r| {
                r.finished_at
                    .map(|f| (f - r.received_at).as_secs_f64() * 1000.0)
            })
            .collect();
        provider_ms.sort_by(|a, b| a.total_cmp(b));
        let backend = if database_url.is_some() {
            "postgresql"
        } else {
            "sqlite"
        };
        let n = lat.len() as f64;
        println!("turn_load: {sessions} sessions x {turns} turns on {backend}");
        println!("turns completed:        {}", lat.len());
        println!("wall time:              {wall:.2} s");
        println!("throughput:             {:.1} turns/s", n / wall);
        println!(
            "turn latency (ms):      p50 {:.1}  p95 {:.1}  max {:.1}",
            percentile(&lat, 0.50),
            percentile(&lat, 0.95),
            lat.last().copied().unwrap_or(0.0)
        );
        println!(
            "provider time (ms):     p50 {:.2}  p95 {:.2}",
            percentile(&provider_ms, 0.50),
            percentile(&provider_ms, 0.95)
        );
        println!(
            "overhead p50/p95 (ms):  {:.1} / {:.1}  (turn latency minus provider p50/p95)",
            percentile(&lat, 0.50) - percentile(&provider_ms, 0.50),
            percentile(&lat, 0.95) - percentile(&provider_ms, 0.95)
        );
        println!(
            "server CPU:             {:.2} ms/turn ({cpu:.2} s over the run)",
            cpu * 1000.0 / n.max(1.0)
        );
        println!("server RSS at the end:  {rss:.1} MiB");
        let per_turn = |key: &str| {
            bench::delta(&metrics_before, &metrics_after, key)
                .map_or("n/a (not exported)".to_owned(), |d| {
                    format!("{:.1}", d / n.max(1.0))
                })
        };
        println!(
            "statements per turn:    {}",
            per_turn("turnkey_store_statements_total")
        );
        println!(
            "write tx per turn:      {}",
            per_turn("turnkey_store_write_transactions_total")
        );
        println!(
            "commits per turn:       {}  (SQLite group commits; PostgreSQL commits each write tx)",
            per_turn("turnkey_store_commit_group_transactions_count")
        );
        println!("raw limits (same run, same filesystem):");
        println!("  fsync/s (4 KiB + fdatasync):     {fsyncs:.0}");
        println!("  rows/s (batched insert, one tx): {rows:.0}");
        println!(
            "  statements/s (one task, point reads through sea-orm + sqlx): {trips:.0}  ({trip_cpu_us:.0} µs CPU each)"
        );
        println!(
            "  turns per fsync the run needed:  {:.2}",
            (n / wall) / fsyncs.max(1.0)
        );
        // A write transaction is two more round trips (BEGIN, COMMIT) besides its statements.
        let trips_per_turn = ["turnkey_store_statements_total", "turnkey_store_write_transactions_total"]
            .map(|k| bench::delta(&metrics_before, &metrics_after, k).map(|d| d / n.max(1.0)));
        if let [Some(statements), Some(tx)] = trips_per_turn {
            let per_turn = statements + 2.0 * tx;
            println!(
                "  turns/s if round trips were all: {:.0}  ({per_turn:.1} round trips a turn, one at a time)",
                trips / per_turn.max(1.0)
            );
        }
        println!("where the time goes (mean ms per occurrence, occurrences per turn):");
        for stage in [
            "admit", "lease", "claim", "context", "provider", "finalize", "delivery",
        ] {
            match mean_ms(
                &metrics_before,
                &metrics_after,
                "turnkey_turn_stage_seconds",
                &format!("stage=\"{stage}\""),
            ) {
                Some((ms, count)) => {
                    println!("  {stage:<9} {ms:>8.2} ms  x{:.2}", count / n.max(1.0))
                }
                None => println!("  {stage:<9} n/a"),
            }
        }
        for (label, series) in [
            ("queue wait", "turnkey_turn_queue_wait_seconds"),
            ("write wait", "turnkey_store_write_wait_seconds"),
            ("write hold", "turnkey_store_write_hold_seconds"),
            ("handoff", "turnkey_store_write_handoff_seconds"),
            ("commit", "turnkey_store_commit_seconds"),
            ("statement", "turnkey_store_statement_seconds"),
        ] {
            if let Some((ms, count)) = mean_ms(&metrics_before, &metrics_after, series, "") {
                println!("  {label:<10} {ms:>7.3} ms  x{:.2}", count / n.max(1.0));
            }
        }
    });
}
