//! An MCP server's tool as a turnkey [`Tool`]: named `SERVER__TOOL`, described and typed by
//! the server, called with `tools/call`, its result content turned into the model's text.
use super::server::Server;
use super::CALL_TIMEOUT;
use crate::{Access, Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Longest tool name providers accept (OpenAI: `^[a-zA-Z0-9_-]{1,64}$`).
const MAX_NAME_CHARS: usize = 64;

pub(super) struct McpTool {
    server: Arc<Server>,
    /// `SERVER__TOOL`, as offered to the model.
    name: String,
    /// The tool's own name on its server.
    remote: String,
    description: String,
    parameters: Value,
    dangerous: bool,
    timeout: Duration,
}

impl McpTool {
    /// The tool as offered, or `None` (with the reason) when its name cannot be offered.
    pub(super) fn new(server: Arc<Server>, tool: rmcp::model::Tool) -> Result<Self, String> {
        let name = offered_name(server.name(), &tool.name)?;
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .map_or_else(
                || format!("Tool {} of the MCP server {}", tool.name, server.name()),
                str::to_owned,
            );
        // Hints from the server decide only whether a person is asked first; a server that
        // does not say it is read-only is treated as one that acts.
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Ok(Self {
            server,
            name,
            remote: tool.name.into_owned(),
            description,
            parameters: Value::Object((*tool.input_schema).clone()),
            dangerous: !read_only,
            timeout: CALL_TIMEOUT,
        })
    }

    async fn send(&self, params: CallToolRequestParams) -> ToolOutput {
        let connection = match self.server.connection().await {
            Ok(c) => c,
            Err(e) => return ToolOutput::error(e),
        };
        match connection.call(self.server.name(), params).await {
            Ok(result) => output_of(result),
            Err(e) => ToolOutput::error(e),
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn dangerous(&self) -> bool {
        self.dangerous
    }
    fn access(&self) -> Access {
        Access::Parallel
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let params = CallToolRequestParams::new(self.remote.clone());
        let params = match args {
            Value::Object(map) => params.with_arguments(map),
            Value::Null => params,
            other => {
                return ToolOutput::error(format!(
                    "the arguments must be a JSON object, not {other}"
                ))
            }
        };
        // Dropping the request (cancel, timeout) tells the server with
        // `notifications/cancelled`.
        tokio::select! {
            () = ctx.cancel.cancelled() => ToolOutput::error(format!(
                "cancelled: the call to MCP server `{}` was abandoned",
                self.server.name()
            )),
            out = tokio::time::timeout(self.timeout, self.send(params)) => out.unwrap_or_else(|_| {
                ToolOutput::error(format!(
                    "MCP server `{}` did not answer within {} s; the call was abandoned",
                    self.server.name(),
                    self.timeout.as_secs()
                ))
            }),
        }
    }
}

/// `SERVER__TOOL`, with characters providers refuse replaced by `_`.
fn offered_name(server: &str, tool: &str) -> Result<String, String> {
    let tool_part: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("{server}{}{tool_part}", super::NAME_SEPARATOR);
    if tool.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "{name:?} is empty or longer than {MAX_NAME_CHARS} characters"
        ));
    }
    Ok(name)
}

/// The model's text of a result: text items joined by newlines, other items described in a
/// line, structured content when there is nothing else; `isError` makes an error result.
fn output_of(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result.content.into_iter().map(describe).collect();
    if parts.is_empty() {
        if let Some(structured) = result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = if parts.is_empty() {
        "(no content)".to_owned()
    } else {
        parts.join("\n")
    };
    if result.is_error == Some(true) {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    }
}

fn describe(block: ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text,
        ContentBlock::Image(i) => format!(
            "[image {}, {} bytes of base64 not shown]",
            i.mime_type,
            i.data.len()
        ),
        ContentBlock::Audio(a) => format!(
            "[audio {}, {} bytes of base64 not shown]",
            a.mime_type,
            a.data.len()
        ),
        ContentBlock::Resource(r) => match r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {uri}, {}, {} bytes of base64 not shown]",
                mime_type.as_deref().unwrap_or("binary"),
                blob.len()
            ),
            _ => "[a resource of a kind this client does not show]".to_owned(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link {}]", link.uri),
        _ => "[content of a kind this client does not show]".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::TextContent;

    #[test]
    fn r9_names_are_server_two_underscores_tool_and_provider_safe() {
        assert_eq!(
            offered_name("time", "get_current_time").unwrap(),
            "time__get_current_time"
        );
        assert_eq!(
            offered_name("fs", "read.file/v2").unwrap(),
            "fs__read_file_v2"
        );
        assert!(offered_name("s", &"x".repeat(70)).is_err());
        assert!(offered_name("s", "").is_err());
    }

    #[test]
    fn r9_text_items_are_joined_and_is_error_makes_an_error_result() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::Text(TextContent::new("one")),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::Text(TextContent::new("two")),
        ]);
        let out = output_of(result.clone());
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "one\n[image image/png, 8 bytes of base64 not shown]\ntwo"
        );
        result.is_error = Some(true);
        assert!(output_of(result).is_error);
        let empty = CallToolResult::success(Vec::new());
        assert_eq!(output_of(empty).content, "(no content)");
    }
}
