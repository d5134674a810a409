//! The Anthropic client against a scripted HTTP/1.1 server on 127.0.0.1, so the real reqwest,
//! SSE and timeout paths run: text and tool_use streams, cache usage, error events, statuses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
mod common;

use common::*;
use std::time::Duration;
use turnkey_providers::{
    build_provider, ChatMessage, ChatRequest, ChatResponse, FinishReason, Provider, ProviderConfig,
    ProviderError, ProviderKind, ToolCall, ToolSchema, Usage,
};

/// One Anthropic SSE event: its name on the `event:` line, its JSON on the `data:` line.
fn event(data: &str) -> Step {
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    let name = v["type"].as_str().unwrap();
    chunk(&format!("event: {name}\ndata: {data}\n\n"))
}

/// A whole chunked SSE response carrying `events`, then the chunk terminator.
fn sse(events: &[&str]) -> Vec<Step> {
    let mut steps = vec![sse_head()];
    steps.extend(events.iter().map(|e| event(e)));
    steps.push(write("0\r\n\r\n"));
    steps
}

fn config(base_url: &str, idle_s: u64) -> ProviderConfig {
    ProviderConfig {
        name: "claude".into(),
        kind: ProviderKind::Anthropic,
        base_url: base_url.into(),
        api_key: Some("sk-ant-test".into()),
        api_key_env: None,
        model: "claude-sonnet-4-5".into(),
        context_window: 200_000,
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
        model: "claude-sonnet-4-5".into(),
        messages: vec![ChatMessage::system("be brief"), ChatMessage::user("hi")],
        tools: vec![],
        stream,
        max_tokens: None,
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

const MESSAGE_START: &str = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":2000,"output_tokens":1}}}"#;

#[tokio::test]
async fn streams_text_deltas_with_cache_usage() {
    let (r, deltas, raw) = call(
        sse(&[
            MESSAGE_START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", world"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}"#,
            r#"{"type":"message_stop"}"#,
        ]),
        request(true),
        30,
    )
    .await;
    let r = r.unwrap();
    assert_eq!(deltas, ["Hello", ", world"]);
    assert_eq!(r.content.as_deref(), Some("Hello, world"));
    assert_eq!(r.finish_reason, FinishReason::Stop);
    assert_eq!(r.model, "claude-sonnet-4-5-20250929");
    assert!(r.streamed);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 12 + 300 + 2000,
            output_tokens: 4,
            cache_read_tokens: 2000,
            cache_write_tokens: 300
        }
    );
    assert!(raw.starts_with("POST /v1/messages HTTP/1.1\r\n"), "{raw}");
    let head = raw.to_ascii_lowercase();
    assert!(head.contains("x-api-key: sk-ant-test\r\n"), "{raw}");
    assert!(head.contains("anthropic-version: 2023-06-01\r\n"), "{raw}");
    assert!(head.contains("content-type: application/json\r\n"), "{raw}");
    assert!(!head.contains("authorization:"), "{raw}");
    let body = request_body(&raw);
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["system"][0]["text"], "be brief");
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"][0]["text"], "hi");
}

