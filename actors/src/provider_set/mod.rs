//! The providers a turn may call (SPEC R8.3, R8.4), as a set that changes while the gateway
//! runs: the configured `[[providers]]` first (and a local server `serve` detected when none is
//! configured), then the providers connected at run time (`/v1/providers`, the web UI's
//! "Connect a model"), in the order they were connected.
//!
//! A turn takes a snapshot ([`Providers::snapshot`]) when its model loop starts and keeps it to
//! the end, so its fallback chain never changes under it; the next turn sees the new set. A
//! connection or removal applies at once in the process that made it; every process (replicas
//! included) also reads the stored list every [`RELOAD_EVERY`] and rebuilds its set when the
//! list changed. Keys are stored sealed (`sealed`) and masked in every answer and log line.
pub mod sealed;

use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use crate::redact::Redactor;
use sealed::{SealError, SealKey};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use turnkey_providers::{build_provider, Provider, ProviderConfig, ProviderKind, Secret};
use turnkey_storage::{ConnectedProvider, Store};

/// How often every process reads the stored list of connected providers.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);
/// The largest context window a connected provider may claim.
const MAX_WINDOW: u32 = 10_000_000;
/// The smallest: below this no system prompt and tool list fit.
const MIN_WINDOW: u32 = 1_024;

/// Where a provider of the set comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A `[[providers]]` table or the `OPENAI_*` variables.
    Configured,
    /// A local server `serve` found with nothing configured.
    Detected,
    /// Connected at run time and stored.
    Connected,
}

impl Source {
    /// Its name in answers: `configured`, `detected` or `connected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Detected => "detected",
            Self::Connected => "connected",
        }
    }
}

/// One provider of the set.
pub struct Entry {
    pub config: ProviderConfig,
    pub client: Arc<dyn Provider>,
    pub source: Source,
}

/// The providers in fallback order, the primary first.
#[derive(Default)]
pub struct ProviderSet {
    entries: Vec<Entry>,
    clients: Vec<Arc<dyn Provider>>,
}

impl ProviderSet {
    fn new(entries: Vec<Entry>) -> Self {
        let clients = entries.iter().map(|e| e.client.clone()).collect();
        Self { entries, clients }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The clients, in the same order as [`Self::entries`].
    pub fn clients(&self) -> &[Arc<dyn Provider>] {
        &self.clients
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The primary.
    pub fn primary(&self) -> Option<&Arc<dyn Provider>> {
        self.clients.first()
    }

    /// Whether the provider at `index` writes compression summaries (and is left out of the
    /// chain unless only such providers exist).
    pub fn is_auxiliary(&self, index: usize) -> bool {
        self.entries.get(index).is_some_and(|e| e.config.auxiliary)
    }

    /// The first auxiliary provider.
    pub fn auxiliary(&self) -> Option<&Arc<dyn Provider>> {
        (0..self.entries.len())
            .find(|&i| self.is_auxiliary(i))
            .map(|i| &self.clients[i])
    }

    /// The provider named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.entries
            .iter()
            .position(|e| e.config.name == name)
            .map(|i| &self.clients[i])
    }

    /// Each provider's model, in chain order, once each (`GET /v1/models`).
    pub fn models(&self) -> Vec<String> {
        self.served().into_iter().map(|(m, _)| m).collect()
    }

    /// Each provider's model with the name of the provider serving it, in chain order, once
    /// each (`GET /v1/models`' `owned_by`).
    pub fn served(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for p in &self.clients {
            if !out.iter().any(|(m, _)| m == p.model()) {
                out.push((p.model().to_owned(), p.name().to_owned()));
            }
        }
        out
    }
}

/// A provider to connect, as `POST /v1/providers` takes it.
#[derive(Clone, Debug)]
pub struct NewProvider {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub model: String,
    pub context_window: Option<u32>,
    pub vision: Option<bool>,
}

/// A provider as `GET /v1/providers` shows it: its key masked.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderView {
    pub name: String,
    pub kind: &'static str,
    pub base_url: String,
    pub model: String,
    pub context_window: u32,
    pub vision: bool,
    /// The key's last four characters behind a mask (`…abcd`), or `null` when it has none.
    pub api_key: Option<String>,
    pub source: Source,
    pub auxiliary: bool,
}

