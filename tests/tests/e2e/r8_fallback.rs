//! The fallback chain and the provider circuit breaker (SPEC R8.3, R8.4) against the real
//! binary: the primary speaks OpenAI, the fallback Anthropic (two scripted servers). A fallback
//! restarts the iteration from preflight with the conversation rebuilt in the fallback's wire
//! format; a primary that failed is skipped by later turns; an auth failure falls back at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_tests::files::content_text;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions, Wire};

use turnkey_tests::wait::BOUND;

async fn start(primary: &ScriptedProvider, fallback: &ScriptedProvider) -> Turnkey {
    let opts = TurnkeyOptions::new(primary)
        .provider_toml("max_retries = 2\nbackoff_base_ms = 10\nbackoff_cap_ms = 20")
        .extra_toml(&format!(
            r#"
[[providers]]
name = "fallback"
kind = "anthropic"
base_url = "{}"
api_key = "fallback-key"
model = "claude-scripted"
context_window = 32000
max_retries = 0
"#,
            fallback.base_url
        ));
    Turnkey::start(opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_failed_primary_falls_back_with_the_whole_conversation_then_is_skipped() {
    let primary = ScriptedProvider::start();
    let fallback = ScriptedProvider::start();
    let tk = start(&primary, &fallback).await;
    let api = tk.api();
    let s = api.create_session_id().await;

    primary.push(Reply::text("answer one"));
    let a = api.submit_accepted(&s, "question one").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["final_response"], "answer one", "{adm}");

    // The primary fails every attempt: the turn completes on the fallback.
    for _ in 0..3 {
        primary.push(Reply::error(500, "boom"));
    }
    fallback.push(Reply::text("answer two from the fallback"));
    let a = api.submit_accepted(&s, "question two").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(
        adm["outcome"]["final_response"],
        "answer two from the fallback"
    );
    assert_eq!(primary.request_count(), 4, "one answer, then 1 + 2 retries");
    let reqs = fallback.requests();
    assert_eq!(reqs.len(), 1);
    // Rebuilt for the fallback: Anthropic's wire, with the whole conversation.
    assert_eq!(reqs[0].wire, Wire::Anthropic);
    assert_eq!(reqs[0].body["model"], "claude-scripted");
    let body = &reqs[0].body;
    assert!(
        content_text(&body["system"]).contains("# Workspace"),
        "system prompt rebuilt as Anthropic's system: {body}"
    );
    let wire: Vec<(String, String)> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                content_text(&m["content"]),
            )
        })
        .collect();
    assert_eq!(
        wire,
        vec![
            ("user".to_owned(), "question one".to_owned()),
            ("assistant".to_owned(), "answer one".to_owned()),
            ("user".to_owned(), "question two".to_owned()),
        ]
    );

    // The primary's breaker is open: the next turn goes straight to the fallback.
    let a = api.submit_accepted(&s, "question three").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(adm["outcome"]["final_response"], "ok: question three");
    assert_eq!(primary.request_count(), 4, "the broken primary is skipped");
    assert_eq!(fallback.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_3_auth_failure_on_the_primary_falls_back_without_retries() {
    let primary = ScriptedProvider::start();
    let fallback = ScriptedProvider::start();
    let tk = start(&primary, &fallback).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    primary.push(Reply::error(401, "invalid_api_key"));
    primary.push(Reply::text("must not be asked again"));
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(adm["outcome"]["final_response"], "ok: hello");
    assert_eq!(primary.request_count(), 1, "an auth failure is not retried");
    assert_eq!(fallback.request_count(), 1);
    assert!(tk.log_tail(500).contains("falling back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_when_every_provider_fails_the_last_error_ends_the_turn() {
    let primary = ScriptedProvider::start();
    let fallback = ScriptedProvider::start();
    let tk = start(&primary, &fallback).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for _ in 0..3 {
        primary.push(Reply::error(503, "down"));
    }
    fallback.push(Reply::error(401, "bad key"));
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "failed", "{adm}");
    assert_eq!(adm["outcome"]["failure_reason"], "provider_auth_failed");
    assert_eq!(primary.request_count(), 3);
    assert_eq!(fallback.request_count(), 1);

    // Both are on cooldown now: the next turn still tries, the primary first.
    primary.push(Reply::text("back again"));
    let a = api.submit_accepted(&s, "retry").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["final_response"], "back again", "{adm}");
    assert_eq!(primary.request_count(), 4);
}
