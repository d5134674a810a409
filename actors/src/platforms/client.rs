//! What every platform client shares: one HTTP client with timeouts on every call, and the
//! classification of a failed call that the outbox sender acts on (SPEC R13.5): a request that
//! never left may be sent again, one the platform asked to slow down is sent again after the
//! time it gave, one that may have arrived is `unknown`, one the platform refused is `failed`.
use std::time::Duration;

/// How long a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one platform call may take in all.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a platform call did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The request never reached the platform (connection refused, DNS, connect timeout):
    /// sending it again cannot double it.
    NotSent(String),
    /// The platform asked to wait (HTTP 429 with Telegram's `parameters.retry_after` or
    /// Slack's `Retry-After`); `None` when it named no time.
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    /// The platform answered that it failed (5xx): it did not take the message; try later.
    Transient(String),
    /// The request was sent and no answer came (a timeout or a connection cut after sending):
    /// the message may or may not be in the chat.
    Ambiguous(String),
    /// Telegram could not parse the HTML of the text (400 "can't parse entities").
    BadFormat(String),
    /// The platform refused the request for good (a 4xx other than 429, `ok: false`).
    Permanent(String),
}

impl CallError {
    pub fn message(&self) -> &str {
        match self {
            Self::NotSent(m)
            | Self::Transient(m)
            | Self::Ambiguous(m)
            | Self::BadFormat(m)
            | Self::Permanent(m) => m,
            Self::RateLimited { message, .. } => message,
        }
    }

    /// Sending again cannot double a message: it did not arrive.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Self::NotSent(_) | Self::RateLimited { .. } | Self::Transient(_)
        )
    }

    /// A reqwest error of a request that was being sent: `NotSent` when it never connected,
    /// else `Ambiguous` (it may have reached the platform). The URL is left out of the text: a
    /// Telegram URL holds the bot token, and the text is stored and shown.
    pub fn from_transport(e: reqwest::Error) -> Self {
        let e = &e.without_url();
        if e.is_builder() {
            return Self::Permanent(format!("bad request: {e}"));
        }
        if e.is_connect() {
            return Self::NotSent(format!("cannot connect: {}", chain(e)));
        }
        if e.is_timeout() {
            return Self::Ambiguous(format!("no answer within {CALL_TIMEOUT:?}: {}", chain(e)));
        }
        Self::Ambiguous(format!("connection failed after sending: {}", chain(e)))
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// An error and its sources, in one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The HTTP client of the platform clients: bounded connect and call times, no proxy for
/// loopback, redirects refused (a platform API does not redirect a POST).
pub fn http_client(call_timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(call_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("turnkey/", env!("CARGO_PKG_VERSION")))
        .build()
        // Building fails only when TLS cannot initialise: the default client has the same
        // backend and fails alike, so nothing is lost by using it.
        .unwrap_or_default()
}

/// `Retry-After` in seconds (Slack, the generic receiver); an HTTP date is not used by either.
pub fn retry_after_header(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}
