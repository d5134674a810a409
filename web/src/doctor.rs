//! `turnkey doctor`: checks the configuration, the store and every provider, and reports each.
//! It changes nothing: no directory, no database file, no table is created (a SQLite file is
//! opened read-only), so it is safe to run against a live deployment. Any problem means exit 1;
//! a warning (an OS sandbox `auto` cannot put in force) does not.
use crate::configuration::Settings;
use crate::provider_probe::CHECK_TIMEOUT;
use migration::sea_orm::{ConnectOptions, Database, EntityTrait};
use migration::{Migrator, MigratorTrait};
use std::path::{Path, PathBuf};
use turnkey_actors::config::ToolsConfig;
use turnkey_actors::provider_set::{self, Role, Source};
use turnkey_providers::ProviderConfig;
use turnkey_storage::entity::connected_provider;
use turnkey_storage::ConnectedProvider;
use turnkey_tools::Sandbox;

/// One line of the report: what was checked and whether it is fine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub subject: String,
    pub ok: bool,
    /// Fine to run with, but worth a look (printed `WARNING`; not a problem).
    pub warning: bool,
    pub detail: String,
}

impl Finding {
    fn ok(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            ok: true,
            warning: false,
            detail: detail.into(),
        }
    }

    fn warning(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            warning: true,
            ..Self::ok(subject, detail)
        }
    }

    fn problem(subject: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            ok: false,
            ..Self::ok(subject, detail)
        }
    }

    /// `store: ok: …`, `sandbox: WARNING: …` or `store: PROBLEM: …`.
    pub fn line(&self) -> String {
        let verdict = match (self.ok, self.warning) {
            (false, _) => "PROBLEM",
            (true, true) => "WARNING",
            (true, false) => "ok",
        };
        format!("{}: {verdict}: {}", self.subject, self.detail)
    }
}

/// Every check, in the order printed. The configuration itself was checked by loading it.
pub async fn check(settings: &Settings) -> Vec<Finding> {
    let mut findings = vec![Finding::ok(
        "config",
        format!(
            "bind {}, data_dir {}",
            settings.server.bind,
            settings.server.data_dir.display()
        ),
    )];
    let (store, connected) = check_store(&settings.database.url).await;
    findings.push(store);
    findings.push(check_sandbox(&settings.runtime.tools));
    // The same order as serve's set (`turnkey_actors::provider_set`): the configured ones; with
    // none, the local server it would detect; then the ones connected at run time.
    // Each with where it comes from and how its context window is known.
    let mut providers: Vec<(ProviderConfig, Source, Window)> = settings
        .runtime
        .providers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let set = settings
                .runtime
                .provider_windows_set
                .get(i)
                .copied()
                .unwrap_or(false);
            let window = if set { Window::Set } else { Window::Default };
            (p.clone(), Source::Configured, window)
        })
        .collect();
    if settings.runtime.providers.is_empty() {
        match crate::startup::detect_provider(settings).await {
            Some(mut found) => {
                found.name = provider_set::detected_name(&found.name, |n| {
                    connected.iter().any(|r| r.name == n)
                });
                findings.push(Finding::warning(
                    "providers",
                    format!(
                        "none configured; serve would use the local server it finds at {} \
                         (model {}) first until a [[providers]] table or OPENAI_* variables \
                         name one",
                        found.base_url, found.model
                    ),
                ));
                providers.push((found, Source::Detected, Window::Ask));
            }
            None if connected.is_empty() => findings.push(Finding::problem(
                "providers",
                "none configured and no local server found on the usual ports, so every \
                 submission is refused (503 no_provider); add a [[providers]] table to \
                 turnkey.toml, or set OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL",
            )),
            None => {}
        }
    }
    let key_file = provider_set::key_file(&settings.runtime());
    let key = match provider_set::sealed::SealKey::load(&key_file) {
        Ok(key) => key,
        Err(e) => {
            findings.push(Finding::problem("secrets key", e.to_string()));
            None
        }
    };
    for row in &connected {
        match provider_set::stored_config(row, key.as_ref()) {
            Ok(p) => {
                let window = if row.context_window.is_some() {
                    Window::Set
                } else {
                    Window::Ask
                };
                providers.push((p, Source::Connected, window));
            }
            Err(why) => findings.push(Finding::problem(
                format!("connected provider {}", row.name),
                format!("cannot be used: {why} (key file {})", key_file.display()),
            )),
        }
    }
    let auxiliary: Vec<bool> = providers.iter().map(|(p, ..)| p.auxiliary).collect();
    let roles = provider_set::roles(&auxiliary);
    for (i, ((p, source, window), role)) in providers.iter().zip(roles).enumerate() {
        let subject = format!(
            "provider[{i}] {} ({}, model {})",
            p.name,
            role_label(role, *source),
            p.model
        );
        findings.push(match crate::provider_probe::check(p, CHECK_TIMEOUT).await {
            Ok(detail) => Finding::ok(
                subject,
                format!("{detail}; {}", window_of(p, *window).await),
            ),
            Err(detail) => Finding::problem(subject, detail),
        });
    }
    findings
}

