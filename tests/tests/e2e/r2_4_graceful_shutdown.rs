//! SIGTERM is not a crash (SPEC R2.4, API.md `serve`): admission closes at once (503
//! `shutting_down` with `Retry-After`), a turn that ends within `server.shutdown_grace_s`
//! completes, and one running a tool when the grace runs out is interrupted and settled as
//! `interrupted` (reason `shutdown`) with its tail closed (a text-only turn is handed back to
//! resume instead: `r13_9_auto_resume`). Only a real crash leaves a turn `unknown`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};

async fn started(grace_s: u64, reply: Reply) -> (ScriptedProvider, Turnkey, String, String) {
    started_with(grace_s, reply, "").await
}

/// [`started`] with more `[tools]` keys.
async fn started_with(
    grace_s: u64,
    reply: Reply,
    tools: &str,
) -> (ScriptedProvider, Turnkey, String, String) {
    let provider = ScriptedProvider::start();
    provider.push(reply);
    let opts = TurnkeyOptions::new(&provider)
        .env("TURNKEY__SERVER__SHUTDOWN_GRACE_S", &grace_s.to_string())
        .extra_toml(&format!("[tools]\napproval = \"off\"\n{tools}"));
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let admission = api.submit_accepted(&session, "a long one").await;
    provider.wait_for_requests(1, BOUND).await.unwrap();
    (provider, tk, session, admission)
}

/// Waits until a tool of the session's turn has started.
async fn tool_started(tk: &Turnkey, session: &str) {
    let api = tk.api();
    eventually(BOUND, "tool.started", || async {
        let events = api.all_events(session, 0).await;
        events
            .iter()
            .any(|e| e["kind"] == "tool.started")
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_4_sigterm_interrupts_a_turn_running_a_tool_past_the_grace_and_settles_it() {
    // A tool is running when the grace runs out: a side effect may be under way, so the turn
    // is settled as interrupted rather than handed back to resume (SPEC R13.9; a text-only
    // turn is handed back: r13_9_auto_resume).
    let sleep = Reply::tool_call("call_sleep", "terminal", json!({"command": "sleep 30"}));
    let (_provider, mut tk, session, admission) = started(2, sleep).await;
    tool_started(&tk, &session).await;
    let url = tk.url.clone();
    let token = tk.token.clone();
    let began = Instant::now();
    let pid = nix::unistd::Pid::from_raw(tk.pid().expect("pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");

    // While stopping, a submission is refused with a hint when to come back. One that
    // reaches the gateway before the signal is handled is admitted (202) like any other:
    // it is kept and runs after the restart.
    let mut refused = None;
    let mut admitted_late = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while refused.is_none() && Instant::now() < deadline {
        let res = reqwest::Client::new()
            .post(format!("{url}/v1/sessions/{session}/submissions"))
            .bearer_auth(&token)
            .json(&json!({"text": "too late"}))
            .send()
            .await
            .expect("the server still answers during the grace");
        if res.status() == 503 {
            refused = Some(res);
        } else {
            assert_eq!(res.status(), 202, "admitted or refused, nothing else");
            let body: Value = res.json().await.unwrap();
            admitted_late.push(body["admission_id"].as_str().unwrap().to_owned());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let res = refused.expect("a 503 while shutting down");
    assert!(res.headers().get("retry-after").is_some(), "Retry-After");
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"]["code"], "shutting_down");

    let status = tk.wait_exit(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "grace of 2 s, then settle: {took:?}"
    );

    tk.restart().await;
    let api = tk.api();
    let adm = api.admission(&admission).await;
    assert_eq!(
        adm.body["status"], "terminal",
        "settled, not unknown: {}",
        adm.text
    );
    assert_eq!(adm.body["outcome"]["result"], "interrupted");
    assert_eq!(adm.body["outcome"]["failure_reason"], "shutdown");
    let events = api.all_events(&session, 0).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "turn.unknown"),
        "only a crash is unknown: {events:?}"
    );
    let finished = events
        .iter()
        .find(|e| e["kind"] == "turn.finished")
        .expect("turn.finished");
    assert_eq!(finished["data"]["failure_reason"], "shutdown");
    assert!(finished["data"]["failure_message"].is_string());
    for late in &admitted_late {
        let adm = api.wait_terminal(late, BOUND).await;
        assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    }
    let messages = api.messages(&session).await;
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // The call, its result (cut short by the stop), and the boundary that closes the tail.
    let mut expected = vec!["user", "assistant", "tool", "assistant"];
    for _ in &admitted_late {
        expected.extend(["user", "assistant"]);
    }
    assert_eq!(roles, expected, "the tail is closed");
    assert_eq!(messages[3]["display"]["closed_as"], "interrupted");
    assert!(
        !events.iter().any(|e| e["kind"] == "turn.resumed"),
        "a turn whose tool ran is not resumed: {events:?}"
    );
    assert_eq!(api.session(&session).await.body["state"], "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_4_sigterm_lets_a_turn_within_the_grace_complete() {
    let reply = Reply::chunks(&["still ", "going ", "done"], Duration::from_millis(500));
    let (_provider, mut tk, _session, admission) = started(20, reply).await;
    let status = tk.terminate(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{status:?}");
    tk.restart().await;
    let adm = tk.api().wait_terminal(&admission, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(adm["outcome"]["final_response"], "still going done");
}

/// A round where the grace cut one call while it ran and parked another that had not started
/// (one worker: it waited its turn): a side effect may have been under way, so the turn settles
/// `interrupted` like a cut single call, instead of being handed back to resume; the parked
/// call never runs, not even after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_4_r13_9_a_round_with_one_call_cut_by_the_grace_and_one_parked_settles_interrupted() {
    let calls = Reply::ToolCalls(vec![
        (
            "call_sleep".into(),
            "terminal".into(),
            json!({"command": "sleep 30"}),
        ),
        (
            "call_after".into(),
            "terminal".into(),
            json!({"command": "echo ran >> parked_call_ran.txt"}),
        ),
    ]);
    let (provider, mut tk, session, admission) = started_with(2, calls, "max_workers = 1\n").await;
    tool_started(&tk, &session).await;
    let status = tk.terminate(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "a graceful stop exits 0: {status:?}");

    tk.restart().await;
    let api = tk.api();
    let adm = api.wait_terminal(&admission, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "interrupted", "{adm}");
    assert_eq!(adm["outcome"]["failure_reason"], "shutdown", "{adm}");
    // A later turn runs after everything the restart would resume: the proof nothing did.
    let asked = api
        .asked_after_a_later_turn(&provider, &session, "and now?")
        .await;
    assert_eq!(asked, ["a long one", "and now?"], "not asked again");
    let events = api.all_events(&session, 0).await;
    assert!(
        !events.iter().any(|e| e["kind"] == "turn.resumed"),
        "a turn with a call cut by the stop is not handed back: {events:?}"
    );
    assert!(
        !events.iter().any(|e| e["kind"] == "turn.unknown"),
        "only a crash is unknown: {events:?}"
    );
    assert!(
        !tk.dir
            .path()
            .join("workspace")
            .join("parked_call_ran.txt")
            .exists(),
        "the parked call never ran"
    );
}
