//! Secrets masked before they are stored or sent (SPEC R13.8; `[security] redact_secrets`):
//! the value of every configured secret (provider keys, platform tokens and signing secrets,
//! the operator token) and the key shapes that cannot be anything else (`memory::scan`'s
//! `KEY_SHAPES`: provider and platform keys, private keys, JSON web tokens) become a mask.
//! Applied where outside text enters the transcript — a door's input at admission, a tool's
//! result before its row (and spill file) is written — so the events, outbox rows and model
//! requests made from them never carry the secret either.
use crate::config::RuntimeConfig;
use crate::memory::scan::KEY_SHAPES;
use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

/// What a configured secret's value becomes.
pub const MASK: &str = "[redacted]";
/// A configured value shorter than this is not masked: it would hit ordinary words.
const MIN_SECRET_CHARS: usize = 8;

static SHAPES: LazyLock<Vec<(Regex, String)>> = LazyLock::new(|| {
    KEY_SHAPES
        .iter()
        .filter_map(|(pattern, name)| {
            // The patterns are constants that `memory::scan`'s tests compile.
            Regex::new(pattern)
                .ok()
                .map(|re| (re, format!("[redacted: {name}]")))
        })
        .collect()
});

/// The masking, fixed at start-up.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    on: bool,
    /// Configured values, longest first (so a value that contains another goes whole).
    values: Vec<String>,
}

impl Redactor {
    /// From the configuration's secrets (`security.extra_secrets`, the operator token, among
    /// them); off when `security.redact_secrets` is false.
    pub fn new(config: &RuntimeConfig) -> Self {
        let mut values: Vec<String> = config.security.extra_secrets.clone();
        for p in &config.providers {
            if let Some(k) = &p.api_key {
                values.push(k.expose().to_owned());
            }
            if let Some(var) = &p.api_key_env {
                if let Ok(v) = std::env::var(var) {
                    values.push(v);
                }
            }
        }
        let platforms = &config.platforms;
        if let Some(t) = &platforms.telegram {
            values.push(t.bot_token.expose().to_owned());
            values.push(t.secret_token.expose().to_owned());
        }
        if let Some(s) = &platforms.slack {
            values.push(s.bot_token.expose().to_owned());
            values.push(s.signing_secret.expose().to_owned());
        }
        if let Some(w) = &platforms.webhook {
            values.push(w.secret.expose().to_owned());
        }
        values.retain(|v| v.trim().chars().count() >= MIN_SECRET_CHARS);
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self {
            on: config.security.redact_secrets,
            values,
        }
    }

    /// `text` with every secret masked; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.on {
            return Cow::Borrowed(text);
        }
        let mut out = Cow::Borrowed(text);
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), MASK));
            }
        }
        for (re, mask) in SHAPES.iter() {
            if re.is_match(&out) {
                out = Cow::Owned(re.replace_all(&out, mask.as_str()).into_owned());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use turnkey_providers::ProviderConfig;

    fn with_key(key: &str) -> RuntimeConfig {
        let mut c = RuntimeConfig::default();
        let mut p: ProviderConfig = serde_json::from_value(serde_json::json!({
            "name": "p", "kind": "openai", "base_url": "http://127.0.0.1:1", "model": "m"
        }))
        .unwrap();
        p.api_key = Some(key.into());
        c.providers.push(p);
        c
    }

    #[test]
    fn r13_8_configured_values_and_key_shapes_are_masked() {
        let mut config = with_key("local-provider-key-123");
        config
            .security
            .extra_secrets
            .push("tk_operator_secret".into());
        let r = Redactor::new(&config);
        let text = "key=local-provider-key-123 op=tk_operator_secret \
                    gh=ghp_abcdefghijklmnopqrstuvwxyz0123456789 \
                    ant=sk-ant-api03-abcdefghijklmnopqrstuvwxyz";
        let out = r.redact(text);
        assert!(!out.contains("local-provider-key-123"), "{out}");
        assert!(!out.contains("tk_operator_secret"), "{out}");
        assert!(!out.contains("ghp_abcdefghij"), "{out}");
        assert!(!out.contains("sk-ant-api03"), "{out}");
        assert!(out.contains("key=[redacted]"), "{out}");
        assert!(out.contains("[redacted: a GitHub token]"), "{out}");
    }

    #[test]
    fn r13_8_ordinary_text_and_code_are_left_alone() {
        let r = Redactor::new(&with_key("local-provider-key-123"));
        for text in [
            "password = input(\"password: \")",
            "Authorization: Bearer {token}",
            "a short key: abc",
            "fn main() { println!(\"hi\"); }",
        ] {
            assert!(matches!(r.redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn r13_8_short_values_are_not_masked_and_off_masks_nothing() {
        let r = Redactor::new(&with_key("short"));
        assert_eq!(r.redact("a short word"), "a short word");
        let mut c = with_key("local-provider-key-123");
        c.security.redact_secrets = false;
        let off = Redactor::new(&c);
        assert_eq!(
            off.redact("local-provider-key-123"),
            "local-provider-key-123"
        );
    }
}
