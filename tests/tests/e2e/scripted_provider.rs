//! Tests of the scripted provider itself (no turnkey process): wire formats, script order,
//! hangs and the concurrency measurement the end-to-end tests rely on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::wait::{within, BOUND};
use turnkey_tests::{Reply, ScriptedProvider, Step};

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn chat_body(text: &str, stream: bool) -> Value {
    json!({
        "model": "scripted-model",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": text}],
    })
}

/// POSTs a streaming request and returns (event name, data) of every SSE frame.
async fn sse_frames(p: &ScriptedProvider, path: &str, body: Value) -> Vec<(String, String)> {
    let resp = client()
        .post(format!("{}{path}", p.base_url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = resp.bytes_stream().eventsource();
    let mut frames = Vec::new();
    while let Some(ev) = stream.next().await {
        let ev = ev.unwrap();
        frames.push((ev.event, ev.data));
    }
    frames
}

async fn chat_text(p: &ScriptedProvider, text: &str) -> String {
    let resp: Value = client()
        .post(format!("{}/chat/completions", p.base_url))
        .json(&chat_body(text, false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    resp["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn scripted_openai_stream_text_frames_are_well_formed() {
    let p = ScriptedProvider::start();
    p.push(Reply::chunks(
        &["Hel", "lo", " world"],
        Duration::from_millis(10),
    ));
    let frames = sse_frames(&p, "/chat/completions", chat_body("hi", true)).await;
    let (last, chunks) = frames.split_last().unwrap();
    assert_eq!(last.1, "[DONE]");
    let chunks: Vec<Value> = chunks
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello world");
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["stop"]);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let reqs = p.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].last_user_text, "hi");
    assert!(reqs[0].stream && reqs[0].finished_at.is_some());
}

#[tokio::test]
async fn scripted_openai_stream_tool_calls_accumulate_by_index() {
    let p = ScriptedProvider::start();
    let args = json!({"path": "a.txt", "content": "héllo"});
    p.push(Reply::ToolCalls(vec![
        ("call_1".into(), "write_file".into(), args.clone()),
        ("call_2".into(), "read_file".into(), json!({"path": "b"})),
    ]));
    let mut body = chat_body("do it", true);
    body["stream_options"] = json!({"include_usage": false});
    let frames = sse_frames(&p, "/chat/completions", body).await;
    assert_eq!(frames.last().unwrap().1, "[DONE]");
    let mut calls: Vec<(String, String, String)> = vec![Default::default(); 2];
    let mut finish = None;
    for (_, data) in &frames[..frames.len() - 1] {
        let c: Value = serde_json::from_str(data).unwrap();
        assert!(c.get("usage").is_none(), "no usage chunk unless asked");
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let slot = &mut calls[tc["index"].as_u64().unwrap() as usize];
            if let Some(id) = tc["id"].as_str() {
                slot.0 = id.into();
            }
            if let Some(name) = tc["function"]["name"].as_str() {
                slot.1 = name.into();
            }
            slot.2 += tc["function"]["arguments"].as_str().unwrap_or("");
        }
    }
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    assert_eq!(calls[0].0, "call_1");
    assert_eq!(calls[0].1, "write_file");
    assert_eq!(serde_json::from_str::<Value>(&calls[0].2).unwrap(), args);
    assert_eq!(calls[1].1, "read_file");
}

#[tokio::test]
async fn scripted_openai_non_streaming_json() {
    let p = ScriptedProvider::start();
    p.push(Reply::chunks(&["a", "b"], Duration::ZERO));
    p.push(Reply::tool_call("c1", "terminal", json!({"command": "ls"})));
    assert_eq!(chat_text(&p, "x").await, "ab");
    let resp: Value = client()
        .post(format!("{}/chat/completions", p.base_url))
        .json(&chat_body("y", false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls");
    let call = &resp["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "terminal");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"command": "ls"}));
    assert!(resp["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn scripted_anthropic_stream_and_json() {
    let p = ScriptedProvider::start();
    p.push(Reply::chunks(&["Hi", " there"], Duration::ZERO));
    p.push(Reply::tool_call(
        "toolu_1",
        "read_file",
        json!({"path": "x"}),
    ));
    let body = json!({"model": "m", "max_tokens": 100, "stream": true,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]});
    let frames = sse_frames(&p, "/messages", body).await;
    let names: Vec<&str> = frames.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let text: String = frames
        .iter()
        .map(|(_, d)| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|v| v["delta"]["text"].as_str().map(String::from))
        .collect();
    assert_eq!(text, "Hi there");
    assert_eq!(p.requests()[0].last_user_text, "hello");

    let body = json!({"model": "m", "max_tokens": 100,
        "messages": [{"role": "user", "content": "go"}]});
    let resp: Value = client()
        .post(format!("{}/messages", p.base_url))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp["stop_reason"], "tool_use");
    assert_eq!(resp["content"][0]["type"], "tool_use");
    assert_eq!(resp["content"][0]["input"], json!({"path": "x"}));
}

#[tokio::test]
async fn scripted_fifo_then_rules_then_default() {
    let p = ScriptedProvider::start();
    p.on_user_text("[needle]", Reply::text("rule"));
    p.on_user_text_times("[once]", Reply::text("once"), 1);
    p.push(Reply::text("first"));
    p.push(Reply::text("second"));
    assert_eq!(chat_text(&p, "a [needle]").await, "first");
    assert_eq!(chat_text(&p, "b").await, "second");
    assert_eq!(chat_text(&p, "c [needle]").await, "rule");
    assert_eq!(chat_text(&p, "d [once]").await, "once");
    assert_eq!(chat_text(&p, "e [once]").await, "ok: e [once]");
    assert_eq!(chat_text(&p, "plain").await, "ok: plain");
    assert_eq!(p.request_count(), 6);
    assert_eq!(p.request_count_for("[needle]"), 2);
}

#[tokio::test]
async fn scripted_errors_overflow_malformed_and_models() {
    let p = ScriptedProvider::start();
    p.push(Reply::Error {
        status: 429,
        body: json!({"error": {"code": "rate_limit_exceeded"}}),
        retry_after: Some(2),
    });
    p.push(Reply::Overflow);
    p.push(Reply::Malformed(b"data: {not json\n\n".to_vec()));
    let c = client();
    let url = format!("{}/chat/completions", p.base_url);
    let r = c
        .post(&url)
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    let r = c
        .post(&url)
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let r = c
        .post(&url)
        .json(&chat_body("x", true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "data: {not json\n\n");
    let models: Value = c
        .get(format!("{}/models", p.base_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "scripted-model");
    assert_eq!(p.request_count(), 3, "model listings are not model calls");
}

#[tokio::test]
async fn scripted_hang_until_released() {
    let p = ScriptedProvider::start();
    p.push(Reply::Hang);
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        client()
            .post(format!("{}/chat/completions", p.base_url))
            .json(&chat_body("wait", true))
            .send(),
    )
    .await
    .expect("headers of a hanging reply arrive at once")
    .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let early = tokio::time::timeout(Duration::from_millis(500), body.next()).await;
    assert!(early.is_err(), "a hanging reply sends no bytes");
    assert_eq!(p.max_concurrency_for("wait"), 1, "still in flight");
    p.release_hangs();
    let mut all = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .unwrap()
    {
        all.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(all).unwrap();
    assert!(text.contains("released") && text.ends_with("data: [DONE]\n\n"));
    assert!(p.requests()[0].finished_at.is_some());
}

/// The text of the `delta.content` frames in `bytes` (Chat Completions SSE).
fn streamed_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect()
}

#[tokio::test]
async fn scripted_steps_stop_at_each_gate_until_released() {
    let p = ScriptedProvider::start();
    p.push(Reply::Steps(vec![
        Step::text("before "),
        Step::Gate,
        Step::text("between "),
        Step::Gate,
        Step::text("after"),
    ]));
    let resp = client()
        .post(format!("{}/chat/completions", p.base_url))
        .json(&chat_body("steps", true))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    // Everything up to a gate arrives, then nothing until the release.
    let mut read_until_silent = async |got: &mut Vec<u8>| {
        while let Ok(Some(chunk)) =
            tokio::time::timeout(Duration::from_millis(400), body.next()).await
        {
            got.extend_from_slice(&chunk.unwrap());
        }
    };
    read_until_silent(&mut got).await;
    assert_eq!(streamed_text(&got), "before ");
    assert_eq!(p.requests()[0].delivered_text, "before ");
    p.release_hangs();
    read_until_silent(&mut got).await;
    assert_eq!(streamed_text(&got), "before between ");
    assert!(
        p.requests()[0].finished_at.is_none(),
        "held at the second gate"
    );
    p.release_hangs();
    read_until_silent(&mut got).await;
    assert_eq!(streamed_text(&got), "before between after");
    assert!(String::from_utf8_lossy(&got).ends_with("data: [DONE]\n\n"));
    assert!(p.requests()[0].finished_at.is_some());
}

#[tokio::test]
async fn scripted_hang_ends_when_client_goes_away() {
    let p = ScriptedProvider::start();
    p.push(Reply::Hang);
    let resp = client()
        .post(format!("{}/chat/completions", p.base_url))
        .json(&chat_body("gone", true))
        .send()
        .await
        .unwrap();
    drop(resp);
    let finished = within(BOUND, || async { p.requests()[0].finished_at }).await;
    assert!(
        finished.is_some(),
        "a hang whose client left counts as finished"
    );
}

#[tokio::test]
async fn scripted_concurrency_tracking() {
    let p = ScriptedProvider::start();
    let slow = Reply::chunks(&["a", "b"], Duration::from_millis(150));
    p.on_user_text("[par]", slow.clone());
    p.on_user_text("[seq]", slow);
    let one = |text: &'static str| {
        let url = format!("{}/chat/completions", p.base_url);
        async move {
            let r = client()
                .post(url)
                .json(&chat_body(text, true))
                .send()
                .await
                .unwrap();
            r.text().await.unwrap()
        }
    };
    let answers = futures::future::join_all([one("1 [par]"), one("2 [par]"), one("3 [par]")]).await;
    assert!(answers.iter().all(|a| a.ends_with("data: [DONE]\n\n")));
    for text in ["1 [seq]", "2 [seq]", "3 [seq]"] {
        one(text).await;
    }
    assert_eq!(p.max_concurrency_for("[par]"), 3);
    assert_eq!(p.max_concurrency_for("[seq]"), 1);
    p.wait_for_requests(6, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(p
        .wait_for_requests(7, Duration::from_millis(100))
        .await
        .is_err());
}