/// How `serve` knows a provider's context window.
#[derive(Clone, Copy)]
enum Window {
    /// `context_window` is set (in its table, or when it was connected).
    Set,
    /// A configured provider without one: 128,000.
    Default,
    /// Read from its server (detected, or connected without one).
    Ask,
}

/// The context window serve would use, and where it comes from, as `GET /v1/providers` says.
async fn window_of(p: &ProviderConfig, window: Window) -> String {
    let tokens = p.context_window;
    match window {
        Window::Set => format!("context window {tokens} tokens, configured"),
        Window::Default => format!("context window {tokens} tokens, the default"),
        Window::Ask => match provider_set::window::read(p).await {
            Some(w) => format!(
                "context window {} tokens, read from the server ({})",
                w.tokens, w.from
            ),
            None => format!(
                "context window {tokens} tokens, the default: the server does not say its own"
            ),
        },
    }
}

/// `primary`, `fallback 1`, `auxiliary`, … as the web UI's Models page says it, and where the
/// provider comes from unless the configuration: `primary, detected`, `fallback 2, connected`.
fn role_label(role: Role, source: Source) -> String {
    let role = match role {
        Role::Fallback(n) => format!("fallback {n}"),
        other => other.as_str().to_owned(),
    };
    match source {
        Source::Configured => role,
        other => format!("{role}, {}", other.as_str()),
    }
}

/// The OS sandbox on this kernel (SPEC R13.7): what `serve` would confine commands with. In
/// `landlock` mode a kernel that cannot confine is a problem (`serve` would refuse to start);
/// in `auto` mode a warning (it would start unconfined, loudly).
fn check_sandbox(tools: &ToolsConfig) -> Finding {
    match Sandbox::new(tools.sandbox, tools.sandbox_network) {
        Err(e) => Finding::problem("sandbox", e.to_string()),
        Ok(sandbox) => {
            let state = sandbox.state();
            if state.complete() {
                Finding::ok("sandbox", state.summary())
            } else {
                Finding::warning("sandbox", state.summary())
            }
        }
    }
}

/// Where a SQLite URL points.
#[derive(Debug, PartialEq, Eq)]
enum SqliteTarget {
    Memory,
    File(PathBuf),
}

/// `sqlite://PATH?…`, `sqlite:PATH`, `sqlite::memory:`; `None` for any other scheme.
fn sqlite_target(url: &str) -> Option<SqliteTarget> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || query.split('&').any(|kv| kv == "mode=memory") {
        return Some(SqliteTarget::Memory);
    }
    Some(SqliteTarget::File(PathBuf::from(path)))
}

/// A read-only URL for an existing SQLite file. Without a `-wal` file beside it (no server
/// running) it is also opened `immutable`, since a read-only open of a WAL database would
/// otherwise leave new `-wal` and `-shm` files behind.
fn read_only_url(path: &Path) -> String {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let immutable = if Path::new(&wal).exists() {
        ""
    } else {
        "&immutable=true"
    };
    format!("sqlite://{}?mode=ro{immutable}", path.display())
}

