//! The provider set of one process ([`Providers`]): built from the configuration, the detected
//! server and the stored rows, swapped whole when one of them changes, and re-read from the
//! store every [`RELOAD_EVERY`] so replicas follow one another.
use super::sealed::{SealError, SealKey};
use super::settings::{detected_name, exists, stored_config};
use super::window::{self, ServerWindow, WindowSource};
use super::{key_file, Entry, NewProvider, ProviderSet, ProviderView, Source};
use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use crate::redact::Redactor;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use turnkey_providers::{build_provider, ProviderConfig};
use turnkey_storage::{ConnectedProvider, Store};

/// How often every process reads the stored list of connected providers.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// What a stored provider's server said its window is (`None`: it said nothing), by the
/// name, URL and model it was asked for, so a provider replaced under the same name is asked
/// again. Asked once per process: at start, or when the provider is connected.
type WindowKey = (String, String, String);

fn window_key(row: &ConnectedProvider) -> WindowKey {
    (row.name.clone(), row.base_url.clone(), row.model.clone())
}

/// The set of one process, swapped whole when it changes.
pub struct Providers {
    current: RwLock<Arc<ProviderSet>>,
    /// The configured (and detected) providers, which lead every set.
    fixed: Mutex<Vec<Arc<Entry>>>,
    /// The stored rows the current set was built from.
    loaded: Mutex<Vec<ConnectedProvider>>,
    /// What the servers of stored providers without a `context_window` said theirs is.
    windows: Mutex<HashMap<WindowKey, Option<ServerWindow>>>,
    /// Serializes rebuilds, so two never interleave.
    rebuild: tokio::sync::Mutex<()>,
    key_file: PathBuf,
    key: Mutex<Option<Arc<SealKey>>>,
    redactor: Redactor,
    store: Store,
}

fn client_of(
    config: &ProviderConfig,
) -> Result<Arc<dyn turnkey_providers::Provider>, GatewayError> {
    build_provider(config).map_err(|e| GatewayError::Config {
        key: "providers".into(),
        reason: e.to_string(),
    })
}

