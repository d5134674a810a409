//! turnkey's doors onto the gateway: command line, configuration, HTTP API (auth, routes, SSE)
//! and start-up/shutdown; and `turnkey chat`, the terminal client of that API. A library so that
//! tests can start the app in-process.
pub mod auth;
pub mod chat;
pub mod cli;
pub mod configuration;
pub mod doctor;
pub mod error;
pub mod follow;
pub mod openapi;
pub mod provider_probe;
pub mod routes;
pub mod security;
pub mod startup;
pub mod telemetry;
