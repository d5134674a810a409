//! Non-streamed Chat Completions responses, and the pieces every OpenAI response shares with
//! the stream: usage, tool-call arguments and the finish reason (SPEC R8.5).
use crate::error::{error_message, ProviderError};
use crate::wire::{ChatResponse, FinishReason, ToolCall, Usage};
use serde_json::Value;

/// A complete (non-streamed) response body.
pub(super) fn parse_completion(
    body: &str,
    fallback_model: &str,
) -> Result<ChatResponse, ProviderError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| ProviderError::MalformedStream(format!("response is not JSON: {e}")))?;
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(ProviderError::MalformedStream(format!(
            "error object in a 2xx response: {}",
            error_message(body)
        )));
    }
    let choice = v
        .pointer("/choices/0")
        .ok_or_else(|| ProviderError::MalformedStream("response has no choices".into()))?;
    let message = &choice["message"];
    let tool_calls: Vec<ToolCall> = message["tool_calls"]
        .as_array()
        .map(|calls| calls.iter().map(tool_call).collect())
        .unwrap_or_default();
    let content = content_text(&message["content"]).filter(|t| !t.is_empty());
    Ok(ChatResponse {
        finish_reason: finish_reason(choice["finish_reason"].as_str(), !tool_calls.is_empty()),
        content,
        tool_calls,
        usage: v.get("usage").map(usage).unwrap_or_default(),
        model: v["model"].as_str().unwrap_or(fallback_model).to_owned(),
        streamed: false,
    })
}

fn tool_call(c: &Value) -> ToolCall {
    let text = |p: &str| {
        c.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    ToolCall {
        id: text("/id"),
        name: text("/function/name"),
        arguments: normalize_arguments(match c.pointer("/function/arguments") {
            Some(Value::String(s)) => s.clone(),
            // Some compatible servers send the arguments as an object, not as JSON text.
            Some(other) if !other.is_null() => other.to_string(),
            _ => String::new(),
        }),
    }
}

/// A string, or (some compatible servers) an array of `{"type":"text","text":...}` parts.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

/// An OpenAI `usage` object: `prompt_tokens` already include the cached ones.
pub(super) fn usage(u: &Value) -> Usage {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("/prompt_tokens"),
        output_tokens: n("/completion_tokens"),
        cache_read_tokens: n("/prompt_tokens_details/cached_tokens"),
        cache_write_tokens: 0,
    }
}

/// A call without arguments is sent back, and parsed by tools, as an empty object.
pub(super) fn normalize_arguments(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        arguments
    }
}

/// The reported finish reason; a server that reports none finished normally.
pub(super) fn finish_reason(reported: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match reported {
        Some(r) => FinishReason::from_wire(r),
        None if has_tool_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_response_is_normalized() {
        let body = r#"{"id":"x","model":"gpt-4o-2024","choices":[{"index":0,
            "message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],
            "usage":{"prompt_tokens":10,"completion_tokens":2,
                     "prompt_tokens_details":{"cached_tokens":4}}}"#;
        let r = parse_completion(body, "fallback").unwrap();
        assert_eq!(r.content.as_deref(), Some("hi"));
        assert_eq!(r.finish_reason, FinishReason::Length);
        assert_eq!(r.model, "gpt-4o-2024");
        assert!(!r.streamed);
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 2,
                cache_read_tokens: 4,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn tool_call_response_is_normalized() {
        let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
            {"id":"c1","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}},
            {"id":"c2","type":"function","function":{"name":"b","arguments":""}},
            {"id":"c3","type":"function","function":{"name":"c","arguments":{"y":2}}}]}}]}"#;
        let r = parse_completion(body, "fallback").unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.model, "fallback");
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        let args: Vec<&str> = r.tool_calls.iter().map(|c| c.arguments.as_str()).collect();
        assert_eq!(args, ["{\"x\":1}", "{}", "{\"y\":2}"]);
        assert_eq!(r.tool_calls[1].name, "b");
        assert_eq!(r.usage, Usage::default());
    }

    #[test]
    fn content_parts_are_joined() {
        let body = r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},
            {"type":"text","text":"b"}]},"finish_reason":"stop"}]}"#;
        let r = parse_completion(body, "m").unwrap();
        assert_eq!(r.content.as_deref(), Some("ab"));
    }

    #[test]
    fn broken_bodies_are_malformed() {
        for body in [
            "not json",
            "{}",
            r#"{"choices":[]}"#,
            r#"{"error":{"message":"x"}}"#,
        ] {
            let e = parse_completion(body, "m").unwrap_err();
            assert_eq!(e.code(), "provider_malformed_stream", "{body}");
        }
    }
}
