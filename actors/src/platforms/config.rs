//! `[platforms.*]` (API.md): each platform is off unless its table is present.
use crate::display::{DisplayLayer, ToolProgress};
use serde::{Deserialize, Serialize};
use turnkey_providers::Secret;

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlatformsConfig {
    pub telegram: Option<TelegramConfig>,
    pub slack: Option<SlackConfig>,
    /// The generic HMAC-signed webhook.
    pub webhook: Option<WebhookConfig>,
}

/// What every platform takes besides its credentials.
pub trait PlatformSettings {
    /// Platform user ids allowed to talk to the agent; `["*"]` is everyone; empty is nobody.
    fn allowed_users(&self) -> &[String];
    /// Stream the answer as one message edited as it grows (SPEC R11.1).
    fn stream(&self) -> bool;
    /// At most one draft edit per this many milliseconds.
    fn edit_interval_ms(&self) -> u64;
    /// Send again a message whose send was cut by a crash (it may arrive twice).
    fn resend_unknown(&self) -> bool;
    /// The platform's display layer (SPEC R3.1): `tool_progress` and `interim` where set. Its
    /// `stream` is not in it: that says whether the chat gets a draft (with the turn's own
    /// `display.stream`), while the session's events stream as `[agent] streaming` says.
    fn display(&self) -> DisplayLayer;

    fn allows(&self, user: &str) -> bool {
        self.allowed_users().iter().any(|u| u == "*" || u == user)
    }
}

macro_rules! platform_settings {
    ($t:ty) => {
        impl PlatformSettings for $t {
            fn allowed_users(&self) -> &[String] {
                &self.allowed_users
            }
            fn stream(&self) -> bool {
                self.stream
            }
            fn edit_interval_ms(&self) -> u64 {
                self.edit_interval_ms
            }
            fn resend_unknown(&self) -> bool {
                self.resend_unknown
            }
            fn display(&self) -> DisplayLayer {
                DisplayLayer {
                    stream: None,
                    tool_progress: self.tool_progress,
                    interim: self.interim,
                }
            }
        }
    };
}

const DEFAULT_EDIT_INTERVAL_MS: u64 = 1000;

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    #[serde(skip_serializing)]
    pub bot_token: Secret,
    /// Sent by Telegram in `X-Telegram-Bot-Api-Secret-Token` (set with `setWebhook`).
    #[serde(skip_serializing)]
    pub secret_token: Secret,
    pub api_base: String,
    pub allowed_users: Vec<String>,
    pub stream: bool,
    pub edit_interval_ms: u64,
    pub resend_unknown: bool,
    /// The chat's tool events and draft lines (SPEC R3.1); unset follows `agent.tool_progress`.
    pub tool_progress: Option<ToolProgress>,
    /// Whether the draft keeps text written before a tool round; unset follows `agent.interim`.
    pub interim: Option<bool>,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            bot_token: Secret::default(),
            secret_token: Secret::default(),
            api_base: "https://api.telegram.org".into(),
            allowed_users: Vec::new(),
            stream: false,
            edit_interval_ms: DEFAULT_EDIT_INTERVAL_MS,
            resend_unknown: false,
            tool_progress: None,
            interim: None,
        }
    }
}
platform_settings!(TelegramConfig);

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    #[serde(skip_serializing)]
    pub bot_token: Secret,
    /// The app's signing secret: checks `X-Slack-Signature`.
    #[serde(skip_serializing)]
    pub signing_secret: Secret,
    pub api_base: String,
    pub allowed_users: Vec<String>,
    pub stream: bool,
    pub edit_interval_ms: u64,
    pub resend_unknown: bool,
    /// The chat's tool events and draft lines (SPEC R3.1); unset follows `agent.tool_progress`.
    pub tool_progress: Option<ToolProgress>,
    /// Whether the draft keeps text written before a tool round; unset follows `agent.interim`.
    pub interim: Option<bool>,
}

