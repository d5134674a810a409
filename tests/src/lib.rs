//! End-to-end test support for turnkey: a scripted model provider, a harness that runs the real
//! `turnkey` binary, a typed API client and fresh PostgreSQL databases.
//!
//! The harness rebuilds `target/<profile>/turnkey` when the service sources are newer, so no test
//! runs a stale binary. Each crate's integration tests are one test binary with a module per area
//! (`tests/tests/e2e/`, `storage/tests/facts/`, `web/tests/service/`); run one area with
//! `cargo test --workspace --test e2e r3_1_display::`. Tests wait for facts, not for time
//! (`wait`). Fakes of the chat platforms (`fake_platforms`), an OTLP collector (`otlp`), a
//! loopback proxy that can cut connections (`cut_proxy`) and a headless-Chromium driver
//! (`browser`) stand in for the outside world.
//!
//! ## Floors
//!
//! A module uses only its own floor and the floors below it, and no two modules use each other,
//! checked by `tests/layers.rs` like every crate's:
//!
//! 1. leaves: `wait`, `require`, `stats`, `wire`, `ws`, `cut_proxy`, `scripted_wire`
//! 2. parts: `api`, `scripted`, `files`, `pg`, `otlp`, `local_model`, `llm_cli`, `openai_sdk`, `openapi_validator`, `browser`, `fake_platforms`
//! 3. harness: `harness`, `webhooks`, `chat_pty`, `bench`
pub mod api;
pub mod bench;
pub mod browser;
pub mod chat_pty;
pub mod cut_proxy;
pub mod fake_platforms;
pub mod files;
pub mod harness;
pub mod llm_cli;
pub mod local_model;
pub mod openai_sdk;
pub mod openapi_validator;
pub mod otlp;
pub mod pg;
pub mod require;
pub mod scripted;
mod scripted_wire;
pub mod stats;
pub mod wait;
pub mod webhooks;
pub mod wire;
pub mod ws;

pub use api::{Api, Resp, SseEvent, SseStream};
pub use fake_platforms::{FakeCall, FakeKind, FakeMessage, FakePlatform, Fault};
pub use harness::{Turnkey, TurnkeyOptions};
pub use local_model::LocalModel;
pub use scripted::{RecordedRequest, Reply, ScriptedProvider, Step};
pub use scripted_wire::Wire;
