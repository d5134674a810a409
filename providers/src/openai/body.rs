//! The OpenAI Chat Completions request body: a projection of the neutral `ChatRequest` that
//! never changes the transcript it came from (SPEC R8.1).
use crate::wire::{ChatMessage, ChatRequest, Role, ToolCall, ToolSchema};
use serde::Serialize;

#[derive(Serialize)]
pub(super) struct RequestBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    /// A prefill (`ChatRequest::prefill`): continue the last assistant message rather than
    /// start a new one. vLLM's and llama.cpp's flag (which wants `add_generation_prompt:
    /// false` beside it); llama.cpp and Ollama also continue a final assistant message
    /// without it, and ignore fields they do not know.
    #[serde(skip_serializing_if = "Option::is_none")]
    continue_final_message: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    add_generation_prompt: Option<bool>,
}

/// Without this, OpenAI streams carry no usage at all.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: Role,
    /// Always present: a string (or, with images, an array of text and `image_url` parts),
    /// or null only on an assistant message that has tool calls (the one place OpenAI
    /// accepts a missing content).
    content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: &'a ToolSchema,
}

impl<'a> RequestBody<'a> {
    /// `max_tokens` is the request's output limit as the provider's configuration settles it.
    pub(super) fn new(req: &'a ChatRequest, max_tokens: Option<u32>) -> Self {
        let prefill = req.prefill
            && req
                .messages
                .last()
                .is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_empty());
        let mut messages: Vec<WireMessage<'a>> =
            req.messages.iter().map(WireMessage::new).collect();
        if prefill {
            // A prefill's trailing whitespace would be a token of its own: the model would
            // then start its next word without the space it carries.
            if let Some(Content::Text(text)) = messages.last_mut().and_then(|m| m.content.as_mut())
            {
                *text = text.trim_end();
            }
        }
        Self {
            model: &req.model,
            messages,
            tools: req
                .tools
                .iter()
                .map(|function| WireTool {
                    kind: "function",
                    function,
                })
                .collect(),
            stream: req.stream,
            stream_options: req.stream.then_some(StreamOptions {
                include_usage: true,
            }),
            max_tokens,
            temperature: req.temperature,
            continue_final_message: prefill.then_some(true),
            add_generation_prompt: prefill.then_some(false),
        }
    }
}

impl<'a> WireMessage<'a> {
    fn new(m: &'a ChatMessage) -> Self {
        let has_calls = m.role == Role::Assistant && !m.tool_calls.is_empty();
        let content = match m.content.as_deref() {
            None if has_calls => None,
            text if !m.images.is_empty() && m.role == Role::User => {
                let text = text
                    .filter(|t| !t.is_empty())
                    .map(|text| Part::Text { text });
                let images = m.images.iter().map(|i| Part::ImageUrl {
                    image_url: ImageUrl {
                        url: format!("data:{};base64,{}", i.media_type, i.base64),
                    },
                });
                Some(Content::Parts(text.into_iter().chain(images).collect()))
            }
            other => Some(Content::Text(other.unwrap_or(""))),
        };
        Self {
            role: m.role,
            content,
            tool_calls: if m.role == Role::Assistant {
                m.tool_calls.iter().map(WireToolCall::new).collect()
            } else {
                Vec::new()
            },
            tool_call_id: match m.role {
                Role::Tool => m.tool_call_id.as_deref(),
                _ => None,
            },
            name: m.name.as_deref().filter(|n| name_allowed(m.role, n)),
        }
    }
}

impl<'a> WireToolCall<'a> {
    fn new(c: &'a ToolCall) -> Self {
        Self {
            id: &c.id,
            kind: "function",
            function: WireFunctionCall {
                name: &c.name,
                arguments: &c.arguments,
            },
        }
    }
}