impl Providers {
    /// The configured providers; the stored ones are added by [`Self::reload`].
    pub fn new(
        config: &RuntimeConfig,
        store: Store,
        redactor: Redactor,
    ) -> Result<Self, GatewayError> {
        let mut fixed = Vec::new();
        for (i, p) in config.providers.iter().enumerate() {
            let set = config.provider_windows_set.get(i).copied().unwrap_or(false);
            fixed.push(Arc::new(Entry {
                client: client_of(p)?,
                config: p.clone(),
                source: Source::Configured,
                window: if set {
                    WindowSource::Configured
                } else {
                    WindowSource::Default
                },
            }));
        }
        let key_file = key_file(config);
        let this = Self {
            current: RwLock::default(),
            fixed: Mutex::new(fixed),
            loaded: Mutex::default(),
            windows: Mutex::default(),
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
        let set = self.snapshot();
        (0..set.entries().len())
            .filter_map(|i| ProviderView::of(&set, i))
            .collect()
    }

    /// Adds a local server `serve` found with nothing configured: it leads the set, before the
    /// connected providers, with the context window its server says. Named as found, unless a
    /// connected provider has that name ([`detected_name`]).
    pub async fn add_detected(&self, mut config: ProviderConfig) -> Result<(), GatewayError> {
        let said = window::read(&config).await;
        let _one = self.rebuild.lock().await;
        let rows = self.lock_loaded().clone();
        config.name = detected_name(&config.name, |n| rows.iter().any(|r| r.name == n));
        let window = match said {
            Some(w) => {
                config.context_window = w.tokens;
                WindowSource::Server(w.from)
            }
            None => WindowSource::Default,
        };
        self.lock_fixed().push(Arc::new(Entry {
            client: client_of(&config)?,
            config,
            source: Source::Detected,
            window,
        }));
        self.publish(&rows);
        Ok(())
    }

    /// Reads the stored list and rebuilds the set when it changed, asking the server of a new
    /// provider without a `context_window` for its window first. A stored provider that cannot
    /// be used here (its key does not open with this process's key file) is left out and
    /// logged, not fatal.
    pub async fn reload(&self) -> Result<(), GatewayError> {
        let _one = self.rebuild.lock().await;
        let rows = self.store.connected_providers().await?;
        if *self.lock_loaded() == rows {
            return Ok(());
        }
        self.ask_windows(&rows).await;
        self.publish(&rows);
        Ok(())
    }

    /// Asks the servers of `rows` not asked yet that have no `context_window` of their own.
    async fn ask_windows(&self, rows: &[ConnectedProvider]) {
        let asked = {
            let windows = self.lock_windows();
            rows.iter()
                .filter(|r| r.context_window.is_none() && !windows.contains_key(&window_key(r)))
                .cloned()
                .collect::<Vec<_>>()
        };
        let reads = asked.iter().map(|row| async move {
            let said = match self.entry_of(row, None) {
                Ok(entry) => window::read(&entry.config).await,
                Err(_) => None,
            };
            (window_key(row), said)
        });
        let said = futures::future::join_all(reads).await;
        self.lock_windows().extend(said);
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
        set.entries()
            .iter()
            .position(|e| e.config.name == config.name)
            .and_then(|i| ProviderView::of(&set, i))
            .ok_or_else(|| {
                GatewayError::Io(format!(
                    "provider {} was stored but not loaded",
                    config.name
                ))
            })
    }

    /// The configuration `new` runs with, if it may be connected: valid, and no provider of
    /// the set has its name.
    pub fn validate(&self, new: &NewProvider) -> Result<ProviderConfig, GatewayError> {
        let config = super::config_of(new)?;
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

    /// Removes connected provider `name`; `NotFound` for none, `Conflict` for a configured or
    /// detected one.
    pub async fn remove(&self, name: &str, by: &str) -> Result<(), GatewayError> {
        if !self.store.remove_provider(name, by).await? {
            let source = self
                .snapshot()
                .entries()
                .iter()
                .find(|e| e.config.name == name)
                .map(|e| e.source);
            return Err(match source {
                Some(Source::Configured) => GatewayError::Conflict {
                    code: "provider_configured",
                    message: format!(
                        "provider {name} comes from the configuration; remove it there and restart"
                    ),
                },
                Some(Source::Detected) => GatewayError::Conflict {
                    code: "provider_configured",
                    message: format!(
                        "provider {name} is the local server found at start; stop that server, \
                         or set server.detect_providers = [] (or configure a provider), and restart"
                    ),
                },
                _ => GatewayError::NotFound(format!("provider {name}")),
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
                window: e.window,
            })
            .collect();
        let windows = self.lock_windows().clone();
        for row in rows {
            if entries.iter().any(|e| e.config.name == row.name) {
                tracing::warn!(provider = %row.name, "a connected provider has the name of a configured one and is left out");
                continue;
            }
            let said = windows.get(&window_key(row)).copied().flatten();
            match self.entry_of(row, said) {
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

    /// The entry of a stored row, with the window its server `said` when it has none of its
    /// own.
    fn entry_of(
        &self,
        row: &ConnectedProvider,
        said: Option<ServerWindow>,
    ) -> Result<Entry, String> {
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
        let mut config = stored_config(row, key.as_deref())?;
        if let Some(k) = &config.api_key {
            self.redactor.add_secret(k.expose());
        }
        let window = match (row.context_window, said) {
            (Some(_), _) => WindowSource::Configured,
            (None, Some(w)) => {
                config.context_window = w.tokens;
                WindowSource::Server(w.from)
            }
            (None, None) => WindowSource::Default,
        };
        let client = build_provider(&config).map_err(|e| e.to_string())?;
        Ok(Entry {
            config,
            client,
            source: Source::Connected,
            window,
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

    fn lock_windows(&self) -> std::sync::MutexGuard<'_, HashMap<WindowKey, Option<ServerWindow>>> {
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
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
