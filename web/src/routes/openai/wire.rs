//! The OpenAI Chat Completions shapes the endpoint reads and writes: the request body, the
//! `chat.completion` answer, `chat.completion.chunk` frames, and errors in OpenAI's shape
//! `{"error": {message, type, param, code}}` with turnkey's stable code as `code`.
use crate::error::ApiError;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::fmt;
use utoipa::ToSchema;

/// Tells the official SDKs not to retry by themselves: the input was admitted and its turn
/// ran, so a retry without the same `Idempotency-Key` would be a new input.
const SHOULD_RETRY: &str = "x-should-retry";

/// An OpenAI Chat Completions request. Only the last message, the user's, is submitted; the
/// session keeps its own history. Sampling parameters (`temperature`, `max_tokens`, …) are
/// accepted and not used.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = ChatCompletionRequest)]
pub struct ChatRequest {
    /// Any name is accepted; a configured provider's model selects that model for the turn.
    pub model: Option<String>,
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    /// Keys the session: one session per caller and `user`.
    pub user: Option<String>,
    /// 1 only (`400 unsupported_parameter` otherwise).
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<u64>,
    /// The client's own tools: ignored (the agent's own tools run inside the gateway), or
    /// `400 unsupported_parameter` with `openai.client_tools = "refuse"`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    /// As `tools`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub functions: Option<Vec<Value>>,
    /// Sampling and other parameters: accepted and not used (the gateway's provider
    /// configuration decides), checked for privileged fields.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk with `choices: []` and `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = ChatCompletionMessage)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool`; the last one must be `user`.
    #[schema(example = "user")]
    pub role: String,
    /// A string, or an array of `{type: "text", text}` parts and, in the last user message,
    /// `{type: "image_url", image_url: {url}}` parts (a `data:` or http(s) URL).
    #[serde(default)]
    #[schema(value_type = Value)]
    pub content: Value,
}

impl ChatMessage {
    /// The message's text: a string, or the text parts of a content array joined. Any other
    /// part is refused rather than silently dropped.
    pub fn text(&self, index: usize) -> Result<String, OpenAiError> {
        let (text, images) = self.text_and_images(index)?;
        match images.first() {
            None => Ok(text),
            Some(_) => Err(unsupported(
                index,
                "content has an image_url part",
                "only the last user message may carry images",
            )),
        }
    }

    /// The message's text and the URLs of its `image_url` parts (`{type: "image_url",
    /// image_url: {url, detail?}}`, or `image_url` as the bare URL string), in order. Other
    /// parts (audio, files) are refused rather than silently dropped.
    pub fn text_and_images(&self, index: usize) -> Result<(String, Vec<String>), OpenAiError> {
        match &self.content {
            Value::String(s) => Ok((s.clone(), Vec::new())),
            Value::Null => Ok((String::new(), Vec::new())),
            Value::Array(parts) => {
                let mut text = Vec::with_capacity(parts.len());
                let mut images = Vec::new();
                for (i, p) in parts.iter().enumerate() {
                    match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("text"), Some(t)) => text.push(t),
                        (Some("image_url"), _) => {
                            let url = p["image_url"]["url"]
                                .as_str()
                                .or(p["image_url"].as_str())
                                .ok_or_else(|| {
                                    OpenAiError::invalid(
                                        "invalid_json",
                                        format!("messages[{index}].content[{i}].image_url.url must be a string"),
                                        Some(format!("messages[{index}].content")),
                                    )
                                })?;
                            images.push(url.to_owned());
                        }
                        (kind, _) => {
                            return Err(unsupported(
                                index,
                                &format!("content[{i}] is of type {}", kind.unwrap_or("(none)")),
                                "only text and image_url parts are accepted",
                            ))
                        }
                    }
                }
                Ok((text.join("\n"), images))
            }
            _ => Err(OpenAiError::invalid(
                "invalid_json",
                format!("messages[{index}].content must be a string or an array of parts"),
                Some(format!("messages[{index}].content")),
            )),
        }
    }
}

fn unsupported(index: usize, what: &str, rule: &str) -> OpenAiError {
    OpenAiError::invalid(
        "unsupported_content",
        format!("messages[{index}].{what}; {rule}"),
        Some(format!("messages[{index}].content")),
    )
}