impl Default for SlackConfig {
    fn default() -> Self {
        Self {
            bot_token: Secret::default(),
            signing_secret: Secret::default(),
            api_base: "https://slack.com/api".into(),
            allowed_users: Vec::new(),
            stream: false,
            edit_interval_ms: DEFAULT_EDIT_INTERVAL_MS,
            resend_unknown: false,
            tool_progress: None,
            interim: None,
        }
    }
}
platform_settings!(SlackConfig);

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// HMAC-SHA256 key of `X-Signature: sha256=HEX`, inbound and outbound.
    #[serde(skip_serializing)]
    pub secret: Secret,
    /// Where replies are POSTed.
    pub reply_url: String,
    /// The body's `user` ids allowed (the signature authenticates the integrator).
    pub allowed_users: Vec<String>,
    pub stream: bool,
    pub edit_interval_ms: u64,
    pub resend_unknown: bool,
    /// The chat's tool events and draft lines (SPEC R3.1); unset follows `agent.tool_progress`.
    pub tool_progress: Option<ToolProgress>,
    /// Whether the draft keeps text written before a tool round; unset follows `agent.interim`.
    pub interim: Option<bool>,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            secret: Secret::default(),
            reply_url: String::new(),
            allowed_users: Vec::new(),
            stream: false,
            edit_interval_ms: DEFAULT_EDIT_INTERVAL_MS,
            resend_unknown: false,
            tool_progress: None,
            interim: None,
        }
    }
}
platform_settings!(WebhookConfig);

impl PlatformsConfig {
    /// The settings of `platform` (`telegram`, `slack`, `webhook`), when it is configured.
    pub fn settings(&self, platform: &str) -> Option<&dyn PlatformSettings> {
        match platform {
            "telegram" => self.telegram.as_ref().map(|c| c as &dyn PlatformSettings),
            "slack" => self.slack.as_ref().map(|c| c as &dyn PlatformSettings),
            "webhook" => self.webhook.as_ref().map(|c| c as &dyn PlatformSettings),
            _ => None,
        }
    }

    /// `(key, reason)` of the first unusable value.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |k: String, why: &str| Err((k, why.to_owned()));
        let url = |k: String, v: &str| -> Result<(), (String, String)> {
            match reqwest::Url::parse(v) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(()),
                _ => Err((k, format!("{v:?} is not an http(s) URL"))),
            }
        };
        let common = |p: &str, s: &dyn PlatformSettings| -> Result<(), (String, String)> {
            if s.edit_interval_ms() < 100 {
                return bad(
                    format!("platforms.{p}.edit_interval_ms"),
                    "must be at least 100 (milliseconds)",
                );
            }
            if s.allowed_users().iter().any(|u| u.trim().is_empty()) {
                return bad(
                    format!("platforms.{p}.allowed_users"),
                    "must not hold an empty id",
                );
            }
            Ok(())
        };
        if let Some(t) = &self.telegram {
            if t.bot_token.expose().trim().is_empty() {
                return bad("platforms.telegram.bot_token".into(), "must be set");
            }
            // Telegram allows 1-256 characters A-Z, a-z, 0-9, _ and - in a secret token.
            let ok = (1..=256).contains(&t.secret_token.expose().len())
                && t.secret_token
                    .expose()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok {
                return bad(
                    "platforms.telegram.secret_token".into(),
                    "must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)",
                );
            }
            url("platforms.telegram.api_base".into(), &t.api_base)?;
            common("telegram", t)?;
        }
        if let Some(s) = &self.slack {
            if s.bot_token.expose().trim().is_empty() {
                return bad("platforms.slack.bot_token".into(), "must be set");
            }
            if s.signing_secret.expose().trim().is_empty() {
                return bad("platforms.slack.signing_secret".into(), "must be set");
            }
            url("platforms.slack.api_base".into(), &s.api_base)?;
            common("slack", s)?;
        }
        if let Some(w) = &self.webhook {
            if w.secret.expose().trim().is_empty() {
                return bad("platforms.webhook.secret".into(), "must be set");
            }
            url("platforms.webhook.reply_url".into(), &w.reply_url)?;
            common("webhook", w)?;
        }
        Ok(())
    }
}
