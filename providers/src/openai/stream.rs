//! Chat Completions SSE streams: reading with an idle bound on every chunk, and accumulating
//! text, tool-call fragments, the finish reason and the final usage chunk into one response.
use super::completion::{finish_reason, normalize_arguments, usage};
use crate::error::{error_message, truncate_chars, ProviderError};
use crate::http::{guard_idle, ChunkError};
use crate::provider::DeltaSink;
use crate::wire::{ChatResponse, ToolCall, Usage};
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
            // The answer is complete once a finish reason arrived; a server that then goes
            // quiet or hangs up instead of sending `[DONE]` does not take it away.
            Err(EventStreamError::Transport(e)) if acc.finish.is_some() => {
                tracing::debug!(error = %e, "stream ended after its finish reason without [DONE]");
                break;
            }
            Err(EventStreamError::Transport(ChunkError::Idle)) => {
                return Err(ProviderError::StreamIdle(idle))
            }
            Err(other) => return Err(ProviderError::MalformedStream(other.to_string())),
        };
        if event.event == "error" {
            return Err(ProviderError::MalformedStream(format!(
                "error event in stream: {}",
                error_message(&event.data)
            )));
        }
        acc.push(&event.data, on_delta)?;
        if acc.done {
            break;
        }
    }
    acc.finish(fallback_model)
}

/// One tool call being assembled: id and name arrive first, arguments in pieces.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Everything a stream has said so far.
#[derive(Default)]
pub(super) struct StreamAccumulator {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
    done: bool,
}

impl StreamAccumulator {
    /// Takes one SSE `data` payload, passing its text fragment (if any) to `on_delta`.
    pub(super) fn push(
        &mut self,
        data: &str,
        on_delta: DeltaSink<'_>,
    ) -> Result<(), ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::MalformedStream(format!(
                "chunk is not JSON ({e}): {}",
                truncate_chars(data, 200)
            ))
        })?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(ProviderError::MalformedStream(format!(
                "error in stream: {}",
                error_message(data)
            )));
        }
        if let Some(model) = chunk["model"].as_str().filter(|m| !m.is_empty()) {
            self.model.get_or_insert_with(|| model.to_owned());
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            // Servers that report usage on every chunk report running totals: keep the last.
            self.usage = Some(usage(u));
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(());
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(reason.to_owned());
        }
        let delta = &choice["delta"];
        if let Some(calls) = delta["tool_calls"].as_array() {
            for (position, call) in calls.iter().enumerate() {
                self.push_call(position, call);
            }
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            on_delta(text);
        }
        Ok(())
    }

    fn push_call(&mut self, position: usize, call: &Value) {
        let index = call["index"]
            .as_u64()
            .unwrap_or_else(|| u64::try_from(position).unwrap_or(u64::MAX));
        let partial = self.calls.entry(index).or_default();
        let field = |p: &str| {
            call.pointer(p)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        if let Some(id) = field("/id") {
            if partial.id.is_empty() {
                partial.id = id.to_owned();
            }
        }
        // The name normally arrives once; a server that repeats it whole must not double it.
        if let Some(name) = field("/function/name") {
            if partial.name != name {
                partial.name.push_str(name);
            }
        }
        if let Some(arguments) = field("/function/arguments") {
            partial.arguments.push_str(arguments);
        }
    }

    /// The response, once the stream has ended. A stream that stopped with neither `[DONE]`
    /// nor a finish reason was cut off, and what it said cannot be trusted as an answer.
    pub(super) fn finish(self, fallback_model: &str) -> Result<ChatResponse, ProviderError> {
        if !self.done && self.finish.is_none() {
            return Err(ProviderError::MalformedStream(format!(
                "stream ended without [DONE] or a finish_reason after {} bytes of text",
                self.text.len()
            )));
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_values()
            .map(|p| ToolCall {
                id: p.id,
                name: p.name,
                arguments: normalize_arguments(p.arguments),
            })
            .collect();
        Ok(ChatResponse {
            finish_reason: finish_reason(self.finish.as_deref(), !tool_calls.is_empty()),
            content: (!self.text.is_empty()).then_some(self.text),
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            model: self.model.unwrap_or_else(|| fallback_model.to_owned()),
            streamed: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::FinishReason;
    use std::sync::Mutex;

    fn feed(chunks: &[&str]) -> (Result<ChatResponse, ProviderError>, Vec<String>) {
        let seen = Mutex::new(Vec::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_owned());
        let mut acc = StreamAccumulator::default();
        for c in chunks {
            if let Err(e) = acc.push(c, &sink) {
                return (Err(e), seen.into_inner().unwrap());
            }
        }
        (acc.finish("fallback"), seen.into_inner().unwrap())
    }

    #[test]
    fn text_deltas_and_final_usage_chunk() {
        let (r, seen) = feed(&[
            r#"{"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            "[DONE]",
        ]);
        let r = r.unwrap();
        assert_eq!(seen, ["Hel", "lo"]);
        assert_eq!(r.content.as_deref(), Some("Hello"));
        assert_eq!(r.model, "m1");
        assert_eq!(r.finish_reason, FinishReason::Stop);
        assert_eq!(r.usage.input_tokens, 7);
        assert_eq!(r.usage.output_tokens, 3);
        assert_eq!(r.usage.cache_read_tokens, 2);
        assert!(r.streamed);
    }

    #[test]
    fn tool_calls_are_assembled_by_index() {
        let (r, seen) = feed(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"ls","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        let r = r.unwrap();
        assert!(seen.is_empty());
        assert_eq!(r.content, None);
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            r.tool_calls,
            [
                ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into()
                },
                ToolCall {
                    id: "c2".into(),
                    name: "ls".into(),
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn done_without_finish_reason_is_a_normal_end() {
        let (r, _) = feed(&[r#"{"choices":[{"delta":{"content":"x"}}]}"#, "[DONE]"]);
        assert_eq!(r.unwrap().finish_reason, FinishReason::Stop);
    }

    #[test]
    fn garbage_and_error_chunks_are_malformed() {
        let (r, seen) = feed(&[r#"{"choices":[{"delta":{"content":"ok"}}]}"#, "{not json"]);
        assert!(matches!(r, Err(ProviderError::MalformedStream(_))));
        assert_eq!(seen, ["ok"]);
        let (r, _) = feed(&[r#"{"error":{"message":"overloaded","type":"server_error"}}"#]);
        let Err(ProviderError::MalformedStream(m)) = r else {
            panic!("expected a malformed stream");
        };
        assert!(m.contains("overloaded"), "{m}");
    }

    #[test]
    fn a_cut_off_stream_is_malformed() {
        let (r, _) = feed(&[r#"{"choices":[{"delta":{"content":"half"}}]}"#]);
        assert!(matches!(r, Err(ProviderError::MalformedStream(_))));
    }
}
