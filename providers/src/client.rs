//! One client for every wire format over HTTP. What a format says its own way (where the call
//! goes, how a request is written and authenticated, how an answer is read) is a [`Wire`];
//! the rest a client does (the `Provider` facts from the configuration, one attempt per `chat`,
//! a failure classified, a stream ignored by the server read whole) is [`HttpProvider`]'s,
//! written once for OpenAI's Chat Completions and Anthropic's Messages.
use crate::error::ProviderError;
use crate::http::{self, Endpoint};
use crate::provider::{DeltaSink, Provider, ProviderConfig};
use crate::retry::RetryPolicy;
use crate::wire::{ChatRequest, ChatResponse};
use std::marker::PhantomData;
use std::time::Duration;

/// What one wire format says its own way.
#[async_trait::async_trait]
pub(crate) trait Wire: Send + Sync + 'static {
    /// The call's path under the base URL.
    const PATH: &'static str;
    /// The call's name in the logs.
    const CALL: &'static str;

    /// The request for `req`, its body and authentication written, ready to send.
    fn request(endpoint: &Endpoint, req: &ChatRequest) -> reqwest::RequestBuilder;

    /// A whole (non-streamed) answer.
    fn parse(body: &str, fallback_model: &str) -> Result<ChatResponse, ProviderError>;

    /// A streamed answer, each text delta passed to `on_delta` as it comes.
    async fn read_stream(
        resp: reqwest::Response,
        idle: Duration,
        on_delta: DeltaSink<'_>,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError>;
}

/// A provider client speaking the wire `W` over HTTP.
pub(crate) struct HttpProvider<W> {
    endpoint: Endpoint,
    wire: PhantomData<fn() -> W>,
}

impl<W: Wire> HttpProvider<W> {
    pub fn new(cfg: &ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            endpoint: Endpoint::new(cfg, W::PATH)?,
            wire: PhantomData,
        })
    }
}

#[async_trait::async_trait]
impl<W: Wire> Provider for HttpProvider<W> {
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
            messages = req.messages.len(), tools = req.tools.len(), call = W::CALL, "provider request");
        // Sends the request and waits for the response head (status and headers).
        let resp = self.endpoint.send(W::request(&self.endpoint, req)).await?;
        let idle = self.endpoint.idle_timeout;
        http::answer(
            resp,
            req.stream,
            idle,
            on_delta,
            async |r| {
                let body = self.endpoint.read_body(r).await?;
                W::parse(&body, &req.model)
            },
            async |r| W::read_stream(r, idle, on_delta, &req.model).await,
        )
        .await
    }
}
