//! The OpenAI client against a scripted HTTP/1.1 server on 127.0.0.1, so the real reqwest,
//! SSE and timeout paths run: streams, tool-call fragments, broken streams, error statuses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use turnkey_providers::{
    build_provider, ChatMessage, ChatRequest, ChatResponse, FinishReason, Provider, ProviderConfig,
    ProviderError, ProviderKind, ToolCall, ToolSchema, Usage,
};

/// A whole chunked SSE response carrying `events` as `data:` lines, then the chunk terminator.
fn sse(events: &[&str]) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    steps.extend(events.iter().map(|e| chunk(&format!("data: {e}\n\n"))));
    steps.push(write("0\r\n\r\n"));
    steps
}

fn config(base_url: &str, idle_s: u64) -> ProviderConfig {
    ProviderConfig {
        name: "test".into(),
        kind: ProviderKind::Openai,
        base_url: base_url.into(),
        api_key: Some("sk-test".into()),
        api_key_env: None,
        model: "gpt-4o".into(),
        context_window: 128_000,
        auxiliary: false,
        request_timeout_s: 10,
        max_retries: 2,
        backoff_base_ms: 500,
        backoff_cap_ms: 20_000,
        stream_idle_timeout_s: idle_s,
        max_output_tokens: None,
        vision: None,
        prefill: None,
    }
}

fn provider(base_url: &str, idle_s: u64) -> std::sync::Arc<dyn Provider> {
    build_provider(&config(base_url, idle_s)).unwrap()
}

/// A provider configured with `max_output_tokens = 256`.
fn limited(base_url: &str, idle_s: u64) -> std::sync::Arc<dyn Provider> {
    let mut cfg = config(base_url, idle_s);
    cfg.max_output_tokens = Some(256);
    build_provider(&cfg).unwrap()
}

fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "gpt-4o".into(),
        messages: vec![ChatMessage::system("be brief"), ChatMessage::user("hi")],
        tools: vec![],
        stream,
        max_tokens: Some(64),
        temperature: None,
        prefill: false,
    }
}

/// Runs one call against `steps`; returns the result, the deltas seen and the raw request.
async fn call(
    steps: Vec<Step>,
    req: ChatRequest,
    idle_s: u64,
) -> (Result<ChatResponse, ProviderError>, Vec<String>, String) {
    common::call(steps, req, idle_s, provider).await
}

#[tokio::test]
async fn streams_text_deltas_then_usage_then_done() {
    let (r, deltas, raw) = call(
        sse(&[
            r#"{"id":"1","model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"id":"1","choices":[{"index":0,"delta":{"content":"Hello"}}]}"#,
            r#"{"id":"1","choices":[{"index":0,"delta":{"content":", world"}}]}"#,
            r#"{"id":"1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"id":"1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":8}}}"#,
            "[DONE]",
        ]),
        request(true),
        30,
    )
    .await;
    let r = r.unwrap();
    assert_eq!(deltas, ["Hello", ", world"]);
    assert_eq!(r.content.as_deref(), Some("Hello, world"));
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert_eq!(r.model, "gpt-4o-2024-08-06");
    assert!(r.streamed);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 12,
            output_tokens: 4,
            cache_read_tokens: 8,
            cache_write_tokens: 0
        }
    );
    assert!(
        raw.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{raw}"
    );
    assert!(raw
        .to_ascii_lowercase()
        .contains("authorization: bearer sk-test\r\n"));
    let body = request_body(&raw);
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(
        body["messages"][1],
        serde_json::json!({"role": "user", "content": "hi"})
    );
    assert!(body.get("tools").is_none());
}

