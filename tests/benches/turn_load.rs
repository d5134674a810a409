//! Load benchmark: many sessions run turns at once against the instant scripted provider, so
//! what is measured is turnkey's own overhead (admission, lease, transcript, events, delivery).
//! Prints turns/s and latency percentiles; it is a measurement, not a test.
//!
//! `cargo bench -p turnkey-tests --bench turn_load` (env: BENCH_SESSIONS, BENCH_TURNS,
//! BENCH_DATABASE_URL to run on PostgreSQL instead of a fresh SQLite file).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use turnkey_tests::stats::percentile;
use turnkey_tests::{ScriptedProvider, Turnkey, TurnkeyOptions};

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
        let receipt: Value = http
            .post(format!("{base}/v1/sessions/{sid}/submissions"))
            .header("authorization", &auth)
            .json(&json!({"text": format!("bench turn {i}"), "request_id": format!("b{i}")}))
            .send()
            .await
            .expect("submit")
            .json()
            .await
            .expect("receipt");
        let admission = receipt["admission_id"]
            .as_str()
            .expect("admission")
            .to_owned();
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

fn main() {
    let sessions = env_usize("BENCH_SESSIONS", 64);
    let turns = env_usize("BENCH_TURNS", 10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let provider = ScriptedProvider::start();
        let mut options =
            TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 20\n");
        if let Ok(url) = std::env::var("BENCH_DATABASE_URL") {
            options = options.database(&url);
        }
        let tk = Turnkey::start(options).await;
        let deadline = Instant::now() + Duration::from_secs(300);
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
        let backend = if std::env::var("BENCH_DATABASE_URL").is_ok() {
            "postgresql"
        } else {
            "sqlite"
        };
        println!("turn_load: {sessions} sessions x {turns} turns on {backend}");
        println!("turns completed:        {}", lat.len());
        println!("wall time:              {wall:.2} s");
        println!(
            "throughput:             {:.1} turns/s",
            lat.len() as f64 / wall
        );
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
    });
}