/// The store's state, and the providers connected at run time that it holds (read only when
/// it is migrated).
async fn check_store(url: &str) -> (Finding, Vec<ConnectedProvider>) {
    let shown = redact_url(url);
    let connect_url = match sqlite_target(url) {
        Some(SqliteTarget::Memory) => {
            return (
                Finding::ok("store", format!("{shown} is in memory: nothing to check")),
                Vec::new(),
            );
        }
        Some(SqliteTarget::File(path)) if !path.exists() => {
            return (
                Finding::ok(
                    "store",
                    format!(
                        "{} does not exist yet; the first `turnkey serve` (or `turnkey migrate`) \
                         creates and migrates it",
                        path.display()
                    ),
                ),
                Vec::new(),
            );
        }
        Some(SqliteTarget::File(path)) => read_only_url(&path),
        None => url.to_owned(),
    };
    let mut opts = ConnectOptions::new(connect_url);
    opts.max_connections(1)
        .connect_timeout(CHECK_TIMEOUT)
        .acquire_timeout(CHECK_TIMEOUT)
        .sqlx_logging(false);
    let db = match Database::connect(opts).await {
        Ok(db) => db,
        Err(e) => {
            return (
                Finding::problem("store", format!("cannot connect to {shown}: {e}")),
                Vec::new(),
            )
        }
    };
    // The read-only variant never creates the migrations table, unlike `is_ready`.
    let pending = Migrator::get_pending_migrations_read_only(&db).await;
    let mut connected = Vec::new();
    let finding = match pending {
        Ok(p) if p.is_empty() => {
            match connected_provider::Entity::find().all(&db).await {
                Ok(rows) => connected = rows,
                Err(e) => tracing::warn!(error = %e, "reading the connected providers"),
            }
            Finding::ok("store", format!("{shown} reachable, migrated"))
        }
        Ok(p) => Finding::problem(
            "store",
            format!(
                "{shown} reachable, NOT migrated: {} migration(s) pending (run `turnkey migrate`)",
                p.len()
            ),
        ),
        Err(e) => Finding::problem("store", format!("cannot read {shown}: {e}")),
    };
    if let Err(e) = db.close().await {
        tracing::debug!(error = %e, "closing the doctor's store connection");
    }
    (finding, connected)
}

/// The URL without its password, for printing.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((creds, host)) = rest.split_once('@') else {
        return url.to_owned();
    };
    match creds.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_their_file() {
        let file = |p: &str| Some(SqliteTarget::File(PathBuf::from(p)));
        assert_eq!(
            sqlite_target("sqlite://./data/t.db?mode=rwc"),
            file("./data/t.db")
        );
        assert_eq!(
            sqlite_target("sqlite:///var/lib/t.db"),
            file("/var/lib/t.db")
        );
        assert_eq!(sqlite_target("sqlite:t.db"), file("t.db"));
        assert_eq!(sqlite_target("sqlite::memory:"), Some(SqliteTarget::Memory));
        assert_eq!(
            sqlite_target("sqlite://x?mode=memory&cache=shared"),
            Some(SqliteTarget::Memory)
        );
        assert_eq!(sqlite_target("postgres://u@h/db"), None);
    }

    #[test]
    fn a_file_without_a_wal_is_opened_immutable() {
        let d = tempfile::tempdir().expect("tempdir");
        let db = d.path().join("t.db");
        assert!(read_only_url(&db).ends_with("?mode=ro&immutable=true"));
        std::fs::write(d.path().join("t.db-wal"), b"").expect("write wal");
        assert!(read_only_url(&db).ends_with("?mode=ro"));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://me:secret@db/turnkey"),
            "postgres://me:***@db/turnkey"
        );
        assert_eq!(redact_url("sqlite://./data/t.db"), "sqlite://./data/t.db");
    }
}
