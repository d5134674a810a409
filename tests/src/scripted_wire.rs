//! Wire formats of the scripted provider: what OpenAI Chat Completions and Anthropic Messages
//! look like on the wire (SSE frames and plain JSON bodies), and how to read the last user text.
use serde_json::{json, Value};

/// Which provider API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

/// Token counts reported back to the client; rough but deterministic.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Usage {
    pub prompt: u64,
    pub completion: u64,
}

impl Usage {
    pub(crate) fn estimate(body: &Value, output: &str) -> Self {
        let prompt = (body.to_string().len() as u64 / 4).max(1);
        let completion = output.chars().count() as u64 / 4 + 1;
        Self { prompt, completion }
    }
}

/// The text of the last message with role `user` (string content or text parts).
pub(crate) fn last_user_text(body: &Value) -> String {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| content_text(m.get("content").unwrap_or(&Value::Null)))
        .unwrap_or_default()
}

/// Whether the request's last message is a tool result: an OpenAI `tool` message, or an
/// Anthropic user message made of `tool_result` blocks.
pub(crate) fn ends_with_tool_result(body: &Value) -> bool {
    let Some(last) = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
    else {
        return false;
    };
    match last.get("role").and_then(Value::as_str) {
        Some("tool") => true,
        Some("user") => last
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|parts| {
                parts
                    .iter()
                    .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"))
            }),
        _ => false,
    }
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A scripted tool call: id, function name, arguments.
pub(crate) type Call = (String, String, Value);

/// Splits a string in two at a char boundary near the middle, to exercise delta accumulation.
fn halves(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    s.split_at(mid)
}

fn openai_frame(delta: Value, finish: Option<&str>) -> String {
    let chunk = json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "scripted-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {chunk}\n\n")
}

fn anthropic_frame(event: Value) -> String {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    format!("event: {kind}\ndata: {event}\n\n")
}

/// Frames sent before the first text chunk or tool call.
pub(crate) fn stream_head(wire: Wire, usage: Usage) -> Vec<String> {
    match wire {
        Wire::OpenAi => vec![openai_frame(
            json!({"role": "assistant", "content": ""}),
            None,
        )],
        Wire::Anthropic => vec![anthropic_frame(json!({
            "type": "message_start",
            "message": {
                "id": "msg_scripted", "type": "message", "role": "assistant",
                "model": "scripted-model", "content": [], "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": usage.prompt, "output_tokens": 1},
            },
        }))],
    }
}

/// Anthropic opens a text block before its deltas; OpenAI needs nothing.
pub(crate) fn text_block_start(wire: Wire) -> Vec<String> {
    match wire {
        Wire::OpenAi => vec![],
        Wire::Anthropic => vec![anthropic_frame(json!({
            "type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""},
        }))],
    }
}

/// One streamed piece of text.
pub(crate) fn text_delta(wire: Wire, text: &str) -> String {
    match wire {
        Wire::OpenAi => openai_frame(json!({"content": text}), None),
        Wire::Anthropic => anthropic_frame(json!({
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text},
        })),
    }
}

pub(crate) fn text_block_stop(wire: Wire) -> Vec<String> {
    match wire {
        Wire::OpenAi => vec![],
        Wire::Anthropic => vec![anthropic_frame(
            json!({"type": "content_block_stop", "index": 0}),
        )],
    }
}

/// All frames of a streamed tool-call answer (after the head): each call's header, then its
/// arguments in two fragments.
/// `first_block` is the Anthropic content-block index of the first call (1 after a text block).
pub(crate) fn tool_call_frames(wire: Wire, calls: &[Call], first_block: usize) -> Vec<String> {
    let mut frames = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let block = first_block + i;
        let args = args.to_string();
        let (a, b) = halves(&args);
        match wire {
            Wire::OpenAi => {
                frames.push(openai_frame(
                    json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
                for part in [a, b] {
                    frames.push(openai_frame(
                        json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                        None,
                    ));
                }
            }
            Wire::Anthropic => {
                frames.push(anthropic_frame(json!({
                    "type": "content_block_start", "index": block,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}},
                })));
                for part in [a, b] {
                    frames.push(anthropic_frame(json!({
                        "type": "content_block_delta", "index": block,
                        "delta": {"type": "input_json_delta", "partial_json": part},
                    })));
                }
                frames.push(anthropic_frame(
                    json!({"type": "content_block_stop", "index": block}),
                ));
            }
        }
    }
    frames
}

