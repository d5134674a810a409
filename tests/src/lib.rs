//! End-to-end test support for turnkey: a scripted model provider, a harness that runs the real
//! `turnkey` binary, a typed API client and fresh PostgreSQL databases.
pub mod api;
pub mod bench;
pub mod browser;
pub mod chat_pty;
pub mod cut_proxy;
pub mod fake_platforms;
pub mod files;
pub mod harness;
pub mod local_model;
pub mod openai_sdk;
pub mod openapi_validator;
pub mod otlp;
pub mod pg;
pub mod require;
pub mod scripted;
mod scripted_server;
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
