//! SPEC R13.9 end to end: a turn that started no side effect resumes by itself after its
//! process is SIGKILLed mid-stream (one process restarted on SQLite and on PostgreSQL, and
//! across two PostgreSQL replicas, where the survivor resumes it) or stopped with SIGTERM past
//! its grace (the next process, or the other replica, resumes it). The resumed attempt gives
//! the one complete answer; `turn.resumed` says so, after the cut attempt's text and before
//! the new one; the outcome records two attempts. Cuts of the resumed attempts are in
//! `r12_failure_matrix` (resumed again up to `[agent] max_resumes`) and `r2_4_unknown_turns`
//! (one cut more: `unknown`), a cut during a running tool in
//! `r13_safe_resume` (left for a person), a SIGTERM during a running tool in
//! `r2_4_graceful_shutdown` (settled `interrupted`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::wire::wire_messages;
use turnkey_tests::{pg, Api, RecordedRequest, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::wait::BOUND;
const QUESTION: &str = "tell me a long story";
const ANSWER: &str = "Once upon a time there was a cat. The end.";
const KEY_A: &str = "sk-replica-a";
const KEY_B: &str = "sk-replica-b";

/// The first call streams slowly (the test cuts it mid-stream); any later one answers whole.
fn script(provider: &ScriptedProvider) {
    let slow = Reply::chunks(
        &["Once upon ", "a time ", "there ", "was ", "a ", "dog"],
        Duration::from_millis(700),
    );
    provider.on_user_text_times(QUESTION, slow, 1);
    provider.on_user_text(QUESTION, Reply::text(ANSWER));
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn position(events: &[Value], kind: &str) -> usize {
    events
        .iter()
        .position(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))
}

/// What every resumed turn must show once it settled: completed with the one complete answer
/// after exactly one resume for `reason`, the cut text before `turn.resumed` and the answer
/// after it, nothing unknown, the transcript holding the question and the one answer.
async fn assert_resumed_once(api: &Api, session: &str, admission: &str, reason: &str) {
    let done = api.wait_terminal(admission, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["outcome"]["final_response"], ANSWER, "{done}");
    assert_eq!(done["outcome"]["attempts"], 2, "{done}");
    // A hand-back at shutdown is no crash: it does not count against `[agent] max_resumes`.
    let crashes = i64::from(reason == "crash");
    assert_eq!(done["crash_resumes"], crashes, "{done}");

    let events = api.all_events(session, 0).await;
    let resumed = of_kind(&events, "turn.resumed");
    assert_eq!(resumed.len(), 1, "resumed once: {events:?}");
    let r = resumed[0];
    assert_eq!(r["data"]["attempt"], 2, "{r}");
    assert_eq!(r["data"]["reason"], reason, "{r}");
    assert_eq!(r["data"]["admission_id"], admission, "{r}");
    assert_eq!(r["admission_id"], admission, "{r}");
    assert!(of_kind(&events, "turn.unknown").is_empty(), "{events:?}");
    assert_eq!(of_kind(&events, "message.complete").len(), 1, "{events:?}");
    assert_eq!(of_kind(&events, "turn.finished").len(), 1, "{events:?}");
    // The answer comes after the resume, and it is the whole answer.
    let at = position(&events, "turn.resumed");
    assert!(at < position(&events, "message.complete"), "{events:?}");
    let complete = of_kind(&events, "message.complete")[0];
    assert_eq!(complete["data"]["text"], ANSWER);
    // Gap-free seqs: what a replay returns has no hole.
    for pair in events.windows(2) {
        assert_eq!(
            pair[1]["seq"].as_i64().unwrap(),
            pair[0]["seq"].as_i64().unwrap() + 1,
            "{events:?}"
        );
    }

    let messages = api.messages(session).await;
    let rows: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![("user", QUESTION), ("assistant", ANSWER)],
        "one question, one answer, no boundary of the cut attempt"
    );
    let view = api.session(session).await;
    assert_eq!(view.body["state"], "idle", "{}", view.text);
}

/// The model was asked twice (the cut call, and the resumed one), and the resumed request is
/// the transcript as it is durably: the question, with nothing of the cut attempt in it.
fn assert_asked_twice(requests: &[RecordedRequest]) -> RecordedRequest {
    let asked: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|r| r.last_user_text == QUESTION)
        .collect();
    assert_eq!(asked.len(), 2, "one cut call and one resumed call");
    let wire = wire_messages(&asked[1].body);
    let roles: Vec<&str> = wire.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["system", "user"], "{wire:?}");
    asked[1].clone()
}