#[tokio::test]
async fn tool_call_deltas_split_across_chunks_are_assembled() {
    // One SSE event is also split across two TCP writes, mid-JSON.
    let mut steps = vec![
        sse_head(),
        chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\","),
        Step::Sleep(Duration::from_millis(50)),
        chunk("\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\n\n"),
    ];
    steps.extend(sse(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"list_dir","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \"a.txt\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ])
    .into_iter()
    .skip(1));
    let mut req = request(true);
    req.tools = vec![ToolSchema {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    let (r, deltas, raw) = call(steps, req, 30).await;
    let r = r.unwrap();
    assert!(deltas.is_empty());
    assert_eq!(r.content, None);
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        r.tool_calls,
        [
            ToolCall {
                id: "call_a".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"a.txt\"}".into()
            },
            ToolCall {
                id: "call_b".into(),
                name: "list_dir".into(),
                arguments: "{}".into()
            },
        ]
    );
    let body = request_body(&raw);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
}

#[tokio::test]
async fn a_chunk_that_is_not_json_is_a_malformed_stream() {
    let (r, deltas, _) = call(
        sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"par"}}]}"#,
            "{\"choices\": [oops",
        ]),
        request(true),
        30,
    )
    .await;
    assert!(matches!(r, Err(ProviderError::MalformedStream(_))), "{r:?}");
    assert_eq!(deltas, ["par"]);
}

#[tokio::test]
async fn an_error_object_mid_stream_is_a_malformed_stream() {
    let (r, _, _) = call(
        sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"par"}}]}"#,
            r#"{"error":{"message":"The server had an error","type":"server_error"}}"#,
        ]),
        request(true),
        30,
    )
    .await;
    let Err(e @ ProviderError::MalformedStream(_)) = r else {
        panic!("expected a malformed stream, got {r:?}");
    };
    assert!(e.is_retryable());
    assert!(e.to_string().contains("The server had an error"));
}

