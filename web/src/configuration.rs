//! Settings, layered with the `config` crate: built-in defaults → `turnkey.toml` (or
//! `--config FILE`) → conventional variables (`DATABASE_URL`, `OPENAI_*`) →
//! `TURNKEY__SECTION__KEY` → command-line flags. An invalid value is reported with its key;
//! unknown keys and sections this build does not serve yet are refused, not ignored.
mod messages;
mod own;
mod sections;

pub use own::{
    AuthSettings, ClientTools, DatabaseSettings, OpenAiSettings, ServerSettings, TelemetrySettings,
};

use config::{Config, ConfigError, Environment, File, FileFormat, Map, Source, Value, ValueKind};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use turnkey_actors::RuntimeConfig;

/// The file read from the working directory when no `--config` is given.
pub const DEFAULT_CONFIG_FILE: &str = "turnkey.toml";
const ENV_PREFIX: &str = "TURNKEY";
const ENV_SEPARATOR: &str = "__";
/// The model of the provider made from `OPENAI_*` variables when `OPENAI_MODEL` is unset.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";

/// The settings: the web crate's own sections, and the runtime's (`RuntimeConfig`: `[agent]`,
/// `[tools]`, `[[providers]]` and the rest) read into it directly, at the top level of the same
/// file (`sections`). Unknown keys and sections are refused.
// Serialize only so that tests can list every key the build accepts (the example file).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub auth: AuthSettings,
    /// `[telemetry]`: OpenTelemetry traces over OTLP/HTTP, off unless `otlp_endpoint` is set.
    pub telemetry: TelemetrySettings,
    /// `[openai]`: the OpenAI-compatible doors.
    pub openai: OpenAiSettings,
    /// What the actors run on. Its `data_dir` and `files` are `[server]`'s (`runtime`), and
    /// `provider_windows_set` is read from the `[[providers]]` tables.
    #[serde(flatten)]
    pub runtime: RuntimeConfig,
}

/// Keys of the contract (API.md) that this build does not serve yet. Each is refused by name
/// rather than accepted and ignored; a later build that serves one removes it from here.
const NOT_IN_THIS_BUILD: &[(&str, &str)] = &[];

impl Settings {
    /// The part of the settings the actors run on, with the two facts it takes from
    /// `[server]`: the data directory and the largest upload.
    pub fn runtime(&self) -> RuntimeConfig {
        let mut runtime = self.runtime.clone();
        runtime.data_dir = self.server.data_dir.clone();
        runtime.files.max_upload_bytes = self.server.max_upload_bytes;
        runtime
    }

    fn validate(&self) -> Result<(), InvalidConfig> {
        validate_bind(&self.server.bind)?;
        for (i, origin) in self.server.cors_origins.iter().enumerate() {
            validate_origin(origin).map_err(|reason| {
                InvalidConfig::new(format!("server.cors_origins[{i}]"), reason)
            })?;
        }
        if self.runtime.stt.on() {
            let ok = reqwest::Url::parse(self.runtime.stt.base_url.trim())
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
            if !ok {
                return Err(InvalidConfig::new(
                    "stt.base_url",
                    "must be an http(s) base URL such as https://api.openai.com/v1, or empty",
                ));
            }
        }
        if self.runtime.stt.timeout_s == 0 {
            return Err(InvalidConfig::new(
                "stt.timeout_s",
                "must be greater than 0",
            ));
        }
        for (i, url) in self.server.detect_providers.iter().enumerate() {
            let ok = reqwest::Url::parse(url)
                .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
            if !ok {
                return Err(InvalidConfig::new(
                    format!("server.detect_providers[{i}]"),
                    format!("{url:?} is not an http(s) base URL such as http://127.0.0.1:11434/v1"),
                ));
            }
        }
        if self.server.max_body_bytes == 0 {
            return Err(InvalidConfig::new(
                "server.max_body_bytes",
                "must be greater than 0",
            ));
        }
        if self.server.max_upload_bytes == 0 {
            return Err(InvalidConfig::new(
                "server.max_upload_bytes",
                "must be greater than 0",
            ));
        }
        if self.server.sse_keepalive_s == 0 {
            return Err(InvalidConfig::new(
                "server.sse_keepalive_s",
                "must be at least 1 (seconds)",
            ));
        }
        if self.server.data_dir.as_os_str().is_empty() {
            return Err(InvalidConfig::new("server.data_dir", "must not be empty"));
        }
        let url = &self.database.url;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            return Err(InvalidConfig::new(
                "database.url",
                "must start with sqlite:, postgres:// or postgresql://",
            ));
        }
        if let Some(t) = &self.auth.operator_token {
            if t.expose().trim().is_empty() {
                return Err(InvalidConfig::new(
                    "auth.operator_token",
                    "must not be empty when set",
                ));
            }
        }
        self.telemetry.validate()?;
        self.runtime()
            .validate()
            .map_err(|(key, reason)| InvalidConfig { key, reason })
    }
}

