//! Provider error classification (SPEC R8.3): every failed call becomes one `ProviderError`
//! with a stable code and a retryable flag, decided from the HTTP status, headers and body.
use std::time::{Duration, SystemTime};

/// Longest provider error text kept in a message; bodies can be whole HTML pages.
const MAX_MESSAGE_CHARS: usize = 1000;

/// Body phrases by which providers say the prompt does not fit the context window.
const OVERFLOW_MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "too many tokens",
    "prompt is too long",
];

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// 429.
    #[error("rate limited{}: {message}", retry_hint(.retry_after))]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    /// 5xx and 529 (overloaded).
    #[error("provider server error {status}: {message}")]
    Server { status: u16, message: String },
    /// The prompt does not fit the model's context window.
    #[error("context overflow: {message}")]
    Overflow { message: String },
    /// 401/403.
    #[error("provider auth failed ({status}): {message}")]
    Auth { status: u16, message: String },
    /// Other 4xx: the request itself is wrong, so repeating it will not help.
    #[error("provider rejected the request ({status}): {message}")]
    Client { status: u16, message: String },
    /// Connect, reset or timeout before the response body began.
    #[error("provider transport error: {0}")]
    Transport(String),
    /// The stream went silent for longer than the configured idle timeout.
    #[error("provider stream idle for {}s", .0.as_secs_f64())]
    StreamIdle(Duration),
    /// Garbage SSE, JSON that does not parse, an error object mid-stream, or a stream that
    /// ended with neither `[DONE]` nor a finish reason.
    #[error("malformed provider stream: {0}")]
    MalformedStream(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    retry_after
        .map(|d| format!(" (retry after {}s)", d.as_secs_f64()))
        .unwrap_or_default()
}

impl ProviderError {
    /// Stable snake_case code, used as a turn's `failure_reason`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::RateLimited { .. } => "rate_limited",
            Self::Server { .. } => "provider_server_error",
            Self::Overflow { .. } => "context_overflow",
            Self::Auth { .. } => "provider_auth_failed",
            Self::Client { .. } => "provider_client_error",
            Self::Transport(_) => "provider_transport_error",
            Self::StreamIdle(_) => "provider_stream_idle",
            Self::MalformedStream(_) => "provider_malformed_stream",
            Self::Unsupported(_) => "provider_unsupported",
        }
    }

    /// Whether the same request may succeed when sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. }
                | Self::Server { .. }
                | Self::Transport(_)
                | Self::StreamIdle(_)
                | Self::MalformedStream(_)
        )
    }

    /// Classifies a non-2xx response from its status, `Retry-After` and body.
    pub(crate) fn from_http(status: u16, retry_after: Option<Duration>, body: &str) -> Self {
        let message = error_message(body);
        match status {
            429 => Self::RateLimited {
                retry_after,
                message,
            },
            400 | 413 if says_overflow(body) => Self::Overflow { message },
            401 | 403 => Self::Auth { status, message },
            // A request timeout is the connection's fault, not the request's.
            408 => Self::Transport(format!("408 request timeout: {message}")),
            500..=599 => Self::Server { status, message },
            _ => Self::Client { status, message },
        }
    }
}

fn says_overflow(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    OVERFLOW_MARKERS.iter().any(|m| lower.contains(m))
}

/// The human-readable message of an error body: OpenAI's and Anthropic's
/// `{"error":{"message","type","code"}}`, a bare `{"error":"..."}`, or the (trimmed) body.
pub(crate) fn error_message(body: &str) -> String {
    let parsed = serde_json::from_str::<serde_json::Value>(body).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let err = v.get("error")?;
        if let Some(s) = err.as_str() {
            return Some(s.to_owned());
        }
        let msg = err.get("message").and_then(|m| m.as_str()).unwrap_or("");
        let kind = ["code", "type"]
            .iter()
            .find_map(|k| err.get(*k).and_then(|c| c.as_str()));
        match kind {
            Some(kind) if !msg.is_empty() => Some(format!("{msg} [{kind}]")),
            Some(kind) => Some(kind.to_owned()),
            None if !msg.is_empty() => Some(msg.to_owned()),
            None => None,
        }
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_owned());
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    truncate_chars(&text, MAX_MESSAGE_CHARS)
}

