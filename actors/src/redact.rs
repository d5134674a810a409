//! Secrets masked before they are stored or sent (SPEC R13.8; `[security] redact_secrets`):
//! the value of every configured secret (provider keys, platform tokens and signing secrets,
//! the operator token) and the key shapes that cannot be anything else (`memory::scan`'s
//! `KEY_SHAPES`: provider and platform keys, private keys, JSON web tokens) become a mask.
//! Applied where outside text enters the transcript — a door's input at admission, a tool's
//! result before its row (and spill file) is written, a memory entry before it is stored —
//! and where the model's text comes back (its answer and streamed deltas, a provider's error
//! message), so the events, outbox rows and model requests made from them never carry the
//! secret either. The log lines are masked as they are written (`turnkey_web::telemetry`).
use crate::config::RuntimeConfig;
use crate::memory::scan::KEY_SHAPES;
use regex::Regex;
use std::borrow::Cow;
use std::sync::{Arc, LazyLock, RwLock};

/// What a configured secret's value becomes.
pub const MASK: &str = "[redacted]";
/// A configured value shorter than this is not masked: it would hit ordinary words.
const MIN_SECRET_CHARS: usize = 8;
/// Streamed text is held back from the last whitespace on (a secret is one word), but no more
/// than this many bytes of one word: a longer run is let through, masked as far as it goes.
const MAX_HELD_WORD: usize = 512;

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

/// The masking: the configuration's secrets from start-up, plus the keys of providers
/// connected at run time ([`Redactor::add_secret`]); every clone shares them.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    on: bool,
    /// Secret values, longest first (so a value that contains another goes whole).
    values: Arc<RwLock<Arc<[String]>>>,
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
        if let Some(k) = config.stt.resolved_api_key() {
            values.push(k.expose().to_owned());
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
        Self {
            on: config.security.redact_secrets,
            values: Arc::new(RwLock::new(settle(values).into())),
        }
    }

    /// Masks `value` too from now on, in every clone (a provider key connected at run time).
    pub fn add_secret(&self, value: &str) {
        let mut values = self.values.write().unwrap_or_else(|e| e.into_inner());
        if values.iter().any(|v| v == value) {
            return;
        }
        let mut all = values.to_vec();
        all.push(value.to_owned());
        *values = settle(all).into();
    }

    fn values(&self) -> Arc<[String]> {
        self.values
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether it masks anything at all.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// How much of `text`, streamed and not complete yet, can be masked and sent now: up to
    /// its last whitespace (key shapes and secrets are single words), and never the start of a
    /// configured value cut by the end of `text`. The rest waits for more text.
    pub fn settled_len(&self, text: &str) -> usize {
        if !self.on {
            return text.len();
        }
        let mut end = match text.rfind(char::is_whitespace) {
            Some(i) => i + text[i..].chars().next().map_or(1, char::len_utf8),
            None => 0,
        };
        if text.len() - end > MAX_HELD_WORD {
            end = text.len();
        }
        // A configured value may hold spaces: its cut start waits too.
        for v in self.values().iter() {
            let from = text.len().saturating_sub(v.len().saturating_sub(1));
            for i in (from..text.len()).filter(|&i| text.is_char_boundary(i)) {
                if i < end && v.starts_with(&text[i..]) {
                    end = i;
                    break;
                }
            }
        }
        end
    }

    /// `text` with every secret masked; borrowed when there was none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.on {
            return Cow::Borrowed(text);
        }
        let mut out = Cow::Borrowed(text);
        for v in self.values().iter() {
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

/// Values long enough to mask, longest first, once each.
fn settle(mut values: Vec<String>) -> Vec<String> {
    values.retain(|v| v.trim().chars().count() >= MIN_SECRET_CHARS);
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    values
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
    fn r13_8_streamed_text_is_held_back_from_a_cut_word_or_a_cut_secret() {
        let r = Redactor::new(&with_key("local provider key 123"));
        assert_eq!(r.settled_len("hello wor"), "hello ".len());
        assert_eq!(r.settled_len("hello world\n"), "hello world\n".len());
        assert_eq!(r.settled_len("key: local provider"), "key: ".len());
        assert_eq!(r.settled_len("nothing"), 0);
        let long = "x".repeat(MAX_HELD_WORD + 1);
        assert_eq!(r.settled_len(&long), long.len());
        assert_eq!(r.settled_len("é ü"), "é ".len());
        let mut c = with_key("local-provider-key-123");
        c.security.redact_secrets = false;
        assert_eq!(Redactor::new(&c).settled_len("hello wor"), 9);
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
