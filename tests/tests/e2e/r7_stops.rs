//! Every stop of the loop (SPEC R7.2, R7.3) against the real binary: each ends the turn with a
//! stable `failure_reason` in both the admission outcome and the `turn.finished` event, or, for
//! an answer still cut off or repeated when recovery is spent, completes it with that answer and
//! its `stop_reason` (R10.2; every door: r10_2_cut_off_answer).
//! Covered elsewhere: provider 5xx after retries (r5_r10_turn_lifecycle
//! `r12_provider_5xx_exhausts_retries…`, `r8_3_retry_limits…`), proven overflow
//! (`r6_5_proven_overflow…`), inactivity (`r4_3…`), shutdown (r2_4_graceful_shutdown).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

async fn start(provider: &ScriptedProvider, agent_toml: &str) -> Turnkey {
    let opts = TurnkeyOptions::new(provider).extra_toml(&format!(
        "[agent]\n{agent_toml}\n\n[tools]\napproval = \"off\"\n"
    ));
    Turnkey::start(opts).await
}

/// Submits `text`, waits for the turn, and checks `result` and `failure_reason` in the
/// admission outcome and in the turn's `turn.finished` event. Returns the outcome.
async fn run_turn(api: &Api, s: &str, text: &str, result: &str, reason: Option<&str>) -> Value {
    let a = api.submit_accepted(s, text).await;
    let adm = api.wait_terminal(&a, BOUND).await;
    let outcome = adm["outcome"].clone();
    assert_eq!(outcome["result"], result, "{adm}");
    let reason = reason.map_or(Value::Null, |r| json!(r));
    assert_eq!(outcome["failure_reason"], reason, "{adm}");
    let events = api.all_events(s, 0).await;
    let finished = events
        .iter()
        .filter(|e| e["kind"] == "turn.finished" && e["admission_id"] == json!(a))
        .collect::<Vec<_>>();
    assert_eq!(finished.len(), 1, "one turn.finished: {events:?}");
    assert_eq!(finished[0]["data"]["result"], result);
    assert_eq!(
        finished[0]["data"]
            .get("failure_reason")
            .cloned()
            .unwrap_or(Value::Null),
        reason,
        "{}",
        finished[0]
    );
    outcome
}

/// A streamed OpenAI answer cut off by the output limit (`finish_reason: length`).
fn truncated(text: &str) -> Reply {
    Reply::cut_off(text)
}

fn read(id: &str, path: &str) -> Reply {
    Reply::tool_call(id, "read_file", json!({ "path": path }))
}

