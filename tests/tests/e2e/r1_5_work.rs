//! Work that outlives the turn (SPEC R1.5, R13.10; API.md "Sub-agents, background processes
//! and agent schedules") against the real binary, on SQLite and PostgreSQL: a child's answer
//! comes back as an internal input of its parent (`source: "subagent"`) and is answered;
//! three children run at once; a child cut by SIGKILL during its model call resumes (R13.9),
//! and one cut past `[agent] max_resumes` reports `unknown` once without running again; the depth limit
//! holds; an interrupt of the parent stops its children, which report `interrupted`; a
//! background command's exit is reported (`source: "process"`), a gateway killed while it runs
//! keeps watching it after the restart and reports its real exit, and one whose exit cannot be
//! known reports `unknown` once; a one-shot agent schedule fires once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const SUBAGENT_REPORT: &str = "[turnkey:subagent-report";
const PROCESS_REPORT: &str = "[turnkey:process-report";

async fn start(provider: &ScriptedProvider, database: Option<&str>, extra: &str) -> Turnkey {
    let toml = format!("[tools]\napproval = \"off\"\n{extra}");
    let opts = TurnkeyOptions::new(provider).extra_toml(&toml);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

/// Every event of `kind` in `session` so far.
async fn events_of(api: &Api, session: &str, kind: &str) -> Vec<Value> {
    api.all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// Waits until `session` has `n` events of `kind`, and answers them.
async fn wait_events(api: &Api, session: &str, kind: &str, n: usize) -> Vec<Value> {
    eventually(BOUND, &format!("{n} × {kind}"), || async {
        let evs = events_of(api, session, kind).await;
        (evs.len() >= n).then_some(evs)
    })
    .await
}

/// The child session of `session`'s first sub-agent, once it started.
async fn first_child(api: &Api, session: &str) -> String {
    let started = wait_events(api, session, "subagent.started", 1).await;
    started[0]["data"]["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The content of `session`'s first tool result row.
async fn first_tool_result(api: &Api, session: &str) -> String {
    let row = api
        .messages(session)
        .await
        .into_iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {session}"));
    row["content"].as_str().unwrap().to_owned()
}

async fn subagents(api: &Api, session: &str) -> Vec<Value> {
    let r = api.get(&format!("/v1/sessions/{session}/subagents")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["subagents"].as_array().cloned().unwrap_or_default()
}

async fn processes(api: &Api, session: &str) -> Vec<Value> {
    let r = api.get(&format!("/v1/sessions/{session}/processes")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["processes"].as_array().cloned().unwrap_or_default()
}

/// The latest tool result the model was sent for `call_id` (empty when none).
fn result_of(provider: &ScriptedProvider, call_id: &str) -> String {
    (0..provider.request_count())
        .rev()
        .map(|n| provider.tool_result(n, call_id))
        .find(|t| !t.is_empty())
        .unwrap_or_default()
}

/// The names of the tools a recorded request offered: with their schemas, or listed in the
/// `tools` index.
fn offered(body: &Value) -> Vec<String> {
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let listed = tools
        .iter()
        .filter(|t| t["function"]["name"] == "tools")
        .flat_map(|t| {
            t["function"]["parameters"]["properties"]["name"]["enum"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        });
    tools
        .iter()
        .map(|t| t["function"]["name"].clone())
        .chain(listed)
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect()
}

/// The parent asks to delegate `tasks` when it reads `ask`, and says `after` when the tool
/// answered.
fn parent_delegates(provider: &ScriptedProvider, ask: &str, tasks: Value, after: &str) {
    provider.on_tool_result(ask, Reply::text(after));
    provider.on_user_text(
        ask,
        Reply::tool_call("d1", "delegate_task", json!({ "tasks": tasks })),
    );
}

/// The parent delegates `goal` when it reads `ask`; the child, reading its goal, makes `call`
/// once and then says `after`; the parent notes the report.
fn one_child_calls(
    provider: &ScriptedProvider,
    ask: &str,
    goal: &str,
    call: (&str, &str, Value),
    after: &str,
) {
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("noted"));
    provider.on_tool_result(goal, Reply::text(after));
    provider.on_user_text(goal, Reply::tool_call(call.0, call.1, call.2));
    parent_delegates(provider, ask, json!([{ "goal": goal }]), "delegated");
}

// ---------------------------------------------------------------------------------------
// A child's answer comes back as a parent input and is answered.

async fn child_report_is_answered(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    // Earlier rules win: the report (which quotes the goal) before the child's goal.
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("The sub-agent found 42."));
    provider.on_user_text("CHILD-GOAL-ALPHA", Reply::text("alpha answer: 42"));
    parent_delegates(
        &provider,
        "Research alpha",
        json!([{"goal": "CHILD-GOAL-ALPHA: find the number", "context": "it is small"}]),
        "I asked a sub-agent.",
    );
    let tk = start(&provider, database, "").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    let adm = api.submit_accepted(&parent, "Research alpha").await;
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");

    let started = wait_events(&api, &parent, "subagent.started", 1).await;
    let finished = wait_events(&api, &parent, "subagent.finished", 1).await;
    let task_id = started[0]["data"]["task_id"].as_str().unwrap().to_owned();
    let child = started[0]["data"]["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(finished[0]["data"]["task_id"], task_id.as_str());
    assert_eq!(finished[0]["data"]["status"], "completed");
    assert!(started[0]["seq"].as_i64() < finished[0]["seq"].as_i64());

    // The report is an admission of the parent: admitted before it was announced, from the
    // sub-agent, and its turn answered it.
    let report = finished[0]["admission_id"].as_str().unwrap().to_owned();
    let answered = api.wait_terminal(&report, BOUND).await;
    assert_eq!(answered["source"], "subagent", "{answered}");
    assert_eq!(answered["outcome"]["result"], "completed", "{answered}");
    assert_eq!(
        answered["outcome"]["final_response"], "The sub-agent found 42.",
        "{answered}"
    );
    let queued = events_of(&api, &parent, "admission.queued").await;
    let queued_seq = queued
        .iter()
        .find(|e| e["admission_id"] == report.as_str())
        .and_then(|e| e["seq"].as_i64())
        .expect("the report's admission.queued");
    assert!(
        queued_seq < finished[0]["seq"].as_i64().unwrap(),
        "admitted, then announced"
    );

    // The model read it as a marked message from the gateway, with the child's answer.
    let asked = provider
        .requests()
        .into_iter()
        .find(|r| r.last_user_text.starts_with(SUBAGENT_REPORT))
        .expect("the parent was asked about the report");
    assert!(
        asked.last_user_text.contains("alpha answer: 42"),
        "{}",
        asked.last_user_text
    );
    assert!(asked.last_user_text.contains("status=completed"));
    assert!(asked.last_user_text.contains("not from the user"));

    // The child: a session of the same owner, whose parent is the caller, that was offered
    // the parent's tools without memory, schedule and delegate_task.
    let row = api.session(&child).await;
    assert_eq!(row.status, 200, "{}", row.text);
    assert_eq!(row.body["parent_session_id"], parent.as_str());
    let child_request = provider
        .requests()
        .into_iter()
        .find(|r| r.last_user_text.starts_with("CHILD-GOAL-ALPHA"))
        .expect("the child's model call");
    assert!(child_request.last_user_text.contains("it is small"));
    let tools = offered(&child_request.body);
    assert!(tools.contains(&"terminal".to_owned()), "{tools:?}");
    for withheld in ["memory", "schedule", "delegate_task"] {
        assert!(
            !tools.contains(&withheld.to_owned()),
            "{withheld} offered: {tools:?}"
        );
    }
    let parent_request = provider
        .requests()
        .into_iter()
        .find(|r| r.last_user_text == "Research alpha")
        .expect("the parent's model call");
    let tools = offered(&parent_request.body);
    for offered in ["delegate_task", "process", "schedule"] {
        assert!(
            tools.contains(&offered.to_owned()),
            "{offered} missing: {tools:?}"
        );
    }

    let list = subagents(&api, &parent).await;
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["task_id"], task_id.as_str());
    assert_eq!(list[0]["status"], "completed");
    assert_eq!(list[0]["child_session_id"], child.as_str());
    assert!(list[0]["result"]
        .as_str()
        .unwrap()
        .contains("alpha answer: 42"));
    assert!(list[0]["reported_at"].is_string());
    // Someone else's session is not found.
    let other = Api::new(&tk.url, Some("nobody"))
        .get(&format!("/v1/sessions/{parent}/subagents"))
        .await;
    assert_eq!(other.status, 401, "{}", other.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_childs_answer_comes_back_as_a_parent_input_and_is_answered_sqlite() {
    child_report_is_answered(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_childs_answer_comes_back_as_a_parent_input_and_is_answered_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    child_report_is_answered(Some(db.url())).await;
}

// ---------------------------------------------------------------------------------------
// Three children at once.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_three_children_run_in_parallel() {
    let provider = ScriptedProvider::start();
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("noted"));
    let slow = |t: &str| Reply::chunks(&[t], Duration::from_millis(1500));
    provider.on_user_text("PAR-A", slow("a done"));
    provider.on_user_text("PAR-B", slow("b done"));
    provider.on_user_text("PAR-C", slow("c done"));
    parent_delegates(
        &provider,
        "Do three things",
        json!([{"goal": "PAR-A"}, {"goal": "PAR-B"}, {"goal": "PAR-C"}]),
        "Three sub-agents are on it.",
    );
    let tk = start(&provider, None, "").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    api.submit_accepted(&parent, "Do three things").await;
    let finished = wait_events(&api, &parent, "subagent.finished", 3).await;
    assert_eq!(finished.len(), 3);
    assert!(finished.iter().all(|e| e["data"]["status"] == "completed"));
    let overlap = provider.max_concurrency_where(|t| t.starts_with("PAR-"));
    assert_eq!(overlap, 3, "the three children's model calls ran at once");
    let list = subagents(&api, &parent).await;
    let mut results: Vec<String> = list
        .iter()
        .map(|t| t["result"].as_str().unwrap_or_default().to_owned())
        .collect();
    results.sort();
    assert!(
        results[0].contains("a done")
            && results[1].contains("b done")
            && results[2].contains("c done"),
        "{results:?}"
    );
    // Every report was admitted once and answered.
    for e in &finished {
        let a = api
            .wait_terminal(e["admission_id"].as_str().unwrap(), BOUND)
            .await;
        assert_eq!(a["source"], "subagent");
    }
    drop(tk);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_more_children_than_max_children_is_an_error_result() {
    let provider = ScriptedProvider::start();
    provider.on_tool_result("Do six things", Reply::text("too many"));
    let tasks: Vec<Value> = (0..6)
        .map(|i| json!({"goal": format!("SIX-{i}")}))
        .collect();
    provider.on_user_text(
        "Do six things",
        Reply::tool_call("d1", "delegate_task", json!({ "tasks": tasks })),
    );
    let tk = start(&provider, None, "").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    let adm = api.submit_accepted(&parent, "Do six things").await;
    api.wait_terminal(&adm, BOUND).await;
    let result = result_of(&provider, "d1");
    assert!(
        result.contains("too many sub-agents") && result.contains("at most 5"),
        "{result}"
    );
    assert!(subagents(&api, &parent).await.is_empty(), "none started");
}

// ---------------------------------------------------------------------------------------
// The depth limit.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_the_depth_limit_holds() {
    let provider = ScriptedProvider::start();
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("noted"));
    // Depth 2 is allowed here: the child delegates; the grandchild, at the limit, may not.
    provider.on_tool_result("DEPTH-GRAND", Reply::text("grandchild gave up"));
    provider.on_user_text(
        "DEPTH-GRAND",
        Reply::tool_call("g1", "delegate_task", json!({"goal": "DEPTH-GREAT"})),
    );
    provider.on_tool_result("DEPTH-CHILD", Reply::text("child delegated"));
    provider.on_user_text(
        "DEPTH-CHILD",
        Reply::tool_call("c1", "delegate_task", json!({"goal": "DEPTH-GRAND"})),
    );
    parent_delegates(
        &provider,
        "Go deep",
        json!([{"goal": "DEPTH-CHILD"}]),
        "delegated",
    );
    let tk = start(&provider, None, "[delegation]\nmax_depth = 2\n").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    api.submit_accepted(&parent, "Go deep").await;
    let child = first_child(&api, &parent).await;
    let grand = first_child(&api, &child).await;
    wait_events(&api, &child, "subagent.finished", 1).await;
    let text = first_tool_result(&api, &grand).await;
    assert!(text.contains("depth limit"), "{text}");
    assert!(
        subagents(&api, &grand).await.is_empty(),
        "no great-grandchild"
    );
    let list = subagents(&api, &child).await;
    assert_eq!(list[0]["depth"], 2, "{list:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_at_the_default_depth_a_child_cannot_delegate() {
    let provider = ScriptedProvider::start();
    one_child_calls(
        &provider,
        "Stay flat",
        "FLAT-CHILD",
        ("c1", "delegate_task", json!({"goal": "FLAT-GRAND"})),
        "could not delegate",
    );
    let tk = start(&provider, None, "").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    api.submit_accepted(&parent, "Stay flat").await;
    let child = first_child(&api, &parent).await;
    wait_events(&api, &parent, "subagent.finished", 1).await;
    let text = first_tool_result(&api, &child).await;
    assert!(text.contains("unknown tool"), "{text}");
    assert!(subagents(&api, &child).await.is_empty());
    assert!(!provider.asked().iter().any(|t| t.contains("FLAT-GRAND")));
}

// ---------------------------------------------------------------------------------------
// /stop (interrupt) of the parent stops its children.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_interrupting_the_parent_stops_its_children() {
    let provider = ScriptedProvider::start();
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("noted"));
    provider.on_user_text(
        "STOP-CHILD",
        Reply::Steps(vec![
            turnkey_tests::Step::text("partial work so far"),
            turnkey_tests::Step::Gate,
        ]),
    );
    parent_delegates(
        &provider,
        "Start and stop",
        json!([{"goal": "STOP-CHILD"}]),
        "delegated",
    );
    let tk = start(&provider, None, "").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    let adm = api.submit_accepted(&parent, "Start and stop").await;
    api.wait_terminal(&adm, BOUND).await;
    eventually(BOUND, "the child's model call", || async {
        provider
            .requests()
            .iter()
            .any(|r| r.last_user_text.starts_with("STOP-CHILD") && !r.delivered_text.is_empty())
            .then_some(())
    })
    .await;
    // The parent's own turn has ended: nothing of its own to stop, but its child is.
    let r = api.interrupt(&parent).await;
    assert!(r.status == 200 || r.status == 202, "{}", r.text);
    let finished = wait_events(&api, &parent, "subagent.finished", 1).await;
    assert_eq!(finished[0]["data"]["status"], "interrupted", "{finished:?}");
    let list = subagents(&api, &parent).await;
    let result = list[0]["result"].as_str().unwrap();
    assert!(result.contains("partial work so far"), "{result}");
    assert!(result.contains("status=interrupted"), "{result}");
    provider.release_hangs();
}

// ---------------------------------------------------------------------------------------
// SIGKILL during a child's model call.

async fn child_cut_by_sigkill(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("noted"));
    // The child's model call hangs on its first attempt and each resume; one more would answer.
    provider.on_user_text_times("CUT-CHILD", Reply::Hang, DEFAULT_MAX_RESUMES + 1);
    provider.on_user_text("CUT-CHILD", Reply::text("the child finished"));
    parent_delegates(
        &provider,
        "Delegate then crash",
        json!([{"goal": "CUT-CHILD"}]),
        "delegated",
    );
    let mut tk = start(&provider, database, "").await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    api.submit_accepted(&parent, "Delegate then crash").await;
    let child_calls = || {
        provider
            .requests()
            .iter()
            .filter(|r| r.last_user_text.starts_with("CUT-CHILD"))
            .count()
    };
    eventually(BOUND, "the child's first model call", || async {
        (child_calls() >= 1).then_some(())
    })
    .await;
    // Cut during the model call: nothing ran, so the child's turn resumes (R13.9), up to
    // `[agent] max_resumes` times.
    for resume in 1..=DEFAULT_MAX_RESUMES {
        tk.restart().await;
        eventually(BOUND, "the child's resumed model call", || async {
            (child_calls() > resume).then_some(())
        })
        .await;
    }
    // Cut once more: its outcome cannot be known. One `unknown` report, no further run.
    tk.restart().await;
    let api2 = tk.api();
    let finished = wait_events(&api2, &parent, "subagent.finished", 1).await;
    assert_eq!(finished[0]["data"]["status"], "unknown", "{finished:?}");
    let report = api2
        .wait_terminal(finished[0]["admission_id"].as_str().unwrap(), BOUND)
        .await;
    assert_eq!(report["source"], "subagent");
    // A later turn of the parent shows nothing more happened meanwhile.
    provider.on_user_text("later", Reply::text("ok"));
    api2.asked_after_a_later_turn(&provider, &parent, "later")
        .await;
    assert_eq!(
        child_calls(),
        DEFAULT_MAX_RESUMES + 1,
        "the child was not run again"
    );
    assert_eq!(
        events_of(&api2, &parent, "subagent.finished").await.len(),
        1
    );
    let list = subagents(&api2, &parent).await;
    assert_eq!(list[0]["status"], "unknown");
    assert!(list[0]["result"]
        .as_str()
        .unwrap()
        .contains("cannot be known"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_10_a_child_cut_past_max_resumes_by_sigkill_reports_unknown_once_sqlite() {
    child_cut_by_sigkill(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_10_a_child_cut_past_max_resumes_by_sigkill_reports_unknown_once_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    child_cut_by_sigkill(Some(db.url())).await;
}

// ---------------------------------------------------------------------------------------
// Background processes.

/// The parent starts `command` in the background when it reads `ask`.
fn starts_in_background(provider: &ScriptedProvider, ask: &str, command: &str) {
    provider.on_tool_result(ask, Reply::text("started in the background"));
    provider.on_user_text(
        ask,
        Reply::tool_call(
            "b1",
            "terminal",
            json!({"command": command, "background": true}),
        ),
    );
}

async fn background_exit_is_reported(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text(PROCESS_REPORT, Reply::text("the build failed with 3"));
    starts_in_background(
        &provider,
        "Build it",
        "echo building; echo bg-out-7; exit 3",
    );
    let tk = start(&provider, database, "").await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let adm = api.submit_accepted(&session, "Build it").await;
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let result = result_of(&provider, "b1");
    let started: Value = serde_json::from_str(&result).expect("JSON tool result");
    let pid = started["process_id"]
        .as_str()
        .expect("process_id")
        .to_owned();

    let exited = wait_events(&api, &session, "process.exited", 1).await;
    assert_eq!(exited[0]["data"]["process_id"], pid.as_str());
    assert_eq!(exited[0]["data"]["exit_code"], 3);
    assert_eq!(exited[0]["data"]["status"], "exited");
    let report = api
        .wait_terminal(exited[0]["admission_id"].as_str().unwrap(), BOUND)
        .await;
    assert_eq!(report["source"], "process", "{report}");
    assert_eq!(
        report["outcome"]["final_response"],
        "the build failed with 3"
    );
    let asked = provider
        .requests()
        .into_iter()
        .find(|r| r.last_user_text.starts_with(PROCESS_REPORT))
        .expect("the model read the report");
    assert!(
        asked.last_user_text.contains("bg-out-7"),
        "{}",
        asked.last_user_text
    );
    assert!(asked.last_user_text.contains("exit_code=3"));
    assert_eq!(events_of(&api, &session, "process.started").await.len(), 1);

    let list = processes(&api, &session).await;
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["process_id"], pid.as_str());
    assert_eq!(list[0]["status"], "exited");
    assert_eq!(list[0]["exit_code"], 3);
    assert!(list[0]["reported_at"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_background_commands_exit_is_reported_sqlite() {
    background_exit_is_reported(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_background_commands_exit_is_reported_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    background_exit_is_reported(Some(db.url())).await;
}

fn data_dir(tk: &Turnkey) -> std::path::PathBuf {
    tk.dir.path().join("data")
}

/// The pid a background process wrote about itself.
fn wrapper_pid(tk: &Turnkey, process_id: &str) -> i32 {
    let file = data_dir(tk).join("processes").join(process_id).join("pid");
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .expect("a pid")
}

async fn survives_a_gateway_crash(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text(PROCESS_REPORT, Reply::text("noted"));
    let marker = "survivor-line";
    starts_in_background(
        &provider,
        "Run the long job",
        &format!("echo {marker}; sleep 4; echo done-after-restart; exit 5"),
    );
    let mut tk = start(&provider, database, "").await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let adm = api.submit_accepted(&session, "Run the long job").await;
    api.wait_terminal(&adm, BOUND).await;
    let pid = processes(&api, &session).await[0]["process_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // SIGKILL while it runs; the restarted gateway finds it running and keeps watching.
    tk.restart().await;
    let api = tk.api();
    let exited = wait_events(&api, &session, "process.exited", 1).await;
    assert_eq!(exited[0]["data"]["status"], "exited", "{exited:?}");
    assert_eq!(exited[0]["data"]["exit_code"], 5, "its real exit code");
    let list = processes(&api, &session).await;
    assert!(list[0]["tail"]
        .as_str()
        .unwrap()
        .contains("done-after-restart"));
    assert_eq!(list[0]["process_id"], pid.as_str());
    // One report, and the command ran once.
    provider.on_user_text("afterwards", Reply::text("ok"));
    api.asked_after_a_later_turn(&provider, &session, "afterwards")
        .await;
    assert_eq!(events_of(&api, &session, "process.exited").await.len(), 1);
    let asked = provider.asked();
    assert_eq!(
        asked
            .iter()
            .filter(|t| t.starts_with(PROCESS_REPORT))
            .count(),
        1
    );
    let log = std::fs::read_to_string(data_dir(&tk).join("processes").join(&pid).join("log"))
        .expect("log");
    assert_eq!(log.matches(marker).count(), 1, "started once: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_10_a_background_process_outlives_a_gateway_crash_and_reports_its_exit_sqlite() {
    survives_a_gateway_crash(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_10_a_background_process_outlives_a_gateway_crash_and_reports_its_exit_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    survives_a_gateway_crash(Some(db.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_10_a_background_process_lost_with_the_gateway_reports_unknown_once() {
    let provider = ScriptedProvider::start();
    provider.on_user_text(PROCESS_REPORT, Reply::text("noted"));
    starts_in_background(&provider, "Run and lose it", "echo lost-run; sleep 30");
    let mut tk = start(&provider, None, "").await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let adm = api.submit_accepted(&session, "Run and lose it").await;
    api.wait_terminal(&adm, BOUND).await;
    let pid = processes(&api, &session).await[0]["process_id"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(BOUND, "the wrapper's pid file", || async {
        data_dir(&tk)
            .join("processes")
            .join(&pid)
            .join("pid")
            .exists()
            .then_some(())
    })
    .await;
    // The gateway and the whole process group die at once (as when a machine loses power for
    // the group): no exit code is ever written.
    tk.kill();
    let wrapper = wrapper_pid(&tk, &pid);
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(wrapper),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killpg");
    tk.restart().await;
    let api = tk.api();
    let exited = wait_events(&api, &session, "process.exited", 1).await;
    assert_eq!(exited[0]["data"]["status"], "unknown", "{exited:?}");
    assert!(exited[0]["data"]["exit_code"].is_null());
    provider.on_user_text("afterwards", Reply::text("ok"));
    api.asked_after_a_later_turn(&provider, &session, "afterwards")
        .await;
    assert_eq!(events_of(&api, &session, "process.exited").await.len(), 1);
    let report = provider
        .asked()
        .into_iter()
        .filter(|t| t.starts_with(PROCESS_REPORT))
        .collect::<Vec<_>>();
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(
        report[0].contains("cannot be known") && report[0].contains("lost-run"),
        "{}",
        report[0]
    );
    let log = std::fs::read_to_string(data_dir(&tk).join("processes").join(&pid).join("log"))
        .expect("log");
    assert_eq!(
        log.matches("lost-run").count(),
        1,
        "not started again: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_process_polls_reads_and_kills_a_background_command() {
    let provider = ScriptedProvider::start();
    provider.on_user_text(PROCESS_REPORT, Reply::text("noted"));
    starts_in_background(&provider, "Serve it", "echo serving-now; sleep 60");
    let tk = start(&provider, None, "").await;
    let api = tk.api();
    let session = api.create_session_id().await;
    api.wait_terminal(&api.submit_accepted(&session, "Serve it").await, BOUND)
        .await;
    let pid = processes(&api, &session).await[0]["process_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let call = |id: &str, action: &str| {
        Reply::tool_call(id, "process", json!({"action": action, "process_id": pid}))
    };
    provider.on_tool_result("Check it", Reply::text("checked"));
    provider.on_user_text_times("Check it", call("p1", "poll"), 1);
    api.wait_terminal(&api.submit_accepted(&session, "Check it").await, BOUND)
        .await;
    let polled: Value = serde_json::from_str(&result_of(&provider, "p1")).expect("JSON");
    assert_eq!(polled["status"], "running", "{polled}");
    provider.on_tool_result("Read it", Reply::text("read"));
    provider.on_user_text_times("Read it", call("p2", "log"), 1);
    eventually(BOUND, "output in the log", || async {
        let adm = api.submit_accepted(&session, "Read it").await;
        api.wait_terminal(&adm, BOUND).await;
        let n = provider.requests().len();
        let log = result_of(&provider, "p2");
        (log.contains("serving-now") || n > 60).then_some(())
    })
    .await;
    provider.on_tool_result("Stop it", Reply::text("stopped"));
    provider.on_user_text_times("Stop it", call("p3", "kill"), 1);
    api.wait_terminal(&api.submit_accepted(&session, "Stop it").await, BOUND)
        .await;
    let killed: Value = serde_json::from_str(&result_of(&provider, "p3")).expect("JSON");
    assert_eq!(killed["signalled"], true, "{killed}");
    let exited = wait_events(&api, &session, "process.exited", 1).await;
    assert_eq!(exited[0]["data"]["status"], "killed", "{exited:?}");
    // Another session's process is not found.
    let other = api.create_session_id().await;
    provider.on_tool_result("Poke it", Reply::text("poked"));
    provider.on_user_text_times("Poke it", call("p4", "poll"), 1);
    api.wait_terminal(&api.submit_accepted(&other, "Poke it").await, BOUND)
        .await;
    assert!(result_of(&provider, "p4").contains("no background process"));
}

// ---------------------------------------------------------------------------------------
// The `schedule` tool.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_one_shot_agent_schedule_fires_once() {
    let provider = ScriptedProvider::start();
    provider.on_user_text("REMINDER-PING", Reply::text("Time to stretch!"));
    provider.on_tool_result("Remind me", Reply::text("I will remind you."));
    provider.on_user_text(
        "Remind me",
        Reply::tool_call(
            "s1",
            "schedule",
            json!({"action": "create", "in_s": 2, "text": "REMINDER-PING: stretch"}),
        ),
    );
    let tk = start(&provider, None, "").await;
    let api = tk.api();
    let session = api.create_session_id().await;
    api.wait_terminal(
        &api.submit_accepted(&session, "Remind me in 2 s").await,
        BOUND,
    )
    .await;
    let made: Value = serde_json::from_str(&result_of(&provider, "s1")).expect("JSON");
    let id = made["created"]["id"].as_str().expect("id").to_owned();
    let listed = api.get("/v1/schedules").await;
    let mine = listed.body["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .cloned()
        .expect("listed");
    assert_eq!(mine["source"], "agent", "{mine}");
    assert!(mine["once_at"].is_string(), "{mine}");
    // It fires once, through the FIFO, with `source: "schedule"`, then is gone.
    let fired = eventually(BOUND, "the reminder's turn", || async {
        provider
            .requests()
            .iter()
            .any(|r| r.last_user_text.starts_with("REMINDER-PING"))
            .then_some(())
    })
    .await;
    let _: () = fired;
    let queued = events_of(&api, &session, "admission.queued").await;
    let last = queued.last().unwrap()["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = api.wait_terminal(&last, BOUND).await;
    assert_eq!(a["source"], "schedule", "{a}");
    assert_eq!(a["outcome"]["final_response"], "Time to stretch!");
    eventually(BOUND, "the one-shot schedule deleted", || async {
        let r = api.get("/v1/schedules").await;
        (!r.text.contains(&id)).then_some(())
    })
    .await;
    // A later input of the session runs after everything admitted before it: a second firing
    // of the reminder would be asked first.
    let asked = api
        .asked_after_a_later_turn(&provider, &session, "and after the reminder?")
        .await;
    let pings = asked
        .iter()
        .filter(|t| t.starts_with("REMINDER-PING"))
        .count();
    assert_eq!(pings, 1, "fired once: {asked:?}");
}

// ---------------------------------------------------------------------------------------
// A graceful stop and background processes.

async fn graceful_stop(on_shutdown: &str) -> (Vec<Value>, String) {
    let provider = ScriptedProvider::start();
    provider.on_user_text(PROCESS_REPORT, Reply::text("noted"));
    starts_in_background(
        &provider,
        "Run until stopped",
        "echo still-here; sleep 3; echo finished-late; exit 4",
    );
    let extra = format!("background_on_shutdown = \"{on_shutdown}\"\n");
    let mut tk = start(&provider, None, &extra).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    api.wait_terminal(
        &api.submit_accepted(&session, "Run until stopped").await,
        BOUND,
    )
    .await;
    let status = tk.terminate(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{status:?}");
    tk.restart().await;
    let api = tk.api();
    let exited = wait_events(&api, &session, "process.exited", 1).await;
    (exited, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_graceful_stop_ends_background_processes_and_the_next_start_reports_them() {
    let (exited, _) = graceful_stop("stop").await;
    assert_eq!(exited.len(), 1);
    assert_eq!(exited[0]["data"]["status"], "killed", "{exited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_graceful_stop_can_leave_background_processes_running() {
    let (exited, _) = graceful_stop("leave").await;
    assert_eq!(exited.len(), 1);
    assert_eq!(exited[0]["data"]["status"], "exited", "{exited:?}");
    assert_eq!(
        exited[0]["data"]["exit_code"], 4,
        "its real exit, seen by the next start"
    );
}

// ---------------------------------------------------------------------------------------
// A chat platform gets one reply per report, through the outbox.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_chat_gets_one_reply_per_report() {
    use turnkey_tests::webhooks::{generic_message, Webhooks, GENERIC_SECRET};
    use turnkey_tests::FakePlatform;
    let provider = ScriptedProvider::start();
    provider.on_user_text(
        PROCESS_REPORT,
        Reply::text("Your backup finished (code 0)."),
    );
    starts_in_background(&provider, "back me up", "echo backed-up; exit 0");
    let chat = FakePlatform::webhook(GENERIC_SECRET);
    let tk = start(&provider, None, &format!("\n{}", chat.config_toml(""))).await;
    let hooks = Webhooks::new(&tk.url);
    // Sends `text` as message `id` of the room; answers the texts of the first `n` replies.
    let say = |id: &'static str, text: &'static str, n: usize| {
        let (hooks, chat) = (&hooks, &chat);
        async move {
            let (r, _) = hooks
                .generic(&generic_message("room-9", id, "alice", text))
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
            let replies = chat.wait_accepted(&["reply"], n, BOUND).await.unwrap();
            replies
                .iter()
                .map(|c| c.body["text"].as_str().unwrap_or("").to_owned())
                .collect::<Vec<String>>()
        }
    };
    let texts = say("m-1", "back me up", 2).await;
    assert_eq!(
        texts,
        [
            "started in the background",
            "Your backup finished (code 0)."
        ]
    );
    // One reply for the report: the chat's next message is answered next, in order, with
    // nothing of the report's in between.
    let texts = say("m-2", "and then?", 3).await;
    assert_eq!(
        texts,
        [
            "started in the background",
            "Your backup finished (code 0).",
            "ok: and then?"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_an_agent_schedule_made_in_a_chat_reminds_the_chat() {
    use turnkey_tests::webhooks::{generic_message, Webhooks, GENERIC_SECRET};
    use turnkey_tests::FakePlatform;
    let provider = ScriptedProvider::start();
    provider.on_user_text("ROOM-REMINDER", Reply::text("Reminder: stand-up now."));
    provider.on_tool_result("remind the room", Reply::text("Will do."));
    provider.on_user_text(
        "remind the room",
        Reply::tool_call(
            "s1",
            "schedule",
            json!({"action": "create", "in_s": 1, "text": "ROOM-REMINDER: stand-up"}),
        ),
    );
    let chat = FakePlatform::webhook(GENERIC_SECRET);
    let tk = start(&provider, None, &format!("\n{}", chat.config_toml(""))).await;
    let hooks = Webhooks::new(&tk.url);
    let (r, _) = hooks
        .generic(&generic_message(
            "room-7",
            "m-1",
            "alice",
            "remind the room in a second",
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The chat is its own principal (not a stored one): the due time is admitted as it.
    let replies = chat.wait_accepted(&["reply"], 2, BOUND).await.unwrap();
    let texts: Vec<&str> = replies
        .iter()
        .map(|c| c.body["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(texts, ["Will do.", "Reminder: stand-up now."]);
}

// ---------------------------------------------------------------------------------------
// A child's approval is relayed into its parent's events and decided through the parent.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_childs_approval_is_decided_through_its_parent() {
    let provider = ScriptedProvider::start();
    one_child_calls(
        &provider,
        "Delegate and approve",
        "CHILD-ASKS",
        ("w1", "terminal", json!({"command": "echo hi > asked"})),
        "child done",
    );
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"dangerous\"\n"),
    )
    .await;
    let api = tk.api();
    let parent = api.create_session_id().await;
    api.submit_accepted(&parent, "Delegate and approve").await;
    let asked = wait_events(&api, &parent, "approval.requested", 1).await;
    let child = first_child(&api, &parent).await;
    assert_eq!(asked[0]["data"]["session_id"], child.as_str());
    let id = asked[0]["data"]["approval_id"].as_str().unwrap();
    // Decided through the parent's own route, as a client that only knows the parent does.
    let r = api
        .post(
            &format!("/v1/sessions/{parent}/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let finished = wait_events(&api, &parent, "subagent.finished", 1).await;
    assert_eq!(finished[0]["data"]["status"], "completed", "{finished:?}");
    assert!(tk.dir.path().join("workspace").join("asked").exists());
    // A session that did not delegate it cannot decide it.
    let stranger = api.create_session_id().await;
    let r = api
        .post(
            &format!("/v1/sessions/{stranger}/approvals/{id}"),
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}
