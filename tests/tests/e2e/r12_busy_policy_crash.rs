//! SPEC R12 with the busy policy (R13.4): the process is SIGKILLed right after a steered or
//! coalesced input was settled as carried by the running turn. The carrying turn had started
//! no side effect without a result, so after a restart it resumes by itself, once (R13.9); the
//! carried inputs point at it, and none of their text is lost or doubled: a steered text is in
//! the transcript once and answered by the resumed attempt (its tool, which had finished, is
//! not run again), and a coalesced burst, cut before its joined row was written, is answered
//! from the head's stored input, which holds every text once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::wire::assert_closed_wire;
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};

async fn start(provider: &ScriptedProvider, toml: &str, failpoint: &str) -> Turnkey {
    Turnkey::start(
        TurnkeyOptions::new(provider)
            .extra_toml(&format!("{toml}\n[tools]\napproval = \"off\"\n"))
            .env("FAILPOINTS", &format!("{failpoint}=return")),
    )
    .await
}

async fn wait_event(api: &Api, session: &str, kind: &str) {
    eventually(BOUND, &format!("{kind} event"), || async {
        let events = api.all_events(session, 0).await;
        events.iter().any(|e| e["kind"] == kind).then_some(())
    })
    .await;
}

async fn settled(api: &Api, id: &str) -> Value {
    api.wait_admission(id, |s| s != "started" && s != "queued", BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_killed_after_a_steered_input_joined_the_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "call_wait",
        "terminal",
        json!({"command": "sleep 1; echo waited"}),
    ));
    let mut tk = start(
        &provider,
        "[agent]\nbusy_policy = \"steer\"\n",
        "steer.after_carry",
    )
    .await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "do the slow thing").await;
    wait_event(&api, &s, "tool.started").await;
    let b = api.submit_accepted(&s, "and also mind this").await;
    assert!(
        tk.wait_exit(BOUND).await.is_some(),
        "turnkey died at steer.after_carry"
    );
    tk.restart_with_env(&[]).await;
    let api = tk.api();

    let adm_a = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm_a["outcome"]["result"], "completed", "resumed: {adm_a}");
    assert_eq!(adm_a["outcome"]["attempts"], 2, "{adm_a}");
    let adm_b = settled(&api, &b).await;
    assert_eq!(adm_b["status"], "terminal", "{adm_b}");
    assert_eq!(adm_b["outcome"]["result"], "steered", "{adm_b}");
    assert_eq!(adm_b["outcome"]["carried_by"], a.as_str(), "{adm_b}");

    // The steered text is in the transcript once, answered by the resumed attempt.
    let rows = api.messages(&s).await;
    let roles: Vec<&str> = rows.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "user", "assistant"],
        "{rows:?}"
    );
    assert_eq!(rows[3]["content"], "and also mind this");
    assert_eq!(rows[4]["content"], "ok: and also mind this", "{}", rows[4]);
    assert!(rows[4]["display"]["boundary"].is_null(), "{}", rows[4]);

    // The resumed call saw the finished tool's result and the steered text; the tool did not
    // run again (the next turn below is the proof: a re-run would come before it).
    assert_eq!(
        provider.request_count(),
        2,
        "the cut call and its one resume"
    );
    let request = &provider.requests()[1];
    assert_eq!(request.last_user_text, "and also mind this");
    assert!(
        request.body.to_string().contains("waited"),
        "{}",
        request.body
    );
    let events = api.all_events(&s, 0).await;
    let tool_starts = events
        .iter()
        .filter(|e| e["kind"] == "tool.started")
        .count();
    assert_eq!(tool_starts, 1, "{events:?}");
    provider.push(Reply::text("fine"));
    let c = api.submit_accepted(&s, "what now?").await;
    let adm_c = api.wait_terminal(&c, BOUND).await;
    assert_eq!(adm_c["outcome"]["result"], "completed", "{adm_c}");
    let request = &provider.requests()[2];
    assert_closed_wire(&request.body, "and also mind this");
    assert_eq!(request.last_user_text, "what now?");
    assert_eq!(
        provider.request_count(),
        3,
        "the cut call, its one resume, the next turn"
    );
    let events = api.all_events(&s, 0).await;
    let tool_starts = events
        .iter()
        .filter(|e| e["kind"] == "tool.started")
        .count();
    assert_eq!(tool_starts, 1, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_killed_after_a_burst_was_coalesced() {
    let provider = ScriptedProvider::start();
    let mut tk = start(
        &provider,
        "[agent]\ncoalesce_ms = 500\n",
        "coalesce.after_commit",
    )
    .await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "part one").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = api.submit_accepted(&s, "part two").await;
    assert!(
        tk.wait_exit(BOUND).await.is_some(),
        "turnkey died at coalesce.after_commit"
    );
    provider.push(Reply::text("both seen"));
    tk.restart_with_env(&[]).await;
    let api = tk.api();

    // Resumed by itself: its joined input is written now, and answered once.
    let adm_a = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm_a["outcome"]["final_response"], "both seen", "{adm_a}");
    assert_eq!(adm_a["outcome"]["attempts"], 2, "{adm_a}");
    let adm_b = settled(&api, &b).await;
    assert_eq!(adm_b["outcome"]["result"], "coalesced", "{adm_b}");
    assert_eq!(adm_b["outcome"]["carried_by"], a.as_str(), "{adm_b}");
    let rows = api.messages(&s).await;
    let roles: Vec<&str> = rows.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant"], "{rows:?}");
    assert_eq!(rows[0]["content"], "part one\npart two");
    // One more turn: the session runs its inputs in order, so a wrong second run of the burst
    // would have called the model before it.
    let c = api.submit_accepted(&s, "and then?").await;
    let adm_c = api.wait_terminal(&c, BOUND).await;
    assert_eq!(adm_c["outcome"]["result"], "completed", "{adm_c}");
    let requests = provider.requests();
    assert_eq!(
        requests.len(),
        2,
        "nothing ran before the crash, once after (then the next turn)"
    );
    assert_eq!(requests[0].last_user_text, "part one\npart two");
    assert_eq!(requests[1].last_user_text, "and then?");
}
