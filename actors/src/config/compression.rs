//! `[compression]`: when a session's context is summarized, and by which model.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionMode {
    #[default]
    InPlace,
    Rotate,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    pub enabled: bool,
    pub threshold: f64,
    pub target_ratio: f64,
    pub protect_first_n: usize,
    pub protect_last_n: usize,
    pub mode: CompressionMode,
    /// Bound on one summary call; past it the compression is abandoned (nothing changes).
    pub timeout_s: u64,
    /// After a failed or useless compression, the session is not compressed again for this
    /// long (the request is still sent when it fits).
    pub cooldown_s: u64,
    /// Per-model overrides (SPEC R6.2): `[compression.models."<model>"]`.
    pub models: BTreeMap<String, ModelCompression>,
    /// Set by `for_model` when the model's own threshold applies: it is used as given, without
    /// the raise for small windows.
    #[serde(skip)]
    pub exact_threshold: bool,
}

/// `[compression.models."<model>"]`: what differs for one model; the rest is the section's.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelCompression {
    /// Used as given (no 0.75 floor for windows under 512K).
    pub threshold: Option<f64>,
    pub target_ratio: Option<f64>,
    pub protect_first_n: Option<usize>,
    pub protect_last_n: Option<usize>,
}

impl CompressionConfig {
    /// The settings for requests to `model`: its `[compression.models."<model>"]` entry over
    /// the section's own values.
    pub fn for_model(&self, model: &str) -> CompressionConfig {
        let mut c = self.clone();
        if let Some(m) = self.models.get(model) {
            if let Some(t) = m.threshold {
                c.threshold = t;
                c.exact_threshold = true;
            }
            c.target_ratio = m.target_ratio.unwrap_or(c.target_ratio);
            c.protect_first_n = m.protect_first_n.unwrap_or(c.protect_first_n);
            c.protect_last_n = m.protect_last_n.unwrap_or(c.protect_last_n);
        }
        c
    }
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 0.50,
            target_ratio: 0.20,
            protect_first_n: 3,
            protect_last_n: 20,
            mode: CompressionMode::InPlace,
            timeout_s: 60,
            cooldown_s: 300,
            models: BTreeMap::new(),
            exact_threshold: false,
        }
    }
}
