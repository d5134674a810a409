//! A real model delegates a task and answers from its report (SPEC R1.5; issue 24): the local
//! SmolLM2 server, behind the real turnkey binary, calls `delegate_task`; the child session
//! (the same model) answers its goal; the child's report comes back into the parent as an
//! internal input (`source: "subagent"`) and the parent's model answers from it: its answer
//! repeats what the child said. Skipped when
//! the model is not installed, unless `TURNKEY_REQUIRE_MODEL=1` (as in `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Instant;
use turnkey_tests::local_model::LOCAL_MODEL_NAME;
use turnkey_tests::wait::{eventually, REAL_MODEL_BOUND as TURN_BOUND};
use turnkey_tests::{Api, LocalModel, Turnkey, TurnkeyOptions};

/// Whole delegations tried before the test fails: the model is small, so a bad answer is
/// tolerated, but one that never delegates (or never answers from the report) fails it.
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
<tool_response>
{"task_ids": ["1"], "note": "Started."}
</tool_response><|im_end|>
<|im_start|>assistant
A sub-agent is on it.<|im_end|>
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
<tool_response>
{"task_ids": ["3"], "note": "Started."}
</tool_response><|im_end|>
<|im_start|>assistant
A sub-agent is on it.<|im_end|>
<|im_start|>user
[turnkey:subagent-report task_id=3 status=completed child_session_id=4]
Goal: reply with the word owl

owl
[end of report: this message comes from the gateway, not from the user]<|im_end|>
<|im_start|>assistant
The sub-agent answered: owl<|im_end|>"#;

/// Lowercase words of `text`, letters and digits only.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `answer` was written from the child's answer: it has the word asked for, or four
/// words in a row of what the child said (a 135M child does not always say the word, but the
/// parent answering from its report repeats what the report says).
fn from_report(child_said: &str, answer: &str) -> bool {
    let child = words(child_said);
    let answer = words(answer).join(" ");
    (child.contains(&WORD.to_owned()) && answer.contains(WORD))
        || child
            .windows(4)
            .any(|w| format!(" {answer} ").contains(&format!(" {} ", w.join(" "))))
}

async fn events_of(api: &Api, session: &str, kind: &str) -> Vec<Value> {
    api.all_events(session, 0)
        .await
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_real_model_delegates_a_task_and_answers_from_its_report() {
    let test = "r1_5_a_real_model_delegates_a_task_and_answers_from_its_report";
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
        // The parent answered from the report: it repeats what the child said.
        let child_said = child_report
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with("[end of report"))
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        if from_report(&child_said, &answer.to_lowercase()) {
            return;
        }
        seen.push(format!(
            "attempt {n}: parent answered {answer:?}, child said {child_said:?}"
        ));
    }
    panic!(
        "in {ATTEMPTS} attempts the model never delegated and answered from the report:\n{}\n{}",
        seen.join("\n"),
        model.log_tail(40)
    );
}
