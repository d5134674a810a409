//! SPEC R4.2 end to end: two turnkey processes on one store (SQLite file, then PostgreSQL)
//! never run two turns of one session at once, while different sessions run side by side.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::{Duration, Instant};
use turnkey_tests::{pg, Api, RecordedRequest, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const S1: &str = "[tag:S1]";
const S2: &str = "[tag:S2]";
/// S1 turns submitted in one burst, alternating between the processes.
const BURST_S1: usize = 8;
/// Then S1 turns submitted one at a time (each waits for the previous), alternating too.
const ONE_BY_ONE_S1: usize = 4;
const TURNS_S1: usize = BURST_S1 + ONE_BY_ONE_S1;
const TURNS_S2: usize = 4;
/// All slow turns (0.5 s each), lease hand-overs included.
const ALL_DONE: Duration = Duration::from_secs(90);

/// One more turn on each session once all tagged turns ended (untagged: the default answer).
const LATER_S1: &str = "later on the first session";
const LATER_S2: &str = "later on the second session";

fn slow_answer(tag: &str) -> Reply {
    Reply::chunks(
        &[tag, " slow", " answer", " in", " five"],
        Duration::from_millis(100),
    )
}

fn turn_text(n: usize, tag: &str) -> String {
    format!("turn {n} {tag}")
}

/// Submits turns `range` tagged `tag` to `session`, alternating between the processes.
async fn submit_alternating(
    apis: [Api; 2],
    session: String,
    tag: &str,
    range: std::ops::Range<usize>,
) -> Vec<String> {
    let mut ids = Vec::new();
    for n in range {
        ids.push(
            apis[n % 2]
                .submit_accepted(&session, &turn_text(n, tag))
                .await,
        );
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

/// The user texts of the history a model call carried.
fn user_texts(r: &RecordedRequest) -> Vec<String> {
    r.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(text_of)
        .collect()
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
    let deadline = Instant::now() + ALL_DONE;

    // A burst: both processes hold queued work for S1 at the same time, and S2 runs meanwhile.
    let (ids1, ids2) = tokio::join!(
        submit_alternating(apis.clone(), s1.clone(), S1, 0..BURST_S1),
        submit_alternating(
            [apis[1].clone(), apis[0].clone()],
            s2.clone(),
            S2,
            0..TURNS_S2
        ),
    );
    wait_all_completed(&apis[0], &ids1, deadline).await;
    wait_all_completed(&apis[1], &ids2, deadline).await;
    // One at a time: the session moves between idle processes.
    for n in BURST_S1..TURNS_S1 {
        let ids = submit_alternating(apis.clone(), s1.clone(), S1, n..n + 1).await;
        wait_all_completed(&apis[(n + 1) % 2], &ids, deadline).await;
    }
    // A later turn on each session: it runs after every input admitted before it, so a turn
    // run a second time, by either process, would have called the model before it did.
    for (n, (session, text)) in [(&s1, LATER_S1), (&s2, LATER_S2)].into_iter().enumerate() {
        let id = apis[n].submit_accepted(session, text).await;
        wait_all_completed(&apis[n], &[id], deadline).await;
    }
    let last_two: Vec<String> = provider.asked()[TURNS_S1 + TURNS_S2..].to_vec();
    assert_eq!(last_two, [LATER_S1, LATER_S2]);

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
    assert_eq!(provider.request_count(), TURNS_S1 + TURNS_S2 + 2);
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
    for tag in [S1, S2] {
        let runner: Vec<u8> = provider
            .requests()
            .iter()
            .filter(|r| r.last_user_text.contains(tag))
            .map(|r| 1 + u8::from(r.header("authorization") == Some("Bearer sk-second")))
            .collect();
        println!("{tag} turns ran in process: {runner:?}");
    }

    // Each turn wrote its own pair of rows: nothing doubled, nothing merged.
    let messages = apis[1].messages(&s1).await;
    let rows: Vec<(String, String)> = messages
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "assistant")
        .map(|m| (m["role"].as_str().unwrap().to_string(), text_of(m)))
        .collect();
    assert_eq!(
        rows.len(),
        2 * TURNS_S1 + 2,
        "a user and an assistant row per turn: {rows:?}"
    );
    let (tagged, later) = rows.split_at(2 * TURNS_S1);
    let row = |role: &str, text: &str| (role.to_owned(), text.to_owned());
    assert_eq!(
        later,
        [
            row("user", LATER_S1),
            row("assistant", &format!("ok: {LATER_S1}"))
        ]
    );
    for pair in tagged.chunks(2) {
        assert_eq!(pair[0].0, "user", "{rows:?}");
        assert!(pair[0].1.ends_with(S1), "{rows:?}");
        assert_eq!(pair[1].0, "assistant", "{rows:?}");
        assert_eq!(pair[1].1, format!("{S1} slow answer in five"), "{rows:?}");
    }

    // SPEC R2.5: one durable FIFO per session, whichever process admitted or runs a turn.
    let s1_calls: Vec<RecordedRequest> = provider
        .requests()
        .into_iter()
        .filter(|r| r.last_user_text.contains(S1))
        .collect();
    let order: Vec<&str> = s1_calls.iter().map(|r| r.last_user_text.as_str()).collect();
    let fifo: Vec<String> = (0..TURNS_S1).map(|n| turn_text(n, S1)).collect();
    assert_eq!(order, fifo, "S1 turns ran in admission order (R2.5)");
    // Whichever process ran a turn, the model saw the whole history written by both.
    for (k, call) in s1_calls.iter().enumerate() {
        assert_eq!(user_texts(call), fifo[..=k], "history of S1 call {k}");
    }
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
