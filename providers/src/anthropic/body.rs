//! The Anthropic Messages request body: a projection of the neutral `ChatRequest` that never
//! changes the transcript it came from (SPEC R8.1), including its prompt-cache breakpoints.
use crate::wire::{ChatMessage, ChatRequest, Role, ToolCall, ToolSchema};
use serde::Serialize;
use serde_json::{json, Value};
use std::borrow::Cow;

/// Anthropic requires `max_tokens`; used when the request sets none.
pub(super) const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Put before a system message that is not the first message (a compression summary, a
/// note): it goes to the model as user-visible text, in its place in the conversation.
const CONTEXT_PREFIX: &str = "[context]";
/// Opens a conversation that would otherwise start with the assistant (Anthropic requires a
/// user message first) or that has no messages at all.
const PLACEHOLDER_USER_TEXT: &str = "(conversation continues)";
/// User messages whose last block gets a cache breakpoint; with the system block that is 3 of
/// the 4 breakpoints Anthropic allows.
const CACHED_USER_TURNS: usize = 2;

#[derive(Serialize)]
pub(super) struct RequestBody<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum WireRole {
    User,
    Assistant,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: WireRole,
    content: Vec<Block<'a>>,
}

#[derive(Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

/// An image block's inline source.
#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

impl Block<'_> {
    fn mark_cached(&mut self) {
        let (Self::Text { cache_control, .. }
        | Self::ToolUse { cache_control, .. }
        | Self::ToolResult { cache_control, .. }
        | Self::Image { cache_control, .. }) = self;
        *cache_control = Some(EPHEMERAL);
    }

    fn is_tool_result(&self) -> bool {
        matches!(self, Self::ToolResult { .. })
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: Cow<'a, Value>,
}

impl<'a> RequestBody<'a> {
    /// `max_tokens` is the request's output limit as the provider's configuration settles it.
    pub(super) fn new(req: &'a ChatRequest, max_tokens: Option<u32>) -> Self {
        let (system_prompt, rest) = match req.messages.split_first() {
            Some((first, rest)) if first.role == Role::System => (Some(first), rest),
            _ => (None, req.messages.as_slice()),
        };
        let mut system: Vec<Block<'a>> = system_prompt
            .and_then(|m| non_empty(m.content.as_deref()))
            .map(|text| text_block(Cow::Borrowed(text)))
            .into_iter()
            .collect();
        let mut messages = alternate(rest.iter().map(convert));
        trim_final_assistant_text(&mut messages);
        mark_cache_breakpoints(&mut system, &mut messages);
        Self {
            model: &req.model,
            max_tokens: max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            system,
            messages,
            tools: req.tools.iter().map(WireTool::new).collect(),
            stream: req.stream,
            // Anthropic accepts 0..=1 where OpenAI accepts 0..=2; out of range is a 400.
            temperature: req.temperature.map(|t| t.clamp(0.0, 1.0)),
        }
    }
}

impl<'a> WireTool<'a> {
    fn new(t: &'a ToolSchema) -> Self {
        // Anthropic insists on an object schema; a tool without parameters gets an empty one.
        let input_schema = if t.parameters.is_object() {
            Cow::Borrowed(&t.parameters)
        } else {
            Cow::Owned(json!({"type": "object", "properties": {}}))
        };
        Self {
            name: &t.name,
            description: &t.description,
            input_schema,
        }
    }
}

fn text_block(text: Cow<'_, str>) -> Block<'_> {
    Block::Text {
        text,
        cache_control: None,
    }
}

/// Anthropic rejects empty text blocks, so empty text is left out rather than sent.
fn non_empty(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !t.trim().is_empty())
}

/// One neutral message as a role and its blocks (possibly none).
fn convert(m: &ChatMessage) -> (WireRole, Vec<Block<'_>>) {
    match m.role {
        Role::User => (
            WireRole::User,
            // Images first, then the text about them (Anthropic's advice).
            m.images
                .iter()
                .map(|i| Block::Image {
                    source: ImageSource {
                        kind: "base64",
                        media_type: &i.media_type,
                        data: &i.base64,
                    },
                    cache_control: None,
                })
                .chain(non_empty(m.content.as_deref()).map(|t| text_block(Cow::Borrowed(t))))
                .collect(),
        ),
        Role::System => (
            WireRole::User,
            non_empty(m.content.as_deref())
                .map(|t| text_block(Cow::Owned(format!("{CONTEXT_PREFIX} {t}"))))
                .into_iter()
                .collect(),
        ),
        Role::Assistant => {
            let text = non_empty(m.content.as_deref()).map(|t| text_block(Cow::Borrowed(t)));
            let calls = m.tool_calls.iter().map(tool_use);
            (WireRole::Assistant, text.into_iter().chain(calls).collect())
        }
        Role::Tool => (
            WireRole::User,
            vec![Block::ToolResult {
                tool_use_id: m.tool_call_id.as_deref().unwrap_or(""),
                content: non_empty(m.content.as_deref()),
                cache_control: None,
            }],
        ),
    }
}

/// A tool call as a `tool_use` block. Anthropic takes the input as a JSON object, while the
/// transcript keeps the model's raw text, which may not parse (or parse to a non-object).
/// Such a call is sent with `{}`: the request stays valid, the transcript keeps the raw
/// text, and the call's own tool result already tells the model its arguments were invalid.
fn tool_use(c: &ToolCall) -> Block<'_> {
    let input = match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            tracing::debug!(call = %c.id, tool = %c.name, "tool call arguments are not a JSON object; sent as {{}}");
            json!({})
        }
    };
    Block::ToolUse {
        id: &c.id,
        name: &c.name,
        input,
        cache_control: None,
    }
}

