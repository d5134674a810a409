//! The HTTP plumbing every provider client shares: one connection pool, the bounded send, the
//! classified failure, whole-body reads with a bound, and the idle guard under an SSE stream.
use crate::error::{retry_after_from_headers, ProviderError};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::CONTENT_TYPE;
use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `{base_url}/{path}`, whether or not `base_url` ends in a slash; only http(s).
pub(crate) fn endpoint(
    provider: &str,
    base_url: &str,
    path: &str,
) -> Result<reqwest::Url, ProviderError> {
    let joined = format!("{}/{path}", base_url.trim().trim_end_matches('/'));
    match reqwest::Url::parse(&joined) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
        Ok(_) | Err(_) => Err(ProviderError::Unsupported(format!(
            "provider '{provider}': base_url {base_url:?} is not an http(s) URL"
        ))),
    }
}

/// What every provider client holds: its identity and window from the configuration, the
/// endpoint it posts to, its key, bounds and retry policy, and the shared connection pool.
pub(crate) struct Endpoint {
    pub name: String,
    pub model: String,
    pub context_window: u32,
    /// `ProviderConfig::sees_images`.
    pub vision: bool,
    /// `ProviderConfig::prefills`.
    pub prefill: bool,
    /// `[[providers]] max_output_tokens`.
    pub max_output_tokens: Option<u32>,
    pub url: reqwest::Url,
    pub api_key: Option<crate::Secret>,
    pub request_timeout: Duration,
    pub idle_timeout: Duration,
    pub retry: crate::retry::RetryPolicy,
    http: reqwest::Client,
}

impl Endpoint {
    /// The client settings of `cfg`, posting to `{base_url}/{path}`.
    pub fn new(cfg: &crate::provider::ProviderConfig, path: &str) -> Result<Self, ProviderError> {
        Ok(Self {
            name: cfg.name.clone(),
            model: cfg.model.clone(),
            context_window: cfg.context_window,
            vision: cfg.sees_images(),
            prefill: cfg.prefills(),
            max_output_tokens: cfg.max_output_tokens,
            url: endpoint(&cfg.name, &cfg.base_url, path)?,
            api_key: cfg.resolved_api_key(),
            request_timeout: Duration::from_secs(cfg.request_timeout_s.max(1)),
            idle_timeout: Duration::from_secs(cfg.stream_idle_timeout_s.max(1)),
            retry: cfg.retry_policy(),
            http: shared_client()?,
        })
    }

    /// The `max_tokens` a request that asks for `asked` (its own limit, if any) is sent with:
    /// the smaller of it and `max_output_tokens` when both are set.
    pub fn output_limit(&self, asked: Option<u32>) -> Option<u32> {
        match (asked, self.max_output_tokens) {
            (Some(a), Some(m)) => Some(a.min(m)),
            (a, m) => a.or(m),
        }
    }

    /// A POST of `body`: a stream asks for SSE and is bounded chunk by chunk later; anything
    /// else is bounded as a whole exchange, body included.
    pub fn post(&self, body: &impl serde::Serialize, stream: bool) -> reqwest::RequestBuilder {
        let builder = self.http.post(self.url.clone()).json(body);
        if stream {
            builder.header(reqwest::header::ACCEPT, "text/event-stream")
        } else {
            builder.timeout(self.request_timeout)
        }
    }

    /// Sends and waits for the response head within the request timeout.
    pub async fn send(
        &self,
        builder: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ProviderError> {
        send(builder, self.request_timeout).await
    }

    /// A whole response body, within the request timeout.
    pub async fn read_body(&self, resp: reqwest::Response) -> Result<String, ProviderError> {
        read_body(resp, self.request_timeout).await
    }
}

/// One connection pool for every provider in the process.
pub(crate) fn shared_client() -> Result<reqwest::Client, ProviderError> {
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

/// Sends a request and waits at most `timeout` for the response head (status and headers).
pub(crate) async fn send(
    builder: reqwest::RequestBuilder,
    timeout: Duration,
) -> Result<reqwest::Response, ProviderError> {
    match tokio::time::timeout(timeout, builder.send()).await {
        Ok(Ok(resp)) => Ok(resp),
        // Nothing was sent, and the same request would fail the same way again.
        Ok(Err(e)) if e.is_builder() => Err(ProviderError::Unsupported(format!(
            "request could not be built: {}",
            describe(&e)
        ))),
        Ok(Err(e)) => Err(ProviderError::Transport(describe(&e))),
        Err(_) => Err(ProviderError::Transport(format!(
            "no response within {}s",
            timeout.as_secs()
        ))),
    }
}

/// The whole body of a successful response, within `timeout`.
pub(crate) async fn read_body(
    resp: reqwest::Response,
    timeout: Duration,
) -> Result<String, ProviderError> {
    match tokio::time::timeout(timeout, resp.text()).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) => Err(ProviderError::Transport(describe(&e))),
        Err(_) => Err(ProviderError::Transport(format!(
            "response body not complete within {}s",
            timeout.as_secs()
        ))),
    }
}