impl ProviderView {
    fn of(e: &Entry) -> Self {
        Self {
            name: e.config.name.clone(),
            kind: e.config.kind.as_str(),
            base_url: e.config.base_url.clone(),
            model: e.config.model.clone(),
            context_window: e.config.context_window,
            vision: e.config.sees_images(),
            api_key: e.config.resolved_api_key().map(|k| mask(k.expose())),
            source: e.source,
            auxiliary: e.config.auxiliary,
        }
    }
}

/// A key as an answer shows it: never more than its last four characters, and none of a short
/// one.
pub fn mask(key: &str) -> String {
    let n = key.chars().count();
    if n < 12 {
        return "…".to_owned();
    }
    let tail: String = key.chars().skip(n - 4).collect();
    format!("…{tail}")
}

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidInput {
        code: "invalid_provider",
        message: message.into(),
    }
}

/// The configuration a connected provider runs with: the defaults of a `[[providers]]` table,
/// and what was given.
pub fn config_of(new: &NewProvider) -> Result<ProviderConfig, GatewayError> {
    let name = new.name.trim();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(invalid(
            "name must be 1 to 64 letters, digits, '-', '_' or '.'",
        ));
    }
    let base_url = new.base_url.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(base_url)
        .map_err(|e| invalid(format!("base_url is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(invalid(
            "base_url must be an http:// or https:// URL with a host",
        ));
    }
    let model = new.model.trim();
    if model.is_empty() || model.len() > 200 {
        return Err(invalid("model must be 1 to 200 characters"));
    }
    if let Some(w) = new.context_window {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&w) {
            return Err(invalid(format!(
                "context_window must be between {MIN_WINDOW} and {MAX_WINDOW}"
            )));
        }
    }
    let mut config: ProviderConfig = serde_json::from_value(serde_json::json!({
        "name": name,
        "kind": new.kind.as_str(),
        "base_url": base_url,
        "model": model,
    }))
    .map_err(|e| invalid(e.to_string()))?;
    config.api_key = new.api_key.clone().filter(|k| !k.is_empty());
    if let Some(w) = new.context_window {
        config.context_window = w;
    }
    config.vision = new.vision;
    Ok(config)
}

/// The set of one process, swapped whole when it changes.
pub struct Providers {
    current: RwLock<Arc<ProviderSet>>,
    /// The configured (and detected) providers, which lead every set.
    fixed: Mutex<Vec<Arc<Entry>>>,
    /// The stored rows the current set was built from.
    loaded: Mutex<Vec<ConnectedProvider>>,
    /// Serializes rebuilds, so two never interleave.
    rebuild: tokio::sync::Mutex<()>,
    key_file: PathBuf,
    key: Mutex<Option<Arc<SealKey>>>,
    redactor: Redactor,
    store: Store,
}

impl Providers {
    /// The configured providers; the stored ones are added by [`Self::reload`].
    pub fn new(
        config: &RuntimeConfig,
        store: Store,
        redactor: Redactor,
    ) -> Result<Self, GatewayError> {
        let mut fixed = Vec::new();
        for p in &config.providers {
            fixed.push(Arc::new(Entry {
                client: build_provider(p).map_err(|e| GatewayError::Config {
                    key: "providers".into(),
                    reason: e.to_string(),
                })?,
                config: p.clone(),
                source: Source::Configured,
            }));
        }
        let key_file = key_file(config);
        let this = Self {
            current: RwLock::default(),
            fixed: Mutex::new(fixed),
            loaded: Mutex::default(),
            rebuild: tokio::sync::Mutex::new(()),
            key_file,
            key: Mutex::default(),
            redactor,
            store,
        };
        this.publish(&[]);
        Ok(this)
    }

    /// The set as it is now; a turn keeps it to its end.
    pub fn snapshot(&self) -> Arc<ProviderSet> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    /// Every provider, its key masked, in chain order.
    pub fn views(&self) -> Vec<ProviderView> {
        self.snapshot()
            .entries()
            .iter()
            .map(ProviderView::of)
            .collect()
    }

    /// Adds a local server `serve` found with nothing configured; it leads the set like a
    /// configured one.
    pub fn add_detected(&self, config: ProviderConfig) -> Result<(), GatewayError> {
        let client = build_provider(&config).map_err(|e| GatewayError::Config {
            key: "providers".into(),
            reason: e.to_string(),
        })?;
        self.lock_fixed().push(Arc::new(Entry {
            config,
            client,
            source: Source::Detected,
        }));
        let rows = self.lock_loaded().clone();
        self.publish(&rows);
        Ok(())
    }

