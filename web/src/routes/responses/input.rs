//! Reading a response's `input`: a string, or a list of items. The last user message is the
//! input this response admits; the messages before it are the history a new session starts
//! with (a stateless client resends the whole conversation: nothing in it runs again). Items a
//! server made (`reasoning`, `mcp_call`, `mcp_list_tools`, `mcp_approval_request`) are skipped.
use crate::routes::openai::wire::OpenAiError;
use serde_json::{json, Value};
use turnkey_actors::SeedMessage;
use turnkey_storage::MessageRole;

/// What a request's input holds.
#[derive(Debug, Default, PartialEq)]
pub struct Input {
    /// User and assistant messages before the last user message, in order.
    pub history: Vec<SeedMessage>,
    /// System and developer messages, in order.
    pub system: Vec<String>,
    /// The last user message's text.
    pub text: String,
    /// Its images: `data:`/`https:` URLs, and file ids.
    pub image_urls: Vec<String>,
    pub file_ids: Vec<String>,
    /// The items as `input_items` lists them (each with an `id`; inline image data left out).
    pub items: Vec<Value>,
    /// `mcp_approval_response` items: the approval's id and whether it is approved.
    pub approvals: Vec<(String, bool)>,
}

fn invalid(code: &str, message: String, param: &str) -> OpenAiError {
    OpenAiError::invalid(code, message, Some(param.into()))
}

/// Reads `input` (see the module documentation).
pub fn read(input: Option<&Value>) -> Result<Input, OpenAiError> {
    let list = match input {
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => items.clone(),
        None | Some(Value::Null) => {
            return Err(invalid("empty_input", "input is required".into(), "input"))
        }
        Some(_) => {
            return Err(invalid(
                "invalid_input",
                "input must be a string or a list of items".into(),
                "input",
            ))
        }
    };
    let mut messages = Vec::new();
    let mut out = Input::default();
    for (i, item) in list.iter().enumerate() {
        if item["type"] == "mcp_approval_response" {
            out.approvals.push(approval_response(item, i)?);
            out.items.push(item.clone());
            continue;
        }
        if !is_message(item, i)? {
            continue;
        }
        let role = item["role"].as_str().unwrap_or_default();
        let (text, images, files) = content(&item["content"], i)?;
        out.items
            .push(listed(item, i, &text, images.len() + files.len()));
        match role {
            "system" | "developer" => {
                if !text.trim().is_empty() {
                    out.system.push(text);
                }
            }
            "user" | "assistant" => messages.push((role, text, images, files)),
            other => {
                return Err(invalid(
                    "invalid_input",
                    format!(
                        "input[{i}].role must be user, assistant, system or developer, not {:?}",
                        crate::error::truncated(other, 40)
                    ),
                    "input",
                ))
            }
        }
    }
    if out.approvals.is_empty() || messages.iter().any(|(role, ..)| *role == "user") {
        last_user_message(&mut out, messages)?;
    }
    Ok(out)
}

/// An `mcp_approval_response` item: `{approval_request_id, approve}`.
fn approval_response(item: &Value, i: usize) -> Result<(String, bool), OpenAiError> {
    match (
        item["approval_request_id"].as_str(),
        item["approve"].as_bool(),
    ) {
        (Some(id), Some(approve)) => Ok((id.to_owned(), approve)),
        _ => Err(invalid(
            "invalid_input",
            format!("input[{i}]: mcp_approval_response needs approval_request_id and approve"),
            "input",
        )),
    }
}

/// A user or assistant message of the input: role, text, image URLs, file ids.
type Message<'a> = (&'a str, String, Vec<String>, Vec<String>);

/// Whether `item` is a message (`false`: an item a server made, skipped); other items are
/// refused.
fn is_message(item: &Value, i: usize) -> Result<bool, OpenAiError> {
    let kind = item["type"].as_str().unwrap_or("message");
    match kind {
        "message" => Ok(true),
        "reasoning" | "mcp_call" | "mcp_list_tools" | "mcp_approval_request" => Ok(false),
        "function_call" | "function_call_output" | "item_reference" => Err(invalid(
            "unsupported_content",
            format!("input[{i}]: {kind} items are not accepted yet"),
            "input",
        )),
        other => Err(invalid(
            "unsupported_content",
            format!(
                "input[{i}]: items of type {:?} are not accepted",
                crate::error::truncated(other, 40)
            ),
            "input",
        )),
    }
}

/// Takes the last user message (and the user messages right before it) as the input; the
/// messages before them are the history.
fn last_user_message(out: &mut Input, mut messages: Vec<Message<'_>>) -> Result<(), OpenAiError> {
    let Some(last) = messages.iter().rposition(|(role, ..)| *role == "user") else {
        return Err(invalid(
            "empty_input",
            "input has no user message".into(),
            "input",
        ));
    };
    if last + 1 != messages.len() {
        return Err(invalid(
            "invalid_input",
            "the last message of input must be the user's".into(),
            "input",
        ));
    }
    let (_, text, images, files) = messages.pop().unwrap_or_default();
    // User messages right before it, with no answer between, are one input with it.
    let mut text = text;
    while messages.last().is_some_and(|(role, ..)| *role == "user") {
        let (_, earlier, ..) = messages.pop().unwrap_or_default();
        if !earlier.trim().is_empty() {
            text = format!("{earlier}\n\n{text}");
        }
    }
    out.text = text;
    out.image_urls = images;
    out.file_ids = files;
    out.history = messages
        .into_iter()
        .filter(|(_, t, ..)| !t.trim().is_empty())
        .map(|(role, text, ..)| SeedMessage {
            role: if role == "user" {
                MessageRole::User
            } else {
                MessageRole::Assistant
            },
            text,
        })
        .collect();
    Ok(())
}

