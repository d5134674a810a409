//! The OpenAI Chat Completions wire (any compatible server): `{base_url}/chat/completions`
//! with a bearer key; a whole answer read by `completion`, a stream by `stream`.
mod body;
mod completion;
mod stream;

use crate::client::{HttpProvider, Wire};
use crate::error::ProviderError;
use crate::http::Endpoint;
use crate::provider::DeltaSink;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use std::time::Duration;

/// The client of an OpenAI-compatible server.
pub(crate) type OpenAiProvider = HttpProvider<ChatCompletions>;

/// OpenAI's Chat Completions.
pub(crate) struct ChatCompletions;

#[async_trait::async_trait]
impl Wire for ChatCompletions {
    const PATH: &'static str = "chat/completions";
    const CALL: &'static str = "chat completion";

    fn request(endpoint: &Endpoint, req: &ChatRequest) -> reqwest::RequestBuilder {
        let builder = endpoint.post(
            &RequestBody::new(req, endpoint.output_limit(req.max_tokens)),
            req.stream,
        );
        match &endpoint.api_key {
            Some(key) => builder.bearer_auth(key.expose()),
            None => builder,
        }
    }

    fn parse(body: &str, fallback_model: &str) -> Result<ChatResponse, ProviderError> {
        completion::parse_completion(body, fallback_model)
    }

    async fn read_stream(
        resp: reqwest::Response,
        idle: Duration,
        on_delta: DeltaSink<'_>,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        stream::read_stream(resp, idle, on_delta, fallback_model).await
    }
}