async fn sigkill_mid_stream_resumes_once(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    script(&provider);
    let mut opts = TurnkeyOptions::new(&provider);
    if let Some(url) = database {
        opts = opts.database(url);
    }
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let admission = api.submit_accepted(&session, QUESTION).await;
    let cut = api.first_delta(&session, 0, BOUND).await;
    tk.kill();
    tk.restart().await;
    let api = tk.api();
    assert_resumed_once(&api, &session, &admission, "crash").await;
    assert_asked_twice(&provider.requests());
    // What streamed before the cut is still in the log, before the resume.
    let events = api.all_events(&session, 0).await;
    let at = position(&events, "turn.resumed");
    assert!(
        events[..at]
            .iter()
            .any(|e| e["kind"] == "message.delta" && e["data"]["text"] == cut.as_str()),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_sigkill_mid_stream_resumes_once_and_completes_sqlite() {
    sigkill_mid_stream_resumes_once(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_sigkill_mid_stream_resumes_once_and_completes_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    sigkill_mid_stream_resumes_once(Some(db.url())).await;
}

async fn sigterm_past_the_grace_hands_back(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    script(&provider);
    let mut opts = TurnkeyOptions::new(&provider).env("TURNKEY__SERVER__SHUTDOWN_GRACE_S", "1");
    if let Some(url) = database {
        opts = opts.database(url);
    }
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let admission = api.submit_accepted(&session, QUESTION).await;
    api.first_delta(&session, 0, BOUND).await;
    let status = tk.terminate(BOUND).await.expect("exits");
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    tk.restart().await;
    let api = tk.api();
    assert_resumed_once(&api, &session, &admission, "shutdown").await;
    assert_asked_twice(&provider.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_sigterm_past_the_grace_hands_a_text_turn_back_and_it_completes_after_restart_sqlite()
{
    sigterm_past_the_grace_hands_back(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_sigterm_past_the_grace_hands_a_text_turn_back_and_it_completes_after_restart_postgres(
) {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    sigterm_past_the_grace_hands_back(Some(db.url())).await;
}

/// A rolling deploy stops the server again and again while one text turn streams: every SIGTERM
/// past the grace hands the turn back, none counts against `[agent] max_resumes` (more stops
/// than it allows crashes), and the turn completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_rolling_restarts_hand_a_turn_back_every_time_and_it_completes() {
    let provider = ScriptedProvider::start();
    let stops = DEFAULT_MAX_RESUMES + 1;
    let slow = Reply::chunks(
        &["Once upon ", "a time ", "there ", "was ", "a ", "dog"],
        Duration::from_millis(700),
    );
    provider.on_user_text_times(QUESTION, slow, stops);
    provider.on_user_text(QUESTION, Reply::text(ANSWER));
    let opts = TurnkeyOptions::new(&provider).env("TURNKEY__SERVER__SHUTDOWN_GRACE_S", "1");
    let mut tk = Turnkey::start(opts).await;
    let session = tk.api().create_session_id().await;
    let admission = tk.api().submit_accepted(&session, QUESTION).await;
    for stop in 0..stops {
        // This attempt streams; then the deploy stops the server and starts it again.
        tk.api().first_delta(&session, stop, BOUND).await;
        let status = tk.terminate(BOUND).await.expect("exits");
        assert!(status.success(), "a graceful stop exits 0: {status:?}");
        tk.restart().await;
    }
    let api = tk.api();
    let done = api.wait_terminal(&admission, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["outcome"]["final_response"], ANSWER, "{done}");
    assert_eq!(done["outcome"]["attempts"], stops + 1, "{done}");
    assert_eq!(done["crash_resumes"], 0, "no stop was a crash: {done}");
    let events = api.all_events(&session, 0).await;
    let resumed = of_kind(&events, "turn.resumed");
    assert_eq!(resumed.len(), stops, "{events:?}");
    assert!(resumed.iter().all(|r| r["data"]["reason"] == "shutdown"));
    assert!(of_kind(&events, "turn.unknown").is_empty(), "{events:?}");
    assert_eq!(of_kind(&events, "message.complete").len(), 1, "{events:?}");
}

/// Two replicas on one PostgreSQL database, told apart by their provider keys; the turn runs
/// on A, A is cut (`kill`: SIGKILL, else SIGTERM past a 1 s grace), and B resumes it without
/// A coming back.
async fn the_other_replica_resumes(kill: bool) {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    let provider = ScriptedProvider::start();
    script(&provider);
    let mut opts = TurnkeyOptions::new(&provider)
        .database(db.url())
        .env("TURNKEY__SERVER__SHUTDOWN_GRACE_S", "1");
    opts.lease_ttl_s = 3;
    opts.lease_refresh_s = 1;
    let mut a = Turnkey::start(opts.clone().provider_api_key(KEY_A)).await;
    let b = Turnkey::start(opts.provider_api_key(KEY_B)).await;
    let (api_a, api_b) = (a.api(), b.api());
    let session = api_a.create_session_id().await;
    let admission = api_a.submit_accepted(&session, QUESTION).await;
    api_b.first_delta(&session, 0, BOUND).await;
    let first = provider.requests()[0].clone();
    assert_eq!(
        first.header("authorization"),
        Some(format!("Bearer {KEY_A}").as_str()),
        "the turn runs on A"
    );
    if kill {
        a.kill();
    } else {
        let status = a.terminate(BOUND).await.expect("A exits");
        assert!(status.success(), "{status:?}");
    }
    let reason = if kill { "crash" } else { "shutdown" };
    assert_resumed_once(&api_b, &session, &admission, reason).await;
    let resumed = assert_asked_twice(&provider.requests());
    assert_eq!(
        resumed.header("authorization"),
        Some(format!("Bearer {KEY_B}").as_str()),
        "B resumed it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_replica_killed_mid_stream_the_other_resumes_the_turn_postgres() {
    the_other_replica_resumes(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_replica_stopped_past_its_grace_the_other_resumes_the_turn_postgres() {
    the_other_replica_resumes(false).await;
}
