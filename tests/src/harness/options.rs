//! How a test configures its turnkey process (`TurnkeyOptions`, built step by step) and the
//! `turnkey.toml` written from them.
use crate::scripted::ScriptedProvider;
use std::path::{Path, PathBuf};

/// How to configure one turnkey process.
#[derive(Clone, Debug)]
pub struct TurnkeyOptions {
    /// `None`: a SQLite file in the temp dir.
    pub database_url: Option<String>,
    pub provider_base_url: String,
    /// The `api_key` of the scripted provider entry; distinct keys tell processes apart in
    /// the provider's recorded `authorization` headers.
    pub provider_api_key: String,
    /// The `model` of the `[[providers]]` entry.
    pub provider_model: String,
    /// Its `context_window` (32,000 unless a test needs pressure sooner).
    pub provider_context_window: u32,
    /// Extra environment, e.g. `("FAILPOINTS", "admission.after_commit=return")`.
    pub env: Vec<(String, String)>,
    pub lease_ttl_s: u64,
    pub lease_refresh_s: u64,
    pub lease_wait_s: u64,
    /// `[lease] watchdog_s`, written only when not 0.
    pub lease_watchdog_s: u64,
    /// Appended verbatim to turnkey.toml; may add sections (`[agent]`, `[tools]`, ...) but not
    /// repeat `[server]`, `[database]`, `[auth]` or `[lease]`.
    pub extra_toml: String,
    /// Extra keys of the scripted `[[providers]]` entry, e.g. `max_retries = 0`.
    pub provider_toml: String,
    /// The scripted provider's wire: `openai` (the default) or `anthropic`.
    pub provider_kind: String,
    /// The executable to run instead of this build's `turnkey` (the harness's self-test runs
    /// a stand-in); per instance, so tests sharing the test binary are not affected.
    pub binary: Option<PathBuf>,
    /// Whether turnkey.toml has the scripted `[[providers]]` entry (a first run has none).
    pub with_provider: bool,
    /// `server.detect_providers`: none by default, so that no test finds a server another
    /// test (or the machine) runs on a usual port.
    pub detect_providers: Vec<String>,
    /// No `[auth] operator_token`: the service generates one into `data/operator.token`, as on
    /// a first start, and the harness reads it from there.
    pub generated_token: bool,
}

impl TurnkeyOptions {
    /// Defaults for a test against `provider`: short leases so cross-process tests stay fast.
    pub fn new(provider: &ScriptedProvider) -> Self {
        Self::for_base_url(&provider.base_url)
    }

    /// The same defaults against any Chat Completions server, e.g. the local test model.
    pub fn for_base_url(base_url: &str) -> Self {
        Self {
            database_url: None,
            provider_base_url: base_url.to_string(),
            provider_api_key: "sk-test".into(),
            provider_model: "scripted-model".into(),
            provider_context_window: 32_000,
            env: Vec::new(),
            lease_ttl_s: 10,
            lease_refresh_s: 2,
            lease_wait_s: 60,
            lease_watchdog_s: 0,
            extra_toml: String::new(),
            provider_toml: String::new(),
            provider_kind: "openai".into(),
            binary: None,
            with_provider: true,
            detect_providers: Vec::new(),
            generated_token: false,
        }
    }

    /// Leaves the operator token to the service (see [`TurnkeyOptions::generated_token`]).
    pub fn generated_token(mut self) -> Self {
        self.generated_token = true;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn database(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_string());
        self
    }

    pub fn provider_api_key(mut self, key: &str) -> Self {
        self.provider_api_key = key.to_string();
        self
    }

    pub fn provider_model(mut self, model: &str) -> Self {
        self.provider_model = model.to_string();
        self
    }

    pub fn context_window(mut self, tokens: u32) -> Self {
        self.provider_context_window = tokens;
        self
    }

    /// Runs `path` instead of this build's `turnkey` (see [`TurnkeyOptions::binary`]).
    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_path_buf());
        self
    }

    pub fn extra_toml(mut self, toml: &str) -> Self {
        self.extra_toml.push_str(toml);
        self
    }

    /// No `[[providers]]` entry; `serve` asks `detect` (base URLs) for a local server instead.
    pub fn first_run(mut self, detect: &[&str]) -> Self {
        self.with_provider = false;
        self.detect_providers = detect.iter().map(|u| (*u).to_owned()).collect();
        self
    }

    /// Speaks to the scripted provider over `kind`'s wire (`openai` or `anthropic`).
    pub fn provider_kind(mut self, kind: &str) -> Self {
        self.provider_kind = kind.to_string();
        self
    }

    pub fn provider_toml(mut self, toml: &str) -> Self {
        self.provider_toml.push_str(toml);
        self.provider_toml.push('\n');
        self
    }
}

/// Writes `turnkey.toml` at `path` for a process whose temp dir is `dir`.
pub(super) fn write_config(
    path: &Path,
    dir: &Path,
    database_url: &str,
    token: &str,
    o: &TurnkeyOptions,
) {
    let token = if o.generated_token {
        String::new()
    } else {
        format!("operator_token = \"{token}\"")
    };
    let toml = format!(
        r#"[server]
data_dir = "{data}"
detect_providers = {detect:?}

[database]
url = "{database_url}"

[auth]
{token}

{provider}
[lease]
ttl_s = {ttl}
refresh_s = {refresh}
wait_s = {wait}
{watchdog}
{memory}
{extra}
"#,
        data = dir.join("data").display(),
        detect = o.detect_providers,
        provider = if o.with_provider {
            format!(
                r#"[[providers]]
name = "scripted"
kind = "{kind}"
base_url = "{base}"
api_key = "{api_key}"
model = "{model}"
context_window = {window}
{provider_extra}"#,
                kind = o.provider_kind,
                base = o.provider_base_url,
                window = o.provider_context_window,
                api_key = o.provider_api_key,
                model = o.provider_model,
                provider_extra = o.provider_toml,
            )
        } else {
            String::new()
        },
        ttl = o.lease_ttl_s,
        refresh = o.lease_refresh_s,
        wait = o.lease_wait_s,
        watchdog = if o.lease_watchdog_s == 0 {
            String::new()
        } else {
            format!("watchdog_s = {}\n", o.lease_watchdog_s)
        },
        // The post-delivery review (every 10 turns by default) would take a scripted reply
        // meant for a turn; tests of the review turn it on with their own `[memory]`.
        memory = if o.extra_toml.contains("[memory]") {
            ""
        } else {
            "[memory]\nreview_every = 0\n"
        },
        extra = o.extra_toml,
    );
    std::fs::write(path, toml).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
