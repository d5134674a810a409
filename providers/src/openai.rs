//! The OpenAI Chat Completions client (any compatible server): one HTTP attempt per `chat`,
//! classified on failure, and handed to the stream or the completion parser on success.
mod body;
mod completion;
mod stream;

use crate::error::ProviderError;
use crate::http::{self, Endpoint};
use crate::provider::{DeltaSink, Provider, ProviderConfig};
use crate::retry::RetryPolicy;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use completion::parse_completion;
use stream::read_stream;

pub struct OpenAiProvider {
    endpoint: Endpoint,
}

impl OpenAiProvider {
    pub fn new(cfg: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            endpoint: Endpoint::new(cfg, "chat/completions")?,
        })
    }

    /// Sends the request and waits for the response head (status and headers).
    async fn send(&self, req: &ChatRequest) -> Result<reqwest::Response, ProviderError> {
        let mut builder = self.endpoint.post(
            &RequestBody::new(req, self.endpoint.output_limit(req.max_tokens)),
            req.stream,
        );
        if let Some(key) = &self.endpoint.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        self.endpoint.send(builder).await
    }

    async fn read_completion(
        &self,
        resp: reqwest::Response,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        let body = self.endpoint.read_body(resp).await?;
        parse_completion(&body, fallback_model)
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiProvider {
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
            messages = req.messages.len(), tools = req.tools.len(), "chat completion request");
        let resp = self.send(req).await?;
        http::answer(
            resp,
            req.stream,
            self.endpoint.idle_timeout,
            on_delta,
            async |r| self.read_completion(r, &req.model).await,
            async |r| read_stream(r, self.endpoint.idle_timeout, on_delta, &req.model).await,
        )
        .await
    }
}