/// A message's text, image URLs and file ids.
fn content(c: &Value, i: usize) -> Result<(String, Vec<String>, Vec<String>), OpenAiError> {
    let mut text = Vec::new();
    let mut images = Vec::new();
    let mut files = Vec::new();
    match c {
        Value::String(s) => text.push(s.clone()),
        Value::Array(parts) => {
            for (j, p) in parts.iter().enumerate() {
                match p["type"].as_str().unwrap_or_default() {
                    "input_text" | "output_text" | "text" => {
                        text.push(p["text"].as_str().unwrap_or_default().to_owned());
                    }
                    "refusal" => {}
                    "input_image" => match (p["image_url"].as_str(), p["file_id"].as_str()) {
                        (Some(url), _) => images.push(url.to_owned()),
                        (None, Some(id)) => files.push(id.to_owned()),
                        (None, None) => {
                            return Err(invalid(
                                "invalid_attachment",
                                format!(
                                "input[{i}].content[{j}]: input_image needs image_url or file_id"
                            ),
                                "input",
                            ))
                        }
                    },
                    other => {
                        return Err(invalid(
                            "unsupported_content",
                            format!(
                                "input[{i}].content[{j}]: parts of type {:?} are not accepted",
                                crate::error::truncated(other, 40)
                            ),
                            "input",
                        ))
                    }
                }
            }
        }
        Value::Null => {}
        _ => {
            return Err(invalid(
                "invalid_input",
                format!("input[{i}].content must be a string or a list of parts"),
                "input",
            ))
        }
    }
    Ok((text.join("\n"), images, files))
}

/// An item as `input_items` lists it: its own id or one made from its place, its text.
fn listed(item: &Value, i: usize, text: &str, attached: usize) -> Value {
    let id = item["id"]
        .as_str()
        .map_or_else(|| format!("msg_in_{i}"), str::to_owned);
    let role = item["role"].as_str().unwrap_or("user");
    let kind = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    let mut content = vec![json!({"type": kind, "text": text})];
    if attached > 0 {
        content
            .push(json!({"type": "input_text", "text": format!("[{attached} image(s) attached]")}));
    }
    json!({"id": id, "type": "message", "role": role, "status": "completed", "content": content})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_one_user_message() {
        let got = read(Some(&json!("hello"))).unwrap();
        assert_eq!(got.text, "hello");
        assert!(got.history.is_empty());
        assert_eq!(got.items.len(), 1);
    }

    #[test]
    fn earlier_messages_are_history_and_the_last_user_message_is_the_input() {
        let got = read(Some(&json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "my name is Ada"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi Ada"}]},
            {"type": "reasoning", "summary": []},
            {"role": "user", "content": [{"type": "input_text", "text": "what is my name?"}]},
        ])))
        .unwrap();
        assert_eq!(got.system, vec!["be brief"]);
        assert_eq!(got.text, "what is my name?");
        assert_eq!(
            got.history,
            vec![
                SeedMessage {
                    role: MessageRole::User,
                    text: "my name is Ada".into()
                },
                SeedMessage {
                    role: MessageRole::Assistant,
                    text: "Hi Ada".into()
                },
            ]
        );
    }

    #[test]
    fn an_approval_response_alone_is_an_input_without_a_message() {
        let got = read(Some(&json!([
            {"type": "mcp_approval_response", "approval_request_id": "a1", "approve": false}
        ])))
        .unwrap();
        assert_eq!(got.approvals, vec![("a1".to_owned(), false)]);
        assert!(got.text.is_empty());
    }

    #[test]
    fn user_messages_without_an_answer_between_are_one_input() {
        let got = read(Some(&json!([
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
        ])))
        .unwrap();
        assert_eq!(got.text, "first\n\nsecond");
        assert!(got.history.is_empty());
    }

    #[test]
    fn bad_inputs_are_refused_with_a_code() {
        let code = |v: Value| read(Some(&v)).unwrap_err().body().error.code;
        assert_eq!(code(json!([])), "empty_input");
        assert_eq!(
            code(json!([{"role": "assistant", "content": "hi"}])),
            "empty_input"
        );
        assert_eq!(
            code(json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])),
            "invalid_input"
        );
        assert_eq!(code(json!(42)), "invalid_input");
        assert_eq!(
            code(json!([{"type": "function_call_output", "call_id": "c", "output": "x"}])),
            "unsupported_content"
        );
        assert_eq!(
            code(json!([{"type": "mcp_approval_response", "approve": true}])),
            "invalid_input"
        );
        assert_eq!(
            code(json!([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}])),
            "unsupported_content"
        );
    }
}
