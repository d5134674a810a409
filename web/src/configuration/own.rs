//! The web crate's own sections of the settings: `[server]`, `[database]`, `[auth]`,
//! `[openai]` and `[telemetry]`, with their defaults and the checks of their values.
use super::InvalidConfig;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use turnkey_providers::Secret;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub bind: String,
    pub data_dir: PathBuf,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Largest file accepted, uploaded (`POST /v1/files`) or attached inline; above it 413
    /// `too_large` and nothing is stored.
    pub max_upload_bytes: usize,
    /// On SIGTERM/SIGINT: how long running turns may go on before they are interrupted and
    /// settled as `interrupted` (reason `shutdown`).
    pub shutdown_grace_s: u64,
    /// After the turns have settled: how long open HTTP connections (SSE included) get.
    pub http_shutdown_grace_s: u64,
    /// An idle event stream (SSE) gets a `: keepalive` comment after this many seconds without
    /// a frame; a WebSocket gets a ping as often. Also how soon a vanished client is noticed.
    pub sse_keepalive_s: u64,
    /// Origins (`scheme://host[:port]`, exactly) whose pages may call the API from a browser
    /// (CORS). Empty: no CORS headers, only the UI served at `/` (same origin) can.
    pub cors_origins: Vec<String>,
    /// With no provider configured, `serve` asks these OpenAI-compatible base URLs for their
    /// models at start-up and uses the first that lists one (Ollama, LM Studio, llama.cpp and
    /// vLLM on their usual ports by default). Empty: never.
    pub detect_providers: Vec<String>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./data"),
            max_body_bytes: 1024 * 1024,
            max_upload_bytes: turnkey_actors::config::DEFAULT_MAX_UPLOAD_BYTES,
            // The whole drain a stop signal starts is `startup::drain_bound` (40 s with these
            // defaults); the deployment files in deploy/ give at least that much.
            shutdown_grace_s: 20,
            http_shutdown_grace_s: 5,
            sse_keepalive_s: 15,
            cors_origins: Vec::new(),
            detect_providers: crate::provider_probe::LOCAL_SERVERS
                .iter()
                .map(|(_, url)| (*url).to_owned())
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// Filled in by [`load`]: when not configured, a SQLite file inside `server.data_dir`.
    pub url: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// When absent, one is generated into `data_dir/operator.token`.
    #[serde(skip_serializing)]
    pub operator_token: Option<Secret>,
}

/// `[openai]`: the OpenAI-compatible doors.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiSettings {
    /// What `POST /v1/chat/completions` does with a request's own `tools` (and `functions`).
    pub client_tools: ClientTools,
}

/// A chat completion's client tools: `ignore` (the default) answers with the agent's own tools
/// as if none were sent, so a front-end that always sends its tools (Open WebUI's page chat)
/// works; `refuse` answers `400 unsupported_parameter`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientTools {
    #[default]
    Ignore,
    Refuse,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// OTLP/HTTP (protobuf) collector, e.g. `http://127.0.0.1:4318`; spans are POSTed to
    /// `/v1/traces` under it unless the URL already ends so. Empty: no export.
    pub otlp_endpoint: String,
    /// The `service.name` resource attribute of every exported span.
    pub service_name: String,
    /// Fraction of turns and requests whose traces are exported, 0.0 to 1.0 (by trace id;
    /// a child follows its parent's decision).
    pub sample_ratio: f64,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            service_name: "turnkey".into(),
            sample_ratio: 1.0,
        }
    }
}

impl TelemetrySettings {
    /// Whether traces are exported at all.
    pub fn enabled(&self) -> bool {
        !self.otlp_endpoint.trim().is_empty()
    }

    /// The URL spans are POSTed to: `otlp_endpoint` with `/v1/traces` appended unless it
    /// already ends with it (the OTLP/HTTP convention for a collector's base URL).
    pub fn traces_url(&self) -> String {
        let base = self.otlp_endpoint.trim().trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_owned()
        } else {
            format!("{base}/v1/traces")
        }
    }

    pub(super) fn validate(&self) -> Result<(), InvalidConfig> {
        if self.enabled() {
            let url = reqwest::Url::parse(self.otlp_endpoint.trim()).map_err(|e| {
                InvalidConfig::new(
                    "telemetry.otlp_endpoint",
                    format!(
                        "{:?} is not a URL ({e}); write e.g. http://127.0.0.1:4318",
                        self.otlp_endpoint
                    ),
                )
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(InvalidConfig::new(
                    "telemetry.otlp_endpoint",
                    "must be an http:// or https:// URL (OTLP over HTTP)",
                ));
            }
        }
        if self.service_name.trim().is_empty() {
            return Err(InvalidConfig::new(
                "telemetry.service_name",
                "must not be empty",
            ));
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(InvalidConfig::new(
                "telemetry.sample_ratio",
                format!("{} is not between 0.0 and 1.0", self.sample_ratio),
            ));
        }
        Ok(())
    }
}