/// A failed response, classified by status, `Retry-After` and body (read within `idle`).
pub(crate) async fn failure(resp: reqwest::Response, idle: Duration) -> ProviderError {
    let status = resp.status().as_u16();
    let retry_after = retry_after_from_headers(resp.headers());
    let body = match tokio::time::timeout(idle, resp.text()).await {
        Ok(Ok(body)) => body,
        Ok(Err(e)) => format!("(error body unreadable: {})", describe(&e)),
        Err(_) => "(error body not received in time)".to_owned(),
    };
    ProviderError::from_http(status, retry_after, &body)
}

/// What every client's `chat` does with the response head: an error status is classified; a
/// non-streamed request is read whole; a server that ignored `stream: true` (a JSON body) is
/// read whole too and its text passed on, so the caller still sees everything that was said;
/// otherwise the stream is read.
pub(crate) async fn answer(
    resp: reqwest::Response,
    stream: bool,
    idle: Duration,
    on_delta: crate::provider::DeltaSink<'_>,
    whole: impl AsyncFnOnce(reqwest::Response) -> Result<crate::wire::ChatResponse, ProviderError>,
    streamed: impl AsyncFnOnce(reqwest::Response) -> Result<crate::wire::ChatResponse, ProviderError>,
) -> Result<crate::wire::ChatResponse, ProviderError> {
    if !resp.status().is_success() {
        return Err(failure(resp, idle).await);
    }
    if !stream {
        return whole(resp).await;
    }
    if is_json(&resp) {
        let answer = whole(resp).await?;
        if let Some(text) = &answer.content {
            on_delta(text);
        }
        return Ok(answer);
    }
    streamed(resp).await
}

pub(crate) fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// A reqwest error with its causes; its own text alone ("error sending request") hides
/// whether the connection was refused, reset or timed out.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why the byte stream under an SSE parser stopped.
#[derive(Debug)]
pub(crate) enum ChunkError {
    Idle,
    Body(reqwest::Error),
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Idle => f.write_str("stream idle"),
            Self::Body(e) => write!(f, "stream interrupted: {}", describe(e)),
        }
    }
}

/// Bounds the wait for every chunk of bytes, so any byte (an SSE keep-alive comment too)
/// proves the stream alive, and silence longer than `idle` ends it with `ChunkError::Idle`.
pub(crate) fn guard_idle(
    bytes: impl Stream<Item = reqwest::Result<Bytes>>,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, ChunkError>> {
    futures::stream::unfold(Some(Box::pin(bytes)), move |state| async move {
        let mut bytes = state?;
        match tokio::time::timeout(idle, bytes.next()).await {
            Ok(Some(Ok(chunk))) => {
                crate::activity::bytes_arrived();
                Some((Ok(chunk), Some(bytes)))
            }
            Ok(Some(Err(e))) => Some((Err(ChunkError::Body(e)), None)),
            Ok(None) => None,
            Err(_) => Some((Err(ChunkError::Idle), None)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_joins_without_doubling_slashes() {
        for base in ["http://h:1/v1", "http://h:1/v1/", " http://h:1/v1// "] {
            assert_eq!(
                endpoint("p", base, "chat/completions").unwrap().as_str(),
                "http://h:1/v1/chat/completions"
            );
        }
        assert_eq!(
            endpoint("p", "https://api.anthropic.com/v1", "messages")
                .unwrap()
                .as_str(),
            "https://api.anthropic.com/v1/messages"
        );
        assert!(endpoint("p", "ftp://h/v1", "messages").is_err());
        assert!(endpoint("p", "", "messages").is_err());
    }
}