pub(crate) fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Parses `Retry-After`: delay seconds (integer or decimal) or an HTTP date, relative to `now`.
/// A date in the past means "now" (zero).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The retry delay a response asks for: OpenAI's `retry-after-ms` when present (it is more
/// precise), else the standard `Retry-After`.
pub(crate) fn retry_after_from_headers(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        if let Ok(d) = Duration::try_from_secs_f64(ms / 1000.0) {
            return Some(d);
        }
    }
    text(reqwest::header::RETRY_AFTER.as_str())
        .and_then(|v| parse_retry_after(v, SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let e = ProviderError::from_http(429, Some(Duration::from_secs(3)), "{}");
        assert!(
            matches!(e, ProviderError::RateLimited { retry_after: Some(d), .. } if d.as_secs() == 3)
        );
        assert!(e.is_retryable());
        assert_eq!(
            ProviderError::from_http(500, None, "").code(),
            "provider_server_error"
        );
        assert_eq!(
            ProviderError::from_http(529, None, "").code(),
            "provider_server_error"
        );
        assert_eq!(
            ProviderError::from_http(401, None, "").code(),
            "provider_auth_failed"
        );
        assert_eq!(
            ProviderError::from_http(403, None, "").code(),
            "provider_auth_failed"
        );
        let c = ProviderError::from_http(404, None, "nope");
        assert_eq!(c.code(), "provider_client_error");
        assert!(!c.is_retryable());
        assert!(ProviderError::from_http(408, None, "").is_retryable());
    }

    #[test]
    fn overflow_is_recognized_by_body_only_on_400_and_413() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        let e = ProviderError::from_http(400, None, openai);
        assert_eq!(e.code(), "context_overflow");
        assert!(!e.is_retryable());
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert_eq!(
            ProviderError::from_http(400, None, anthropic).code(),
            "context_overflow"
        );
        assert_eq!(
            ProviderError::from_http(413, None, "Too many tokens").code(),
            "context_overflow"
        );
        assert_eq!(
            ProviderError::from_http(400, None, "bad field").code(),
            "provider_client_error"
        );
        assert_eq!(
            ProviderError::from_http(500, None, openai).code(),
            "provider_server_error"
        );
    }

    #[test]
    fn error_messages_come_from_the_error_json() {
        let body = r#"{"error":{"message":"Invalid key","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        assert_eq!(error_message(body), "Invalid key [invalid_api_key]");
        assert_eq!(error_message(r#"{"error":"boom"}"#), "boom");
        assert_eq!(
            error_message("  <html>bad gateway</html>\n"),
            "<html>bad gateway</html>"
        );
        assert_eq!(error_message(""), "(empty body)");
        let long = "x".repeat(5000);
        assert_eq!(error_message(&long).chars().count(), MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(30))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "9".parse().unwrap());
        assert_eq!(retry_after_from_headers(&h), Some(Duration::from_secs(9)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(
            retry_after_from_headers(&h),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn codes_and_retryability_are_stable() {
        let cases = [
            (
                ProviderError::Transport("x".into()),
                "provider_transport_error",
                true,
            ),
            (
                ProviderError::StreamIdle(Duration::from_secs(1)),
                "provider_stream_idle",
                true,
            ),
            (
                ProviderError::MalformedStream("x".into()),
                "provider_malformed_stream",
                true,
            ),
            (
                ProviderError::Unsupported("x".into()),
                "provider_unsupported",
                false,
            ),
            (
                ProviderError::Overflow {
                    message: "x".into(),
                },
                "context_overflow",
                false,
            ),
        ];
        for (e, code, retry) in cases {
            assert_eq!(e.code(), code);
            assert_eq!(e.is_retryable(), retry, "{code}");
        }
    }
}