#[tokio::test]
async fn tool_use_with_split_partial_json_is_assembled() {
    // One event is also split across two TCP writes, mid-JSON.
    let mut steps = vec![
        sse_head(),
        event(MESSAGE_START),
        event(r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
        event(r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Reading."}}"#),
        event(r#"{"type":"content_block_stop","index":0}"#),
        chunk("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"),
        Step::Sleep(Duration::from_millis(50)),
        chunk("\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_a\",\"name\":\"read_file\",\"input\":{}}}\n\n"),
    ];
    steps.extend(
        sse(&[
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"th\": \"a.txt\"}"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_b","name":"list_dir","input":{}}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}"#,
            r#"{"type":"message_stop"}"#,
        ])
        .into_iter()
        .skip(1),
    );
    let mut req = request(true);
    req.tools = vec![ToolSchema {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    let (r, deltas, raw) = call(steps, req, 30).await;
    let r = r.unwrap();
    assert_eq!(deltas, ["Reading."]);
    assert_eq!(r.content.as_deref(), Some("Reading."));
    assert_eq!(r.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        r.tool_calls,
        [
            ToolCall {
                id: "toolu_a".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"a.txt\"}".into()
            },
            ToolCall {
                id: "toolu_b".into(),
                name: "list_dir".into(),
                arguments: "{}".into()
            },
        ]
    );
    assert_eq!(r.usage.output_tokens, 30);
    let body = request_body(&raw);
    assert_eq!(body["tools"][0]["name"], "read_file");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn an_overloaded_error_event_mid_stream_is_retryable() {
    let (r, deltas, _) = call(
        sse(&[
            MESSAGE_START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"par"}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ]),
        request(true),
        30,
    )
    .await;
    let Err(e @ ProviderError::Server { status: 529, .. }) = r else {
        panic!("expected an overloaded server error, got {r:?}");
    };
    assert!(e.is_retryable());
    assert!(e.to_string().contains("Overloaded"), "{e}");
    assert_eq!(deltas, ["par"]);
}

#[tokio::test]
async fn garbage_in_the_stream_is_malformed() {
    let mut steps = sse(&[MESSAGE_START]);
    steps.insert(
        2,
        chunk("event: content_block_delta\ndata: {\"type\": oops\n\n"),
    );
    let (r, _, _) = call(steps, request(true), 30).await;
    let Err(e @ ProviderError::MalformedStream(_)) = r else {
        panic!("expected a malformed stream, got {r:?}");
    };
    assert!(e.is_retryable());
}

#[tokio::test]
async fn a_stream_cut_before_the_stop_reason_is_malformed() {
    let mut steps = sse(&[
        MESSAGE_START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"half"}}"#,
    ]);
    steps.pop(); // no chunk terminator: the server just hangs up
    let (r, deltas, _) = call(steps, request(true), 30).await;
    assert!(matches!(r, Err(ProviderError::MalformedStream(_))), "{r:?}");
    assert_eq!(deltas, ["half"]);
}

#[tokio::test]
async fn a_silent_stream_is_stream_idle() {
    let steps = vec![
        sse_head(),
        event(MESSAGE_START),
        Step::Sleep(Duration::from_secs(6)),
    ];
    let (r, _, _) = call(steps, request(true), 1).await;
    assert!(
        matches!(r, Err(ProviderError::StreamIdle(d)) if d == Duration::from_secs(1)),
        "{r:?}"
    );
}

#[tokio::test]
async fn unauthorized_is_auth_and_not_retryable() {
    let body =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let (r, _, _) = call(plain("401 Unauthorized", "", body), request(true), 30).await;
    let Err(e @ ProviderError::Auth { status: 401, .. }) = r else {
        panic!("expected auth error, got {r:?}");
    };
    assert!(!e.is_retryable());
    assert_eq!(e.code(), "provider_auth_failed");
    assert!(e.to_string().contains("invalid x-api-key"), "{e}");
}

#[tokio::test]
async fn rate_limit_carries_retry_after() {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    let (r, _, _) = call(
        plain("429 Too Many Requests", "retry-after: 12\r\n", body),
        request(true),
        30,
    )
    .await;
    let Err(
        e @ ProviderError::RateLimited {
            retry_after: Some(after),
            ..
        },
    ) = r
    else {
        panic!("expected rate limited, got {r:?}");
    };
    assert_eq!(after, Duration::from_secs(12));
    assert!(e.is_retryable());
}

#[tokio::test]
async fn overloaded_529_is_a_retryable_server_error() {
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let (r, _, _) = call(plain("529 Overloaded", "", body), request(true), 30).await;
    let Err(e @ ProviderError::Server { status: 529, .. }) = r else {
        panic!("expected server error, got {r:?}");
    };
    assert!(e.is_retryable());
}

#[tokio::test]
async fn prompt_too_long_is_overflow() {
    let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210311 tokens > 200000 maximum"}}"#;
    let (r, _, _) = call(plain("400 Bad Request", "", body), request(false), 30).await;
    let Err(e @ ProviderError::Overflow { .. }) = r else {
        panic!("expected overflow, got {r:?}");
    };
    assert_eq!(e.code(), "context_overflow");
    assert!(!e.is_retryable());
}

#[tokio::test]
async fn non_streamed_message_is_parsed() {
    let body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi there"}],"stop_reason":"max_tokens","usage":{"input_tokens":5,"cache_read_input_tokens":7,"output_tokens":2}}"#;
    let (r, deltas, raw) = call(plain("200 OK", "", body), request(false), 30).await;
    let r = r.unwrap();
    assert_eq!(r.content.as_deref(), Some("Hi there"));
    assert_eq!(r.finish_reason, FinishReason::Length);
    assert!(!r.streamed);
    assert!(deltas.is_empty());
    assert_eq!(r.usage.input_tokens, 12);
    assert_eq!(r.usage.cache_read_tokens, 7);
    assert_eq!(request_body(&raw)["stream"], false);
}

/// `max_output_tokens` replaces Anthropic's required default `max_tokens` (4096), and caps a
/// request's own ask.
#[tokio::test]
async fn max_output_tokens_replaces_the_default_max_tokens() {
    let body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#;
    let (r, _, raw) = common::call(plain("200 OK", "", body), request(false), 30, limited).await;
    assert_eq!(r.unwrap().content.as_deref(), Some("ok"));
    assert_eq!(request_body(&raw)["max_tokens"], 256);
    let mut asks_more = request(false);
    asks_more.max_tokens = Some(8000);
    let (_, _, raw) = common::call(plain("200 OK", "", body), asks_more, 30, limited).await;
    assert_eq!(request_body(&raw)["max_tokens"], 256);
}
