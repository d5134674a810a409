//! `[security]` and `[limits]`: the audit log's retention and per-principal rate limits and
//! quotas.
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[security]` (API.md "Tenancy and security").
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Configured secret values and well-known key shapes are masked in what a door admits
    /// and in tool results, before they are stored or sent to a model (`redact`).
    pub redact_secrets: bool,
    /// Audit entries older than this many days are deleted (checked hourly).
    pub audit_retention_days: u32,
    /// The key that seals the API keys of providers connected at run time (`/v1/providers`,
    /// the web UI's "Connect a model"): a file holding 32 random bytes in base64, made at the
    /// first connection. Empty: `<data_dir>/secrets.key`. Replicas must share one file.
    pub secrets_key_file: PathBuf,
    /// Secrets known to the process but not in this configuration (the operator token), masked
    /// too. Not a configuration key.
    #[serde(skip)]
    pub extra_secrets: Vec<String>,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            redact_secrets: true,
            audit_retention_days: 90,
            secrets_key_file: PathBuf::new(),
            extra_secrets: Vec::new(),
        }
    }
}

/// `[limits]` (API.md "Tenancy and security"): per principal, 0 = unlimited; the operator and
/// the gateway's own internal inputs (reports, schedules) are exempt. Checked before an input
/// is admitted, counted in the database (every replica counts the same).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Inputs admitted in the last 60 s; over it: 429 `rate_limited`.
    pub turns_per_minute: u32,
    /// Turns running at once (across the principal's sessions); over it: 429 `rate_limited`.
    pub concurrent_turns: u32,
    /// Model tokens (input + output) per UTC day; over it: 429 `quota_exceeded`.
    pub tokens_per_day: u64,
}

impl LimitsConfig {
    pub fn any(&self) -> bool {
        self.turns_per_minute > 0 || self.concurrent_turns > 0 || self.tokens_per_day > 0
    }
}
