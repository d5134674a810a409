//! Model providers: neutral wire types, the `Provider` trait, the OpenAI-compatible client
//! with SSE streaming, error classification, retry timing, token estimates and prices.
// Tests may fail loudly; the library itself is still checked without this in non-test builds.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod error;
pub mod openai;
pub mod pricing;
pub mod provider;
pub mod retry;
pub mod tokens;
pub mod wire;

pub use error::ProviderError;
pub use openai::OpenAiProvider;
pub use pricing::{cost_usd, price_per_mtok, Price};
pub use provider::{build_provider, DeltaSink, Provider, ProviderConfig, ProviderKind};
pub use retry::RetryPolicy;
pub use tokens::{estimate_messages, estimate_tokens};
pub use wire::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, Role, ToolCall, ToolSchema, Usage,
};