fn messages_of(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("?").to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn transcript(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("?").to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_final_text_completes_without_a_failure_reason() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("the answer"));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let outcome = run_turn(&api, &s, "question", "completed", None).await;
    assert_eq!(outcome["final_response"], "the answer");
    assert_eq!(stop_reason_everywhere(&api, &s, &outcome).await, "stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_max_iterations_stops_without_a_grace_call() {
    let provider = ScriptedProvider::start();
    for i in 0..3 {
        provider.push(read(&format!("m{i}"), &format!("missing-{i}.txt")));
    }
    let tk = start(&provider, "max_iterations = 2\niteration_budget = 10").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    run_turn(&api, &s, "keep reading", "failed", Some("max_iterations")).await;
    assert_eq!(provider.request_count(), 2, "no call past max_iterations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_3_spent_budget_gets_one_grace_call_without_tools() {
    let provider = ScriptedProvider::start();
    provider.push(read("b0", "missing-0.txt"));
    provider.push(read("b1", "missing-1.txt"));
    provider.push(Reply::text(
        "Stopped after reading two files; the rest is left.",
    ));
    let tk = start(&provider, "max_iterations = 10\niteration_budget = 2").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let outcome = run_turn(
        &api,
        &s,
        "read everything",
        "failed",
        Some("budget_exhausted"),
    )
    .await;
    assert_eq!(
        outcome["final_response"],
        "Stopped after reading two files; the rest is left."
    );
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3, "two iterations and one grace call");
    assert!(reqs[0].body["tools"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let last = &reqs[2].body;
    assert!(
        last.get("tools")
            .is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)),
        "the grace call offers no tools: {last}"
    );
    let wire = messages_of(last);
    let (role, text) = wire.last().unwrap();
    assert_eq!(role, "user");
    assert!(text.contains("summarize where the work stopped"), "{text}");
    // The instruction is wire-only; the summary is the delivered answer.
    let msgs = transcript(&api.messages(&s).await);
    assert!(
        msgs.iter().all(|(_, t)| !t.contains("iteration budget")),
        "{msgs:?}"
    );
    assert_eq!(
        msgs.last().unwrap(),
        &(
            "assistant".to_owned(),
            "Stopped after reading two files; the rest is left.".to_owned()
        )
    );
    let events = api.all_events(&s, 0).await;
    assert!(events.iter().any(|e| e["kind"] == "message.complete"
        && e["data"]["text"] == "Stopped after reading two files; the rest is left."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_time_budget_spent_interrupts_the_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::Hang);
    let tk = start(&provider, "turn_timeout_s = 1").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    run_turn(&api, &s, "slow", "interrupted", Some("turn_timeout")).await;
    provider.release_hangs();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_user_interrupt_stops_the_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::Hang);
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let api2 = tk.api();
    let s2 = s.clone();
    let p2 = provider.clone();
    let interrupter = tokio::spawn(async move {
        p2.wait_for_requests(1, BOUND).await.unwrap();
        let r = api2.interrupt(&s2).await;
        assert_eq!(r.status, 202, "{}", r.text);
    });
    run_turn(&api, &s, "wait", "interrupted", Some("interrupted")).await;
    interrupter.await.unwrap();
    provider.release_hangs();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_tool_guard_halt_stops_the_turn() {
    let provider = ScriptedProvider::start();
    for i in 0..3 {
        provider.push(read(&format!("g{i}"), "same.txt"));
    }
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    run_turn(&api, &s, "loop", "failed", Some("tool_guard_halt")).await;
    assert_eq!(provider.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_empty_output_is_recovered_once() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text(""));
    provider.push(Reply::text("now an answer"));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let outcome = run_turn(&api, &s, "say something", "completed", None).await;
    assert_eq!(outcome["final_response"], "now an answer");
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    let wire = messages_of(&reqs[1].body);
    assert_eq!(
        wire[wire.len() - 2],
        ("user".to_owned(), "say something".to_owned())
    );
    assert!(wire.last().unwrap().1.contains("empty"), "{wire:?}");
    // The nudge is wire-only.
    let msgs = transcript(&api.messages(&s).await);
    assert_eq!(
        msgs,
        vec![
            ("user".to_owned(), "say something".to_owned()),
            ("assistant".to_owned(), "now an answer".to_owned())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_empty_output_twice_fails_as_empty_response() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text(""));
    provider.push(Reply::text(""));
    provider.push(Reply::text("never asked"));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    run_turn(&api, &s, "say something", "failed", Some("empty_response")).await;
    assert_eq!(provider.request_count(), 2, "exactly one recovery call");
}

/// A model that says what it is about to do, calls a tool, then says the same again.
fn announce_then_read(text: &str) -> Reply {
    Reply::TextThenToolCalls(
        text.to_owned(),
        vec![(
            "r1".to_owned(),
            "read_file".to_owned(),
            json!({"path": "notes.txt"}),
        )],
    )
}

/// The `stop_reason` of an answered turn, in its outcome, `message.complete` and
/// `turn.finished`, all the same.
async fn stop_reason_everywhere(api: &Api, s: &str, outcome: &Value) -> Value {
    let events = api.all_events(s, 0).await;
    let of = |kind: &str| {
        events
            .iter()
            .rev()
            .find(|e| e["kind"] == kind)
            .map(|e| e["data"]["stop_reason"].clone())
            .unwrap_or_else(|| panic!("no {kind}: {events:?}"))
    };
    assert_eq!(of("message.complete"), outcome["stop_reason"], "{events:?}");
    assert_eq!(of("turn.finished"), outcome["stop_reason"], "{events:?}");
    outcome["stop_reason"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_repeated_output_gets_one_recovery_then_is_the_answer() {
    let provider = ScriptedProvider::start();
    provider.push(announce_then_read("I will read the notes first."));
    provider.push(Reply::text("I will read the notes first."));
    provider.push(Reply::text("I will read the notes first."));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    // The repeat guard stops the loop, not the turn: the text is the answer (SPEC R10.2).
    let outcome = run_turn(&api, &s, "what do the notes say?", "completed", None).await;
    assert_eq!(outcome["final_response"], "I will read the notes first.");
    assert_eq!(stop_reason_everywhere(&api, &s, &outcome).await, "repeated");
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3, "one recovery call, no more");
    let wire = messages_of(&reqs[2].body);
    let n = wire.len();
    assert_eq!(
        wire[n - 2],
        (
            "assistant".to_owned(),
            "I will read the notes first.".to_owned()
        )
    );
    assert!(wire[n - 1].1.contains("repeats"), "{wire:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_repeated_output_recovered_and_other_turns_answers_do_not_count() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Done."));
    provider.push(Reply::text("Done."));
    provider.push(announce_then_read("Let me look."));
    provider.push(Reply::text("Let me look."));
    provider.push(Reply::text("The notes say: buy milk."));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    run_turn(&api, &s, "remember milk", "completed", None).await;
    // The same short answer to another request in another turn is an answer, not a loop.
    let same = run_turn(&api, &s, "remember bread", "completed", None).await;
    assert_eq!(same["final_response"], "Done.");
    assert_eq!(provider.request_count(), 2);
    let next = run_turn(&api, &s, "what do the notes say?", "completed", None).await;
    assert_eq!(next["final_response"], "The notes say: buy milk.");
    assert_eq!(
        provider.request_count(),
        5,
        "the repeat got one recovery call"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_truncated_output_is_continued_and_concatenated() {
    let provider = ScriptedProvider::start();
    provider.push(truncated("part one, "));
    provider.push(truncated("part two, "));
    provider.push(Reply::text("the end."));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let outcome = run_turn(&api, &s, "write a lot", "completed", None).await;
    assert_eq!(outcome["final_response"], "part one, part two, the end.");
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    // The scripted provider is on loopback: a local server, continued from a prefill (the
    // answer so far as the last message, its trailing space trimmed), with no instruction.
    let second = messages_of(&reqs[1].body);
    assert_eq!(
        second.last().unwrap(),
        &("assistant".to_owned(), "part one,".to_owned())
    );
    assert_eq!(reqs[1].body["continue_final_message"], true);
    let third = messages_of(&reqs[2].body);
    assert_eq!(
        third.last().unwrap(),
        &("assistant".to_owned(), "part one, part two,".to_owned())
    );
    for r in &reqs[1..] {
        let users = messages_of(&r.body)
            .into_iter()
            .filter(|(role, _)| role == "user")
            .count();
        assert_eq!(users, 1, "no instruction: {}", r.body);
    }
    // Streamed deltas kept flowing through the continuations.
    let events = api.all_events(&s, 0).await;
    let deltas: String = events
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .map(|e| e["data"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(deltas, "part one, part two, the end.");
    // The prefills are wire-only.
    let msgs = transcript(&api.messages(&s).await);
    assert_eq!(
        msgs,
        vec![
            ("user".to_owned(), "write a lot".to_owned()),
            (
                "assistant".to_owned(),
                "part one, part two, the end.".to_owned()
            )
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_output_still_truncated_after_two_continuations_is_the_answer() {
    let provider = ScriptedProvider::start();
    for part in ["a ", "b ", "c ", "never asked"] {
        provider.push(truncated(part));
    }
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    // The text so far is the answer, marked as cut off (SPEC R10.2).
    let outcome = run_turn(&api, &s, "write forever", "completed", None).await;
    assert_eq!(outcome["final_response"], "a b c ");
    assert_eq!(
        stop_reason_everywhere(&api, &s, &outcome).await,
        "truncated"
    );
    assert_eq!(provider.request_count(), 3, "at most two continuations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_terminal_provider_error_fails_the_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::error(401, "invalid_api_key"));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    run_turn(&api, &s, "hello", "failed", Some("provider_auth_failed")).await;
    assert_eq!(provider.request_count(), 1, "auth errors are not retried");
}
