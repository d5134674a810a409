//! The Anthropic Messages API client: one HTTP attempt per `chat` to `{base_url}/messages`,
//! classified on failure, and handed to the event-stream or the message parser on success.
mod body;
mod response;

use crate::error::ProviderError;
use crate::http::{self, Endpoint};
use crate::provider::{DeltaSink, Provider, ProviderConfig};
use crate::retry::RetryPolicy;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use response::{parse_message, read_stream};

/// The API version this client speaks (request shape, event names).
const API_VERSION: &str = "2023-06-01";

pub struct AnthropicProvider {
    endpoint: Endpoint,
}

impl AnthropicProvider {
    pub fn new(cfg: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            endpoint: Endpoint::new(cfg, "messages")?,
        })
    }

    /// Sends the request and waits for the response head (status and headers).
    async fn send(&self, req: &ChatRequest) -> Result<reqwest::Response, ProviderError> {
        let mut builder = self
            .endpoint
            .post(
                &RequestBody::new(req, self.endpoint.output_limit(req.max_tokens)),
                req.stream,
            )
            .header("anthropic-version", API_VERSION);
        if let Some(key) = &self.endpoint.api_key {
            builder = builder.header("x-api-key", key.expose());
        }
        self.endpoint.send(builder).await
    }

    async fn read_message(
        &self,
        resp: reqwest::Response,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        let body = self.endpoint.read_body(resp).await?;
        parse_message(&body, fallback_model)
    }
}

#[async_trait::async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn model(&self) -> &str {
        &self.endpoint.model
    }

    fn context_window(&self) -> u32 {
        self.endpoint.context_window
    }

    fn sees_images(&self) -> bool {
        self.endpoint.vision
    }

    fn prefills(&self) -> bool {
        self.endpoint.prefill
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.endpoint.retry
    }

    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        tracing::debug!(provider = %self.endpoint.name, model = %req.model, stream = req.stream,
            messages = req.messages.len(), tools = req.tools.len(), "messages request");
        let resp = self.send(req).await?;
        http::answer(
            resp,
            req.stream,
            self.endpoint.idle_timeout,
            on_delta,
            async |r| self.read_message(r, &req.model).await,
            async |r| read_stream(r, self.endpoint.idle_timeout, on_delta, &req.model).await,
        )
        .await
    }
}
