//! Logging set-up: `tracing` to stderr, filtered by `RUST_LOG`. Stdout is reserved for the
//! lines scripts read (`operator token: …`, `listening on http://…`).
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn";

/// Installs the global subscriber; a second call (tests) is a no-op.
pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Err only means a subscriber is already installed, which is what we want anyway.
    let _already_installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
