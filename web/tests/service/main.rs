//! The web crate's tests: the HTTP API in-process and on a loopback port, configuration
//! loading, the deployment files, the first run and the web UI's Node tests. One test binary,
//! one module per area; run one with `cargo test --workspace --test service configuration::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly

#[macro_use]
mod common;

mod api;
mod configuration;
mod deploy_manifests;
mod first_run;
mod serve;
mod web_ui;
