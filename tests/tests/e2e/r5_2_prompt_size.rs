//! What a first "hello" costs the model (SPEC R5.2, R5.3; issue 38 item 8): a small local model
//! reads every prompt token before its first word (llama.cpp: ~7 ms a token on two cores), so
//! the request the provider receives for "hello" on a fresh session, with the default
//! configuration and so the default tools, stays within 900 prompt tokens. Counted on the
//! prompt-bearing part of the body (`messages` and `tools`, as JSON) with OpenAI's o200k and
//! cl100k BPE and as bytes / 4, and bounded on the largest: a local model's own tokenizer
//! is not at hand, and JSON costs most tokenizers more than English does. The system prompt
//! names no absolute path. The figures are printed for docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::wait::BOUND;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// Prompt tokens a first "hello" may cost (issue 38: it was ~2,380 on llama.cpp).
const BOUND_TOKENS: usize = 900;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_2_a_first_hello_with_the_default_tools_costs_at_most_900_prompt_tokens() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Hello!"));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "hello").await;
    api.wait_terminal(&a, BOUND).await;
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 1, "one call for a hello");
    let body = &reqs[0].body;
    let prompt = json!({"messages": body["messages"], "tools": body["tools"]}).to_string();
    let o200k = tiktoken_rs::o200k_base_singleton()
        .encode_ordinary(&prompt)
        .len();
    let cl100k = tiktoken_rs::cl100k_base_singleton()
        .encode_ordinary(&prompt)
        .len();
    let quarter = prompt.len().div_ceil(4);
    let system = body["messages"][0]["content"].as_str().unwrap();
    let tools = body["tools"].as_array().map_or(0, Vec::len);
    println!(
        "hello prompt: {} bytes ({} system, {} tools JSON, {tools} tools offered); \
         o200k {o200k}, cl100k {cl100k}, bytes/4 {quarter} tokens",
        prompt.len(),
        system.len(),
        body["tools"].to_string().len(),
    );
    println!("{prompt}");
    let most = o200k.max(cl100k).max(quarter);
    assert!(
        most <= BOUND_TOKENS,
        "a first hello costs {most} prompt tokens, over {BOUND_TOKENS}\n{prompt}"
    );
    let dir = tk.dir.path().to_str().unwrap();
    assert!(
        !system.contains(dir),
        "the prompt names the absolute workspace path {dir}:\n{system}"
    );
}