    /// Reads the stored list and rebuilds the set when it changed. A stored provider that
    /// cannot be used here (its key does not open with this process's key file) is left out
    /// and logged, not fatal.
    pub async fn reload(&self) -> Result<(), GatewayError> {
        let _one = self.rebuild.lock().await;
        let rows = self.store.connected_providers().await?;
        if *self.lock_loaded() == rows {
            return Ok(());
        }
        self.publish(&rows);
        Ok(())
    }

    /// Checks `new` (the caller tried it live first), seals its key, stores it and applies it.
    /// A name already in the set is 409 `provider_exists`.
    pub async fn connect(&self, new: &NewProvider, by: &str) -> Result<ProviderView, GatewayError> {
        let config = self.validate(new)?;
        let sealed = match &config.api_key {
            Some(k) => Some(
                self.seal_key(true)?
                    .ok_or_else(|| GatewayError::Io("no secrets key".into()))?
                    .seal(&config.name, k.expose())
                    .map_err(seal_error)?,
            ),
            None => None,
        };
        let row = ConnectedProvider {
            name: config.name.clone(),
            kind: config.kind.as_str().to_owned(),
            base_url: config.base_url.clone(),
            model: config.model.clone(),
            api_key_sealed: sealed,
            context_window: new.context_window.map(i64::from),
            vision: config.vision,
            created_at: 0,
            created_by: by.to_owned(),
        };
        if let Some(k) = &config.api_key {
            self.redactor.add_secret(k.expose());
        }
        if self.store.connect_provider(row).await?.is_none() {
            return Err(exists(&config.name));
        }
        self.reload().await?;
        let set = self.snapshot();
        let entry = set
            .entries()
            .iter()
            .find(|e| e.config.name == config.name)
            .ok_or_else(|| {
                GatewayError::Io(format!(
                    "provider {} was stored but not loaded",
                    config.name
                ))
            })?;
        Ok(ProviderView::of(entry))
    }

    /// The configuration `new` runs with, if it may be connected: valid, and no provider of
    /// the set has its name.
    pub fn validate(&self, new: &NewProvider) -> Result<ProviderConfig, GatewayError> {
        let config = config_of(new)?;
        if self
            .snapshot()
            .entries()
            .iter()
            .any(|e| e.config.name == config.name)
        {
            return Err(exists(&config.name));
        }
        Ok(config)
    }

    /// Removes connected provider `name`; `NotFound` for a configured one or none.
    pub async fn remove(&self, name: &str, by: &str) -> Result<(), GatewayError> {
        if !self.store.remove_provider(name, by).await? {
            let configured = self
                .snapshot()
                .entries()
                .iter()
                .any(|e| e.config.name == name && e.source != Source::Connected);
            return Err(if configured {
                GatewayError::Conflict {
                    code: "provider_configured",
                    message: format!(
                        "provider {name} comes from the configuration; remove it there and restart"
                    ),
                }
            } else {
                GatewayError::NotFound(format!("provider {name}"))
            });
        }
        self.reload().await
    }

    /// Rebuilds the set from the fixed entries and `rows`.
    fn publish(&self, rows: &[ConnectedProvider]) {
        let fixed = self.lock_fixed().clone();
        let mut entries: Vec<Entry> = fixed
            .iter()
            .map(|e| Entry {
                config: e.config.clone(),
                client: e.client.clone(),
                source: e.source,
            })
            .collect();
        for row in rows {
            if entries.iter().any(|e| e.config.name == row.name) {
                tracing::warn!(provider = %row.name, "a connected provider has the name of a configured one and is left out");
                continue;
            }
            match self.entry_of(row) {
                Ok(entry) => entries.push(entry),
                Err(why) => {
                    tracing::error!(provider = %row.name, error = %why, "a connected provider cannot be used by this process")
                }
            }
        }
        let set = Arc::new(ProviderSet::new(entries));
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = set;
        *self.lock_loaded() = rows.to_vec();
    }