#[tokio::test]
async fn a_stream_ending_without_done_or_finish_is_malformed() {
    let (r, deltas, _) = call(
        sse(&[r#"{"choices":[{"index":0,"delta":{"content":"half an ans"}}]}"#]),
        request(true),
        30,
    )
    .await;
    assert!(matches!(r, Err(ProviderError::MalformedStream(_))), "{r:?}");
    assert_eq!(deltas, ["half an ans"]);
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_malformed() {
    // No chunk terminator: the server just hangs up.
    let mut steps = sse(&[r#"{"choices":[{"index":0,"delta":{"content":"x"}}]}"#]);
    steps.pop();
    let (r, _, _) = call(steps, request(true), 30).await;
    assert!(matches!(r, Err(ProviderError::MalformedStream(_))), "{r:?}");
}

#[tokio::test]
async fn a_silent_stream_is_stream_idle() {
    let mut steps = vec![
        sse_head(),
        chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"),
    ];
    steps.push(Step::Sleep(Duration::from_secs(6)));
    let started = Instant::now();
    let (r, deltas, _) = call(steps, request(true), 1).await;
    assert!(
        matches!(r, Err(ProviderError::StreamIdle(d)) if d == Duration::from_secs(1)),
        "{r:?}"
    );
    assert_eq!(deltas, ["a"]);
    // The server is still asleep: the client gave up on its own after about a second.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn silence_after_the_finish_reason_keeps_the_answer() {
    let steps = vec![
        sse_head(),
        chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n"),
        Step::Sleep(Duration::from_secs(6)),
    ];
    let (r, _, _) = call(steps, request(true), 1).await;
    let r = r.unwrap();
    assert_eq!(r.content.as_deref(), Some("done"));
    assert_eq!(r.finish_reason, FinishReason::Stop);
}

#[tokio::test]
async fn keep_alive_comments_keep_a_slow_stream_alive() {
    let mut steps = vec![sse_head()];
    for _ in 0..4 {
        steps.push(Step::Sleep(Duration::from_millis(500)));
        steps.push(chunk(": keep-alive\n\n"));
    }
    steps.extend(
        sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"late"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ])
        .into_iter()
        .skip(1),
    );
    let (r, _, _) = call(steps, request(true), 1).await;
    assert_eq!(r.unwrap().content.as_deref(), Some("late"));
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let body = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#;
    let (r, _, _) = call(
        plain("429 Too Many Requests", "Retry-After: 7\r\n", body),
        request(true),
        30,
    )
    .await;
    let Err(ProviderError::RateLimited {
        retry_after,
        message,
    }) = r
    else {
        panic!("expected rate limited, got {r:?}");
    };
    assert_eq!(retry_after, Some(Duration::from_secs(7)));
    assert!(message.contains("Rate limit reached"), "{message}");
}

#[tokio::test]
async fn context_length_exceeded_is_overflow() {
    let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let (r, _, _) = call(plain("400 Bad Request", "", body), request(false), 30).await;
    let Err(e @ ProviderError::Overflow { .. }) = r else {
        panic!("expected overflow, got {r:?}");
    };
    assert_eq!(e.code(), "context_overflow");
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn other_400s_are_client_errors() {
    let body =
        r#"{"error":{"message":"Unrecognized request argument","type":"invalid_request_error"}}"#;
    let (r, _, _) = call(plain("400 Bad Request", "", body), request(false), 30).await;
    assert!(
        matches!(r, Err(ProviderError::Client { status: 400, .. })),
        "{r:?}"
    );
}

#[tokio::test]
async fn server_errors_are_retryable() {
    let (r, _, _) = call(
        plain("500 Internal Server Error", "", "oops"),
        request(true),
        30,
    )
    .await;
    let Err(e @ ProviderError::Server { status: 500, .. }) = r else {
        panic!("expected server error, got {r:?}");
    };
    assert!(e.is_retryable());
    assert!(e.to_string().contains("oops"));
}

#[tokio::test]
async fn unauthorized_is_auth() {
    let body = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let (r, _, _) = call(plain("401 Unauthorized", "", body), request(false), 30).await;
    let Err(e @ ProviderError::Auth { status: 401, .. }) = r else {
        panic!("expected auth error, got {r:?}");
    };
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("Incorrect API key"));
}

#[tokio::test]
async fn non_streamed_completion_is_parsed() {
    let body = r#"{"id":"x","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#;
    let (r, deltas, raw) = call(plain("200 OK", "", body), request(false), 30).await;
    let r = r.unwrap();
    assert_eq!(r.content.as_deref(), Some("Hi there"));
    assert!(!r.streamed);
    assert!(deltas.is_empty());
    assert_eq!(r.usage.input_tokens, 5);
    assert!(request_body(&raw).get("stream_options").is_none());
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_still_answers() {
    let body = r#"{"choices":[{"message":{"content":"whole"},"finish_reason":"stop"}]}"#;
    let (r, deltas, _) = call(plain("200 OK", "", body), request(true), 30).await;
    let r = r.unwrap();
    assert_eq!(r.content.as_deref(), Some("whole"));
    assert!(!r.streamed);
    assert_eq!(deltas, ["whole"]);
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let p = provider(&format!("http://{addr}/v1"), 30);
    let r = tokio::time::timeout(TEST_BOUND, p.chat(&request(true), &|_| {}))
        .await
        .expect("test exceeded its time bound");
    let Err(e @ ProviderError::Transport(_)) = r else {
        panic!("expected transport error, got {r:?}");
    };
    assert!(e.is_retryable());
}

/// `max_output_tokens` (SPEC R8.5, R10.2): the configured output limit is the request's
/// `max_tokens`; a request that asks for less keeps its own; unset, none is sent.
#[tokio::test]
async fn max_output_tokens_is_the_requests_max_tokens() {
    let body = r#"{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}"#;
    let sent = |raw: &str| request_body(raw).get("max_tokens").cloned();
    let mut turn = request(false);
    turn.max_tokens = None;
    let (_, _, raw) = call(plain("200 OK", "", body), turn.clone(), 30).await;
    assert_eq!(
        sent(&raw),
        None,
        "no limit configured: the server's applies"
    );
    let limited_call = |req: ChatRequest| async move {
        let steps = plain("200 OK", "", body);
        common::call(steps, req, 30, limited).await
    };
    let (r, _, raw) = limited_call(turn.clone()).await;
    assert_eq!(r.unwrap().content.as_deref(), Some("ok"));
    assert_eq!(sent(&raw), Some(serde_json::json!(256)));
    let (_, _, raw) = limited_call(request(true)).await;
    assert_eq!(
        sent(&raw),
        Some(serde_json::json!(64)),
        "a smaller ask wins"
    );
    turn.max_tokens = Some(1000);
    let (_, _, raw) = limited_call(turn).await;
    assert_eq!(
        sent(&raw),
        Some(serde_json::json!(256)),
        "the limit caps a larger ask"
    );
}
