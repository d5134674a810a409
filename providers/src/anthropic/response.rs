//! Anthropic Messages responses: the SSE event stream (message_start … message_stop) and the
//! non-streamed message, both normalized into one `ChatResponse` (SPEC R8.5).
use crate::error::{error_message, truncate_chars, ProviderError};
use crate::http::{guard_idle, ChunkError};
use crate::provider::DeltaSink;
use crate::wire::{ChatResponse, FinishReason, ToolCall, Usage};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Reads a streamed response to its end.
pub(super) async fn read_stream(
    resp: reqwest::Response,
    idle: Duration,
    on_delta: DeltaSink<'_>,
    fallback_model: &str,
) -> Result<ChatResponse, ProviderError> {
    let mut events = std::pin::pin!(guard_idle(resp.bytes_stream(), idle).eventsource());
    let mut acc = StreamAccumulator::default();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            // The answer is complete once the stop reason arrived; a server that then goes
            // quiet or hangs up instead of sending `message_stop` does not take it away.
            Err(EventStreamError::Transport(e)) if acc.stop_reason.is_some() => {
                tracing::debug!(error = %e, "stream ended after its stop reason without message_stop");
                break;
            }
            Err(EventStreamError::Transport(ChunkError::Idle)) => {
                return Err(ProviderError::StreamIdle(idle))
            }
            Err(other) => return Err(ProviderError::MalformedStream(other.to_string())),
        };
        acc.push(&event.event, &event.data, on_delta)?;
        if acc.done {
            break;
        }
    }
    acc.finish(fallback_model)
}

/// A content block being assembled: text, or a tool call whose input arrives in pieces.
enum PartialBlock {
    Text,
    ToolUse {
        id: String,
        name: String,
        /// Concatenated `input_json_delta.partial_json`.
        json: String,
        /// The `input` of `content_block_start`: the input itself when no deltas follow.
        initial: Value,
    },
    /// Thinking and any block type this client does not know: kept out of the answer.
    Other,
}

/// Everything a stream has said so far.
#[derive(Default)]
pub(super) struct StreamAccumulator {
    text: String,
    blocks: BTreeMap<u64, PartialBlock>,
    stop_reason: Option<String>,
    usage: Usage,
    model: Option<String>,
    done: bool,
}

impl StreamAccumulator {
    /// Takes one SSE event (its name and `data`), passing text fragments to `on_delta`.
    pub(super) fn push(
        &mut self,
        name: &str,
        data: &str,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let event: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::MalformedStream(format!(
                "event {name:?} is not JSON ({e}): {}",
                truncate_chars(data, 200)
            ))
        })?;
        // The payload's own `type` names the event; the SSE `event:` line repeats it.
        let kind = event["type"].as_str().unwrap_or(name);
        match kind {
            "message_start" => {
                let message = &event["message"];
                if let Some(model) = message["model"].as_str().filter(|m| !m.is_empty()) {
                    self.model = Some(model.to_owned());
                }
                self.usage = usage(&message["usage"], &self.usage);
            }
            "content_block_start" => {
                let block = &event["content_block"];
                let partial = match block["type"].as_str() {
                    Some("text") => {
                        let text = block["text"].as_str().unwrap_or("");
                        self.push_text(text, on_delta);
                        PartialBlock::Text
                    }
                    Some("tool_use") => PartialBlock::ToolUse {
                        id: block["id"].as_str().unwrap_or("").to_owned(),
                        name: block["name"].as_str().unwrap_or("").to_owned(),
                        json: String::new(),
                        initial: block["input"].clone(),
                    },
                    _ => PartialBlock::Other,
                };
                self.blocks.insert(index(&event)?, partial);
            }
            "content_block_delta" => self.push_delta(&event, on_delta)?,
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                self.usage = usage(&event["usage"], &self.usage);
            }
            "message_stop" => self.done = true,
            "error" => return Err(classify_error(data)),
            // content_block_stop and ping carry nothing to keep; event types added to the API
            // later are ignored, as Anthropic's versioning policy asks of clients.
            _ => {}
        }
        Ok(())
    }

    fn push_text(&mut self, text: &str, on_delta: DeltaSink<'_>) {
        if !text.is_empty() {
            self.text.push_str(text);
            on_delta(text);
        }
    }

    fn push_delta(&mut self, event: &Value, on_delta: DeltaSink<'_>) -> Result<(), ProviderError> {
        let delta = &event["delta"];
        let at = index(event)?;
        match delta["type"].as_str() {
            Some("text_delta") => self.push_text(delta["text"].as_str().unwrap_or(""), on_delta),
            Some("input_json_delta") => match self.blocks.get_mut(&at) {
                Some(PartialBlock::ToolUse { json, .. }) => {
                    json.push_str(delta["partial_json"].as_str().unwrap_or(""));
                }
                _ => {
                    return Err(ProviderError::MalformedStream(format!(
                        "input_json_delta for block {at}, which is not a started tool_use"
                    )))
                }
            },
            // thinking_delta, signature_delta and later kinds do not belong in the answer.
            _ => {}
        }
        Ok(())
    }

    /// The response, once the stream has ended. A stream that stopped with neither
    /// `message_stop` nor a stop reason was cut off, and cannot be trusted as an answer.
    pub(super) fn finish(self, fallback_model: &str) -> Result<ChatResponse, ProviderError> {
        if !self.done && self.stop_reason.is_none() {
            return Err(ProviderError::MalformedStream(format!(
                "stream ended without message_stop or a stop_reason after {} bytes of text",
                self.text.len()
            )));
        }
        let tool_calls: Vec<ToolCall> = self
            .blocks
            .into_values()
            .filter_map(|b| match b {
                PartialBlock::ToolUse {
                    id,
                    name,
                    json,
                    initial,
                } => Some(ToolCall {
                    id,
                    name,
                    arguments: if json.trim().is_empty() {
                        input_text(&initial)
                    } else {
                        json
                    },
                }),
                PartialBlock::Text | PartialBlock::Other => None,
            })
            .collect();
        Ok(ChatResponse {
            finish_reason: finish_reason(self.stop_reason.as_deref(), !tool_calls.is_empty()),
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls,
            usage: self.usage,
            model: self.model.unwrap_or_else(|| fallback_model.to_owned()),
            streamed: true,
        })
    }
}

