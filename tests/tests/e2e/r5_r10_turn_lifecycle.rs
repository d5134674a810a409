//! One turn's lifecycle through the real binary: what the model sees (R5), the preflight gate
//! (R6), provider error paths (R8, R12 rows 429/5xx/overflow/garbage), and how finalize closes
//! the tail (R10).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::{Reply, ScriptedProvider, Step, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

async fn start() -> (ScriptedProvider, Turnkey) {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    (provider, tk)
}

fn outcome(adm: &Value) -> &Value {
    &adm["outcome"]
}

fn roles(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_2_system_prompt_is_built_once_and_replayed_byte_for_byte() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for text in ["first", "second", "third"] {
        let a = api.submit_accepted(&s, text).await;
        api.wait_terminal(&a, BOUND).await;
    }
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 3);
    let system: Vec<Value> = reqs.iter().map(|r| r.body["messages"][0].clone()).collect();
    assert_eq!(system[0]["role"], "system");
    assert!(system[0]["content"]
        .as_str()
        .unwrap()
        .contains("# Workspace"));
    assert_eq!(
        system[0], system[1],
        "the prompt must not be rebuilt between turns"
    );
    assert_eq!(system[1], system[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_4_wire_copy_replays_history_without_bookkeeping_fields() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::text("answer one"));
    let a = api.submit_accepted(&s, "question one").await;
    api.wait_terminal(&a, BOUND).await;
    let a = api.submit_accepted(&s, "question two").await;
    api.wait_terminal(&a, BOUND).await;
    let second = &provider.requests()[1].body;
    let msgs = second["messages"].as_array().unwrap();
    let wire: Vec<(String, String)> = msgs
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(wire.len(), 4, "{wire:?}");
    assert_eq!(wire[1], ("user".into(), "question one".into()));
    assert_eq!(wire[2], ("assistant".into(), "answer one".into()));
    assert_eq!(wire[3], ("user".into(), "question two".into()));
    for m in msgs {
        for field in [
            "id",
            "idx",
            "turn_id",
            "api_content",
            "display",
            "created_at",
        ] {
            assert!(
                m.get(field).is_none(),
                "bookkeeping field {field} leaked: {m}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_provider_429_then_success_is_retried_and_completes() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::Error {
        status: 429,
        body: serde_json::json!({"error": {"message": "slow down", "code": "rate_limit"}}),
        retry_after: Some(0),
    });
    provider.push(Reply::error(503, "overloaded"));
    provider.push(Reply::text("made it"));
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "completed", "{adm}");
    assert_eq!(outcome(&adm)["final_response"], "made it");
    assert_eq!(provider.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_provider_5xx_exhausts_retries_and_fails_with_a_closed_tail() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for _ in 0..3 {
        provider.push(Reply::error(500, "boom"));
    }
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "failed", "{adm}");
    assert_eq!(outcome(&adm)["failure_reason"], "provider_server_error");
    assert_eq!(provider.request_count(), 3, "max attempts, no more");
    // R10.5: the failed user row gets an assistant boundary, so the next input is not merged.
    let msgs = api.messages(&s).await;
    assert_eq!(roles(&msgs), vec!["user", "assistant"]);
    let next = api.submit_accepted(&s, "again").await;
    let adm = api.wait_terminal(&next, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "completed");
    let last = provider.requests().last().unwrap().body.clone();
    let wire_roles: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(wire_roles, vec!["system", "user", "assistant", "user"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_garbage_stream_is_retried_then_fails_cleanly() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for _ in 0..3 {
        provider.push(Reply::Malformed(b"data: {this is not json\n\n".to_vec()));
    }
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "failed", "{adm}");
    assert_eq!(outcome(&adm)["failure_reason"], "provider_malformed_stream");
    assert!(
        tk.log_tail(500).contains("retrying"),
        "malformed streams are retryable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_5_proven_overflow_fails_closed_without_resending() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::Overflow);
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "failed", "{adm}");
    assert_eq!(outcome(&adm)["failure_reason"], "context_overflow");
    assert_eq!(
        provider.request_count(),
        1,
        "a request that must fail is not sent again"
    );
    // A context-pressure failure does not grow the transcript (SPEC R10.5).
    assert_eq!(roles(&api.messages(&s).await), vec!["user"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_2_interrupt_mid_stream_keeps_what_was_shown_and_settles_interrupted() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::Text {
        chunks: (0..40).map(|i| format!("word{i} ")).collect(),
        chunk_delay: Duration::from_millis(100),
    });
    let a = api.submit_accepted(&s, "talk slowly").await;
    // Interrupted once something was shown, long before the last word.
    api.first_delta(&s, 0, BOUND).await;
    let r = api.interrupt(&s).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "interrupted", "{adm}");
    let msgs = api.messages(&s).await;
    assert_eq!(roles(&msgs), vec!["user", "assistant"]);
    let shown = msgs[1]["content"].as_str().unwrap();
    assert!(
        shown.starts_with("word0 "),
        "partial text is kept: {shown:?}"
    );
    assert!(!shown.contains("word39"), "the stream was cut: {shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_3_unknown_tool_gets_an_error_result_and_the_loop_continues() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::tool_call(
        "call_1",
        "rm_rf",
        serde_json::json!({"path": "/"}),
    ));
    provider.push(Reply::text("I cannot do that."));
    let a = api.submit_accepted(&s, "delete everything").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "completed", "{adm}");
    let msgs = api.messages(&s).await;
    assert_eq!(roles(&msgs), vec!["user", "assistant", "tool", "assistant"]);
    assert_eq!(msgs[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(msgs[2]["tool_call_id"], "call_1");
    assert!(msgs[2]["content"]
        .as_str()
        .unwrap()
        .contains("unknown tool"));
    // The second call saw the tool-call row and its result (persisted before anything else).
    let second = &provider.requests()[1].body["messages"];
    assert_eq!(second[2]["tool_calls"][0]["function"]["name"], "rm_rf");
    assert_eq!(second[3]["tool_call_id"], "call_1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_4_usage_is_recorded_on_the_session_and_in_the_outcome() {
    let (_provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "count my tokens").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    let usage = &outcome(&adm)["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{adm}");
    assert!(usage["output_tokens"].as_u64().unwrap() > 0, "{adm}");
    let session = api.session(&s).await.body;
    assert_eq!(session["usage"]["input_tokens"], usage["input_tokens"]);
    assert_eq!(session["state"], "idle");
}

/// A turn whose model goes silent is interrupted by the liveness watchdog as `turn_inactive`,
/// and the session runs its next input.
async fn watchdog_hard_interrupts_a_silent_turn(
    options: TurnkeyOptions,
    provider: ScriptedProvider,
) {
    let tk = Turnkey::start(options).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::Hang);
    let a = api.submit_accepted(&s, "hang please").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "interrupted", "{adm}");
    assert_eq!(outcome(&adm)["failure_reason"], "turn_inactive");
    // The session is free again: the next turn runs.
    let b = api.submit_accepted(&s, "next").await;
    assert_eq!(
        outcome(&api.wait_terminal(&b, BOUND).await)["result"],
        "completed"
    );
    provider.release_hangs();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_watchdog_hard_interrupts_a_silent_turn() {
    let provider = ScriptedProvider::start();
    let mut options = TurnkeyOptions::new(&provider);
    options.lease_watchdog_s = 1;
    watchdog_hard_interrupts_a_silent_turn(options, provider).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_provider_bytes_without_text_keep_a_turn_alive() {
    let provider = ScriptedProvider::start();
    let mut options = TurnkeyOptions::new(&provider);
    options.lease_watchdog_s = 1;
    let tk = Turnkey::start(options).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    // 2.4 s without a word, but a keep-alive comment every 0.4 s: the stream is alive.
    let mut steps = vec![Step::Ping(Duration::from_millis(400)); 6];
    steps.push(Step::text("still here"));
    provider.push(Reply::Steps(steps));
    let a = api.submit_accepted(&s, "think quietly").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "completed", "{adm}");
    assert_eq!(outcome(&adm)["final_response"], "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_the_older_agent_liveness_timeout_key_still_arms_the_watchdog() {
    let provider = ScriptedProvider::start();
    let options = TurnkeyOptions::new(&provider).extra_toml("[agent]\nliveness_timeout_s = 1\n");
    watchdog_hard_interrupts_a_silent_turn(options, provider).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_3_retry_limits_come_from_the_provider_config() {
    let provider = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&provider)
        .provider_toml("max_retries = 4\nbackoff_base_ms = 10\nbackoff_cap_ms = 20");
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for _ in 0..5 {
        provider.push(Reply::error(503, "down"));
    }
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "failed", "{adm}");
    assert_eq!(provider.request_count(), 5, "1 attempt + max_retries 4");
    assert!(
        outcome(&adm)["failure_message"]
            .as_str()
            .is_some_and(|m| m.contains("503")),
        "failure_message says what the provider said: {adm}"
    );
    let events = api.all_events(&s, 0).await;
    let finished = events
        .iter()
        .find(|e| e["kind"] == "turn.finished")
        .expect("turn.finished");
    assert_eq!(finished["data"]["failure_reason"], "provider_server_error");
    assert_eq!(
        finished["data"]["failure_message"],
        outcome(&adm)["failure_message"]
    );

    // max_retries = 0: one attempt only.
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).provider_toml("max_retries = 0")).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::error(503, "down"));
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(outcome(&adm)["result"], "failed", "{adm}");
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_2_status_events_follow_queue_and_state() {
    let (provider, tk) = start().await;
    let api = tk.api();
    let s = api.create_session_id().await;
    provider.push(Reply::chunks(&["slow"], Duration::from_millis(500)));
    let first = api.submit_accepted(&s, "one").await;
    api.submit_accepted(&s, "two").await;
    let last = api.submit_accepted(&s, "three").await;
    api.wait_terminal(&first, BOUND).await;
    api.wait_terminal(&last, BOUND).await;
    let events = api.all_events(&s, 0).await;
    let statuses: Vec<(String, u64)> = events
        .iter()
        .filter(|e| e["kind"] == "status")
        .map(|e| {
            (
                e["data"]["state"].as_str().unwrap().to_string(),
                e["data"]["queue_depth"].as_u64().unwrap(),
            )
        })
        .collect();
    // Three admissions, three claims, three ends: every change is announced.
    assert_eq!(statuses.len(), 9, "{statuses:?}");
    assert_eq!(statuses.last().unwrap(), &("idle".to_string(), 0));
    assert!(statuses.iter().any(|s| s.0 == "running"), "{statuses:?}");
    assert!(
        statuses.iter().any(|s| s.1 >= 1),
        "queue depth shows what waits: {statuses:?}"
    );
    let view = api.session(&s).await;
    assert_eq!(view.body["model"], "scripted-model", "the model in use");
}

