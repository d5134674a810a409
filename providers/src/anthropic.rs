//! The Anthropic Messages wire: `{base_url}/messages` with `x-api-key` and the API version;
//! a whole message and the event stream read by `response`.
mod body;
mod response;

use crate::client::{HttpProvider, Wire};
use crate::error::ProviderError;
use crate::http::Endpoint;
use crate::provider::DeltaSink;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use std::time::Duration;

/// The API version this client speaks (request shape, event names).
const API_VERSION: &str = "2023-06-01";

/// The client of the Anthropic API.
pub(crate) type AnthropicProvider = HttpProvider<Messages>;

/// Anthropic's Messages API.
pub(crate) struct Messages;

#[async_trait::async_trait]
impl Wire for Messages {
    const PATH: &'static str = "messages";
    const CALL: &'static str = "messages";

    fn request(endpoint: &Endpoint, req: &ChatRequest) -> reqwest::RequestBuilder {
        let builder = endpoint
            .post(
                &RequestBody::new(req, endpoint.output_limit(req.max_tokens)),
                req.stream,
            )
            .header("anthropic-version", API_VERSION);
        match &endpoint.api_key {
            Some(key) => builder.header("x-api-key", key.expose()),
            None => builder,
        }
    }

    fn parse(body: &str, fallback_model: &str) -> Result<ChatResponse, ProviderError> {
        response::parse_message(body, fallback_model)
    }

    async fn read_stream(
        resp: reqwest::Response,
        idle: Duration,
        on_delta: DeltaSink<'_>,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        response::read_stream(resp, idle, on_delta, fallback_model).await
    }
}