/// A complete (non-streamed) `message` body.
pub(super) fn parse_message(
    body: &str,
    fallback_model: &str,
) -> Result<ChatResponse, ProviderError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| ProviderError::MalformedStream(format!("response is not JSON: {e}")))?;
    if v["type"] == "error" {
        return Err(classify_error(body));
    }
    let blocks = v["content"]
        .as_array()
        .ok_or_else(|| ProviderError::MalformedStream("response has no content array".into()))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: b["id"].as_str().unwrap_or("").to_owned(),
                name: b["name"].as_str().unwrap_or("").to_owned(),
                arguments: input_text(&b["input"]),
            }),
            _ => {}
        }
    }
    Ok(ChatResponse {
        finish_reason: finish_reason(v["stop_reason"].as_str(), !tool_calls.is_empty()),
        content: (!text.is_empty()).then_some(text),
        tool_calls,
        usage: usage(&v["usage"], &Usage::default()),
        model: v["model"].as_str().unwrap_or(fallback_model).to_owned(),
        streamed: false,
    })
}

/// An `error` event or body, classified as the HTTP status Anthropic documents for its type
/// would be: `overloaded_error` as 529 and `api_error` as 500 are retryable, a context
/// overflow is `Overflow`. An unknown type stays a (retryable) malformed stream.
pub(super) fn classify_error(data: &str) -> ProviderError {
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    let status = match v.pointer("/error/type").and_then(Value::as_str) {
        Some("invalid_request_error") => 400,
        Some("authentication_error") => 401,
        Some("permission_error") => 403,
        Some("not_found_error") => 404,
        Some("request_too_large") => 413,
        Some("rate_limit_error") => 429,
        Some("api_error") => 500,
        Some("timeout_error") => 504,
        Some("overloaded_error") => 529,
        _ => {
            return ProviderError::MalformedStream(format!(
                "error event in stream: {}",
                error_message(data)
            ))
        }
    };
    ProviderError::from_http(status, None, data)
}

fn index(event: &Value) -> Result<u64, ProviderError> {
    event["index"].as_u64().ok_or_else(|| {
        ProviderError::MalformedStream(format!(
            "{} without a block index",
            event["type"].as_str().unwrap_or("event")
        ))
    })
}