/// The transcript carries each turn's cost on the turn's last row (`turn_usage`), the same
/// figures `turn.finished` gave, so that a page read later shows them (issue 26).
async fn turn_usage_in_the_transcript(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&provider);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let mut outcomes = Vec::new();
    for text in ["first question", "second question"] {
        let a = api.submit_accepted(&s, text).await;
        outcomes.push(outcome(&api.wait_terminal(&a, BOUND).await).clone());
    }
    let messages = api.messages(&s).await;
    let costed: Vec<&Value> = messages
        .iter()
        .filter(|m| m.get("turn_usage").is_some())
        .collect();
    assert_eq!(costed.len(), 2, "one row per turn: {messages:?}");
    for (row, done) in costed.iter().zip(&outcomes) {
        assert_eq!(row["role"], "assistant", "{row}");
        assert_eq!(
            row["turn_usage"]["input_tokens"], done["usage"]["input_tokens"],
            "{row} / {done}"
        );
        assert_eq!(
            row["turn_usage"]["output_tokens"],
            done["usage"]["output_tokens"]
        );
        assert!(row["turn_usage"]["cost_usd"].is_number(), "{row}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_4_each_turns_usage_is_in_the_transcript_sqlite() {
    turn_usage_in_the_transcript(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_4_each_turns_usage_is_in_the_transcript_postgres() {
    let Some(db) = turnkey_tests::pg::fresh_database().await else {
        return;
    };
    turn_usage_in_the_transcript(Some(db.url())).await;
}
