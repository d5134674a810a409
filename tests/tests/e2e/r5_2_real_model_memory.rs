//! A real model saves and recalls a memory (SPEC R5.2; issue 23): the local SmolLM2 server,
//! behind the real turnkey binary, calls the `memory` tool to add a fact about the user to its
//! profile; a new session of the same principal has the fact in its system prompt (`# User
//! profile`) and the model answers a question with it. Skipped when the model is not
//! installed, unless `TURNKEY_REQUIRE_MODEL=1` (as in `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Instant;
use turnkey_tests::local_model::LOCAL_MODEL_NAME;
use turnkey_tests::wait::REAL_MODEL_BOUND as TURN_BOUND;
use turnkey_tests::{Api, LocalModel, Turnkey, TurnkeyOptions};

/// Whole turns tried for each half before the test fails: the model is small, so one bad
/// answer is tolerated, but one that never saves (or never recalls) fails the test.
const ATTEMPTS: usize = 3;
const COLOUR: &str = "teal";

/// A 135M model copies a pattern it has just seen, in its own ChatML turns; it does not call
/// tools from the tool list alone.
const SAVE_EXAMPLES: &str = r#"When the user tells you a fact about themselves, your answer is always a <tool_call> for memory that adds the fact to the profile.
Three earlier conversations:
<|im_start|>user
My favourite fruit is mango.<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "memory", "arguments": {"action": "add", "target": "profile", "text": "Favourite fruit: mango"}}
</tool_call><|im_end|>
<|im_start|>user
My favourite animal is the owl.<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "memory", "arguments": {"action": "add", "target": "profile", "text": "Favourite animal: owl"}}
</tool_call><|im_end|>
<|im_start|>user
My favourite city is Lyon.<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "memory", "arguments": {"action": "add", "target": "profile", "text": "Favourite city: Lyon"}}
</tool_call><|im_end|>"#;

const RECALL_EXAMPLES: &str = r#"Answer a question about the user by copying the matching line of the # User profile below, without calling tools.
Two earlier conversations, when the profile said "- Favourite fruit: mango" and "- Favourite animal: owl":
<|im_start|>user
What is my favourite fruit?<|im_end|>
<|im_start|>assistant
Favourite fruit: mango<|im_end|>
<|im_start|>user
What is my favourite animal?<|im_end|>
<|im_start|>assistant
Favourite animal: owl<|im_end|>"#;

async fn session_with(api: &Api, system: &str) -> String {
    let r = api
        .post("/v1/sessions", &json!({ "system_message": system }))
        .await;
    assert_eq!(r.status, 201, "POST /v1/sessions: {}", r.text);
    r.str_field("id")
}

/// One turn: its final answer, the tools it ran (name and status), and a summary to report.
async fn turn(api: &Api, session: &str, text: &str) -> (String, Vec<(String, String)>, String) {
    let started = Instant::now();
    let adm = api.submit_accepted(session, text).await;
    let adm = api.wait_terminal(&adm, TURN_BOUND).await;
    let tools: Vec<(String, String)> = api
        .all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "tool.completed")
        .map(|e| {
            let s = |k: &str| e["data"][k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("status"))
        })
        .collect();
    let answer = adm["outcome"]["final_response"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let summary = format!(
        "{:.0?}: result {}, tools {tools:?}, answer {answer:?}",
        started.elapsed(),
        adm["outcome"]["result"]
    );
    (answer, tools, summary)
}

fn profile_texts(memory: &Value) -> Vec<String> {
    memory["profile"]["entries"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_2_a_real_model_saves_a_fact_and_recalls_it_in_a_new_session() {
    let test = "r5_2_a_real_model_saves_a_fact_and_recalls_it_in_a_new_session";
    let Some(model) = LocalModel::start_or_skip(test).await else {
        return;
    };
    eprintln!("local model: {} ({})", model.base_url, model.command_line);
    let opts = TurnkeyOptions::for_base_url(&model.base_url)
        .provider_model(LOCAL_MODEL_NAME)
        .provider_toml("request_timeout_s = 600")
        .provider_toml("stream_idle_timeout_s = 600")
        .provider_toml("max_retries = 0")
        .extra_toml("[tools]\napproval = \"off\"\nenabled = [\"memory\"]\n");
    let tk = Turnkey::start(opts).await;
    let api = tk.api();

    let mut seen = Vec::new();
    let mut saved = None;
    for n in 1..=ATTEMPTS {
        let session = session_with(&api, SAVE_EXAMPLES).await;
        let (_, tools, summary) =
            turn(&api, &session, &format!("My favourite colour is {COLOUR}.")).await;
        eprintln!("save attempt {n}: {summary}");
        let texts = profile_texts(&api.get("/v1/memory").await.body);
        let ran = tools
            .iter()
            .any(|(name, status)| name == "memory" && status == "ok");
        if ran && texts.iter().any(|t| t.to_lowercase().contains(COLOUR)) {
            saved = Some(texts);
            break;
        }
        seen.push(format!("{summary}; profile {texts:?}"));
    }
    let Some(saved) = saved else {
        panic!(
            "in {ATTEMPTS} turns the model never saved {COLOUR:?} with the memory tool:\n{}\n{}",
            seen.join("\n"),
            model.log_tail(40)
        );
    };
    eprintln!("saved: {saved:?}");

    for n in 1..=ATTEMPTS {
        let session = session_with(&api, RECALL_EXAMPLES).await;
        let prompt = api.session(&session).await;
        let (answer, _, summary) = turn(&api, &session, "What is my favourite colour?").await;
        eprintln!("recall attempt {n}: {summary}");
        if answer.to_lowercase().contains(COLOUR) {
            return;
        }
        seen.push(format!("{summary}; session {}", prompt.text));
    }
    panic!(
        "in {ATTEMPTS} new sessions the model never answered with {COLOUR:?} from its profile \
         {saved:?}:\n{}\n{}",
        seen.join("\n"),
        model.log_tail(40)
    );
}
