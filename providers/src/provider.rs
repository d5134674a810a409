//! The `Provider` trait every model client implements and its configuration; the factory
//! that turns one configured entry into a client stands above the clients, in `build.rs`.
use crate::error::ProviderError;
use crate::retry::RetryPolicy;
use crate::secret::Secret;
use crate::wire::{ChatRequest, ChatResponse};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Any Chat Completions compatible server.
    Openai,
    /// The Anthropic Messages API (`{base_url}/messages`).
    Anthropic,
}

impl ProviderKind {
    /// Its name in the configuration (`kind = "…"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// The kind named `name` (its [`Self::as_str`]), if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Openai, Self::Anthropic]
            .into_iter()
            .find(|k| k.as_str() == name)
    }
}

/// One `[[providers]]` entry of the configuration.
// Debug is written by hand so that a logged config never shows the key.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    #[serde(default, skip_serializing)]
    pub api_key: Option<Secret>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    pub model: String,
    #[serde(default = "default_window")]
    pub context_window: u32,
    /// The output limit of one answer: `max_tokens` in every request (for Anthropic, whose
    /// `max_tokens` is required, it replaces the default of 4096). Unset: OpenAI requests carry
    /// none, so the server's own limit applies. A request that asks for less (a compression
    /// summary's budget) keeps its own.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Used for compression summaries.
    #[serde(default)]
    pub auxiliary: bool,
    /// Bound on one whole non-streamed call, and on waiting for a stream's response headers.
    #[serde(default = "default_timeout")]
    pub request_timeout_s: u64,
    /// Retries of one call after its first attempt, for retryable errors (429, 5xx, transport,
    /// idle or malformed streams). 0 = one attempt only.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// First backoff pause; each retry doubles it (with jitter), up to `backoff_cap_ms`.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// Longest pause between two attempts; also caps a provider's `Retry-After`.
    #[serde(default = "default_backoff_cap_ms")]
    pub backoff_cap_ms: u64,
    /// Longest silence allowed between two chunks of a stream.
    #[serde(default = "default_idle")]
    pub stream_idle_timeout_s: u64,
    /// Whether the model sees images (SPEC R8.1): a user's images go to it as image parts,
    /// else as a note naming the file. Unset: true for known vision models (`sees_images`).
    #[serde(default)]
    pub vision: Option<bool>,
    /// Whether a cut-off answer is continued as a prefill (SPEC R10.2): the partial answer
    /// sent as the last, assistant message for the model to carry on, with no instruction it
    /// could echo. Unset: true for an OpenAI-compatible server on this machine or a private
    /// network (llama.cpp, Ollama, vLLM), false elsewhere (OpenAI's API has no prefill, and
    /// Claude 4.6 and later refuse one); see `prefills`.
    #[serde(default)]
    pub prefill: Option<bool>,
}

/// Model names (lower case) whose families see images, matched as substrings.
const VISION_MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4.1",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    "claude-4",
    "gemini",
    "llava",
    "bakllava",
    "moondream",
    "vision",
    "-vl",
    "pixtral",
    "gemma3",
    "gemma-3",
    "minicpm-v",
    "qwen2.5vl",
    "llama4",
];

impl ProviderConfig {
    /// `prefill` when set, else whether this is an OpenAI-compatible server on a loopback or
    /// private address, or a host name without a dot (a container's, `localhost`).
    pub fn prefills(&self) -> bool {
        self.prefill.unwrap_or_else(|| {
            self.kind == ProviderKind::Openai
                && reqwest::Url::parse(&self.base_url)
                    .ok()
                    .is_some_and(|u| u.host_str().is_some_and(is_local))
        })
    }

    /// `vision` when set, else whether `model` is a known vision model.
    pub fn sees_images(&self) -> bool {
        self.vision.unwrap_or_else(|| {
            let m = self.model.to_ascii_lowercase();
            VISION_MODELS.iter().any(|v| m.contains(v))
        })
    }
}

/// A loopback, private, link-local or unique-local address, or a name without a dot (a URL's
/// host, an IPv6 address in brackets).
fn is_local(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Ok(std::net::IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
        }
        Err(_) => !host.trim_end_matches('.').contains('.'),
    }
}

fn default_window() -> u32 {
    128_000
}

fn default_timeout() -> u64 {
    120
}

fn default_max_retries() -> u32 {
    2
}

fn default_backoff_base_ms() -> u64 {
    500
}

fn default_backoff_cap_ms() -> u64 {
    20_000
}

