//! The tool round against the real binary (SPEC R9.4–R9.7): parallel calls with results in
//! call order, interrupt mid-batch, approvals (approve, deny, timeout), the repeat guard,
//! checkpoints and restore, and results spilled to disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::path::PathBuf;
use turnkey_tests::wire::wire_messages;
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};

async fn start(provider: &ScriptedProvider, tools_toml: &str) -> Turnkey {
    let opts = TurnkeyOptions::new(provider).extra_toml(&format!("[tools]\n{tools_toml}\n"));
    Turnkey::start(opts).await
}

fn workspace(tk: &Turnkey) -> PathBuf {
    tk.dir.path().join("workspace")
}

fn terminal(id: &str, command: &str) -> (String, String, Value) {
    (
        id.to_string(),
        "terminal".to_string(),
        json!({ "command": command }),
    )
}

fn events_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

fn millis(e: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(e["created_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

/// The tool results the model got in its request after the round, as (call id, content).
fn results_sent(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_4_eight_one_second_calls_run_in_parallel_and_answer_in_call_order() {
    let provider = ScriptedProvider::start();
    let calls: Vec<_> = (0..8)
        .map(|i| terminal(&format!("c{i}"), &format!("sleep 1; echo out-{i}")))
        .collect();
    provider.push(Reply::ToolCalls(calls));
    provider.push(Reply::text("all done"));
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "run eight").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");

    let events = api.all_events(&s, 0).await;
    let started = events_of(&events, "tool.started");
    let completed = events_of(&events, "tool.completed");
    assert_eq!((started.len(), completed.len()), (8, 8));
    let first = started.iter().map(|e| millis(e)).min().unwrap();
    let last = completed.iter().map(|e| millis(e)).max().unwrap();
    assert!(
        last - first < 2000,
        "eight 1 s calls took {} ms from first start to last result",
        last - first
    );
    assert!(completed.iter().all(|e| e["data"]["status"] == "ok"));

    let second = provider.requests()[1].body.clone();
    let sent = results_sent(&second);
    let ids: Vec<&str> = sent.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"]);
    for (i, (_, content)) in sent.iter().enumerate() {
        let out: Value = serde_json::from_str(content).unwrap();
        assert_eq!(out["exit_code"], 0, "{content}");
        assert_eq!(out["stdout"].as_str().unwrap().trim(), format!("out-{i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_4_interrupt_mid_batch_ends_started_calls_and_skips_the_rest() {
    let provider = ScriptedProvider::start();
    let calls: Vec<_> = (0..4)
        .map(|i| terminal(&format!("c{i}"), &format!("echo $$ > pid{i}; sleep 60")))
        .collect();
    provider.push(Reply::ToolCalls(calls));
    let tk = start(&provider, "approval = \"off\"\nmax_workers = 2").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "start long work").await;
    let ws = workspace(&tk);
    eventually(BOUND, "start of two calls", || async {
        (ws.join("pid0").exists() && ws.join("pid1").exists()).then_some(())
    })
    .await;
    assert_eq!(api.interrupt(&s).await.status, 202);
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "interrupted", "{adm}");

    let events = api.all_events(&s, 0).await;
    let statuses: Vec<(String, String)> = events_of(&events, "tool.completed")
        .iter()
        .map(|e| {
            (
                e["data"]["call_id"].as_str().unwrap().to_string(),
                e["data"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(statuses.len(), 4, "{statuses:?}");
    let skipped = statuses.iter().filter(|(_, s)| s == "skipped").count();
    assert_eq!(skipped, 2, "the two that never started: {statuses:?}");
    assert!(!ws.join("pid2").exists() && !ws.join("pid3").exists());
    // The started ones were killed with their process group.
    for i in 0..2 {
        let pid: i32 = std::fs::read_to_string(ws.join(format!("pid{i}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        assert!(!alive, "process {pid} of call {i} was killed");
    }
    let messages = api.messages(&s).await;
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "tool",
            "tool",
            "assistant"
        ],
        "every call has a result and the tail is closed"
    );
    assert_eq!(
        provider.request_count(),
        1,
        "no model call after the interrupt"
    );
}

async fn approval_requested(api: &Api, session: &str) -> Value {
    eventually(BOUND, "approval.requested", || async {
        api.all_events(session, 0)
            .await
            .into_iter()
            .find(|e| e["kind"] == "approval.requested")
    })
    .await
}

async fn decide(api: &Api, session: &str, approval_id: &str, decision: &str) -> u16 {
    api.post(
        &format!("/v1/sessions/{session}/approvals/{approval_id}"),
        &json!({ "decision": decision }),
    )
    .await
    .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_7_approve_runs_deny_refuses_timeout_denies() {
    let provider = ScriptedProvider::start();
    let tk = start(
        &provider,
        "approval = \"dangerous\"\napproval_timeout_s = 2",
    )
    .await;
    let api = tk.api();
    let ws = workspace(&tk);

    // Approve: it runs.
    provider.push(Reply::ToolCalls(vec![terminal(
        "a1",
        "echo yes > approved",
    )]));
    provider.push(Reply::text("ran it"));
    let s = api.create_session_id().await;
    let adm = api.submit_accepted(&s, "please approve").await;
    let req = approval_requested(&api, &s).await;
    assert_eq!(req["data"]["name"], "terminal");
    assert_eq!(req["data"]["call_id"], "a1");
    assert!(req["data"]["expires_at"].is_string());
    let view = api.session(&s).await;
    assert_eq!(
        view.body["pending_approvals"][0]["call_id"], "a1",
        "{}",
        view.text
    );
    let id = req["data"]["approval_id"].as_str().unwrap();
    assert_eq!(decide(&api, &s, id, "approve").await, 200);
    assert_eq!(decide(&api, &s, id, "deny").await, 409, "decided once");
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(ws.join("approved").exists());

    // Deny: the model gets a refusal, nothing runs.
    provider.push(Reply::ToolCalls(vec![terminal("d1", "echo no > denied")]));
    provider.push(Reply::text("fine"));
    let s = api.create_session_id().await;
    let adm = api.submit_accepted(&s, "please deny").await;
    let req = approval_requested(&api, &s).await;
    let id = req["data"]["approval_id"].as_str().unwrap();
    assert_eq!(decide(&api, &s, id, "deny").await, 200);
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(!ws.join("denied").exists());
    let sent = results_sent(&provider.requests().last().unwrap().body);
    assert!(sent[0].1.contains("denied"), "{sent:?}");

    // No answer in time: a denial, announced as a timeout.
    provider.push(Reply::ToolCalls(vec![terminal("t1", "echo late > late")]));
    provider.push(Reply::text("ok then"));
    let s = api.create_session_id().await;
    let adm = api.submit_accepted(&s, "nobody answers").await;
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(!ws.join("late").exists());
    let events = api.all_events(&s, 0).await;
    let resolved = events_of(&events, "approval.resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["decision"], "timeout");
    let completed = events_of(&events, "tool.completed");
    assert_eq!(completed[0]["data"]["status"], "denied");
    let id = resolved[0]["data"]["approval_id"].as_str().unwrap();
    assert_eq!(decide(&api, &s, id, "approve").await, 409, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_6_the_same_call_three_times_halts_the_turn() {
    let provider = ScriptedProvider::start();
    for i in 0..3 {
        provider.push(Reply::tool_call(
            &format!("r{i}"),
            "read_file",
            json!({"path": "notes.txt"}),
        ));
    }
    let tk = start(&provider, "approval = \"off\"").await;
    std::fs::write(workspace(&tk).join("notes.txt"), "hello").unwrap();
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "loop please").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "failed", "{adm}");
    assert_eq!(adm["outcome"]["failure_reason"], "tool_guard_halt");
    assert_eq!(provider.request_count(), 3, "no fourth model call");
    let events = api.all_events(&s, 0).await;
    let statuses: Vec<&str> = events_of(&events, "tool.completed")
        .iter()
        .map(|e| e["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "ok", "skipped"]);
    let messages = api.messages(&s).await;
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("read_file was called 3 times"),
        "a controlled answer: {last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_6_file_changes_are_checkpointed_and_restored() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::ToolCalls(vec![
        (
            "w1".into(),
            "write_file".into(),
            json!({"path": "a.txt", "content": "changed"}),
        ),
        (
            "w2".into(),
            "write_file".into(),
            json!({"path": "new/b.txt", "content": "created"}),
        ),
    ]));
    provider.push(Reply::text("edited"));
    let tk = start(&provider, "approval = \"off\"").await;
    let ws = workspace(&tk);
    std::fs::write(ws.join("a.txt"), "original").unwrap();
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "edit files").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "changed"
    );
    let events = api.all_events(&s, 0).await;
    let turn = events_of(&events, "turn.started")[0]["data"]["turn_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The receipt turns terminal a moment before the session lets go of its lease; until
    // then a restore is refused as `session_busy` (409), as documented.
    let path = format!("/v1/sessions/{s}/checkpoints/{turn}/restore");
    let res = eventually(
        BOUND,
        "an answer to the restore other than session_busy",
        || async {
            let res = api.post(&path, &json!({})).await;
            if res.status != 409 {
                return Some(res);
            }
            assert_eq!(res.error_code(), Some("session_busy"), "{}", res.text);
            None
        },
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "original"
    );
    assert!(
        !ws.join("new/b.txt").exists(),
        "a file the turn created is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_5_a_large_result_is_spilled_and_the_model_gets_head_tail_and_path() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::ToolCalls(vec![terminal("big", "seq 1 5000")]));
    provider.push(Reply::text("read it"));
    let tk = start(&provider, "approval = \"off\"\nspill_bytes = 4096").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "print a lot").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    let sent = results_sent(&provider.requests()[1].body);
    let content = &sent[0].1;
    assert!(
        content.len() < 8192,
        "the model gets a bounded text: {} bytes",
        content.len()
    );
    let path = content
        .split("full output: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|p| p.trim_end_matches(|c: char| !c.is_alphanumeric()))
        .expect("the spill path is named");
    let full = std::fs::read_to_string(path).unwrap();
    assert!(full.contains("4999"), "the whole output is on disk");
    let roles: Vec<String> = wire_messages(&provider.requests()[1].body)
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
}
