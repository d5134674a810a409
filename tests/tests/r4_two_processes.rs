//! SPEC R4.2 end to end: two turnkey processes on one store (SQLite file, then PostgreSQL)
//! never run two turns of one session at once, while different sessions run side by side.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::{Duration, Instant};
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const S1: &str = "[tag:S1]";
const S2: &str = "[tag:S2]";
const TURNS_S1: usize = 8;
const TURNS_S2: usize = 4;
/// All twelve slow turns (0.5 s each), lease hand-overs included.
const ALL_DONE: Duration = Duration::from_secs(90);

fn slow_answer(tag: &str) -> Reply {
    Reply::chunks(
        &[tag, " slow", " answer", " in", " five"],
        Duration::from_millis(100),
    )
}

/// Submits `count` messages tagged `tag` to `session`, alternating between the processes.
async fn submit_alternating(
    apis: [Api; 2],
    session: String,
    tag: &str,
    count: usize,
) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..count {
        let text = format!("turn {n} {tag}");
        ids.push(apis[n % 2].submit_accepted(&session, &text).await);
    }
    ids
}

async fn wait_all_completed(api: &Api, ids: &[String], deadline: Instant) {
    for id in ids {
        let left = deadline.saturating_duration_since(Instant::now());
        let done = api.wait_terminal(id, left).await;
        assert_eq!(done["outcome"]["result"], "completed", "{done}");
    }
}

fn text_of(m: &Value) -> String {
    m["content"].as_str().unwrap_or_default().to_string()
}

async fn two_processes_one_store(first: TurnkeyOptions, provider: &ScriptedProvider) {
    provider.on_user_text(S1, slow_answer(S1));
    provider.on_user_text(S2, slow_answer(S2));
    let tk1 = Turnkey::start(first.clone()).await;
    let second = first
        .database(&tk1.database_url)
        .provider_api_key("sk-second");
    let tk2 = Turnkey::start(second).await;
    let apis = [tk1.api(), tk2.api()];
    let s1 = apis[0].create_session_id().await;
    let s2 = apis[1].create_session_id().await;

    let (ids1, ids2) = tokio::join!(
        submit_alternating(apis.clone(), s1.clone(), S1, TURNS_S1),
        submit_alternating([apis[1].clone(), apis[0].clone()], s2.clone(), S2, TURNS_S2),
    );
    let deadline = Instant::now() + ALL_DONE;
    wait_all_completed(&apis[0], &ids1, deadline).await;
    wait_all_completed(&apis[1], &ids2, deadline).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert_eq!(
        provider.request_count_for(S1),
        TURNS_S1,
        "one model call per S1 turn"
    );
    assert_eq!(
        provider.request_count_for(S2),
        TURNS_S2,
        "one model call per S2 turn"
    );
    assert_eq!(provider.request_count(), TURNS_S1 + TURNS_S2);
    assert_eq!(
        provider.max_concurrency_for(S1),
        1,
        "one session never runs two turns at once"
    );
    assert_eq!(
        provider.max_concurrency_for(S2),
        1,
        "one session never runs two turns at once"
    );
    let across = provider.max_concurrency_where(|t| t.contains(S1) || t.contains(S2));
    println!("max concurrency across the two sessions: {across} (2 shows they ran side by side)");
    let by_second = provider
        .requests()
        .iter()
        .filter(|r| r.header("authorization") == Some("Bearer sk-second"))
        .count();
    println!(
        "model calls made by the second process: {by_second} of {}",
        TURNS_S1 + TURNS_S2
    );

    // Each turn wrote its own pair of rows: nothing doubled, nothing merged.
    let messages = apis[1].messages(&s1).await;
    let rows: Vec<(String, String)> = messages
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "assistant")
        .map(|m| (m["role"].as_str().unwrap().to_string(), text_of(m)))
        .collect();
    assert_eq!(
        rows.len(),
        2 * TURNS_S1,
        "a user and an assistant row per turn: {rows:?}"
    );
    for pair in rows.chunks(2) {
        assert_eq!(pair[0].0, "user", "{rows:?}");
        assert!(pair[0].1.ends_with(S1), "{rows:?}");
        assert_eq!(pair[1].0, "assistant", "{rows:?}");
        assert_eq!(pair[1].1, format!("{S1} slow answer in five"), "{rows:?}");
    }

    // SPEC R2.5: one durable FIFO per session, whichever process admitted or runs a turn.
    let order: Vec<String> = provider
        .requests()
        .into_iter()
        .filter(|r| r.last_user_text.contains(S1))
        .map(|r| r.last_user_text)
        .collect();
    let fifo: Vec<String> = (0..TURNS_S1).map(|n| format!("turn {n} {S1}")).collect();
    assert_eq!(order, fifo, "S1 turns ran in admission order (R2.5)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_2_two_processes_one_sqlite_one_turn_per_session() {
    let provider = ScriptedProvider::start();
    two_processes_one_store(TurnkeyOptions::new(&provider), &provider).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_2_two_processes_one_postgres_one_turn_per_session() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    let provider = ScriptedProvider::start();
    two_processes_one_store(TurnkeyOptions::new(&provider).database(db.url()), &provider).await;
}
