//! What per-principal limits add to a submission (SPEC R13.8): the time from sending
//! `POST /v1/sessions/{id}/submissions` to its 202, for an API token's principal, with
//! `[limits]` unset and with all three set (high enough never to refuse: each is then one
//! indexed read before the admission). Each turn ends before the next submission, so the
//! queue is the same in both. Prints figures; it is a measurement, not a test.
//!
//! `cargo bench -p turnkey-tests --bench limits` (env: BENCH_SUBMISSIONS, default 200;
//! BENCH_DATABASE_URL to run on PostgreSQL instead of a fresh SQLite file).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use serde_json::json;
use std::time::{Duration, Instant};
use turnkey_tests::bench;
use turnkey_tests::stats::percentile;

async fn measure(limits: &str, n: usize, database_url: Option<&str>) -> Vec<f64> {
    let provider = bench::instant_provider();
    provider.on_user_text("load", turnkey_tests::Reply::text("ok"));
    let options =
        bench::server_options(&provider, database_url).extra_toml(&format!("[limits]\n{limits}\n"));
    let tk = turnkey_tests::Turnkey::start(options).await;
    let op = tk.api();
    let r = op.post("/v1/tokens", &json!({"name": "bench"})).await;
    let user = op.with_token(Some(&r.str_field("token")));
    let session = user.create_session_id().await;
    let http = reqwest::Client::new();
    let auth = format!("Bearer {}", r.str_field("token"));
    let mut spans = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = Instant::now();
        let admission = bench::submit(
            &http,
            &tk.url,
            &auth,
            &session,
            &format!("load {i}"),
            &format!("l{i}"),
        )
        .await;
        spans.push(t0.elapsed().as_secs_f64() * 1000.0);
        user.wait_terminal(&admission, Duration::from_secs(60))
            .await;
    }
    spans.sort_by(|a, b| a.total_cmp(b));
    spans
}

fn main() {
    let n = std::env::var("BENCH_SUBMISSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let database_url = std::env::var("BENCH_DATABASE_URL").ok();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let off = measure("", n, database_url.as_deref()).await;
        let on = measure(
            "turns_per_minute = 1000000\nconcurrent_turns = 1000\ntokens_per_day = 1000000000000",
            n,
            database_url.as_deref(),
        )
        .await;
        println!("submissions: {n} per run, each to its 202");
        for (name, v) in [("limits off", &off), ("limits on ", &on)] {
            println!(
                "{name}: p50 {:.2} ms  p95 {:.2} ms",
                percentile(v, 0.5),
                percentile(v, 0.95)
            );
        }
        println!(
            "added: p50 {:+.2} ms  p95 {:+.2} ms",
            percentile(&on, 0.5) - percentile(&off, 0.5),
            percentile(&on, 0.95) - percentile(&off, 0.95)
        );
    });
}