/// OpenAI takes a participant `name` on system, user and assistant messages only, and rejects
/// the whole request when it is not `^[a-zA-Z0-9_-]{1,64}$`; such a name is left out.
fn name_allowed(role: Role, name: &str) -> bool {
    role != Role::Tool
        && (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn request(messages: Vec<ChatMessage>, tools: Vec<ToolSchema>, stream: bool) -> ChatRequest {
        ChatRequest {
            model: "gpt-4o".into(),
            messages,
            tools,
            stream,
            max_tokens: None,
            temperature: None,
            prefill: false,
        }
    }

    fn body(req: &ChatRequest) -> Value {
        serde_json::to_value(RequestBody::new(req, req.max_tokens)).unwrap()
    }

    #[test]
    fn plain_request_has_no_optional_fields() {
        let v = body(&request(vec![ChatMessage::user("hi")], vec![], false));
        assert_eq!(
            v,
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": false})
        );
    }

    #[test]
    fn streaming_asks_for_usage_and_options_are_sent() {
        let mut req = request(vec![ChatMessage::user("hi")], vec![], true);
        req.max_tokens = Some(100);
        req.temperature = Some(0.5);
        let v = body(&req);
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"], json!({"include_usage": true}));
        assert_eq!(v["max_tokens"], 100);
        assert_eq!(v["temperature"], 0.5);
    }

    #[test]
    fn tools_and_tool_messages_take_the_openai_shape() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let assistant = ChatMessage {
            content: None,
            tool_calls: vec![call],
            ..ChatMessage::assistant("")
        };
        let result = ChatMessage {
            name: Some("read_file".into()),
            ..ChatMessage::tool_result("call_1", "contents")
        };
        let tool = ToolSchema {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object"}),
        };
        let v = body(&request(vec![assistant, result], vec![tool], false));
        assert_eq!(
            v["messages"][0],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]})
        );
        assert_eq!(
            v["messages"][1],
            json!({"role": "tool", "content": "contents", "tool_call_id": "call_1"})
        );
        assert_eq!(
            v["tools"],
            json!([{"type": "function", "function": {
                "name": "read_file", "description": "Read a file", "parameters": {"type": "object"}}}])
        );
    }

    #[test]
    fn content_is_null_only_where_openai_allows_it() {
        let empty = |role| ChatMessage {
            images: Vec::new(),
            role,
            content: None,
            tool_calls: vec![],
            tool_call_id: None,
            name: None,
        };
        let msgs = vec![
            empty(Role::System),
            empty(Role::User),
            empty(Role::Assistant),
        ];
        let v = body(&request(msgs, vec![], false));
        for m in v["messages"].as_array().unwrap() {
            assert_eq!(m["content"], "", "{m}");
        }
    }

    #[test]
    fn invalid_participant_names_are_left_out() {
        let named = |n: &str| ChatMessage {
            name: Some(n.into()),
            ..ChatMessage::user("x")
        };
        let v = body(&request(
            vec![named("alice_1"), named("Alice Smith")],
            vec![],
            false,
        ));
        assert_eq!(v["messages"][0]["name"], "alice_1");
        assert!(v["messages"][1].get("name").is_none());
    }

    #[test]
    fn a_prefill_continues_the_last_assistant_message_without_its_trailing_space() {
        let msgs = vec![
            ChatMessage::user("Tell me a story"),
            ChatMessage::assistant("Once upon a time, "),
        ];
        let mut req = request(msgs, vec![], true);
        assert!(body(&req).get("continue_final_message").is_none());
        req.prefill = true;
        let v = body(&req);
        assert_eq!(v["continue_final_message"], true);
        assert_eq!(v["add_generation_prompt"], false);
        assert_eq!(v["messages"][1]["content"], "Once upon a time,");
        // A request that does not end with the answer's start is not a prefill.
        req.messages.push(ChatMessage::user("go on"));
        let v = body(&req);
        assert!(v.get("continue_final_message").is_none(), "{v}");
        assert_eq!(v["messages"][1]["content"], "Once upon a time, ");
    }
}
