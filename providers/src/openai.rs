//! The OpenAI Chat Completions client (any compatible server): one HTTP attempt per `chat`,
//! classified on failure, and handed to the stream or the completion parser on success.
mod body;
mod completion;
mod stream;

use crate::error::ProviderError;
use crate::http::{self, endpoint, read_body, shared_client};
use crate::provider::{DeltaSink, Provider, ProviderConfig};
use crate::retry::RetryPolicy;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use completion::parse_completion;
use reqwest::header::ACCEPT;
use std::time::Duration;
use stream::read_stream;

pub struct OpenAiProvider {
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

impl OpenAiProvider {
    pub fn new(cfg: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            name: cfg.name.clone(),
            model: cfg.model.clone(),
            context_window: cfg.context_window,
            endpoint: endpoint(&cfg.name, &cfg.base_url, "chat/completions")?,
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
            .json(&RequestBody::new(req));
        builder = if req.stream {
            builder.header(ACCEPT, "text/event-stream")
        } else {
            // The whole exchange, body included; a stream is bounded chunk by chunk instead.
            builder.timeout(self.request_timeout)
        };
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        http::send(builder, self.request_timeout).await
    }

    async fn read_completion(
        &self,
        resp: reqwest::Response,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        let body = read_body(resp, self.request_timeout).await?;
        parse_completion(&body, fallback_model)
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiProvider {
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
            messages = req.messages.len(), tools = req.tools.len(), "chat completion request");
        let resp = self.send(req).await?;
        http::answer(
            resp,
            req.stream,
            self.idle_timeout,
            on_delta,
            async |r| self.read_completion(r, &req.model).await,
            async |r| read_stream(r, self.idle_timeout, on_delta, &req.model).await,
        )
        .await
    }
}
