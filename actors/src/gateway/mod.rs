//! `Gateway`: the one handle the web layer holds. It starts the actors, runs recovery, and
//! offers the operations the doors need, one file per concern (`impl Gateway` blocks, the way
//! `Store` is split): `sessions`, `submissions`, `approvals`, `schedules`, and the chat
//! platforms' `commands`. Reads go straight to the store; every write goes through an actor.
//! This file holds the start, the accessors and the graceful stop.
mod approvals;
mod audit;
pub mod commands;
mod deletion;
mod direct;
pub mod memory;
mod providers;
mod schedules;
mod sessions;
mod submissions;
mod work;

use crate::admission::Admissions;
use crate::compressor::CompressionActor;
use crate::config::AgentWrites;
use crate::config::RuntimeConfig;
use crate::delivery::{DeliveryActor, EventHub};
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::instance::Instance;
use crate::memory::tool::MemoryTool;
use crate::notifier::Notifier;
use crate::outbox_sender::OutboxSender;
use crate::recovery;
use crate::scheduler::{self, SchedulerActor};
use crate::session::registry::SessionRegistry;
use crate::skills::catalog::Catalog;
use crate::skills::tools::{SkillManage, SkillView};
use crate::tool_exec::ToolExecActor;
use crate::toolbox;
use crate::turn::StopReason;
use crate::wakeups::Wakeups;
use actix::{Actor, Addr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use turnkey_storage::*;

/// After the shutdown grace, how long interrupted turns get to settle (commit their tail and
/// receipt) before the process stops anyway.
pub const SETTLE_AFTER_INTERRUPT: Duration = Duration::from_secs(5);
/// At shutdown, how long platform messages being sent get to finish.
pub const OUTBOX_DRAIN: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Gateway {
    deps: Arc<Deps>,
    /// The tools' workspace, absolute (checkpoints are restored into it).
    workspace: std::path::PathBuf,
    admission: Admissions,
    registry: SessionRegistry,
    /// Admits scheduled inputs when they fall due (SPEC R1.5).
    scheduler: Addr<SchedulerActor>,
    /// Sends platform messages; `None` when no platform is configured.
    outbox: Option<OutboxSender>,
    /// Wakes this process on other replicas' notices (SPEC R13.6).
    _notifier: Addr<Notifier>,
    /// Sub-agents, background processes and agent schedules (SPEC R1.5).
    work: crate::work::Wired,
}

/// Probes the kernel for the OS sandbox `tools.sandbox` asks for. `landlock` where the kernel
/// cannot confine stops the start; `auto` there starts with a loud warning (the web layer
/// also says it on stderr); `off` is said once.
fn sandbox(config: &RuntimeConfig) -> Result<turnkey_tools::Sandbox, GatewayError> {
    let tools = &config.tools;
    let sandbox =
        turnkey_tools::Sandbox::new(tools.sandbox, tools.sandbox_network).map_err(|e| {
            GatewayError::Config {
                key: "tools.sandbox".into(),
                reason: format!(
                    "\"landlock\", but this kernel cannot confine commands: {}; run on a \
                     kernel with Landlock (Linux 5.13+, lsm=landlock), or set \"auto\" to \
                     start unconfined with a warning",
                    e.reason
                ),
            }
        })?;
    let state = sandbox.state();
    if state.complete() && state.mode != turnkey_tools::SandboxMode::Off {
        tracing::info!(sandbox = %state.summary(), "commands and MCP servers are confined");
    } else if state.mode == turnkey_tools::SandboxMode::Off {
        tracing::warn!("tools.sandbox = \"off\": commands and MCP servers run unconfined");
    } else {
        tracing::warn!(sandbox = %state.summary(), "the OS sandbox is NOT (fully) in force on this kernel");
    }
    Ok(sandbox)
}

/// The gateway's own tools, beside the toolbox's built-in and MCP ones: memory, the work
/// tools (sub-agents, processes, schedules, the background terminal) and skills, as
/// configured; with the skills catalog the turns read.
fn own_tools(
    config: &RuntimeConfig,
    store: &Store,
    hub: &EventHub,
    redactor: &crate::redact::Redactor,
    sandbox: &turnkey_tools::Sandbox,
    handles: &crate::work::Handles,
) -> (Vec<Arc<dyn turnkey_tools::Tool>>, Catalog) {
    let mut own: Vec<Arc<dyn turnkey_tools::Tool>> = Vec::new();
    if config.memory.enabled {
        own.push(Arc::new(MemoryTool::new(
            store.clone(),
            hub.clone(),
            config.memory.clone(),
            redactor.clone(),
        )));
    }
    own.push(Arc::new(crate::work::subagent::DelegateTask::new(
        handles.clone(),
    )));
    own.push(Arc::new(crate::work::process::ProcessTool::new(
        handles.clone(),
    )));
    own.push(Arc::new(crate::work::schedule_tool::ScheduleTool::new(
        handles.clone(),
    )));
    if let Some(terminal) = crate::work::process::builtin_terminal(sandbox) {
        own.push(Arc::new(crate::work::process::BackgroundTerminal::new(
            terminal,
            handles.clone(),
        )));
    }
    let skills = Catalog::new(config.skills.clone(), store.clone());
    if config.skills.enabled {
        own.push(Arc::new(SkillView::new(skills.clone(), store.clone())));
        if config.skills.agent_writes != AgentWrites::Off {
            own.push(Arc::new(SkillManage::new(
                skills.clone(),
                store.clone(),
                config.skills.agent_writes,
            )));
        }
    }
    (own, skills)
}

impl Gateway {
    /// Starts the actors on the current actix System, then recovers: `started` admissions of
    /// dead owners become `unknown`, queued ones are drained.
    pub async fn start(config: RuntimeConfig, store: Store) -> Result<Self, GatewayError> {
        crate::failpoints::init();
        let sandbox = sandbox(&config)?;
        let instance = Instance::current();
        // Names this process in the notices its writes send (one origin per process).
        let origin = turnkey_storage::notify::set_origin(instance.id());
        // Listening starts before recovery: nothing another replica does meanwhile is missed.
        let notices = store.notices().await?;
        let hub = EventHub::default();
        let redactor = crate::redact::Redactor::new(&config);
        let providers = Arc::new(crate::provider_set::Providers::new(
            &config,
            store.clone(),
            redactor.clone(),
        )?);
        // The providers connected at run time, before anything can ask for a model.
        providers.reload().await?;
        let handles = crate::work::Handles::default();
        let (own, skills) = own_tools(&config, &store, &hub, &redactor, &sandbox, &handles);
        let toolbox = toolbox::build(&config, own, &sandbox).await?;
        let workspace = toolbox.workspace.clone();
        let delivery = DeliveryActor::new(store.clone(), hub.clone()).start();
        let compressor = CompressionActor::new(store.clone(), hub.clone()).start();
        let wakeups = Wakeups::default();
        let tools = ToolExecActor::new(
            store.clone(),
            hub.clone(),
            delivery.clone(),
            toolbox.registry,
            config.tools.clone(),
            toolbox.workspace,
            config.data_dir.clone(),
            wakeups.clone(),
            redactor.clone(),
        )
        .start();
        let deps = Arc::new(Deps {
            store,
            config,
            instance,
            providers,
            provider_health: Default::default(),
            hub,
            delivery,
            tools,
            compressor,
            tool_offer: toolbox.offer,
            skills,
            wakeups,
            event_wakes: Wakeups::default(),
            lease_wakes: Wakeups::default(),
            interrupt_acks: Wakeups::default(),
            shutdown: CancellationToken::new(),
            outbox_wake: Default::default(),
            sandbox,
            redactor,
        });
        let registry = SessionRegistry::new(deps.clone());
        let admission = Admissions::new(deps.clone(), registry.clone());
        let notifier = Notifier::start(deps.clone(), registry.clone(), origin, notices);
        recovery::recover_at_start(&deps, &registry).await?;
        let scheduler = scheduler::start(deps.clone(), admission.clone()).await?;
        let work = crate::work::Wired {
            deps: deps.clone(),
            admission: admission.clone(),
            registry: registry.clone(),
            scheduler: scheduler.clone(),
            processes: Default::default(),
            children: Default::default(),
        };
        handles.set(work.clone());
        // Reports a stopped gateway left unadmitted, goals never admitted, processes whose
        // watcher died: before new input, so nothing waits for the first sweep.
        crate::work::sweep(&work).await;
        recovery::spawn_sweeper(deps.clone(), registry.clone());
        crate::work::spawn_sweeper(work.clone());
        audit::spawn_pruner(deps.clone());
        crate::provider_set::spawn_reloader(deps.providers.clone(), deps.shutdown.clone());
        let outbox = OutboxSender::start(deps.clone()).await;
        Ok(Self {
            deps,
            workspace,
            admission,
            registry,
            scheduler,
            outbox,
            _notifier: notifier,
            work,
        })
    }

    pub fn store(&self) -> &Store {
        &self.deps.store
    }

    /// What masks secrets in what is stored, sent and logged; it learns the keys of providers
    /// connected at run time.
    pub fn redactor(&self) -> &crate::redact::Redactor {
        &self.deps.redactor
    }

    /// What the OS sandbox confines on this kernel (SPEC R13.7).
    pub fn sandbox(&self) -> &turnkey_tools::SandboxState {
        self.deps.sandbox.state()
    }

    pub fn hub(&self) -> &EventHub {
        &self.deps.hub
    }

    /// Wake-ups for events of a session that another process committed (the hub carries this
    /// process's own): what an event follower waits on besides the hub.
    pub fn event_wakes(&self) -> &Wakeups {
        &self.deps.event_wakes
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.deps.config
    }

    /// Tells the outbox sender that platform messages were committed (a command's answer, a
    /// notice): they go out now instead of at its next look (within a second).
    pub fn wake_outbox(&self) {
        self.deps.outbox_wake.notify_one();
    }

    /// Whether new input can be admitted now: not while stopping, and not while no provider
    /// is configured (it would be queued only to fail).
    fn check_admitting(&self) -> Result<(), GatewayError> {
        if self.deps.shutdown.is_cancelled() {
            return Err(GatewayError::ShuttingDown);
        }
        if self.deps.providers.is_empty() {
            return Err(GatewayError::NoProvider);
        }
        Ok(())
    }

    /// Graceful stop: stops admitting and starting turns, lets running turns go on for at most
    /// `grace`, then interrupts the rest, which settle as `interrupted` (reason `shutdown`) with
    /// their tails closed. Only a crash leaves a turn `unknown`.
    pub async fn shutdown(&self, grace: Duration) {
        self.deps.shutdown.cancel();
        if !self.wait_drained(grace).await {
            let n = self.registry.interrupt_all(StopReason::Shutdown).await;
            tracing::warn!(
                turns = n,
                ?grace,
                "shutdown grace ran out; interrupting turns"
            );
            if !self.wait_drained(SETTLE_AFTER_INTERRUPT).await {
                tracing::error!("turns did not settle after the interrupt; stopping anyway");
            }
        }
        crate::work::process::stop_all(&self.work).await;
        // Platform messages being sent finish, so none is left `sending` (thus `unknown`).
        if let Some(outbox) = &self.outbox {
            outbox.drain(OUTBOX_DRAIN).await;
        }
    }

    /// Waits up to `limit` until no session drains; answers whether that happened.
    async fn wait_drained(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if !self.registry.any_draining().await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
