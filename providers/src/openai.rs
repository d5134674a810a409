//! The OpenAI Chat Completions client (any compatible server): one HTTP attempt per `chat`,
//! classified on failure, and handed to the stream or the completion parser on success.
mod body;
mod completion;
mod stream;

use crate::error::{retry_after_from_headers, ProviderError};
use crate::provider::{DeltaSink, Provider, ProviderConfig};
use crate::retry::RetryPolicy;
use crate::wire::{ChatRequest, ChatResponse};
use body::RequestBody;
use completion::parse_completion;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use std::sync::OnceLock;
use std::time::Duration;
use stream::read_stream;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
            endpoint: endpoint(&cfg.name, &cfg.base_url)?,
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
        match tokio::time::timeout(self.request_timeout, builder.send()).await {
            Ok(Ok(resp)) => Ok(resp),
            // Nothing was sent, and the same request would fail the same way again.
            Ok(Err(e)) if e.is_builder() => Err(ProviderError::Unsupported(format!(
                "request could not be built: {}",
                describe(&e)
            ))),
            Ok(Err(e)) => Err(ProviderError::Transport(describe(&e))),
            Err(_) => Err(ProviderError::Transport(format!(
                "no response within {}s",
                self.request_timeout.as_secs()
            ))),
        }
    }

    async fn read_completion(
        &self,
        resp: reqwest::Response,
        fallback_model: &str,
    ) -> Result<ChatResponse, ProviderError> {
        let body = match tokio::time::timeout(self.request_timeout, resp.text()).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => return Err(ProviderError::Transport(describe(&e))),
            Err(_) => {
                return Err(ProviderError::Transport(format!(
                    "response body not complete within {}s",
                    self.request_timeout.as_secs()
                )))
            }
        };
        parse_completion(&body, fallback_model)
    }

    /// A failed response, classified by status, `Retry-After` and body.
    async fn failure(&self, resp: reqwest::Response) -> ProviderError {
        let status = resp.status().as_u16();
        let retry_after = retry_after_from_headers(resp.headers());
        let body = match tokio::time::timeout(self.idle_timeout, resp.text()).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => format!("(error body unreadable: {})", describe(&e)),
            Err(_) => "(error body not received in time)".to_owned(),
        };
        ProviderError::from_http(status, retry_after, &body)
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
        if !resp.status().is_success() {
            return Err(self.failure(resp).await);
        }
        if !req.stream {
            return self.read_completion(resp, &req.model).await;
        }
        if is_json(&resp) {
            // A server that ignores `stream: true` answers in one piece; pass its text on so
            // the caller still sees everything that was said.
            let answer = self.read_completion(resp, &req.model).await?;
            if let Some(text) = &answer.content {
                on_delta(text);
            }
            return Ok(answer);
        }
        read_stream(resp, self.idle_timeout, on_delta, &req.model).await
    }
}

fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// `{base_url}/chat/completions`, whether or not `base_url` ends in a slash.
fn endpoint(provider: &str, base_url: &str) -> Result<reqwest::Url, ProviderError> {
    let joined = format!("{}/chat/completions", base_url.trim().trim_end_matches('/'));
    match reqwest::Url::parse(&joined) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
        Ok(_) | Err(_) => Err(ProviderError::Unsupported(format!(
            "provider '{provider}': base_url {base_url:?} is not an http(s) URL"
        ))),
    }
}

/// One connection pool for every provider in the process.
fn shared_client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .use_rustls_tls()
        .build()
        .map_err(|e| ProviderError::Unsupported(format!("HTTP client: {}", describe(&e))))?;
    // Two first callers may both build one; either is fine and only one is kept.
    Ok(CLIENT.get_or_init(|| client).clone())
}

/// A reqwest error with its causes; its own text alone ("error sending request") hides
/// whether the connection was refused, reset or timed out.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_joins_without_doubling_slashes() {
        for base in ["http://h:1/v1", "http://h:1/v1/", " http://h:1/v1// "] {
            assert_eq!(
                endpoint("p", base).unwrap().as_str(),
                "http://h:1/v1/chat/completions"
            );
        }
        assert!(endpoint("p", "ftp://h/v1").is_err());
        assert!(endpoint("p", "").is_err());
    }
}
