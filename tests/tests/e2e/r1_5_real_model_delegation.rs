//! A real model delegates a task and answers from its report (SPEC R1.5; issue 24): the local
//! SmolLM2 server, behind the real turnkey binary, calls `delegate_task`; the child session
//! (the same model) answers its goal; the child's report comes back into the parent as an
//! internal input (`source: "subagent"`), admitted once, and the parent's model answers it.
//! What the 135M model says is not judged (it does not reliably repeat a report; see
//! docs/requirements.md): the test holds the path a real model's tool call takes, from its
//! arguments to the child's turn, the report and the parent's answering turn. Skipped when
//! the model is not installed, unless `TURNKEY_REQUIRE_MODEL=1` (as in `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Instant;
use turnkey_tests::local_model::LOCAL_MODEL_NAME;
use turnkey_tests::wait::{eventually, REAL_MODEL_BOUND as TURN_BOUND};
use turnkey_tests::{Api, LocalModel, Turnkey, TurnkeyOptions};

/// Turns tried before the test fails: the model is small, so a turn that does not delegate is
/// tolerated, but one that never does fails it.
const ATTEMPTS: usize = 3;
const WORD: &str = "teal";

/// A 135M model copies a pattern it has just seen in its own ChatML turns.
const EXAMPLES: &str = r#"Your answer to a user's message is always a <tool_call> for delegate_task whose goal is the user's message, copied word for word. When a message starting with [turnkey:subagent-report arrives, you answer by copying the sub-agent's answer from it.
Earlier conversations:
<|im_start|>user
reply with the word mango<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "delegate_task", "arguments": {"goal": "reply with the word mango"}}
</tool_call><|im_end|>
<|im_start|>user
[turnkey:subagent-report task_id=1 status=completed child_session_id=2]
Goal: reply with the word mango

mango
[end of report: this message comes from the gateway, not from the user]<|im_end|>
<|im_start|>assistant
The sub-agent answered: mango<|im_end|>
<|im_start|>user
reply with the word owl<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "delegate_task", "arguments": {"goal": "reply with the word owl"}}
</tool_call><|im_end|>
<|im_start|>user
[turnkey:subagent-report task_id=3 status=completed child_session_id=4]
Goal: reply with the word owl

owl
[end of report: this message comes from the gateway, not from the user]<|im_end|>
<|im_start|>assistant
The sub-agent answered: owl<|im_end|>"#;

async fn events_of(api: &Api, session: &str, kind: &str) -> Vec<Value> {
    api.all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_real_model_delegates_a_task_and_answers_its_report() {
    let test = "r1_5_a_real_model_delegates_a_task_and_answers_its_report";
    let Some(model) = LocalModel::start_or_skip(test).await else {
        return;
    };
    eprintln!("local model: {} ({})", model.base_url, model.command_line);
    let opts = TurnkeyOptions::for_base_url(&model.base_url)
        .provider_model(LOCAL_MODEL_NAME)
        .provider_toml("request_timeout_s = 600")
        .provider_toml("stream_idle_timeout_s = 600")
        .provider_toml("max_retries = 0")
        .extra_toml("[tools]\napproval = \"off\"\nenabled = [\"delegate_task\"]\n");
    let tk = Turnkey::start(opts).await;
    let api = tk.api();

    let mut seen = Vec::new();
    for n in 1..=ATTEMPTS {
        let started = Instant::now();
        let r = api
            .post("/v1/sessions", &json!({ "system_message": EXAMPLES }))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let parent = r.str_field("id");
        let adm = api
            .submit_accepted(&parent, &format!("reply with the word {WORD}"))
            .await;
        let first = api.wait_terminal(&adm, TURN_BOUND).await;
        let delegated = events_of(&api, &parent, "subagent.started").await;
        if delegated.is_empty() {
            let tools: Vec<Value> = events_of(&api, &parent, "tool.completed").await;
            seen.push(format!(
                "attempt {n}: no delegation; outcome {}; tools {tools:?}",
                first["outcome"]
            ));
            continue;
        }
        let finished = eventually(TURN_BOUND, "the sub-agent's report", || async {
            events_of(&api, &parent, "subagent.finished").await.pop()
        })
        .await;
        let report = finished["admission_id"].as_str().unwrap().to_owned();
        let answered = api.wait_terminal(&report, TURN_BOUND).await;
        assert_eq!(answered["source"], "subagent", "{answered}");
        let list = api.get(&format!("/v1/sessions/{parent}/subagents")).await;
        let child_report = list.body["subagents"][0]["result"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let answer = answered["outcome"]["final_response"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        eprintln!(
            "attempt {n} ({:.0?}): parent's answer {answer:?}; goal {:?}; child's report {child_report:?}",
            started.elapsed(),
            delegated[0]["data"]["goal"]
        );
        assert_eq!(events_of(&api, &parent, "subagent.finished").await.len(), 1);
        assert_eq!(answered["outcome"]["result"], "completed", "{answered}");
        assert!(
            !answer.trim().is_empty(),
            "the report's turn answered: {answered}"
        );
        assert!(
            delegated[0]["data"]["goal"]
                .as_str()
                .unwrap_or_default()
                .contains(WORD),
            "the goal came from the model's tool call: {delegated:?}"
        );
        assert!(
            child_report.starts_with("[turnkey:subagent-report"),
            "{child_report}"
        );
        assert!(child_report.contains("status=completed"), "{child_report}");
        return;
    }
    panic!(
        "in {ATTEMPTS} attempts the model never delegated:\n{}\n{}",
        seen.join("\n"),
        model.log_tail(40)
    );
}
