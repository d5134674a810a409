//! `Deps`: the wiring every actor shares, built once at start-up by the gateway. It depends
//! only on the leaf actors (delivery, tool execution), so actor files import it without
//! importing the gateway that starts them. A turn's phases do not take all of it: they take
//! the part they use ([`Record`], [`Models`], one actor's address), so that a phase's
//! signature says what it reaches.
use crate::compressor::CompressionActor;
use crate::config::RuntimeConfig;
use crate::delivery::{DeliveryActor, EventHub};
use crate::instance::Instance;
use crate::provider_health::ProviderHealth;
use crate::tool_exec::ToolExecActor;
use crate::toolbox::index::ToolOffer;
use crate::wakeups::Wakeups;
use actix::Addr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use turnkey_providers::{Provider, ToolSchema};
use turnkey_storage::Store;

pub struct Deps {
    pub store: Store,
    pub config: RuntimeConfig,
    pub instance: Instance,
    /// The primary first, then fallbacks in order; providers connected at run time follow the
    /// configured ones. A turn works on one snapshot of it.
    pub providers: Arc<crate::provider_set::Providers>,
    /// A circuit breaker per provider, by name: the fallback chain skips one that keeps
    /// failing (SPEC R8.4).
    pub provider_health: ProviderHealth,
    pub hub: EventHub,
    pub delivery: Addr<DeliveryActor>,
    pub tools: Addr<ToolExecActor>,
    /// Summarizes and swaps a session's transcript when the preflight gate asks for it.
    pub compressor: Addr<CompressionActor>,
    /// What the model is offered, fixed at start-up: the always-on tools' schemas and the
    /// index of the rest (`toolbox::index`).
    pub tool_offer: ToolOffer,
    /// The skills: the operator's folders and the stored ones (SPEC R5.2).
    pub skills: crate::skills::catalog::Catalog,
    /// Wakes turns waiting on a person (approvals, decisions on unknown tool runs).
    pub wakeups: Wakeups,
    /// Wakes event followers when another process committed events of their session (the
    /// hub wakes them for this process's own).
    pub event_wakes: Wakeups,
    /// Wakes lease waiters when another process released the lease of their session.
    pub lease_wakes: Wakeups,
    /// Wakes an interrupt asked here for a turn another replica runs, when that replica acted.
    pub interrupt_acks: Wakeups,
    /// Cancelled when the process begins to shut down: no new admissions, no new drains.
    pub shutdown: CancellationToken,
    /// Wakes the outbox sender after a commit that wrote platform messages outside a turn
    /// (`notify_one`: a wake-up before it waits is kept).
    pub outbox_wake: Arc<tokio::sync::Notify>,
    /// The OS sandbox every command and MCP server runs in, probed at start-up (SPEC R13.7).
    pub sandbox: turnkey_tools::Sandbox,
    /// Masks secrets in what a door admits and in tool results (SPEC R13.8).
    pub redactor: crate::redact::Redactor,
}

/// The durable record and what announces it: a phase that commits writes through the store
/// and publishes what it committed to the session's followers.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    pub store: &'a Store,
    pub hub: &'a EventHub,
}

/// The model side of a turn: the configuration that shapes a request, the providers in
/// fallback order with their health, the tool schemas offered to them, the compressor the
/// preflight gate asks, and the delivery actor that commits streamed text.
#[derive(Clone, Copy)]
pub struct Models<'a> {
    pub config: &'a RuntimeConfig,
    /// The turn's snapshot of the provider set.
    pub set: &'a crate::provider_set::ProviderSet,
    /// The primary first, then fallbacks in order (the snapshot's clients).
    pub providers: &'a [Arc<dyn Provider>],
    pub health: &'a ProviderHealth,
    /// The schemas a session that withholds nothing is offered (`tool_offer.schemas()`).
    pub tool_schemas: &'a [ToolSchema],
    pub tool_offer: &'a ToolOffer,
    pub compressor: &'a Addr<CompressionActor>,
    pub delivery: &'a Addr<DeliveryActor>,
    /// What the model's text and errors pass through before they are stored or sent.
    pub redactor: &'a crate::redact::Redactor,
    /// For the bytes of the images a request shows the model.
    pub store: &'a turnkey_storage::Store,
}

impl Deps {
    pub fn record(&self) -> Record<'_> {
        Record {
            store: &self.store,
            hub: &self.hub,
        }
    }

    /// The model side of a turn that works on `set` (a snapshot of `providers`).
    pub fn models<'a>(&'a self, set: &'a crate::provider_set::ProviderSet) -> Models<'a> {
        Models {
            config: &self.config,
            set,
            providers: set.clients(),
            health: &self.provider_health,
            tool_schemas: self.tool_offer.schemas(),
            tool_offer: &self.tool_offer,
            compressor: &self.compressor,
            delivery: &self.delivery,
            redactor: &self.redactor,
            store: &self.store,
        }
    }
}