/// The body of an error on the OpenAI-compatible routes.
#[derive(Debug, Serialize, ToSchema)]
pub struct OpenAiErrorBody {
    pub error: OpenAiErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OpenAiErrorDetail {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `permission_error`,
    /// `rate_limit_error` or `api_error`.
    #[serde(rename = "type")]
    #[schema(example = "invalid_request_error")]
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// turnkey's stable code (API.md "Error codes"), or a failed turn's `failure_reason`.
    #[schema(example = "invalid_messages")]
    pub code: String,
}

/// An error in OpenAI's shape.
#[derive(Debug)]
pub struct OpenAiError {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    pub retry_after: Option<u64>,
    /// The input was admitted: the SDK must not retry on its own.
    pub admitted: bool,
    /// `X-Turnkey-Session`, once the session is known.
    pub session: Option<String>,
}

impl OpenAiError {
    pub fn new(status: StatusCode, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            param: None,
            retry_after: None,
            admitted: false,
            session: None,
        }
    }

    pub fn invalid(code: &str, message: impl Into<String>, param: Option<String>) -> Self {
        Self {
            param,
            ..Self::new(StatusCode::BAD_REQUEST, code, message)
        }
    }

    pub fn in_session(mut self, session: impl fmt::Display) -> Self {
        self.session = Some(session.to_string());
        self
    }

    /// OpenAI's `type` for a status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 404 | 405 | 409 | 413 | 415 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            429 => "rate_limit_error",
            _ => "api_error",
        }
    }

    pub fn body(&self) -> OpenAiErrorBody {
        OpenAiErrorBody {
            error: OpenAiErrorDetail {
                message: self.message.clone(),
                kind: self.kind(),
                param: self.param.clone(),
                code: self.code.clone(),
            },
        }
    }

    /// The error as one SSE frame, for a stream that already began.
    pub fn frame(&self) -> Bytes {
        Bytes::from(format!("data: {}\n\n", json!(self.body())))
    }
}

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        Self {
            retry_after: e.retry_after,
            ..Self::new(e.status, e.code, e.message)
        }
    }
}

impl fmt::Display for OpenAiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl ResponseError for OpenAiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            res.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        if let Some(s) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, s.to_string()));
        }
        if self.admitted {
            res.insert_header((SHOULD_RETRY, "false"));
        }
        if let Some(s) = &self.session {
            res.insert_header((super::SESSION_HEADER, s.as_str()));
        }
        res.json(self.body())
    }
}

/// What every answer and chunk of one completion shares.
#[derive(Clone, Debug)]
pub struct Completion {
    pub id: String,
    pub created: i64,
    pub model: String,
}

/// OpenAI's `usage`.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[schema(as = CompletionUsage)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

pub fn usage(prompt: u64, completion: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
    }
}

/// The non-streamed answer: `chat.completion`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-ADMISSION_ID`.
    pub id: String,
    #[schema(example = "chat.completion")]
    pub object: &'static str,
    /// Unix seconds.
    pub created: i64,
    /// The model that ran.
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    /// Always `null`.
    #[schema(value_type = Option<Object>)]
    pub logprobs: Option<Value>,
    /// `stop`, or `length` for a turn that ran out of its iteration budget.
    #[schema(example = "stop")]
    pub finish_reason: &'static str,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AssistantMessage {
    #[schema(example = "assistant")]
    pub role: &'static str,
    /// The turn's authoritative final answer.
    pub content: String,
    /// Always `null`.
    pub refusal: Option<String>,
}

impl Completion {
    /// The non-streamed answer.
    pub fn answer(&self, text: &str, finish_reason: &'static str, usage: Usage) -> ChatCompletion {
        ChatCompletion {
            id: self.id.clone(),
            object: "chat.completion",
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: text.to_owned(),
                    refusal: None,
                },
                logprobs: None,
                finish_reason,
            }],
            usage,
        }
    }

    /// One `chat.completion.chunk` frame with `delta` and `finish_reason`.
    pub fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        self.frame(
            json!([{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }]),
            None,
        )
    }

    /// The last chunk when `stream_options.include_usage`: no choices, the usage.
    pub fn usage_chunk(&self, usage: Usage) -> Bytes {
        self.frame(json!([]), Some(usage))
    }

    fn frame(&self, choices: Value, usage: Option<Usage>) -> Bytes {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(u) = usage {
            c["usage"] = json!(u);
        }
        Bytes::from(format!("data: {c}\n\n"))
    }
}

/// The end of a stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";