/// A tool_use `input` as the JSON text the transcript keeps; none at all is `{}`.
fn input_text(input: &Value) -> String {
    match input {
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}

/// An Anthropic `usage` object over what is known so far: `input_tokens` there excludes the
/// cached tokens, which the neutral `Usage` counts in (see its doc). A field missing here
/// (message_delta carries mostly `output_tokens`) keeps its earlier value.
fn usage(u: &Value, earlier: &Usage) -> Usage {
    let n = |key: &str| u.get(key).and_then(Value::as_u64);
    let cache_read = n("cache_read_input_tokens").unwrap_or(earlier.cache_read_tokens);
    let cache_write = n("cache_creation_input_tokens").unwrap_or(earlier.cache_write_tokens);
    let uncached = n("input_tokens").unwrap_or_else(|| {
        earlier
            .input_tokens
            .saturating_sub(earlier.cache_read_tokens)
            .saturating_sub(earlier.cache_write_tokens)
    });
    Usage {
        input_tokens: uncached
            .saturating_add(cache_read)
            .saturating_add(cache_write),
        output_tokens: n("output_tokens").unwrap_or(earlier.output_tokens),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
    }
}

fn finish_reason(reported: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match reported {
        Some(r) => FinishReason::from_wire(r),
        None if has_tool_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn feed(events: &[&str]) -> (Result<ChatResponse, ProviderError>, Vec<String>) {
        let seen = Mutex::new(Vec::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_owned());
        let mut acc = StreamAccumulator::default();
        for data in events {
            if let Err(e) = acc.push("", data, &sink) {
                return (Err(e), seen.into_inner().unwrap());
            }
        }
        (acc.finish("fallback"), seen.into_inner().unwrap())
    }

    #[test]
    fn usage_counts_cached_tokens_into_input_and_keeps_earlier_fields() {
        let start = usage(
            &serde_json::json!({"input_tokens": 10, "cache_creation_input_tokens": 100,
                                "cache_read_input_tokens": 1000, "output_tokens": 1}),
            &Usage::default(),
        );
        assert_eq!(
            start,
            Usage {
                input_tokens: 1110,
                output_tokens: 1,
                cache_read_tokens: 1000,
                cache_write_tokens: 100
            }
        );
        let end = usage(&serde_json::json!({"output_tokens": 42}), &start);
        assert_eq!(end.input_tokens, 1110);
        assert_eq!(end.output_tokens, 42);
        assert_eq!(end.cache_read_tokens, 1000);
    }

    #[test]
    fn a_tool_use_without_deltas_keeps_its_start_input() {
        let (r, _) = feed(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"now","input":{}}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}"#,
            r#"{"type":"message_stop"}"#,
        ]);
        let r = r.unwrap();
        assert_eq!(r.tool_calls[0].arguments, "{}");
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(r.model, "fallback");
    }

    #[test]
    fn thinking_blocks_and_unknown_events_are_ignored() {
        let (r, seen) = feed(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            r#"{"type":"some_future_event","x":1}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"hi"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}"#,
        ]);
        assert_eq!(seen, ["hi"]);
        let r = r.unwrap();
        assert_eq!(r.content.as_deref(), Some("hi"));
        assert_eq!(r.finish_reason, FinishReason::Stop);
    }

    #[test]
    fn broken_streams_are_malformed() {
        let (r, _) = feed(&[
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
        ]);
        assert_eq!(r.unwrap_err().code(), "provider_malformed_stream");
        let (r, _) = feed(&[
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"half"}}"#,
        ]);
        assert_eq!(r.unwrap_err().code(), "provider_malformed_stream");
        let (r, _) = feed(&["<html>"]);
        assert_eq!(r.unwrap_err().code(), "provider_malformed_stream");
    }

    #[test]
    fn error_types_are_classified_like_their_statuses() {
        let e = |kind: &str, msg: &str| {
            classify_error(&format!(
                r#"{{"type":"error","error":{{"type":"{kind}","message":"{msg}"}}}}"#
            ))
        };
        let overloaded = e("overloaded_error", "Overloaded");
        assert!(matches!(
            overloaded,
            ProviderError::Server { status: 529, .. }
        ));
        assert!(overloaded.is_retryable());
        assert!(e("api_error", "x").is_retryable());
        assert_eq!(e("rate_limit_error", "x").code(), "rate_limited");
        assert_eq!(
            e("authentication_error", "x").code(),
            "provider_auth_failed"
        );
        assert!(!e("authentication_error", "x").is_retryable());
        assert_eq!(
            e("invalid_request_error", "prompt is too long: 1 > 0").code(),
            "context_overflow"
        );
        assert_eq!(
            e("invalid_request_error", "bad").code(),
            "provider_client_error"
        );
        assert_eq!(
            e("brand_new_error", "x").code(),
            "provider_malformed_stream"
        );
        assert_eq!(
            classify_error("not json").code(),
            "provider_malformed_stream"
        );
    }

    #[test]
    fn a_non_streamed_message_is_normalized() {
        let body = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
            "content":[{"type":"text","text":"Let me look."},
                       {"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"a"}}],
            "stop_reason":"tool_use",
            "usage":{"input_tokens":3,"cache_read_input_tokens":20,"cache_creation_input_tokens":0,"output_tokens":9}}"#;
        let r = parse_message(body, "fallback").unwrap();
        assert_eq!(r.content.as_deref(), Some("Let me look."));
        assert_eq!(r.model, "claude-x");
        assert!(!r.streamed);
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            r.tool_calls,
            [ToolCall {
                id: "toolu_1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a"}"#.into()
            }]
        );
        assert_eq!(r.usage.input_tokens, 23);
        assert_eq!(r.usage.cache_read_tokens, 20);
        assert_eq!(r.usage.output_tokens, 9);
        for broken in ["nope", "{}", r#"{"type":"message"}"#] {
            assert_eq!(
                parse_message(broken, "m").unwrap_err().code(),
                "provider_malformed_stream",
                "{broken}"
            );
        }
    }
}
