//! `Deps`: the wiring every actor and turn phase shares, built once at start-up by the
//! gateway. It depends only on the leaf delivery actor, so actor files import it without
//! importing the gateway that starts them.
use crate::config::RuntimeConfig;
use crate::delivery::{DeliveryActor, EventHub};
use crate::instance::Instance;
use actix::Addr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use turnkey_providers::Provider;
use turnkey_storage::Store;

pub struct Deps {
    pub store: Store,
    pub config: RuntimeConfig,
    pub instance: Instance,
    /// The primary first, then fallbacks in order.
    pub providers: Vec<Arc<dyn Provider>>,
    pub hub: EventHub,
    pub delivery: Addr<DeliveryActor>,
    /// Cancelled when the process begins to shut down: no new admissions, no new drains.
    pub shutdown: CancellationToken,
}
