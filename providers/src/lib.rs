//! Model providers: neutral wire types, the `Provider` trait, the OpenAI-compatible and
//! Anthropic Messages clients with SSE streaming, error classification, retry timing, token
//! counts and prices.
//!
//! ## Floors
//!
//! A module uses only its own floor and the floors below it, and no two modules use each other
//! (`tests/layers.rs`; `docs/architecture.md` shows the same list):
//!
//! 1. leaves: `wire`, `error`, `secret`, `activity`
//! 2. terms: `retry`, `pricing`, `tokens`, `provider`
//! 3. transport: `http`, `client`
//! 4. clients: `openai`, `anthropic`
//! 5. factory: `build`
// Tests may fail loudly; the library itself is still checked without this in non-test builds.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod activity;
pub mod anthropic;
pub mod build;
mod client;
pub mod error;
mod http;
pub mod openai;
pub mod pricing;
pub mod provider;
pub mod retry;
pub mod secret;
pub mod tokens;
pub mod wire;

pub use build::build_provider;
pub use error::ProviderError;
pub use pricing::{cost_usd, price_per_mtok, Price, Pricing};
pub use provider::{DeltaSink, Provider, ProviderConfig, ProviderKind};
pub use retry::RetryPolicy;
pub use secret::Secret;
pub use tokens::{
    estimate_messages, estimate_messages_for_model, estimate_tokens, estimate_tokens_for_model,
};
pub use wire::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, Image, Role, ToolCall, ToolSchema, Usage,
};
