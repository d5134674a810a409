//! Per-turn display behaviour (SPEC R3.1) against the real binary: `display {stream,
//! tool_progress, interim}` on a submission, on a session (`PATCH`) and in a platform table
//! decides which events a turn publishes and what a chat's draft shows, never what is stored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::fake_platforms::parse_telegram_html;
use turnkey_tests::webhooks::{telegram_message, Webhooks};
use turnkey_tests::{Api, FakePlatform, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};
/// `actors/src/platforms/drafts.rs`: the last line of every draft, and a tool's line.
const MARKER: &str = "✍️ still writing…";
const TOOL_LINE: &str = "🔧 terminal";
const ALICE: i64 = 4242;

fn terminal(id: &str, command: &str) -> (String, String, Value) {
    (
        id.to_string(),
        "terminal".to_string(),
        json!({ "command": command }),
    )
}

fn read_file(id: &str, path: &str) -> (String, String, Value) {
    (
        id.to_string(),
        "read_file".to_string(),
        json!({ "path": path }),
    )
}

/// Submits `text` with `display`; answers the admission id.
async fn submit_shown(api: &Api, session: &str, text: &str, display: Value) -> String {
    let r = api
        .post(
            &format!("/v1/sessions/{session}/submissions"),
            &json!({ "text": text, "display": display }),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.body["admission_id"].as_str().unwrap().to_owned()
}

/// The kinds of the events of one admission's turn, in order.
async fn kinds_of(api: &Api, session: &str, admission: &str) -> Vec<String> {
    api.all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["admission_id"] == admission)
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

async fn events_of(api: &Api, session: &str, admission: &str, kind: &str) -> Vec<Value> {
    api.all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["admission_id"] == admission && e["kind"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_1_a_turn_shown_without_streaming_publishes_no_deltas_and_stores_the_same() {
    let provider = ScriptedProvider::start();
    for _ in 0..2 {
        provider.push(Reply::chunks(
            &["Hello ", "there, ", "my friend."],
            Duration::from_millis(60),
        ));
    }
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let s = api.create_session_id().await;

    let quiet = submit_shown(&api, &s, "say hello", json!({"stream": false})).await;
    let done = api.wait_terminal(&quiet, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let kinds = kinds_of(&api, &s, &quiet).await;
    assert!(
        !kinds.iter().any(|k| k == "message.delta"),
        "a turn shown without streaming published deltas: {kinds:?}"
    );
    let complete = events_of(&api, &s, &quiet, "message.complete").await;
    assert_eq!(complete.len(), 1, "{kinds:?}");
    assert_eq!(complete[0]["data"]["text"], "Hello there, my friend.");

    let streamed = api.submit_accepted(&s, "say hello again").await;
    let done = api.wait_terminal(&streamed, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let deltas = events_of(&api, &s, &streamed, "message.delta").await;
    let text: String = deltas
        .iter()
        .map(|d| d["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello there, my friend.", "the default streams");

    // Both answers are stored alike.
    let answers: Vec<Value> = api
        .messages(&s)
        .await
        .into_iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        answers,
        [
            json!("Hello there, my friend."),
            json!("Hello there, my friend.")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_1_tool_progress_decides_which_starts_are_shown_never_which_tools_run() {
    let provider = ScriptedProvider::start();
    for _ in 0..2 {
        provider.push(Reply::ToolCalls(vec![
            terminal("c1", "echo one >> runs.txt"),
            terminal("c2", "echo two >> runs.txt"),
            read_file("c3", "runs.txt"),
        ]));
        provider.push(Reply::text("done"));
    }
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"off\"\n"))
            .await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let r = api
        .patch_session(&s, &json!({"display": {"tool_progress": "new"}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["display"],
        json!({"stream": true, "tool_progress": "new", "interim": true})
    );

    // `new`: a start only where the tool changes.
    let a = api.submit_accepted(&s, "run them").await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let started: Vec<Value> = events_of(&api, &s, &a, "tool.started")
        .await
        .iter()
        .map(|e| e["data"]["call_id"].clone())
        .collect();
    assert_eq!(started, [json!("c1"), json!("c3")]);
    assert_eq!(events_of(&api, &s, &a, "tool.completed").await.len(), 3);
    assert!(events_of(&api, &s, &a, "tool.progress").await.is_empty());

    // The input's own display wins over the session's: `off` shows no start at all.
    let b = submit_shown(&api, &s, "run them again", json!({"tool_progress": "off"})).await;
    let done = api.wait_terminal(&b, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(events_of(&api, &s, &b, "tool.started").await.is_empty());
    let completed = events_of(&api, &s, &b, "tool.completed").await;
    assert_eq!(completed.len(), 3);
    assert!(completed.iter().all(|e| e["data"]["status"] == "ok"));

    // Every call ran, each once, and the transcript has every result.
    let runs = std::fs::read_to_string(tk.dir.path().join("workspace/runs.txt")).unwrap();
    assert_eq!(runs, "one\ntwo\none\ntwo\n");
    let tool_rows = api
        .messages(&s)
        .await
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tool_rows, 6);

    // `null` gives the session back to the configured display.
    let r = api.patch_session(&s, &json!({"display": null})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["display"]["tool_progress"], "all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_1_a_display_the_turn_cannot_follow_is_refused_and_nothing_is_admitted() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for bad in [
        json!({"tool_progress": "loud"}),
        json!({"stream": "yes"}),
        json!({"interim": 1}),
    ] {
        let r = api
            .post(
                &format!("/v1/sessions/{s}/submissions"),
                &json!({"text": "hi", "display": bad}),
            )
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.error_code(), Some("invalid_display"), "{}", r.text);
    }
    for bad in [
        json!({"colour": "red"}),
        json!({"tool_progress": "some"}),
        json!("off"),
    ] {
        let r = api.patch_session(&s, &json!({ "display": bad })).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.error_code(), Some("invalid_display"), "{}", r.text);
    }
    let view = api.session(&s).await;
    assert_eq!(view.body["queue_depth"], 0);
    assert_eq!(
        view.body["display"],
        json!({"stream": true, "tool_progress": "all", "interim": true})
    );
    assert!(api
        .all_events(&s, 0)
        .await
        .iter()
        .all(|e| e["admission_id"].is_null()));
    assert!(provider.requests().is_empty());
}

/// The Telegram draft texts (as the chat shows them) from the `from`th call on, once the
/// final edit came.
async fn drafts_until_final(tg: &FakePlatform, from: usize, fin: &str) -> Vec<String> {
    eventually(BOUND, "final edit", || async {
        let shown: Vec<String> = tg
            .accepted(&["sendMessage", "editMessageText"])
            .iter()
            .skip(from)
            .map(|c| parse_telegram_html(c.text()).unwrap())
            .collect();
        shown.last().is_some_and(|s| s == fin).then_some(shown)
    })
    .await
}

/// A turn that writes a line, runs a tool, then answers (streamed slowly enough for drafts).
fn interim_then_answer(provider: &ScriptedProvider) {
    provider.push(Reply::TextThenToolCalls(
        "Let me check the files first.\n".into(),
        vec![terminal("t1", "echo checked")],
    ));
    provider.push(Reply::chunks(
        &["All ", "files ", "are ", "fine.\n", "Nothing ", "to do."],
        Duration::from_millis(150),
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_1_a_draft_drops_interim_text_at_a_tool_round_unless_the_session_keeps_it() {
    let provider = ScriptedProvider::start();
    let tg = FakePlatform::telegram("123456:FAKE");
    let toml = format!(
        "[tools]\napproval = \"off\"\n{}",
        tg.config_toml("stream = true\nedit_interval_ms = 100\ninterim = false\n")
    );
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(&toml)).await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let fin = "All files are fine.\nNothing to do.";

    // The platform table says `interim = false`: from the tool round on, the draft shows the
    // tool's line and what follows, never the interim line.
    interim_then_answer(&provider);
    let (r, _) = hooks
        .telegram(&telegram_message(1, ALICE, ALICE, "check"))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let session = r.body["receipt"]["session_id"].as_str().unwrap().to_owned();
    let shown = drafts_until_final(&tg, 0, fin).await;
    let at_tool = shown
        .iter()
        .position(|s| s.contains(TOOL_LINE))
        .unwrap_or_else(|| panic!("no draft shows the tool: {shown:?}"));
    for s in &shown[at_tool..] {
        assert!(!s.contains("Let me check"), "interim text kept: {shown:?}");
    }
    assert!(shown[at_tool].ends_with(MARKER), "{shown:?}");

    // The session keeps it (`PATCH`): the interim line stays above the tool's.
    let r = api
        .patch_session(&session, &json!({"display": {"interim": true}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = tg.accepted(&["sendMessage", "editMessageText"]).len();
    interim_then_answer(&provider);
    let (r, _) = hooks
        .telegram(&telegram_message(2, ALICE, ALICE, "check again"))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let admission = r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = api.wait_terminal(&admission, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let shown = drafts_until_final(&tg, before, fin).await;
    let at_tool = shown
        .iter()
        .position(|s| s.contains(TOOL_LINE))
        .unwrap_or_else(|| panic!("no draft shows the tool: {shown:?}"));
    for s in &shown[at_tool..shown.len() - 1] {
        assert!(
            s.starts_with("Let me check the files first."),
            "interim text dropped: {shown:?}"
        );
    }
    // Either way the stored answer is the same, and so is the chat's final message.
    let answers: Vec<Value> = api
        .messages(&session)
        .await
        .into_iter()
        .filter(|m| m["role"] == "assistant" && m["tool_calls"].is_null())
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(answers, [json!(fin), json!(fin)]);
}