/// Merges consecutive same-role messages, drops empty ones, and opens with a user message, so
/// roles strictly alternate as Anthropic requires. In a merged user message the tool results
/// go first: Anthropic wants them right after the assistant's `tool_use` blocks.
fn alternate<'a>(
    converted: impl Iterator<Item = (WireRole, Vec<Block<'a>>)>,
) -> Vec<WireMessage<'a>> {
    let mut out: Vec<WireMessage<'a>> = Vec::new();
    for (role, blocks) in converted {
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    if out.first().is_none_or(|m| m.role != WireRole::User) {
        out.insert(
            0,
            WireMessage {
                role: WireRole::User,
                content: vec![text_block(Cow::Borrowed(PLACEHOLDER_USER_TEXT))],
            },
        );
    }
    for m in out.iter_mut().filter(|m| m.role == WireRole::User) {
        // A stable sort: results keep their order, and so does the text after them.
        m.content.sort_by_key(|b| !b.is_tool_result());
    }
    out
}

/// A request ending with an assistant message asks the model to continue it (a prefill,
/// `ChatRequest::prefill`); Anthropic refuses one whose text ends in whitespace, and the model
/// writes the space its next word needs itself.
fn trim_final_assistant_text(messages: &mut Vec<WireMessage<'_>>) {
    let Some(last) = messages
        .last_mut()
        .filter(|m| m.role == WireRole::Assistant)
    else {
        return;
    };
    if let Some(Block::Text { text, .. }) = last.content.last_mut() {
        let trimmed = text.trim_end();
        if trimmed.len() != text.len() {
            *text = Cow::Owned(trimmed.to_owned());
        }
        if text.is_empty() {
            last.content.pop();
        }
    }
    if last.content.is_empty() {
        messages.pop();
    }
}

