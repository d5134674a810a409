//! A real model through a real compression (SPEC R6, issue 7): the local SmolLM2 server with a
//! 2,048-token context carries a 40-turn conversation past the compression threshold (0.75 of
//! the window for small windows), summarizes its own middle, and still answers. Skipped when
//! the model is not installed, unless `TURNKEY_REQUIRE_MODEL=1` (as in `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Instant;
use turnkey_tests::local_model::{LocalModelOptions, LOCAL_MODEL_NAME};
use turnkey_tests::{LocalModel, Turnkey, TurnkeyOptions};

/// The model's context, and the window turnkey is told about.
const CTX: u32 = 2048;
/// Short answers keep 40 turns quick; the summary call is capped by the same limit.
const N_PREDICT: u32 = 64;
const TURNS: usize = 40;
/// A 135M model on two shared cores answers at a few tokens a second when the cores are busy;
/// a turn that compresses makes two calls.
use turnkey_tests::wait::REAL_MODEL_BOUND as TURN_BOUND;
/// Earlier exchanges in the model's own ChatML turns: a 135M model copies a pattern it has just
/// seen, and without one it rambles until the output limit cuts it off (turnkey then continues
/// it twice and delivers the rambling as a `stop_reason: truncated` answer).
const SYSTEM: &str = r#"You are a note keeper. Answer every message with one short sentence.
An earlier conversation:
<|im_start|>user
Remember: item 1 is lemon, kept in the green box on the top shelf of the hall.<|im_end|>
<|im_start|>assistant
Noted: item 1 is lemon, kept in the green box on the top shelf of the hall.<|im_end|>
<|im_start|>user
Remember: item 2 is rocket, kept in the red box on the low shelf of the attic.<|im_end|>
<|im_start|>assistant
Noted: item 2 is rocket, kept in the red box on the low shelf of the attic.<|im_end|>
<|im_start|>user
Question: what is item 1?<|im_end|>
<|im_start|>assistant
Item 1 is lemon.<|im_end|>"#;
const WORDS: [&str; 10] = [
    "apple", "river", "candle", "falcon", "marble", "violin", "harbor", "tulip", "comet", "willow",
];
const PLACES: [&str; 7] = [
    "blue box on the second shelf of the kitchen",
    "yellow box on the top shelf of the garage",
    "brown box on the low shelf of the cellar",
    "white box on the middle shelf of the study",
    "black box on the top shelf of the bedroom",
    "orange box on the second shelf of the office",
    "grey box on the low shelf of the porch",
];

/// The user text of turn `i` (0-based): mostly a fact to remember, every fifth a question. With
/// the model's echo a turn adds about 60 tokens, so the threshold (1,536) is passed near turn 25.
fn user_text(i: usize) -> String {
    let n = i + 1;
    if n.is_multiple_of(5) {
        format!("Question {n}: what is item {}?", n - 2)
    } else {
        format!(
            "Remember: item {n} is {}, kept in the {}.",
            WORDS[i % WORDS.len()],
            PLACES[i % PLACES.len()]
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_a_real_model_carries_a_long_conversation_through_compression() {
    let test = "r6_a_real_model_carries_a_long_conversation_through_compression";
    let options = LocalModelOptions {
        ctx_size: CTX,
        n_predict: N_PREDICT,
    };
    let Some(model) = LocalModel::start_or_skip_with(test, options).await else {
        return;
    };
    eprintln!("local model: {} ({})", model.base_url, model.command_line);
    // The same model is the summarizer (no auxiliary provider); no tools, so their schemas
    // take none of the window.
    let opts = TurnkeyOptions::for_base_url(&model.base_url)
        .provider_model(LOCAL_MODEL_NAME)
        .context_window(CTX)
        .provider_toml("request_timeout_s = 600")
        .provider_toml("stream_idle_timeout_s = 600")
        .provider_toml("max_retries = 0")
        .extra_toml(
            "[tools]\napproval = \"off\"\nenabled = []\n\n[compression]\ntimeout_s = 300\n",
        );
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let r = api
        .post("/v1/sessions", &json!({ "system_message": SYSTEM }))
        .await;
    assert_eq!(r.status, 201, "POST /v1/sessions: {}", r.text);
    let session = r.str_field("id");

    let started = Instant::now();
    let mut answers = Vec::new();
    for i in 0..TURNS {
        let text = user_text(i);
        let turn_started = Instant::now();
        let admission = api.submit_accepted(&session, &text).await;
        let adm = api.wait_terminal(&admission, TURN_BOUND).await;
        let answer = adm["outcome"]["final_response"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        eprintln!(
            "turn {:2} ({:.1?}): {text:?} -> {} {answer:?}",
            i + 1,
            turn_started.elapsed(),
            adm["outcome"]["result"]
        );
        if adm["outcome"]["result"] != "completed" || answer.trim().is_empty() {
            panic!(
                "turn {} did not complete with an answer: {adm}\n{}\n{}",
                i + 1,
                tk.log_tail(40),
                model.log_tail(40)
            );
        }
        answers.push(answer);
    }
    let elapsed = started.elapsed();

    let events = api.all_events(&session, 0).await;
    let compressions: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "compression.completed")
        .map(|e| &e["data"])
        .collect();
    eprintln!(
        "{TURNS} turns in {elapsed:.1?}; compressions: {}",
        serde_json::to_string(&compressions).unwrap()
    );
    assert!(
        !compressions.is_empty(),
        "{TURNS} turns in a {CTX}-token window compress at least once\n{}",
        tk.log_tail(60)
    );
    for c in &compressions {
        let (before, after) = (
            c["before_tokens"].as_u64().unwrap(),
            c["after_tokens"].as_u64().unwrap(),
        );
        assert!(
            after < before,
            "a compression makes the request smaller: {c}"
        );
        assert!(c["compressed_messages"].as_u64().unwrap() >= 2, "{c}");
    }

    let history = api.messages(&session).await;
    let summaries: Vec<&Value> = history
        .iter()
        .filter(|m| m["summary_epoch"].is_number())
        .collect();
    assert_eq!(
        summaries.len(),
        compressions.len(),
        "one summary row per compression"
    );
    for s in &summaries {
        let content = s["content"].as_str().unwrap_or_default();
        eprintln!("summary row: {content:?}");
        let said = content.split_once('\n').map(|(_, b)| b).unwrap_or_default();
        assert!(
            !said.trim().is_empty(),
            "the summary has text after its header: {s}"
        );
    }
    assert!(
        history.iter().any(|m| m["compressed_epoch"].is_number()),
        "rows left the wire copy"
    );
    let users: Vec<&str> = history
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    let expected: Vec<String> = (0..TURNS).map(user_text).collect();
    assert_eq!(
        users, expected,
        "every user message is still in the history"
    );
    assert!(!answers.last().unwrap().trim().is_empty());
}