fn default_idle() -> u64 {
    120
}

impl ProviderConfig {
    /// `api_key` when set, else the value of the environment variable named by `api_key_env`.
    /// Empty values count as unset.
    pub fn resolved_api_key(&self) -> Option<Secret> {
        Secret::resolve(self.api_key.as_ref(), self.api_key_env.as_deref())
    }

    /// How calls to this provider are retried.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_retries.saturating_add(1),
            base_delay: Duration::from_millis(self.backoff_base_ms),
            max_delay: Duration::from_millis(self.backoff_cap_ms.max(self.backoff_base_ms)),
        }
    }
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("api_key_env", &self.api_key_env)
            .field("model", &self.model)
            .field("context_window", &self.context_window)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("auxiliary", &self.auxiliary)
            .field("request_timeout_s", &self.request_timeout_s)
            .field("max_retries", &self.max_retries)
            .field("backoff_base_ms", &self.backoff_base_ms)
            .field("backoff_cap_ms", &self.backoff_cap_ms)
            .field("stream_idle_timeout_s", &self.stream_idle_timeout_s)
            .field("vision", &self.vision)
            .field("prefill", &self.prefill)
            .finish()
    }
}

/// Receives each streamed text fragment as it arrives.
pub type DeltaSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    fn name(&self) -> &str;
    fn model(&self) -> &str;
    /// How a failed call to this provider is retried (`max_retries`, backoff base and cap).
    fn retry_policy(&self) -> RetryPolicy;
    fn context_window(&self) -> u32;
    /// Whether image parts may be sent to it (`ProviderConfig::sees_images`).
    fn sees_images(&self) -> bool;
    /// Whether it continues a request's final assistant message (`ChatRequest::prefill`,
    /// `ProviderConfig::prefills`).
    fn prefills(&self) -> bool;
    /// One attempt. Streams when req.stream is true, calling on_delta per text fragment.
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: DeltaSink<'_>,
    ) -> Result<ChatResponse, ProviderError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(kind: &str) -> ProviderConfig {
        serde_json::from_value(serde_json::json!({
            "name": "main", "kind": kind, "base_url": "http://127.0.0.1:9/v1",
            "api_key": "sk-secret", "model": "gpt-4o"
        }))
        .unwrap()
    }

    #[test]
    fn defaults_apply_and_debug_hides_the_key() {
        let c = cfg("openai");
        assert_eq!(c.context_window, 128_000);
        assert_eq!(c.max_output_tokens, None);
        assert_eq!(c.request_timeout_s, 120);
        assert_eq!(c.retry_policy(), RetryPolicy::default());
        assert_eq!(c.stream_idle_timeout_s, 120);
        assert!(!c.auxiliary);
        assert!(!format!("{c:?}").contains("sk-secret"));
        assert_eq!(
            c.resolved_api_key().as_ref().map(Secret::expose),
            Some("sk-secret")
        );
    }

    #[test]
    fn api_key_falls_back_to_the_named_env_var() {
        let mut c = cfg("openai");
        c.api_key = None;
        c.api_key_env = Some("PATH".into());
        assert_eq!(
            c.resolved_api_key(),
            std::env::var("PATH").ok().map(Secret::from)
        );
        c.api_key_env = Some("TURNKEY_TEST_SURELY_UNSET_VAR".into());
        assert_eq!(c.resolved_api_key(), None);
        c.api_key = Some(Secret::default());
        assert_eq!(c.resolved_api_key(), None);
    }

    #[test]
    fn r10_2_a_local_openai_compatible_server_prefills_by_default() {
        let at = |kind: &str, url: &str| {
            let mut c = cfg(kind);
            c.base_url = url.into();
            c.prefills()
        };
        for local in [
            "http://127.0.0.1:8080/v1",
            "http://localhost:11434/v1",
            "http://[::1]:8000/v1",
            "http://192.168.1.20:8080/v1",
            "http://10.0.0.5/v1",
            "http://llama:8080/v1",
        ] {
            assert!(at("openai", local), "{local}");
        }
        for remote in [
            "https://api.openai.com/v1",
            "https://openrouter.ai/api/v1",
            "http://8.8.8.8/v1",
        ] {
            assert!(!at("openai", remote), "{remote}");
        }
        assert!(
            !at("anthropic", "http://127.0.0.1:9/v1"),
            "Claude 4.6+ refuse a prefill"
        );
        let mut c = cfg("anthropic");
        c.prefill = Some(true);
        assert!(c.prefills(), "the setting wins");
    }
}
