//! turnkey's doors onto the gateway: command line, configuration, HTTP API (auth, routes, SSE)
//! and start-up/shutdown; and `turnkey chat`, the terminal client of that API. A library so that
//! tests can start the app in-process.
//!
//! ## Floors
//!
//! A module uses only its own floor and the floors below it, and no two modules use each other:
//! every path outside tests that names a module of the crate is checked by `tests/layers.rs`
//! (the checker every crate shares), and `docs/architecture.md` shows the same list. A floor
//! names modules; a file belongs to the longest name that is a prefix of its path.
//!
//! 1. leaves: `error`, `metrics`, `provider_probe`, `openapi::mirrors`, `chat`
//! 2. settings: `configuration`, `telemetry`, `cors`
//! 3. state: `state`
//! 4. access: `auth`, `follow`, `security`
//! 5. routes: `routes`
//! 6. document: `openapi`
//! 7. server: `startup`
//! 8. commands: `doctor`, `cli`
pub mod auth;
pub mod chat;
pub mod cli;
pub mod configuration;
pub mod cors;
pub mod doctor;
pub mod error;
pub mod follow;
pub mod metrics;
pub mod openapi;
pub mod provider_probe;
pub mod routes;
pub mod security;
pub mod startup;
pub mod state;
pub mod telemetry;