/// `server.bind` must be `host:port` with a port in 0..=65535 (0 picks a free port), checked
/// before anything touches the store so that a typo is a usage error (exit 2).
fn validate_bind(bind: &str) -> Result<(), InvalidConfig> {
    if bind.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let bad = || {
        InvalidConfig::new(
            "server.bind",
            format!("{bind:?} is not host:port (for example 127.0.0.1:8080 or [::1]:8080)"),
        )
    };
    let (host, port) = bind.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    let hostname = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if hostname {
        Ok(())
    } else {
        Err(bad())
    }
}

/// A CORS origin must be what a browser sends in `Origin`: `http` or `https`, a host, an
/// optional port, and nothing else (no path, not even `/`; no wildcard), so that matching it is
/// a plain string comparison.
pub fn validate_origin(origin: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(origin).map_err(|e| {
        format!("{origin:?} is not an origin ({e}); write scheme://host[:port], e.g. https://ui.example.com")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{origin:?} is not an origin: the scheme must be http or https"
        ));
    }
    let canonical = url.origin().ascii_serialization();
    if canonical != origin {
        return Err(format!(
            "{origin:?} is not an origin as browsers send it; write {canonical:?} (no path, \
             no trailing slash, lower-case host, no default port)"
        ));
    }
    Ok(())
}

/// Refuses, by name, any key of [`NOT_IN_THIS_BUILD`] that a layer sets.
fn refuse_unavailable(config: &Config) -> Result<(), InvalidConfig> {
    for (key, why) in NOT_IN_THIS_BUILD {
        if config.get::<Value>(key).is_ok() {
            return Err(InvalidConfig::new(
                *key,
                format!("not available in this build (planned): {why}; remove it"),
            ));
        }
    }
    Ok(())
}

fn settings_of(config: Config) -> Result<Settings, InvalidConfig> {
    refuse_unavailable(&config)?;
    let windows_set: Vec<bool> = config
        .get_array("providers")
        .unwrap_or_default()
        .into_iter()
        .map(|table| {
            table
                .into_table()
                .is_ok_and(|t| t.contains_key("context_window"))
        })
        .collect();
    let mut settings: Settings = config.try_deserialize().map_err(InvalidConfig::from)?;
    settings.runtime.provider_windows_set = windows_set;
    Ok(settings)
}

/// What the command line says, which wins over every other layer.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// Must exist when given; otherwise `turnkey.toml` in the working directory is optional.
    pub config_file: Option<PathBuf>,
    pub bind: Option<String>,
    pub database_url: Option<String>,
}

/// A setting that cannot be used, named by its key (exit code 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfig {
    pub key: String,
    pub reason: String,
}

impl InvalidConfig {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config: {}: {}", self.key, self.reason)
    }
}

impl std::error::Error for InvalidConfig {}

/// Loads the settings from the process environment and the working directory.
pub fn load(overrides: &Overrides) -> Result<Settings, InvalidConfig> {
    let env: HashMap<String, String> = std::env::vars().collect();
    let cwd = std::env::current_dir()
        .map_err(|e| InvalidConfig::new("config", format!("no working directory: {e}")))?;
    load_from(overrides, &env, &cwd)
}

/// Loads the settings from an explicit environment and working directory (for tests).
pub fn load_from(
    overrides: &Overrides,
    env: &HashMap<String, String>,
    cwd: &Path,
) -> Result<Settings, InvalidConfig> {
    let file = config_file(overrides, cwd)?;
    // The first pass only tells whether the file or TURNKEY__ variables configure providers;
    // conventional provider variables fill in only when nothing does.
    let first = settings_of(layered(file.as_deref(), None, env, overrides)?)?;
    let conventional = Conventional::from_env(env, first.runtime.providers.is_empty());
    let mut settings = settings_of(layered(
        file.as_deref(),
        Some(conventional),
        env,
        overrides,
    )?)?;
    if settings.database.url.is_empty() {
        settings.database.url = default_database_url(&settings.server.data_dir);
    }
    settings.validate()?;
    Ok(settings)
}

fn config_file(overrides: &Overrides, cwd: &Path) -> Result<Option<PathBuf>, InvalidConfig> {
    match &overrides.config_file {
        Some(path) if path.is_file() => Ok(Some(path.clone())),
        Some(path) => Err(InvalidConfig::new(
            "--config",
            format!("no such file: {}", path.display()),
        )),
        None => {
            let default = cwd.join(DEFAULT_CONFIG_FILE);
            Ok(default.is_file().then_some(default))
        }
    }
}

