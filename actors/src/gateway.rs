//! `Gateway`: the one handle the web layer holds. It starts the actors, runs recovery, and
//! offers the operations the doors need (create session, submit, interrupt, state). Reads go
//! straight to the store; every write goes through an actor.
use crate::admission::{AdmissionActor, Submit};
use crate::config::RuntimeConfig;
use crate::delivery::{DeliveryActor, EventHub};
use crate::error::GatewayError;
use crate::instance::Instance;
use crate::recovery;
use crate::registry::SessionRegistry;
use crate::session::{Interrupt, SessionState, Status};
use crate::turn::prompt;
use actix::{Actor, Addr};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use turnkey_providers::{build_provider, Provider};
use turnkey_storage::*;

/// What a door asks for when it creates a session.
#[derive(Clone, Debug, Default)]
pub struct NewSessionRequest {
    pub title: Option<String>,
    pub system_message: Option<String>,
    pub model: Option<String>,
    pub platform: String,
    pub chat_key: Option<String>,
}

/// One input as a door received it; the admission actor normalizes it before it is stored.
#[derive(Clone, Debug, Default)]
pub struct Submission {
    pub text: String,
    pub request_id: Option<String>,
    pub attachments: Vec<serde_json::Value>,
    pub display: Option<serde_json::Value>,
    pub model: Option<String>,
    /// Which door: api, ws, openai, cli, telegram, slack, webhook, internal.
    pub surface: String,
}

/// The answer to a submission (API.md receipt).
#[derive(Clone, Debug, Serialize)]
pub struct Receipt {
    pub admission_id: AdmissionId,
    pub session_id: SessionId,
    pub seq: i64,
    pub status: AdmissionStatus,
    pub duplicate: bool,
}

/// Everything the actors share, built once at start-up.
pub struct Deps {
    pub store: Store,
    pub config: RuntimeConfig,
    pub instance: Instance,
    pub providers: Vec<Arc<dyn Provider>>,
    pub hub: EventHub,
    pub delivery: Addr<DeliveryActor>,
    /// Cancelled when the process begins to shut down.
    pub shutdown: CancellationToken,
}

#[derive(Clone)]
pub struct Gateway {
    deps: Arc<Deps>,
    admission: Addr<AdmissionActor>,
    registry: SessionRegistry,
}

impl Gateway {
    /// Starts the actors on the current actix System, then recovers: `started` admissions of
    /// dead owners become `unknown`, queued ones are drained.
    pub async fn start(config: RuntimeConfig, store: Store) -> Result<Self, GatewayError> {
        crate::failpoints::init();
        let providers = config
            .providers
            .iter()
            .map(build_provider)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| GatewayError::Config(e.to_string()))?;
        let hub = EventHub::default();
        let delivery = DeliveryActor::new(store.clone(), hub.clone()).start();
        let deps = Arc::new(Deps {
            store,
            config,
            instance: Instance::current(),
            providers,
            hub,
            delivery,
            shutdown: CancellationToken::new(),
        });
        let registry = SessionRegistry::new(deps.clone());
        let admission = AdmissionActor::new(deps.clone(), registry.clone()).start();
        let gw = Self {
            deps,
            admission,
            registry,
        };
        recovery::recover_at_start(&gw.deps, &gw.registry).await?;
        recovery::spawn_sweeper(gw.deps.clone(), gw.registry.clone());
        Ok(gw)
    }

    pub fn store(&self) -> &Store {
        &self.deps.store
    }

    pub fn hub(&self) -> &EventHub {
        &self.deps.hub
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.deps.config
    }

    /// May `principal` see and act on `session`? Others' sessions look like missing ones.
    pub async fn authorize(
        &self,
        principal: &Principal,
        session: SessionId,
    ) -> Result<Session, GatewayError> {
        crate::admission::authorize(&self.deps.store, principal, session).await
    }

    /// Creates a session; its system prompt is built first, so the row never holds a NULL
    /// prompt (SPEC R5.1).
    pub async fn create_session(
        &self,
        principal: &Principal,
        req: NewSessionRequest,
    ) -> Result<Session, GatewayError> {
        let id = SessionId::new();
        let built = prompt::build_for_new_session(&self.deps.config, &req)?;
        let session = self
            .deps
            .store
            .create_session(NewSession {
                id,
                owner: principal.id.clone(),
                platform: req.platform.clone(),
                chat_key: req.chat_key.clone(),
                title: req.title.clone(),
                model: req.model.clone(),
                system_message: req.system_message.clone(),
                system_prompt: built.prompt,
                workspace_snapshot: Some(built.workspace_snapshot),
            })
            .await?;
        Ok(session)
    }

    /// Admits one input durably and returns its receipt; the session's actor drains it.
    pub async fn submit(
        &self,
        principal: &Principal,
        session: SessionId,
        submission: Submission,
    ) -> Result<Receipt, GatewayError> {
        if self.deps.shutdown.is_cancelled() {
            return Err(GatewayError::ShuttingDown);
        }
        self.admission
            .send(Submit {
                principal: principal.clone(),
                session,
                submission,
            })
            .await
            .map_err(|_| GatewayError::ShuttingDown)?
    }

    /// Interrupts the running turn of `session`, if this process runs one. Returns whether a
    /// running turn was signalled.
    pub async fn interrupt(
        &self,
        principal: &Principal,
        session: SessionId,
        reason: Option<String>,
    ) -> Result<bool, GatewayError> {
        self.authorize(principal, session).await?;
        let Some(addr) = self.registry.get(session) else {
            return Ok(false);
        };
        addr.send(Interrupt {
            reason: reason.unwrap_or_else(|| "user_interrupt".into()),
        })
        .await
        .map_err(|_| GatewayError::ShuttingDown)
    }

    /// Idle or running, and how many inputs wait. A turn run by another replica counts as
    /// running: the lease says so.
    pub async fn session_state(&self, session: SessionId) -> Result<SessionState, GatewayError> {
        let local = match self.registry.get(session) {
            Some(addr) => addr.send(Status).await.ok(),
            None => None,
        };
        let queue_depth = self.deps.store.queue_depth(session).await?;
        let running_here = local.is_some_and(|s| s.running);
        let running = running_here
            || match self.deps.store.get_lease(session).await? {
                Some(l) => l.holder.is_some() && l.expires_at > now_ms(),
                None => false,
            };
        Ok(SessionState {
            running,
            queue_depth,
        })
    }

    /// Stops admitting, lets running turns reach a safe point for at most `grace`, then returns.
    pub async fn shutdown(&self, grace: Duration) {
        self.deps.shutdown.cancel();
        let deadline = tokio::time::Instant::now() + grace;
        while self.registry.any_running().await && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
