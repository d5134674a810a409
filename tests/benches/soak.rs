//! Soak: a steady open-loop load at half of the measured capacity for a long time (10 minutes by
//! default), against the instant scripted provider. First a closed-loop burst (64 sessions, 10
//! s) measures capacity; then submissions arrive at half that rate, spread round-robin over 64
//! sessions, whatever the server's latency. Every minute it prints the window's turns, latency
//! p50/p99 and the server's RSS and CPU; at the end, RSS growth after the first (warm-up)
//! window and the drift of p99 from the first window to the last. A measurement, not a test.
//!
//! The scripted model's context window is small (4,000 tokens), so every session reaches its
//! compression threshold within about a minute and then stays there, as long-lived sessions
//! do; the compressions are part of the load.
//!
//! `cargo bench -p turnkey-tests --bench soak` (env: SOAK_SECS, default 600; SOAK_RATE to
//! fix the rate in turns/s instead of measuring; SOAK_CONTEXT_WINDOW in tokens, default
//! 4,000; BENCH_DATABASE_URL for PostgreSQL).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use turnkey_tests::bench;
use turnkey_tests::stats::percentile;

const SESSIONS: usize = 64;

/// Submit times of admissions not finished yet, and finished turns' (finish time, latency ms).
#[derive(Default)]
struct Book {
    pending: HashMap<String, Instant>,
    /// Turns that finished before their receipt was read: finish time, completed or not.
    early: HashMap<String, (Instant, bool)>,
    done: Vec<(Instant, f64)>,
    failed: u64,
    /// `compression.completed` events seen.
    compressions: u64,
}

async fn open_session(http: &reqwest::Client, base: &str, auth: &str) -> String {
    let session: Value = http
        .post(format!("{base}/v1/sessions"))
        .header("authorization", auth)
        .json(&json!({"title": "soak"}))
        .send()
        .await
        .expect("create session")
        .json()
        .await
        .expect("session json");
    session["id"].as_str().expect("id").to_owned()
}

/// Follows a session's events and settles each finished turn in `book`.
async fn follow(
    http: reqwest::Client,
    base: String,
    auth: String,
    sid: String,
    book: Arc<Mutex<Book>>,
) {
    let resp = http
        .get(format!("{base}/v1/sessions/{sid}/events"))
        .header("authorization", &auth)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("sse");
    let mut events = resp.bytes_stream().eventsource();
    while let Some(Ok(ev)) = events.next().await {
        if ev.event == "compression.completed" {
            book.lock().unwrap().compressions += 1;
            continue;
        }
        if ev.event != "turn.finished" {
            continue;
        }
        let event: Value = serde_json::from_str(&ev.data).expect("json");
        let Some(admission) = event["admission_id"].as_str() else {
            continue;
        };
        let now = Instant::now();
        let completed = event["data"]["result"] == "completed";
        let mut b = book.lock().unwrap();
        match b.pending.remove(admission) {
            Some(t0) => b.settle(t0, now, completed),
            None => {
                b.early.insert(admission.to_owned(), (now, completed));
            }
        }
    }
}

impl Book {
    fn settle(&mut self, t0: Instant, finished: Instant, completed: bool) {
        if completed {
            self.done
                .push((finished, (finished - t0).as_secs_f64() * 1000.0));
        } else {
            self.failed += 1;
        }
    }
}

/// Submits one turn; answers its admission id.
async fn submit(
    http: &reqwest::Client,
    base: &str,
    auth: &str,
    sid: &str,
    i: u64,
    book: &Mutex<Book>,
) -> String {
    let t0 = Instant::now();
    let text = format!("soak turn {i}");
    let admission = bench::submit(http, base, auth, sid, &text, &format!("s{i}")).await;
    let mut b = book.lock().unwrap();
    // The turn may have finished before the receipt was read.
    match b.early.remove(&admission) {
        Some((finished, completed)) => b.settle(t0, finished, completed),
        None => {
            b.pending.insert(admission.clone(), t0);
        }
    }
    admission
}