fn layered(
    file: Option<&Path>,
    conventional: Option<Conventional>,
    env: &HashMap<String, String>,
    overrides: &Overrides,
) -> Result<Config, InvalidConfig> {
    let mut builder = Config::builder();
    if let Some(path) = file {
        builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true));
    }
    if let Some(c) = conventional {
        builder = builder.add_source(c);
    }
    let prefix = format!("{ENV_PREFIX}{ENV_SEPARATOR}");
    let mut ours: Map<String, String> = env
        .iter()
        .filter(|(k, _)| k.to_ascii_uppercase().starts_with(&prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // The list-valued keys are comma separated in the environment. Values stay strings
    // otherwise, so that a token such as "1e5" is not read as a number.
    let lists: Vec<(String, Vec<String>)> = LIST_KEYS
        .iter()
        .filter_map(|&(section, key)| {
            let var = format!(
                "{prefix}{}{ENV_SEPARATOR}{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            );
            let items = comma_list(&ours.remove(&var)?);
            Some((format!("{section}.{key}"), items))
        })
        .collect();
    builder = builder.add_source(
        Environment::with_prefix(ENV_PREFIX)
            .prefix_separator(ENV_SEPARATOR)
            .separator(ENV_SEPARATOR)
            .source(Some(ours)),
    );
    for (path, items) in lists {
        builder = builder
            .set_override(path, items)
            .map_err(InvalidConfig::from)?;
    }
    builder = builder
        .set_override_option("server.bind", overrides.bind.clone())
        .and_then(|b| b.set_override_option("database.url", overrides.database_url.clone()))
        .map_err(InvalidConfig::from)?;
    builder.build().map_err(InvalidConfig::from)
}

/// The keys whose `TURNKEY__SECTION__KEY` variable is a comma list.
const LIST_KEYS: &[(&str, &str)] = &[
    ("tools", "enabled"),
    ("server", "cors_origins"),
    ("server", "detect_providers"),
];

fn comma_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// `sqlite://<data_dir>/turnkey.db?mode=rwc`: the SQLite file lives in the data directory.
pub fn default_database_url(data_dir: &Path) -> String {
    let dir = data_dir.to_string_lossy();
    let dir = dir.trim_end_matches('/');
    format!("sqlite://{dir}/turnkey.db?mode=rwc")
}

/// The conventional variables other tools already set, as one configuration layer.
#[derive(Clone, Debug)]
struct Conventional(Map<String, Value>);

impl Conventional {
    fn from_env(env: &HashMap<String, String>, synthesize_providers: bool) -> Self {
        let origin = "the environment".to_string();
        let get = |k: &str| env.get(k).filter(|v| !v.trim().is_empty()).cloned();
        let mut map = Map::new();
        if let Some(url) = get("DATABASE_URL") {
            map.insert("database.url".into(), Value::new(Some(&origin), url));
        }
        // Only the OPENAI_* variables make a provider (API.md): ANTHROPIC_API_KEY, often left in
        // a shell for other tools, is read only by a [[providers]] entry that names it in
        // api_key_env.
        if synthesize_providers
            && (get("OPENAI_API_KEY").is_some() || get("OPENAI_BASE_URL").is_some())
        {
            let openai = provider_table(
                &origin,
                "openai",
                get("OPENAI_BASE_URL").unwrap_or_else(|| "https://api.openai.com/v1".into()),
                "OPENAI_API_KEY",
                get("OPENAI_MODEL").unwrap_or_else(|| DEFAULT_OPENAI_MODEL.into()),
            );
            map.insert(
                "providers".into(),
                Value::new(Some(&origin), ValueKind::Array(vec![openai])),
            );
        }
        Self(map)
    }
}

fn provider_table(
    origin: &String,
    kind: &str,
    base_url: String,
    key_env: &str,
    model: String,
) -> Value {
    let mut t = Map::new();
    let mut put = |k: &str, v: String| {
        t.insert(k.to_string(), Value::new(Some(origin), v));
    };
    put("name", kind.to_string());
    put("kind", kind.to_string());
    put("base_url", base_url);
    put("api_key_env", key_env.to_string());
    put("model", model);
    Value::new(Some(origin), ValueKind::Table(t))
}

impl Source for Conventional {
    fn clone_into_box(&self) -> Box<dyn Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<Map<String, Value>, ConfigError> {
        Ok(self.0.clone())
    }
}