/// Frames after the content: finish reason, optional usage, end marker. The last frame is the
/// end marker (`data: [DONE]` or `message_stop`).
pub(crate) fn stream_tail(
    wire: Wire,
    tool_calls: bool,
    include_usage: bool,
    usage: Usage,
) -> Vec<String> {
    match wire {
        Wire::OpenAi => {
            let finish = if tool_calls { "tool_calls" } else { "stop" };
            let mut frames = vec![openai_frame(json!({}), Some(finish))];
            if include_usage {
                let chunk = json!({
                    "id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                    "created": 0, "model": "scripted-model", "choices": [],
                    "usage": {"prompt_tokens": usage.prompt,
                        "completion_tokens": usage.completion,
                        "total_tokens": usage.prompt + usage.completion},
                });
                frames.push(format!("data: {chunk}\n\n"));
            }
            frames.push("data: [DONE]\n\n".to_string());
            frames
        }
        Wire::Anthropic => {
            let stop = if tool_calls { "tool_use" } else { "end_turn" };
            vec![
                anthropic_frame(json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": null},
                    "usage": {"output_tokens": usage.completion},
                })),
                anthropic_frame(json!({"type": "message_stop"})),
            ]
        }
    }
}

/// A complete non-streaming answer.
pub(crate) fn full_body(wire: Wire, text: Option<&str>, calls: &[Call], usage: Usage) -> Value {
    match wire {
        Wire::OpenAi => {
            let mut message = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                message["tool_calls"] = calls
                    .iter()
                    .map(|(id, name, args)| {
                        json!({"id": id, "type": "function",
                            "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
            }
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            json!({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                "model": "scripted-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": usage.prompt, "completion_tokens": usage.completion,
                    "total_tokens": usage.prompt + usage.completion},
            })
        }
        Wire::Anthropic => {
            let mut content: Vec<Value> = text
                .map(|t| vec![json!({"type": "text", "text": t})])
                .unwrap_or_default();
            content.extend(calls.iter().map(|(id, name, args)| {
                json!({"type": "tool_use", "id": id, "name": name, "input": args})
            }));
            let stop = if calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            json!({
                "id": "msg_scripted", "type": "message", "role": "assistant",
                "model": "scripted-model", "content": content, "stop_reason": stop,
                "stop_sequence": null,
                "usage": {"input_tokens": usage.prompt, "output_tokens": usage.completion},
            })
        }
    }
}

/// The provider's "your prompt is too long" answer (HTTP 400).
pub(crate) fn overflow_body(wire: Wire) -> Value {
    match wire {
        Wire::OpenAi => json!({"error": {
            "message": "This model's maximum context length is 32000 tokens. \
                        However, your messages resulted in 40000 tokens.",
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded",
        }}),
        Wire::Anthropic => json!({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 40000 tokens > 32000 maximum",
        }}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_user_text_reads_strings_and_parts() {
        let body = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "tool", "content": "result"},
        ]});
        assert_eq!(last_user_text(&body), "ab");
        assert_eq!(last_user_text(&json!({})), "");
    }

    #[test]
    fn a_tool_result_ends_the_request_in_either_wire() {
        let openai = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": []},
            {"role": "tool", "content": "result"},
        ]});
        assert!(ends_with_tool_result(&openai));
        let anthropic = json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
        ]});
        assert!(ends_with_tool_result(&anthropic));
        assert!(!ends_with_tool_result(
            &json!({"messages": [{"role": "user", "content": "go"}]})
        ));
        assert!(!ends_with_tool_result(&json!({})));
    }

    #[test]
    fn halves_respects_char_boundaries() {
        let (a, b) = halves("aé");
        assert_eq!(format!("{a}{b}"), "aé");
    }
}