/// Breakpoints (SPEC R8.1: only the projection changes): the system prompt, and the last block
/// of each of the last two user messages, so a turn reads back the prefix the previous
/// request wrote.
fn mark_cache_breakpoints(system: &mut [Block<'_>], messages: &mut [WireMessage<'_>]) {
    if let Some(last) = system.last_mut() {
        last.mark_cached();
    }
    messages
        .iter_mut()
        .rev()
        .filter(|m| m.role == WireRole::User)
        .take(CACHED_USER_TURNS)
        .filter_map(|m| m.content.last_mut())
        .for_each(Block::mark_cached);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            model: "claude-sonnet-4-5".into(),
            messages,
            tools: vec![],
            stream: true,
            max_tokens: None,
            temperature: None,
            prefill: false,
        }
    }

    fn body(req: &ChatRequest) -> Value {
        serde_json::to_value(RequestBody::new(req, req.max_tokens)).unwrap()
    }

    fn roles(v: &Value) -> Vec<&str> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect()
    }

    fn calling(text: Option<&str>, calls: &[(&str, &str)]) -> ChatMessage {
        ChatMessage {
            content: text.map(str::to_owned),
            tool_calls: calls
                .iter()
                .map(|(id, args)| ToolCall {
                    id: (*id).into(),
                    name: "read_file".into(),
                    arguments: (*args).into(),
                })
                .collect(),
            ..ChatMessage::assistant("")
        }
    }

    fn cache_markers(v: &Value) -> usize {
        v.to_string().matches("\"cache_control\"").count()
    }

    #[test]
    fn a_plain_request_has_the_system_prompt_max_tokens_and_markers() {
        let v = body(&request(vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("hi"),
        ]));
        assert_eq!(
            v,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}],
                "stream": true
            })
        );
    }

    #[test]
    fn max_tokens_and_temperature_are_passed_within_anthropic_ranges() {
        let mut req = request(vec![ChatMessage::user("hi")]);
        req.max_tokens = Some(64);
        req.temperature = Some(1.5);
        req.stream = false;
        let v = body(&req);
        assert_eq!(v["max_tokens"], 64);
        assert_eq!(v["temperature"], 1.0);
        assert_eq!(v["stream"], false);
        assert!(v.get("system").is_none());
        assert!(v.get("tools").is_none());
    }

    #[test]
    fn tool_calls_become_tool_use_and_results_one_user_message() {
        let v = body(&request(vec![
            ChatMessage::system("s"),
            ChatMessage::user("read both"),
            calling(Some("Reading."), &[("c1", r#"{"path":"a"}"#), ("c2", "")]),
            ChatMessage::tool_result("c1", "A"),
            ChatMessage::tool_result("c2", ""),
            ChatMessage::assistant("Done."),
        ]));
        assert_eq!(roles(&v), ["user", "assistant", "user", "assistant"]);
        assert_eq!(
            v["messages"][1]["content"],
            json!([
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "c2", "name": "read_file", "input": {}}
            ])
        );
        assert_eq!(
            v["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "c1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "c2", "cache_control": {"type": "ephemeral"}}
            ])
        );
    }

    #[test]
    fn unparseable_or_non_object_arguments_are_sent_as_an_empty_object() {
        let req = request(vec![
            ChatMessage::user("go"),
            calling(None, &[("c1", "{\"path\": \"a"), ("c2", "[1,2]")]),
            ChatMessage::tool_result("c1", "error: arguments are not valid JSON"),
            ChatMessage::tool_result("c2", "error: arguments are not an object"),
        ]);
        let v = body(&req);
        assert_eq!(v["messages"][1]["content"][0]["input"], json!({}));
        assert_eq!(v["messages"][1]["content"][1]["input"], json!({}));
        // The transcript keeps what the model said.
        assert_eq!(req.messages[1].tool_calls[0].arguments, "{\"path\": \"a");
    }

    #[test]
    fn roles_alternate_and_a_user_message_comes_first() {
        let v = body(&request(vec![
            ChatMessage::system("s"),
            ChatMessage::assistant("left over"),
            ChatMessage::user("one"),
            ChatMessage::user("two"),
            ChatMessage::assistant("a"),
            ChatMessage::assistant(""),
            ChatMessage::assistant("b"),
            ChatMessage::user("   "),
        ]));
        assert_eq!(roles(&v), ["user", "assistant", "user", "assistant"]);
        assert_eq!(
            v["messages"][0]["content"][0]["text"],
            PLACEHOLDER_USER_TEXT
        );
        let texts = |i: usize| -> Vec<String> {
            v["messages"][i]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["text"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(texts(2), ["one", "two"]);
        assert_eq!(texts(3), ["a", "b"]);
        let empty = body(&request(vec![]));
        assert_eq!(roles(&empty), ["user"]);
    }

    #[test]
    fn a_later_system_message_is_user_visible_context_in_its_place() {
        let v = body(&request(vec![
            ChatMessage::system("prompt"),
            ChatMessage::system("Summary of earlier turns: X."),
            ChatMessage::user("and now?"),
            ChatMessage::assistant("ok"),
            ChatMessage::system("note"),
        ]));
        assert_eq!(v["system"].as_array().unwrap().len(), 1);
        assert_eq!(v["system"][0]["text"], "prompt");
        assert_eq!(roles(&v), ["user", "assistant", "user"]);
        assert_eq!(
            v["messages"][0]["content"][0]["text"],
            "[context] Summary of earlier turns: X."
        );
        assert_eq!(v["messages"][0]["content"][1]["text"], "and now?");
        assert_eq!(v["messages"][2]["content"][0]["text"], "[context] note");
        // Without a leading system prompt, no system field at all.
        let v = body(&request(vec![
            ChatMessage::user("hi"),
            ChatMessage::system("s"),
        ]));
        assert!(v.get("system").is_none());
        assert_eq!(roles(&v), ["user"]);
    }

    #[test]
    fn tool_results_come_first_in_a_merged_user_message() {
        let v = body(&request(vec![
            ChatMessage::user("go"),
            calling(None, &[("c1", "{}")]),
            ChatMessage::system("summary"),
            ChatMessage::tool_result("c1", "R"),
            ChatMessage::user("also this"),
        ]));
        let kinds: Vec<&str> = v["messages"][2]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["tool_result", "text", "text"]);
        assert_eq!(v["messages"][2]["content"][1]["text"], "[context] summary");
    }

    #[test]
    fn cache_markers_sit_on_the_system_and_the_last_two_user_messages() {
        let v = body(&request(vec![
            ChatMessage::system("s"),
            ChatMessage::user("u1"),
            ChatMessage::assistant("a1"),
            ChatMessage::user("u2"),
            calling(None, &[("c1", "{}")]),
            ChatMessage::tool_result("c1", "r1"),
            ChatMessage::user("u3"),
            ChatMessage::assistant("a3"),
        ]));
        assert_eq!(cache_markers(&v), 3);
        let marked = |m: usize, b: usize| {
            v["messages"][m]["content"][b]
                .get("cache_control")
                .is_some()
        };
        assert!(v["system"][0].get("cache_control").is_some());
        assert!(!marked(0, 0), "u1 is the third user message from the end");
        assert!(marked(2, 0), "u2");
        assert!(!marked(4, 0), "tool result is not the last block");
        assert!(marked(4, 1), "u3 after the tool result");
        // A short conversation gets fewer, never more than four.
        let short = body(&request(vec![ChatMessage::user("hi")]));
        assert_eq!(cache_markers(&short), 1);
    }

    #[test]
    fn tools_take_the_anthropic_shape() {
        let mut req = request(vec![ChatMessage::user("hi")]);
        req.tools = vec![
            ToolSchema {
                name: "read_file".into(),
                description: "Read a file".into(),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            },
            ToolSchema {
                name: "now".into(),
                description: "The time".into(),
                parameters: Value::Null,
            },
        ];
        let v = body(&req);
        assert_eq!(
            v["tools"],
            json!([
                {"name": "read_file", "description": "Read a file",
                 "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "now", "description": "The time",
                 "input_schema": {"type": "object", "properties": {}}}
            ])
        );
    }

    #[test]
    fn a_final_assistant_text_is_sent_without_trailing_whitespace() {
        let v = body(&request(vec![
            ChatMessage::user("Tell me a story"),
            ChatMessage::assistant("Once upon a time, "),
        ]));
        let last = v["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["role"], "assistant");
        assert_eq!(last["content"][0]["text"], "Once upon a time,");
    }
}
