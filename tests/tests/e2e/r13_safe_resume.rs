//! Crashes in the tool round (SPEC R12 tool rows, R13.1, R13.2): the process dies at a named
//! point, restarts on the same store, and the turn is resumed from the transcript instead of
//! becoming a blanket `unknown`. A call recorded but not started runs once; a call that ran
//! without its result being saved is `unknown` until a person says retry or skip; a pending
//! approval survives and answering it resumes the turn. The side effect is a line appended to
//! a file, so "ran twice" is visible.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::path::PathBuf;
use turnkey_tests::wire::assert_closed_wire;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};
const APPEND: &str = "echo ran >> side_effect.txt";

fn options(provider: &ScriptedProvider, database: Option<&str>, tools: &str) -> TurnkeyOptions {
    let mut opts = TurnkeyOptions::new(provider).extra_toml(&format!("[tools]\n{tools}\n"));
    if let Some(url) = database {
        opts = opts.database(url);
    }
    opts
}

fn side_effects(tk: &Turnkey) -> usize {
    let path: PathBuf = tk.dir.path().join("workspace").join("side_effect.txt");
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn append_call() -> Reply {
    Reply::tool_call("call_side", "terminal", json!({ "command": APPEND }))
}

async fn die(tk: &mut Turnkey, point: &str) {
    let status = tk.wait_exit(BOUND).await;
    assert!(status.is_some(), "turnkey did not die at failpoint {point}");
}

async fn events_kind(api: &Api, session: &str, kind: &str) -> Vec<Value> {
    api.all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

async fn planned_not_run_then_resumed_once(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.push(append_call());
    provider.push(Reply::text("appended"));
    let opts = options(&provider, database, "approval = \"off\"")
        .env("FAILPOINTS", "tool.after_planned=return");
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "append a line").await;
    die(&mut tk, "tool.after_planned").await;
    assert_eq!(side_effects(&tk), 0, "the call was recorded, not run");

    tk.restart_with_env(&[]).await;
    let api = tk.api();
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        adm["outcome"]["result"], "completed",
        "resumed, not unknown: {adm}"
    );
    assert_eq!(side_effects(&tk), 1, "run exactly once");
    let started = events_kind(&api, &s, "turn.started").await;
    assert_eq!(started.len(), 2);
    assert_eq!(started[1]["data"]["resumed"], true);
    assert_eq!(
        provider.request_count(),
        2,
        "the model is not asked the first question again"
    );
    assert_closed_wire(&provider.requests()[1].body, "append a line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_tool_call_persisted_not_run_is_resumed_and_runs_once_sqlite() {
    planned_not_run_then_resumed_once(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_tool_call_persisted_not_run_is_resumed_and_runs_once_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    planned_not_run_then_resumed_once(Some(db.url())).await;
}

/// Dies after the side effect, before the result is saved; after the restart the run is
/// `unknown` and the turn waits. Returns the restarted process, its session and admission.
async fn ran_not_persisted(
    provider: &ScriptedProvider,
    database: Option<&str>,
) -> (Turnkey, String, String) {
    provider.push(append_call());
    provider.push(Reply::text("finished after the decision"));
    let opts = options(provider, database, "approval = \"off\"")
        .env("FAILPOINTS", "tool.before_result=return");
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "append once").await;
    die(&mut tk, "tool.before_result").await;
    assert_eq!(side_effects(&tk), 1, "the side effect happened");

    tk.restart_with_env(&[]).await;
    let api = tk.api();
    let question = eventually(BOUND, "question about the unknown tool run", || async {
        let view = api.session(&s).await;
        view.body["unknown_tool_runs"]
            .as_array()
            .and_then(|a| a.first())
            .cloned()
    })
    .await;
    assert_eq!(question["call_id"], "call_side");
    let unknown = events_kind(&api, &s, "tool.completed").await;
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0]["data"]["status"], "unknown");
    // The callers' decision is what comes next: after it, the side effects and model calls
    // are counted again, so a run while nobody decided would show there.
    assert_eq!(side_effects(&tk), 1, "not re-run while nobody decided");
    assert_eq!(
        provider.request_count(),
        1,
        "nothing invented reaches the model"
    );
    assert_eq!(api.admission(&a).await.body["status"], "started");
    (tk, s, a)
}

async fn decide(api: &Api, s: &str, decision: &str) -> u16 {
    api.post(
        &format!("/v1/sessions/{s}/tool_runs/call_side"),
        &json!({ "decision": decision }),
    )
    .await
    .status
}

