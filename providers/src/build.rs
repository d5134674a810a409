//! The factory that turns one configured `[[providers]]` entry into its client: above both
//! clients, so that `provider.rs` (the trait they implement) stays below them.
use crate::anthropic::AnthropicProvider;
use crate::error::ProviderError;
use crate::openai::OpenAiProvider;
use crate::provider::{Provider, ProviderConfig, ProviderKind};
use std::sync::Arc;

/// Builds the client for one configured provider.
pub fn build_provider(cfg: &ProviderConfig) -> Result<Arc<dyn Provider>, ProviderError> {
    match cfg.kind {
        ProviderKind::Openai => Ok(Arc::new(OpenAiProvider::new(cfg)?)),
        ProviderKind::Anthropic => Ok(Arc::new(AnthropicProvider::new(cfg)?)),
    }
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
    fn factory_builds_openai_and_anthropic() {
        let p = build_provider(&cfg("openai")).unwrap();
        assert_eq!(p.name(), "main");
        assert_eq!(p.model(), "gpt-4o");
        assert_eq!(p.context_window(), 128_000);
        let mut c = cfg("anthropic");
        c.model = "claude-sonnet-4-5".into();
        c.max_retries = 5;
        let p = build_provider(&c).unwrap();
        assert_eq!(p.name(), "main");
        assert_eq!(p.model(), "claude-sonnet-4-5");
        assert_eq!(p.retry_policy().max_attempts, 6);
    }

    #[test]
    fn a_bad_base_url_is_refused_at_build_time() {
        for kind in ["openai", "anthropic"] {
            let mut c = cfg(kind);
            c.base_url = "not a url".into();
            assert!(matches!(
                build_provider(&c),
                Err(ProviderError::Unsupported(_))
            ));
        }
    }
}
