//! Reading a completion request: the JSON body within its bound, the last user message's text
//! and images, and those images as attachments (fetched first when given by URL).
use super::wire::{ChatRequest, OpenAiError};
use crate::configuration::ClientTools;
use crate::routes::{read_body, reject_privileged_fields};
use crate::state::AppState;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest};
use serde_json::{json, Value};
use std::time::Duration;

/// The body bound of the OpenAI doors: inline images make a body larger than other requests,
/// so room for the largest upload, base64 encoded, beside the usual bound.
pub(crate) fn body_limit(state: &AppState) -> usize {
    let files = &state.gateway.config().files;
    state.max_body_bytes + files.max_upload_bytes / 3 * 4 + 4
}

/// A JSON body as `T` (a declared non-JSON content type is refused) within
/// [`body_limit`]; `what` names the request in the error.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
    what: &str,
) -> Result<T, OpenAiError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
        if !ct.starts_with("application/json") {
            return Err(OpenAiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON with Content-Type: application/json",
            ));
        }
    }
    let raw = read_body(payload, body_limit(state)).await?;
    serde_json::from_slice(&raw).map_err(|e| {
        OpenAiError::invalid(
            "invalid_json",
            format!("the body is not a valid {what}: {e}"),
            None,
        )
    })
}

/// The request's `Idempotency-Key`, trimmed, if not empty, checked against the request-id
/// limits before a session is made for the request (admission checks them all again).
pub(crate) fn idempotency_key(req: &HttpRequest) -> Result<Option<&str>, OpenAiError> {
    let key = crate::routes::submissions::idempotency_header(req)?
        .map(str::trim)
        .filter(|k| !k.is_empty());
    if let Some(k) = key {
        turnkey_actors::limits::request_id(k).map_err(crate::error::ApiError::from)?;
    }
    Ok(key)
}

/// Reads and parses a chat completion request ([`read_json`]): no privileged field, `n` 1,
/// client tools as `openai.client_tools` says.
pub(super) async fn read_request(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<ChatRequest, OpenAiError> {
    let body: ChatRequest = read_json(state, req, payload, "chat completion request").await?;
    reject_privileged_fields(&body.extra)?;
    if body.n.is_some_and(|n| n != 1) {
        return Err(OpenAiError::invalid(
            "unsupported_parameter",
            "n must be 1: a session answers each input once",
            Some("n".into()),
        ));
    }
    let refused = state.client_tools == ClientTools::Refuse;
    for (name, list) in [("tools", &body.tools), ("functions", &body.functions)] {
        if refused && list.as_ref().is_some_and(|l| !l.is_empty()) {
            return Err(OpenAiError::invalid(
                "unsupported_parameter",
                format!(
                    "{name} are not accepted (openai.client_tools = \"refuse\"): the agent's own \
                     tools (tools.enabled) run inside the gateway"
                ),
                Some(name.into()),
            ));
        }
    }
    Ok(body)
}

/// How long an image given by an http(s) URL may take to download.
const IMAGE_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The attachments of the input from its `image_url` parts: a `data:` URL as it is (admission
/// stores it as a file, SPEC R2.2); an http(s) URL downloaded first, the way `web_fetch`
/// fetches (public addresses only unless `tools.fetch_allow` lists the host; at most
/// `server.max_upload_bytes`), then passed on as data. Any other URL, or one that cannot be
/// fetched, is 400 `invalid_attachment`; a too large image 413 `too_large`. Nothing is admitted.
pub(crate) async fn image_attachments(
    state: &AppState,
    urls: &[String],
) -> Result<Vec<Value>, OpenAiError> {
    use base64::Engine as _;
    let config = state.gateway.config();
    let mut out = Vec::with_capacity(urls.len());
    for (i, url) in urls.iter().enumerate() {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let invalid = |why: String| {
            OpenAiError::invalid(
                "invalid_attachment",
                format!("image {i} of the last message: {why}"),
                Some("messages".into()),
            )
        };
        match scheme.as_str() {
            "data" => out.push(json!({ "url": url })),
            "http" | "https" => {
                let limit = config.files.max_upload_bytes;
                let fetched = turnkey_tools::download(
                    &config.tools.fetch_allow,
                    url,
                    limit,
                    IMAGE_FETCH_TIMEOUT,
                )
                .await;
                let (bytes, _declared) = match fetched {
                    Ok(got) => got,
                    Err(turnkey_tools::DownloadError::TooLarge { url, limit }) => {
                        return Err(OpenAiError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "too_large",
                            format!("the image at {url} is larger than {limit} bytes (server.max_upload_bytes)"),
                        ))
                    }
                    Err(e) => return Err(invalid(format!("cannot fetch it: {e}"))),
                };
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                // The type is sniffed again at admission; the one given here only has to parse.
                out.push(json!({ "url": format!("data:application/octet-stream;base64,{data}") }));
            }
            _ => {
                return Err(invalid(format!(
                    "{:?} is neither a data: URL nor an http(s) URL",
                    crate::error::truncated(url, 64)
                )))
            }
        }
    }
    Ok(out)
}

/// The text and image URLs of the last message, which must be the user's.
pub(super) fn last_user_input(body: &ChatRequest) -> Result<(String, Vec<String>), OpenAiError> {
    let Some((i, last)) = body.messages.iter().enumerate().next_back() else {
        return Err(OpenAiError::invalid(
            "empty_input",
            "messages is empty; the last message must be the user's",
            Some("messages".into()),
        ));
    };
    if last.role != "user" {
        return Err(OpenAiError::invalid(
            "invalid_messages",
            format!(
                "the last message must have role \"user\"; got {:?} (only the last user message \
                 is submitted, the session keeps its own history)",
                crate::error::truncated(&last.role, 32)
            ),
            Some(format!("messages[{i}].role")),
        ));
    }
    last.text_and_images(i)
}
