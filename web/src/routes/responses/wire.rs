//! The shapes of the Responses API on the wire, as OpenAI's reference and the official SDK
//! read them: the create request, the Response object, its output items and the stream's
//! events. Items and events are JSON values built here, in one place.
use crate::routes::openai::wire::OpenAiError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use turnkey_storage::AdmissionId;
use utoipa::ToSchema;

/// The prefix of a response id; the rest is its admission's id.
pub const ID_PREFIX: &str = "resp_";
/// The `server_label` of the tools the agent runs itself.
pub const SERVER_LABEL: &str = "turnkey";

/// `POST /v1/responses`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[schema(as = CreateResponse)]
pub struct CreateResponse {
    /// A string (one user message) or a list of input items: messages (`role` user,
    /// assistant, system or developer; `content` a string or `input_text`, `output_text` and
    /// `input_image` parts). The last user message is this response's input; earlier ones
    /// start a new session's history.
    #[schema(value_type = Object)]
    pub input: Option<Value>,
    /// A model `GET /v1/models` lists runs this response; any other name keeps the session's.
    pub model: Option<String>,
    /// Instructions for this response only, after the session's system prompt.
    pub instructions: Option<String>,
    /// Continues that response's session.
    pub previous_response_id: Option<String>,
    /// A turnkey session id (or `{id}`) to continue.
    #[schema(value_type = Option<Object>)]
    pub conversation: Option<Value>,
    /// Server-sent events as the response is made.
    pub stream: Option<bool>,
    /// Answer at once; the response is made with nobody connected.
    pub background: Option<bool>,
    /// Accepted either way: every response is stored durably (it is an admission).
    pub store: Option<bool>,
    /// Client tools: not offered yet (`unsupported_parameter`).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<Value>>,
    #[schema(value_type = Option<Object>)]
    pub tool_choice: Option<Value>,
    /// Up to 16 string pairs, returned with the response.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// The output limit of each model call; a cut answer is `incomplete`.
    pub max_output_tokens: Option<u32>,
    /// Other fields (`temperature`, `top_p`, `text`, `reasoning`, `user`, …) are accepted and
    /// not used; one naming a right is refused (`forbidden_field`).
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// The Response object (OpenAI's shape; only the fields below are produced).
#[derive(Clone, Debug, Serialize, ToSchema)]
#[schema(as = Response)]
pub struct ResponseObject {
    /// `resp_` and the admission's id.
    pub id: String,
    #[schema(example = "response")]
    pub object: &'static str,
    /// Seconds since the epoch.
    pub created_at: i64,
    /// `queued`, `in_progress`, `completed`, `failed`, `cancelled` or `incomplete`.
    pub status: &'static str,
    pub model: String,
    /// `message`, `mcp_call` and `mcp_approval_request` items, in the order the turn made them.
    #[schema(value_type = Vec<Object>)]
    pub output: Vec<Value>,
    pub previous_response_id: Option<String>,
    /// The turnkey session.
    #[schema(value_type = Object)]
    pub conversation: Value,
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
    /// `{code, message}` when `failed`.
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// `{reason: "max_output_tokens"}` when `incomplete`.
    #[schema(value_type = Option<Object>)]
    pub incomplete_details: Option<Value>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub background: bool,
    pub store: bool,
    pub parallel_tool_calls: bool,
    #[schema(value_type = Object)]
    pub tool_choice: Value,
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
    #[schema(value_type = Object)]
    pub text: Value,
    pub truncation: &'static str,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

/// `DELETE /v1/responses/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    pub id: String,
    #[schema(example = "response")]
    pub object: &'static str,
    pub deleted: bool,
}

/// `GET /v1/responses/{id}/input_items`.
#[derive(Debug, Serialize, ToSchema)]
pub struct InputItems {
    #[schema(example = "list")]
    pub object: &'static str,
    #[schema(value_type = Vec<Object>)]
    pub data: Vec<Value>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

/// The id of the response of `admission`.
pub fn response_id(admission: AdmissionId) -> String {
    format!("{ID_PREFIX}{admission}")
}

/// The admission a response id names; anything else is no response (404, like a missing one).
pub fn parse_response_id(id: &str) -> Result<AdmissionId, OpenAiError> {
    id.strip_prefix(ID_PREFIX)
        .and_then(|rest| rest.parse().ok())
        .ok_or_else(|| not_found(id))
}

pub fn not_found(id: &str) -> OpenAiError {
    OpenAiError::new(
        actix_web::http::StatusCode::NOT_FOUND,
        "not_found",
        format!("no response {:?}", crate::error::truncated(id, 80)),
    )
}

/// A `message` item of the assistant.
pub fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content = match text {
        Some(t) => json!([output_text(t)]),
        None => json!([]),
    };
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

/// An `output_text` content part.
pub fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// An `mcp_call` item: a tool the agent ran itself.
pub fn mcp_call(
    call_id: &str,
    name: &str,
    arguments: &str,
    status: &str,
    output: Option<&str>,
    error: Option<&str>,
) -> Value {
    json!({
        "id": format!("mcp_{call_id}"),
        "type": "mcp_call",
        "server_label": SERVER_LABEL,
        "name": name,
        "arguments": arguments,
        "status": status,
        "output": output,
        "error": error,
    })
}

/// An `mcp_approval_request` item: a tool call waiting for a person.
pub fn approval_request(approval_id: &str, name: &str, arguments: &str) -> Value {
    json!({
        "id": approval_id,
        "type": "mcp_approval_request",
        "server_label": SERVER_LABEL,
        "name": name,
        "arguments": arguments,
    })
}

/// The usage object from a turn's token counts.
pub fn usage(input: u64, output: u64, cached: u64) -> Value {
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output,
    })
}
