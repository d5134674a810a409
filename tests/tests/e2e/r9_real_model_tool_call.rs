//! A real model calls a real tool (SPEC R9.2): the local SmolLM2 server, behind the real
//! turnkey binary, asks `read_file` for a workspace file and repeats its content. Skipped when
//! the model is not installed, unless `TURNKEY_REQUIRE_MODEL=1` (as in `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Instant;
use turnkey_tests::local_model::LOCAL_MODEL_NAME;
use turnkey_tests::{LocalModel, Turnkey, TurnkeyOptions};

/// A 135M model on two shared cores answers at a few tokens a second when the cores are busy.
use turnkey_tests::wait::REAL_MODEL_BOUND as TURN_BOUND;
/// Whole turns tried before the test fails; the model is small and its first token is a close
/// call, so one bad answer is tolerated, but one that never calls the tool fails the test.
const ATTEMPTS: usize = 3;
const FILE: &str = "secret.txt";
const CODE_WORD: &str = "PELICAN";

/// Two earlier exchanges in the model's own ChatML turns: a 135M model copies a pattern it
/// has just seen, and does not call tools from the tool list alone. The answers after the
/// tool responses are the bare file text: with a lead-in such as "notes.txt says:" the model,
/// at temperature 0, answered that lead-in in a loop for about half of the session start
/// times in the prompt (measured 7 of 20 with it, 20 of 20 without).
const EXAMPLES: &str = r#"When the user asks about a file, your first answer is always a <tool_call> for read_file. After the <tool_response> comes back, repeat its text exactly.
Two earlier conversations:
<|im_start|>user
What is in notes.txt?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "read_file", "arguments": {"path": "notes.txt"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
buy milk
</tool_response><|im_end|>
<|im_start|>assistant
buy milk<|im_end|>
<|im_start|>user
What is in todo.md?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "read_file", "arguments": {"path": "todo.md"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
fix the roof
</tool_response><|im_end|>
<|im_start|>assistant
fix the roof<|im_end|>"#;

/// What one turn showed: whether `read_file` ran ok, and the final answer.
struct Attempt {
    read_ok: bool,
    final_response: String,
    summary: String,
}

impl Attempt {
    fn passed(&self) -> bool {
        self.read_ok && self.final_response.contains(CODE_WORD)
    }
}

async fn one_turn(tk: &Turnkey) -> Attempt {
    let api = tk.api();
    let r = api
        .post("/v1/sessions", &json!({ "system_message": EXAMPLES }))
        .await;
    assert_eq!(r.status, 201, "POST /v1/sessions: {}", r.text);
    let session = r.str_field("id");
    let started = Instant::now();
    let admission = api
        .submit_accepted(&session, &format!("What is in {FILE}?"))
        .await;
    let adm = api.wait_terminal(&admission, TURN_BOUND).await;
    let events = api.all_events(&session, 0).await;
    let tools: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.completed")
        .collect();
    let read_ok = tools
        .iter()
        .any(|e| e["data"]["name"] == "read_file" && e["data"]["status"] == "ok");
    let final_response = adm["outcome"]["final_response"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let calls: Vec<String> = tools
        .iter()
        .map(|e| format!("{} {}", e["data"]["name"], e["data"]["status"]))
        .collect();
    let summary = format!(
        "{:.0?}: result {}, tool calls {calls:?}, final response {final_response:?}, failure {}",
        started.elapsed(),
        adm["outcome"]["result"],
        adm["outcome"]["failure_message"],
    );
    Attempt {
        read_ok,
        final_response,
        summary,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_2_a_real_model_reads_a_file_with_a_real_tool() {
    let test = "r9_2_a_real_model_reads_a_file_with_a_real_tool";
    let Some(model) = LocalModel::start_or_skip(test).await else {
        return;
    };
    eprintln!("local model: {} ({})", model.base_url, model.command_line);
    // Retries would only repeat a slow answer; the bounds are generous instead.
    let opts = TurnkeyOptions::for_base_url(&model.base_url)
        .provider_model(LOCAL_MODEL_NAME)
        .provider_toml("request_timeout_s = 600")
        .provider_toml("stream_idle_timeout_s = 600")
        .provider_toml("max_retries = 0")
        .extra_toml("[tools]\napproval = \"off\"\nenabled = [\"read_file\"]\n");
    let tk = Turnkey::start(opts).await;
    let workspace = tk.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join(FILE),
        format!("The code word is {CODE_WORD}.\n"),
    )
    .unwrap();

    let mut seen = Vec::new();
    for n in 1..=ATTEMPTS {
        let attempt = one_turn(&tk).await;
        eprintln!("attempt {n}: {}", attempt.summary);
        if attempt.passed() {
            return;
        }
        seen.push(attempt.summary);
    }
    panic!(
        "in {ATTEMPTS} turns the model never both called read_file on {FILE} and answered with \
         {CODE_WORD}:\n{}\n{}",
        seen.join("\n"),
        model.log_tail(40)
    );
}
