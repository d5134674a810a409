//! The Anthropic Messages API client: one HTTP attempt per `chat` to `{base_url}/messages`,
//! classified on failure, and handed to the event-stream or the message parser on success.
mod body;
mod response;

use crate::error::ProviderError;
use crate::http::{self, endpoint, read_body, shared_client};
use crate::provider::{DeltaSink, Provider, ProviderConfig};
use crate::retry::RetryPolicy;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use reqwest::header::ACCEPT;
use response::{parse_message, read_stream};
use std::time::Duration;

/// The API version this client speaks (request shape, event names).
const API_VERSION: &str = "2023-06-01";

pub struct AnthropicProvider {
    name: String,
    model: String,
    context_window: u32,
    endpoint: reqwest::Url,
    api_key: Option<String>,
    request_timeout: Duration,
    idle_timeout: Duration,
    retry: RetryPolicy,
    http: reqwest::Client,
}

impl AnthropicProvider {
    pub fn new(cfg: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            name: cfg.name.clone(),
            model: cfg.model.clone(),
            context_window: cfg.context_window,
            endpoint: endpoint(&cfg.name, &cfg.base_url, "messages")?,
            api_key: cfg.resolved_api_key(),
            request_timeout: Duration::from_secs(cfg.request_timeout_s.max(1)),
            idle_timeout: Duration::from_secs(cfg.stream_idle_timeout_s.max(1)),
            retry: cfg.retry_policy(),
            http: shared_client()?,
        })
    }

    /// Sends the request and waits for the response head (status and headers).
    async fn send(&self, req: &ChatRequest) -> Result<reqwest::Response, ProviderError> {
        let mut builder = self
            .http
            .post(self.endpoint.clone())
            .header("anthropic-version", API_VERSION)
            .json(&RequestBody::new(req));
        builder = if req.stream {
            builder.header(ACCEPT, "text/event-stream")
        } else {
            // The whole exchange, body included; a stream is bounded chunk by chunk instead.
            builder.timeout(self.request_timeout)
        };
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        http::send(builder, self.request_timeout).await
    }

    async fn read_message(
        &self,
        resp: reqwest::Response,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        let body = read_body(resp, self.request_timeout).await?;
        parse_message(&body, fallback_model)
    }
}

#[async_trait::async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn context_window(&self) -> u32 {
        self.context_window
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError> {
        tracing::debug!(provider = %self.name, model = %req.model, stream = req.stream,
            messages = req.messages.len(), tools = req.tools.len(), "messages request");
        let resp = self.send(req).await?;
        http::answer(
            resp,
            req.stream,
            self.idle_timeout,
            on_delta,
            async |r| self.read_message(r, &req.model).await,
            async |r| read_stream(r, self.idle_timeout, on_delta, &req.model).await,
        )
        .await
    }
}