fn main() {
    let secs: u64 = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let fixed_rate: Option<f64> = std::env::var("SOAK_RATE").ok().and_then(|v| v.parse().ok());
    let database_url = std::env::var("BENCH_DATABASE_URL").ok();
    let context_window: u32 = std::env::var("SOAK_CONTEXT_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let provider = bench::instant_provider();
        // A long-lived session lives at its compression threshold: with a small window every
        // session compresses about once a minute, so the run measures that steady state
        // instead of transcripts that only grow.
        let options = bench::server_options(&provider, database_url.as_deref())
            .context_window(context_window);
        let tk = turnkey_tests::Turnkey::start(options).await;
        let pid = tk.pid().expect("server pid");
        let http = reqwest::Client::new();
        let auth = format!("Bearer {}", tk.token);
        let book = Arc::new(Mutex::new(Book::default()));
        let mut sids = Vec::new();
        for _ in 0..SESSIONS {
            let sid = open_session(&http, &tk.url, &auth).await;
            tokio::spawn(follow(
                http.clone(),
                tk.url.clone(),
                auth.clone(),
                sid.clone(),
                book.clone(),
            ));
            sids.push(sid);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut next_id = 0u64;

        // Capacity: every session submits its next turn as soon as the last one finished.
        let rate = match fixed_rate {
            Some(r) => r,
            None => {
                let t0 = Instant::now();
                let calibrate = Duration::from_secs(10);
                let mut tasks = Vec::new();
                for sid in sids.clone() {
                    let (http, base, auth, book) =
                        (http.clone(), tk.url.clone(), auth.clone(), book.clone());
                    let first = next_id;
                    next_id += 1_000_000;
                    tasks.push(tokio::spawn(async move {
                        let mut i = first;
                        while t0.elapsed() < calibrate {
                            let admission = submit(&http, &base, &auth, &sid, i, &book).await;
                            i += 1;
                            // This session's next turn only after this one finished.
                            let wait = Instant::now();
                            while book.lock().unwrap().pending.contains_key(&admission)
                                && wait.elapsed() < Duration::from_secs(30)
                            {
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                        }
                    }));
                }
                for t in tasks {
                    t.await.expect("calibration task");
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                let done = book.lock().unwrap().done.len();
                let capacity = done as f64 / t0.elapsed().as_secs_f64();
                println!(
                    "measured capacity: {capacity:.1} turns/s (closed loop, {SESSIONS} sessions)"
                );
                capacity / 2.0
            }
        };
        book.lock().unwrap().done.clear();
        println!("soak: {rate:.1} turns/s for {secs} s, {SESSIONS} sessions");
        println!(
            "window  turns   p50 ms   p99 ms   RSS MiB   SQLite MiB   CPU ms/turn   compressions"
        );

        let started = Instant::now();
        let end = started + Duration::from_secs(secs);
        let interval = Duration::from_secs_f64(1.0 / rate.max(0.1));
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut window_start = Instant::now();
        let mut cpu_mark = bench::cpu_seconds(pid).unwrap_or(0.0);
        let mut compressions_mark = book.lock().unwrap().compressions;
        let mut windows: Vec<(f64, f64, f64)> = Vec::new(); // (p99, rss, SQLite's heap)
        let mut k = 0usize;
        while Instant::now() < end {
            ticker.tick().await;
            let sid = sids[k % SESSIONS].clone();
            k += 1;
            let (client, base, bearer, ledger) =
                (http.clone(), tk.url.clone(), auth.clone(), book.clone());
            let i = next_id;
            next_id += 1;
            tokio::spawn(async move {
                submit(&client, &base, &bearer, &sid, i, &ledger).await;
            });
            if window_start.elapsed() >= Duration::from_secs(60) || Instant::now() >= end {
                let now = Instant::now();
                let (mut lat, compressions): (Vec<f64>, u64) = {
                    let b = book.lock().unwrap();
                    let lat = b
                        .done
                        .iter()
                        .filter(|(t, _)| *t >= window_start && *t < now)
                        .map(|(_, l)| *l)
                        .collect();
                    (lat, b.compressions)
                };
                lat.sort_by(|a, b| a.total_cmp(b));
                let cpu = bench::cpu_seconds(pid).unwrap_or(0.0);
                let rss = bench::rss_mib(pid).unwrap_or(0.0);
                // SQLite's own heap (page caches, prepared statements), to tell its growth
                // from the rest of the process's.
                let sqlite = bench::scrape(&tk.url)
                    .await
                    .get("turnkey_sqlite_memory_bytes")
                    .copied()
                    .unwrap_or(0.0)
                    / (1024.0 * 1024.0);
                let p99 = percentile(&lat, 0.99);
                println!(
                    "{:>6}  {:>5}  {:>7.1}  {:>7.1}  {:>8.1}  {:>11.1}  {:>11.2}  {:>13}",
                    windows.len() + 1,
                    lat.len(),
                    percentile(&lat, 0.50),
                    p99,
                    rss,
                    sqlite,
                    (cpu - cpu_mark) * 1000.0 / (lat.len().max(1) as f64),
                    compressions - compressions_mark
                );
                compressions_mark = compressions;
                windows.push((p99, rss, sqlite));
                cpu_mark = cpu;
                window_start = now;
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let b = book.lock().unwrap();
        println!(
            "finished turns: {}, failed: {}, still pending: {}",
            b.done.len(),
            b.failed,
            b.pending.len()
        );
        if windows.len() >= 2 {
            let (p99_first, rss_warm, sqlite_warm) = windows[0];
            let (p99_last, rss_last, sqlite_last) = windows[windows.len() - 1];
            println!(
                "RSS after warm-up: {rss_warm:.1} -> {rss_last:.1} MiB ({:+.1} %)",
                (rss_last - rss_warm) / rss_warm.max(0.1) * 100.0
            );
            let (rest_warm, rest_last) = (rss_warm - sqlite_warm, rss_last - sqlite_last);
            println!(
                "of which SQLite's heap: {sqlite_warm:.1} -> {sqlite_last:.1} MiB; the rest: \
                 {rest_warm:.1} -> {rest_last:.1} MiB ({:+.1} %)",
                (rest_last - rest_warm) / rest_warm.max(0.1) * 100.0
            );
            println!(
                "p99 drift: {p99_first:.1} -> {p99_last:.1} ms ({:+.1} ms)",
                p99_last - p99_first
            );
        }
    });
}
