//! The post-delivery review against the real binary (SPEC R10.4, R4.5; API.md "Memory and
//! skills"): after the answer is delivered, a review asks the model (its request tagged
//! `[turnkey:review]`) and commits what it saves with `review.finished`; a new input cancels
//! a slow review within a second and runs first, and the cancelled review writes nothing.
//! With `write_approval` its writes wait for a person.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const TAG: &str = "[turnkey:review]";

async fn kinds(api: &Api, session: &str) -> Vec<Value> {
    api.all_events(session, 0).await
}

async fn event_of(api: &Api, session: &str, kind: &str) -> Value {
    eventually(BOUND, kind, || async {
        kinds(api, session)
            .await
            .into_iter()
            .find(|e| e["kind"] == kind)
    })
    .await
}

fn save_profile(provider: &ScriptedProvider, text: &str) {
    provider.on_tool_result(TAG, Reply::text("saved"));
    provider.on_user_text(
        TAG,
        Reply::tool_call(
            "r1",
            "memory",
            json!({"action": "add", "target": "profile", "text": text}),
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_4_the_review_saves_after_delivery_in_one_commit() {
    let provider = ScriptedProvider::start();
    let toml = "[memory]\nreview_every = 1\n";
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(toml)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    save_profile(&provider, "Name: Carol");
    provider.push(Reply::text("Hello Carol."));
    let adm = api.submit_accepted(&session, "I am Carol.").await;
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["source"], "user", "{done}");

    let finished = event_of(&api, &session, "review.finished").await;
    assert_eq!(finished["data"]["actions"], 1, "{finished}");
    let events = kinds(&api, &session).await;
    let seq = |kind: &str| {
        events
            .iter()
            .find(|e| e["kind"] == kind)
            .and_then(|e| e["seq"].as_i64())
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    // The answer was delivered and the turn settled before the review began.
    assert!(seq("turn.finished") < seq("review.started"));
    assert!(seq("review.started") < seq("memory.updated"));
    assert!(seq("memory.updated") <= seq("review.finished"));
    let updated = events
        .iter()
        .find(|e| e["kind"] == "memory.updated")
        .unwrap();
    assert_eq!(updated["data"]["by"], "review");

    // The review's request: tagged, with the conversation, offering only its two tools.
    let review = provider
        .requests()
        .into_iter()
        .find(|r| r.last_user_text.contains(TAG))
        .expect("a review request");
    assert!(
        review.last_user_text.starts_with(TAG),
        "{}",
        review.last_user_text
    );
    assert!(review.last_user_text.contains("user: I am Carol."));
    assert!(review.last_user_text.contains("assistant: Hello Carol."));
    let tools: Vec<&str> = review.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["memory", "skill_manage"]);
    let memory = api.get("/v1/memory").await;
    assert_eq!(memory.body["profile"]["entries"][0]["text"], "Name: Carol");
    let changes = api.get("/v1/memory/changes").await;
    assert_eq!(changes.body["changes"][0]["by"], "review");
    assert_eq!(changes.body["changes"][0]["session_id"], session.as_str());

    // The next new session's prompt has what the review saved.
    let next = api.create_session_id().await;
    provider.push(Reply::text("Hi."));
    let adm = api.submit_accepted(&next, "Hello").await;
    api.wait_terminal(&adm, BOUND).await;
    let last = provider
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.last_user_text == "Hello")
        .unwrap();
    assert!(last.body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .contains("Name: Carol"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_5_a_new_input_cancels_a_slow_review_within_a_second_and_runs_first() {
    let provider = ScriptedProvider::start();
    let toml = "[memory]\nreview_every = 1\n";
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(toml)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    // The review would save, but only after a long silence.
    provider.on_tool_result(TAG, Reply::text("saved"));
    provider.on_user_text_times(TAG, Reply::Hang, 1);
    save_profile(&provider, "Name: Dave");
    provider.push(Reply::text("Hello."));
    let adm = api.submit_accepted(&session, "I am Dave.").await;
    api.wait_terminal(&adm, BOUND).await;
    eventually(BOUND, "the review's request", || async {
        (provider.request_count_for(TAG) >= 1).then_some(())
    })
    .await;

    provider.push(Reply::text("Second answer."));
    let asked = Instant::now();
    let adm = api.submit_accepted(&session, "And now?").await;
    let cancelled = event_of(&api, &session, "review.cancelled").await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(1), "cancelled after {took:?}");
    assert_eq!(cancelled["data"]["reason"], "input", "{cancelled}");
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let events = kinds(&api, &session).await;
    let first = |kind: &str| events.iter().position(|e| e["kind"] == kind).unwrap();
    assert!(
        first("review.cancelled")
            < events
                .iter()
                .rposition(|e| e["kind"] == "turn.started")
                .unwrap()
    );
    // The review after the second turn saves; the cancelled one wrote nothing, so the fact
    // is there once.
    eventually(BOUND, "the second review to finish", || async {
        kinds(&api, &session)
            .await
            .iter()
            .any(|e| e["kind"] == "review.finished")
            .then_some(())
    })
    .await;
    let memory = api.get("/v1/memory").await;
    assert_eq!(
        memory.body["profile"]["entries"].as_array().unwrap().len(),
        1,
        "{}",
        memory.text
    );
    let ended: Vec<&str> = kinds(&api, &session)
        .await
        .iter()
        .filter_map(|e| match e["kind"].as_str() {
            Some(k @ ("review.finished" | "review.cancelled")) => Some(k),
            _ => None,
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|k| {
            if k == "review.finished" {
                "finished"
            } else {
                "cancelled"
            }
        })
        .collect();
    assert_eq!(ended, ["cancelled", "finished"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_4_with_write_approval_the_reviews_writes_wait_for_a_person() {
    let provider = ScriptedProvider::start();
    let toml = "[memory]\nreview_every = 1\nwrite_approval = true\n";
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(toml)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    save_profile(&provider, "Name: Erin");
    provider.push(Reply::text("Hello Erin."));
    let adm = api.submit_accepted(&session, "I am Erin.").await;
    api.wait_terminal(&adm, BOUND).await;
    event_of(&api, &session, "review.finished").await;
    assert_eq!(
        api.get("/v1/memory").await.body["profile"]["entries"],
        json!([])
    );
    let pending = api.get("/v1/memory/pending").await;
    let p = &pending.body["pending"][0];
    assert_eq!(
        (p["action"].as_str(), p["text"].as_str()),
        (Some("add"), Some("Name: Erin"))
    );
    let path = format!("/v1/memory/pending/{}", p["id"].as_str().unwrap());
    let ok = api.post(&path, &json!({"decision": "approve"})).await;
    assert_eq!(
        (ok.status, ok.body["status"].as_str()),
        (200, Some("approved")),
        "{}",
        ok.text
    );
    assert_eq!(
        api.post(&path, &json!({"decision": "deny"})).await.status,
        409
    );
    assert_eq!(
        api.get("/v1/memory").await.body["profile"]["entries"][0]["text"],
        "Name: Erin"
    );
    assert_eq!(
        api.get("/v1/memory/pending").await.body["pending"],
        json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_sigkill_mid_review_closes_it_interrupted_with_nothing_written_and_no_rerun() {
    let provider = ScriptedProvider::start();
    let toml = "[memory]\nreview_every = 1\n";
    let mut tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(toml)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    // The review stages a write, then its next model call never answers: the process dies
    // with the write staged and not committed.
    provider.on_tool_result(TAG, Reply::Hang);
    save_profile(&provider, "Name: Frank");
    provider.push(Reply::text("Hello Frank."));
    let adm = api.submit_accepted(&session, "I am Frank.").await;
    api.wait_terminal(&adm, BOUND).await;
    eventually(BOUND, "the review's second model call", || async {
        (provider.request_count_for(TAG) >= 2).then_some(())
    })
    .await;

    tk.kill();
    tk.restart().await;
    let api = tk.api();
    let cancelled = event_of(&api, &session, "review.cancelled").await;
    assert_eq!(cancelled["data"]["reason"], "interrupted", "{cancelled}");
    let started = event_of(&api, &session, "review.started").await;
    assert_eq!(started["data"]["review_id"], cancelled["data"]["review_id"]);
    assert_eq!(
        api.get("/v1/memory").await.body["profile"]["entries"],
        json!([])
    );
    assert_eq!(
        api.get("/v1/memory/changes").await.body["changes"],
        json!([])
    );
    assert_eq!(
        provider.request_count_for(TAG),
        2,
        "not run again after the restart"
    );

    // The next turn runs as usual; the review after it is a new one, and it commits.
    provider.release_hangs();
    provider.push(Reply::text("Still here."));
    let adm = api.submit_accepted(&session, "Hello again.").await;
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let events = kinds(&api, &session).await;
    let reviews: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "review.started")
        .collect();
    assert!(reviews.len() <= 2, "{reviews:?}");
    if let Some(second) = reviews.get(1) {
        assert_ne!(second["data"]["review_id"], started["data"]["review_id"]);
    }
}