async fn ran_not_persisted_then_retry(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let (tk, s, a) = ran_not_persisted(&provider, database).await;
    let api = tk.api();
    assert_eq!(decide(&api, &s, "retry").await, 200);
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(
        side_effects(&tk),
        2,
        "retry runs it again, on a person's word (once: it did not run while undecided)"
    );
    assert_eq!(
        provider.request_count(),
        2,
        "one model call after the decision"
    );
    assert_eq!(decide(&api, &s, "skip").await, 409, "decided once");
    let sent = &provider.requests()[1].body;
    assert_closed_wire(sent, "append once");
}

async fn ran_not_persisted_then_skip(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let (tk, s, a) = ran_not_persisted(&provider, database).await;
    let api = tk.api();
    assert_eq!(decide(&api, &s, "skip").await, 200);
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(
        side_effects(&tk),
        1,
        "skip does not run it again, nor did anything while undecided"
    );
    assert_eq!(
        provider.request_count(),
        2,
        "one model call after the decision"
    );
    let sent = &provider.requests()[1].body;
    let tool = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        tool["content"].as_str().unwrap().contains("skipped"),
        "the model gets a skipped result: {tool}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_tool_ran_result_not_persisted_is_unknown_then_retry_sqlite() {
    ran_not_persisted_then_retry(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_tool_ran_result_not_persisted_is_unknown_then_skip_sqlite() {
    ran_not_persisted_then_skip(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_tool_ran_result_not_persisted_is_unknown_then_retry_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    ran_not_persisted_then_retry(Some(db.url())).await;
}

async fn approval_survives_sigkill(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.push(append_call());
    provider.push(Reply::text("approved and done"));
    let mut tk = Turnkey::start(options(&provider, database, "approval = \"dangerous\"")).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "ask first").await;
    let approval_id = eventually(BOUND, "approval.requested", || async {
        let requested = events_kind(&api, &s, "approval.requested").await;
        requested
            .first()
            .map(|r| r["data"]["approval_id"].as_str().unwrap().to_string())
    })
    .await;
    tk.kill();
    tk.restart().await;
    let api = tk.api();
    // Still pending after the crash, not silently a denial.
    let view = api.session(&s).await;
    assert_eq!(
        view.body["pending_approvals"][0]["approval_id"], approval_id,
        "{}",
        view.text
    );
    // (Approving is the proof below: a run before it would make two side effects.)
    assert_eq!(side_effects(&tk), 0);
    let res = api
        .post(
            &format!("/v1/sessions/{s}/approvals/{approval_id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        adm["outcome"]["result"], "completed",
        "answering resumes the turn: {adm}"
    );
    assert_eq!(side_effects(&tk), 1, "it ran once, after the approval");
    let requested = events_kind(&api, &s, "approval.requested").await;
    assert_eq!(requested.len(), 1, "the same request, not a second one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_2_pending_approval_survives_sigkill_and_answering_resumes_sqlite() {
    approval_survives_sigkill(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_2_pending_approval_survives_sigkill_and_answering_resumes_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    approval_survives_sigkill(Some(db.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_2_sigterm_parks_a_turn_waiting_for_approval_and_the_next_process_resumes_it() {
    let provider = ScriptedProvider::start();
    provider.push(append_call());
    provider.push(Reply::text("approved after the deploy"));
    let opts = options(&provider, None, "approval = \"dangerous\"")
        .env("TURNKEY__SERVER__SHUTDOWN_GRACE_S", "1");
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "ask, then survive a deploy").await;
    eventually(BOUND, "approval.requested", || async {
        let requested = events_kind(&api, &s, "approval.requested").await;
        (!requested.is_empty()).then_some(())
    })
    .await;
    let status = tk.terminate(BOUND).await.expect("exits");
    assert!(status.success(), "{status:?}");

    tk.restart().await;
    let api = tk.api();
    let adm = api.admission(&a).await;
    assert_eq!(
        adm.body["status"], "started",
        "parked, not settled: {}",
        adm.text
    );
    let view = api.session(&s).await;
    let pending = &view.body["pending_approvals"];
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{}", view.text);
    let id = pending[0]["approval_id"].as_str().unwrap();
    let res = api
        .post(
            &format!("/v1/sessions/{s}/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(side_effects(&tk), 1);
}
