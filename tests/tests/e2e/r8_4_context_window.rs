//! The context window is read from the server (issue 38, item 9), against the real binary: a
//! detected llama.cpp says its `n_ctx` in `/props`; connected servers say theirs in vLLM's
//! `/v1/models` (`max_model_len`), LM Studio's `/api/v0/models/{model}` and Ollama's
//! `/api/show`; `GET /v1/providers` lists each window with where it came from, the stderr line
//! names the primary's. A `context_window` given when connecting wins over the server's; a
//! server that says nothing leaves the default, said as such. The windows are read again
//! after a restart. Last, against the real llama.cpp server (the local model, skipped without
//! it unless `TURNKEY_REQUIRE_MODEL=1`): its window is the `--ctx-size` it was started with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::local_model::{LocalModel, LocalModelOptions};
use turnkey_tests::{Api, ScriptedProvider, Turnkey, TurnkeyOptions};

/// `[name, context_window, context_window_source, context_window_read_from]` of each provider.
async fn windows(api: &Api) -> Value {
    let r = api.get("/v1/providers").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rows: Vec<Value> = r.body["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            json!([
                p["name"],
                p["context_window"],
                p["context_window_source"],
                p["context_window_read_from"]
            ])
        })
        .collect();
    Value::from(rows)
}

async fn connect(api: &Api, name: &str, server: &ScriptedProvider, window: Option<u32>) {
    let mut body = json!({"name": name, "kind": "openai", "base_url": server.base_url, "model": "scripted-model"});
    if let Some(w) = window {
        body["context_window"] = json!(w);
    }
    let r = api.post("/v1/providers", &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_the_context_window_is_read_from_the_server() {
    let llama = ScriptedProvider::start();
    llama.answer_path(
        "/props",
        json!({"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 1}),
    );
    let vllm = ScriptedProvider::start();
    vllm.answer_path(
        "/v1/models",
        json!({"object": "list", "data": [{"id": "scripted-model", "object": "model", "max_model_len": 32768}]}),
    );
    let lmstudio = ScriptedProvider::start();
    lmstudio.answer_path(
        "/api/v0/models/scripted-model",
        json!({"id": "scripted-model", "state": "loaded", "max_context_length": 131072, "loaded_context_length": 4096}),
    );
    let ollama = ScriptedProvider::start();
    ollama.answer_path(
        "/api/show",
        json!({"parameters": "num_ctx 16384", "model_info": {"llama.context_length": 131072}}),
    );
    let silent = ScriptedProvider::start();
    let mut tk = Turnkey::start(TurnkeyOptions::new(&llama).first_run(&[&llama.base_url])).await;
    let op = tk.api();
    connect(&op, "vllm", &vllm, None).await;
    connect(&op, "given", &vllm, Some(20_000)).await;
    connect(&op, "lmstudio", &lmstudio, None).await;
    connect(&op, "ollama", &ollama, None).await;
    connect(&op, "silent", &silent, None).await;
    let expected = json!([
        ["local", 8192, "server", "llama.cpp GET /props"],
        ["vllm", 32768, "server", "vLLM GET /v1/models max_model_len"],
        ["given", 20000, "configured", null],
        [
            "lmstudio",
            4096,
            "server",
            "LM Studio GET /api/v0/models/{model}"
        ],
        ["ollama", 16384, "server", "Ollama POST /api/show num_ctx"],
        ["silent", 128000, "default", null],
    ]);
    assert_eq!(windows(&op).await, expected);
    let said = tk.stderr();
    assert!(
        said.contains("context window 8192 tokens (read from the server, llama.cpp GET /props)"),
        "{said}"
    );

    // Read again at the next start.
    tk.restart().await;
    assert_eq!(windows(&tk.api()).await, expected);
}

/// The real llama.cpp server (xllamacpp), detected: its window is its `--ctx-size`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_real_llama_cpp_server_says_its_context_window() {
    let options = LocalModelOptions {
        ctx_size: 4096,
        ..LocalModelOptions::default()
    };
    let Some(model) =
        LocalModel::start_or_skip_with("r8_4_a_real_llama_cpp_server_says…", options).await
    else {
        return;
    };
    let unused = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&unused).first_run(&[&model.base_url])).await;
    assert_eq!(
        windows(&tk.api()).await,
        json!([["local", 4096, "server", "llama.cpp GET /props"]]),
        "{}",
        model.log_tail(20)
    );
}

/// A configured provider's server is not asked: a window set in its table is `configured`; a
/// table without one runs with the default and is said to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_configured_window_is_said_set_or_default() {
    let main = ScriptedProvider::start();
    let second = ScriptedProvider::start();
    second.answer_path(
        "/props",
        json!({"default_generation_settings": {"n_ctx": 8192}}),
    );
    let tk = Turnkey::start(TurnkeyOptions::new(&main).provider_toml(&format!(
        "[[providers]]\nname = \"second\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted-model\"\n",
        second.base_url
    )))
    .await;
    assert_eq!(
        windows(&tk.api()).await,
        json!([
            ["scripted", 32000, "configured", null],
            ["second", 128000, "default", null],
        ])
    );
    assert!(
        !second.other_requests().iter().any(|p| p == "/props"),
        "{:?}",
        second.other_requests()
    );
}