    fn entry_of(&self, row: &ConnectedProvider) -> Result<Entry, String> {
        let key = match row.api_key_sealed {
            Some(_) => Some(
                self.seal_key(false)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| {
                        format!(
                            "its key is sealed but the secrets key file {} is missing",
                            self.key_file.display()
                        )
                    })?,
            ),
            None => None,
        };
        let config = stored_config(row, key.as_deref())?;
        if let Some(k) = &config.api_key {
            self.redactor.add_secret(k.expose());
        }
        let client = build_provider(&config).map_err(|e| e.to_string())?;
        Ok(Entry {
            config,
            client,
            source: Source::Connected,
        })
    }

    /// The sealing key, loaded once; made when `create` and the file does not exist yet.
    fn seal_key(&self, create: bool) -> Result<Option<Arc<SealKey>>, GatewayError> {
        let mut cached = self.key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = cached.as_ref() {
            return Ok(Some(k.clone()));
        }
        let loaded = if create {
            Some(SealKey::load_or_create(&self.key_file).map_err(seal_error)?)
        } else {
            SealKey::load(&self.key_file).map_err(seal_error)?
        };
        *cached = loaded.map(Arc::new);
        Ok(cached.clone())
    }

    fn lock_fixed(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Entry>>> {
        self.fixed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, Vec<ConnectedProvider>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The configuration a stored connected provider runs with, its key opened with `key`.
pub fn stored_config(
    row: &ConnectedProvider,
    key: Option<&SealKey>,
) -> Result<ProviderConfig, String> {
    let kind =
        ProviderKind::from_name(&row.kind).ok_or_else(|| format!("unknown kind {:?}", row.kind))?;
    let api_key = match (&row.api_key_sealed, key) {
        (Some(sealed), Some(key)) => Some(Secret::from(
            key.open(&row.name, sealed).map_err(|e| e.to_string())?,
        )),
        (Some(_), None) => return Err("its key is sealed and no secrets key file was found".into()),
        (None, _) => None,
    };
    config_of(&NewProvider {
        name: row.name.clone(),
        kind,
        base_url: row.base_url.clone(),
        api_key,
        model: row.model.clone(),
        context_window: row.context_window.and_then(|w| u32::try_from(w).ok()),
        vision: row.vision,
    })
    .map_err(|e| e.to_string())
}

/// Where the key that seals connected providers' keys is: `security.secrets_key_file`, else
/// `<data_dir>/secrets.key`.
pub fn key_file(config: &RuntimeConfig) -> PathBuf {
    if config.security.secrets_key_file.as_os_str().is_empty() {
        config.data_dir.join("secrets.key")
    } else {
        config.security.secrets_key_file.clone()
    }
}

fn exists(name: &str) -> GatewayError {
    GatewayError::Conflict {
        code: "provider_exists",
        message: format!("a provider named {name} exists; choose another name or remove it first"),
    }
}

fn seal_error(e: SealError) -> GatewayError {
    GatewayError::Io(e.to_string())
}

/// Reads the stored list every [`RELOAD_EVERY`] until `stop`: providers connected or removed
/// by another process (a replica) apply here too. On the actix arbiter, like the gateway's other
/// background passes, so it is dropped with them, on the runtime.
pub fn spawn_reloader(providers: Arc<Providers>, stop: tokio_util::sync::CancellationToken) {
    actix::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                () = stop.cancelled() => return,
                r = providers.reload() => if let Err(e) = r {
                    tracing::warn!(error = %e, "could not read the connected providers");
                },
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(name: &str, url: &str) -> NewProvider {
        NewProvider {
            name: name.into(),
            kind: ProviderKind::Openai,
            base_url: url.into(),
            api_key: None,
            model: "m".into(),
            context_window: None,
            vision: None,
        }
    }

    #[test]
    fn a_connected_providers_settings_are_checked() {
        assert!(config_of(&new("local-1.a_b", "http://127.0.0.1:11434/v1/")).is_ok());
        let c = config_of(&new("x", "http://127.0.0.1:1/v1/")).unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:1/v1", "a trailing slash goes");
        assert_eq!(
            c.context_window, 128_000,
            "the [[providers]] defaults apply"
        );
        for (name, url) in [
            ("", "http://127.0.0.1:1"),
            ("a b", "http://127.0.0.1:1"),
            ("ok", "ftp://127.0.0.1/"),
            ("ok", "not a url"),
            ("ok", "file:///etc/passwd"),
        ] {
            assert!(config_of(&new(name, url)).is_err(), "{name:?} {url:?}");
        }
        let mut small = new("ok", "http://127.0.0.1:1");
        small.context_window = Some(10);
        assert!(config_of(&small).is_err());
    }

    #[test]
    fn a_key_is_masked_to_its_last_four() {
        assert_eq!(mask("sk-abcdefghijklmnop"), "…mnop");
        assert_eq!(mask("short-key"), "…");
    }
}
