//! `Gateway`: the one handle the web layer holds. It starts the actors, runs recovery, and
//! offers the operations the doors need (create session, submit, interrupt, state). Reads go
//! straight to the store; every write goes through an actor.
use crate::admission::{AdmissionActor, RetryUnknown, Submit};
use crate::compressor::CompressionActor;
use crate::config::RuntimeConfig;
use crate::delivery::{DeliveryActor, EventHub};
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::input::{NewSessionRequest, Receipt, Submission};
use crate::instance::Instance;
use crate::limits;
use crate::notifier::Notifier;
use crate::outbox_sender::OutboxSender;
use crate::platforms::{self, ChatAdmission, ChatMessage};
use crate::recovery;
use crate::registry::SessionRegistry;
use crate::remote_interrupt::{self, Interruption};
use crate::scheduler::{self, ScheduleRequest, SchedulerActor};
use crate::session::{SessionState, Status};
use crate::tool_exec::ToolExecActor;
use crate::toolbox;
use crate::turn::{prompt, StopReason};
use crate::wakeups::Wakeups;
use actix::{Actor, Addr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use turnkey_providers::build_provider;
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
    admission: Addr<AdmissionActor>,
    registry: SessionRegistry,
    /// Admits scheduled inputs when they fall due (SPEC R1.5).
    scheduler: Addr<SchedulerActor>,
    /// Sends platform messages; `None` when no platform is configured.
    outbox: Option<OutboxSender>,
    /// Wakes this process on other replicas' notices (SPEC R13.6).
    _notifier: Addr<Notifier>,
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
            .map_err(|e| GatewayError::Config {
                key: "providers".into(),
                reason: e.to_string(),
            })?;
        let instance = Instance::current();
        // Names this process in the notices its writes send (one origin per process).
        let origin = turnkey_storage::notify::set_origin(instance.id());
        // Listening starts before recovery: nothing another replica does meanwhile is missed.
        let notices = store.notices().await?;
        let toolbox = toolbox::build(&config).await?;
        let workspace = toolbox.workspace.clone();
        let hub = EventHub::default();
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
            tool_schemas: toolbox.schemas,
            wakeups,
            event_wakes: Wakeups::default(),
            lease_wakes: Wakeups::default(),
            interrupt_acks: Wakeups::default(),
            shutdown: CancellationToken::new(),
            outbox_wake: Default::default(),
        });
        let registry = SessionRegistry::new(deps.clone());
        let admission = AdmissionActor::new(deps.clone(), registry.clone()).start();
        let notifier = Notifier::start(deps.clone(), registry.clone(), origin, notices);
        recovery::recover_at_start(&deps, &registry).await?;
        recovery::spawn_sweeper(deps.clone(), registry.clone());
        let scheduler = scheduler::start(deps.clone(), admission.clone()).await?;
        let outbox = OutboxSender::start(deps.clone()).await;
        Ok(Self {
            deps,
            workspace,
            admission,
            registry,
            scheduler,
            outbox,
            _notifier: notifier,
        })
    }

    /// `POST /v1/schedules`: a schedule on a session `principal` may act on (SPEC R1.5).
    pub async fn create_schedule(
        &self,
        principal: &Principal,
        req: ScheduleRequest,
    ) -> Result<Schedule, GatewayError> {
        scheduler::create(&self.deps, &self.scheduler, principal, req).await
    }

    /// `GET /v1/schedules`: all for the operator, else those on `principal`'s sessions.
    pub async fn schedules(&self, principal: &Principal) -> Result<Vec<Schedule>, GatewayError> {
        scheduler::list(&self.deps, principal).await
    }

    /// `DELETE /v1/schedules/{id}`: stops its future due times.
    pub async fn delete_schedule(
        &self,
        principal: &Principal,
        id: ScheduleId,
    ) -> Result<(), GatewayError> {
        scheduler::delete(&self.deps, &self.scheduler, principal, id).await
    }

    pub fn store(&self) -> &Store {
        &self.deps.store
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

    /// May `principal` see and act on `session`? Others' sessions look like missing ones.
    pub async fn authorize(
        &self,
        principal: &Principal,
        session: SessionId,
    ) -> Result<Session, GatewayError> {
        crate::admission::authorize(&self.deps.store, principal, session).await
    }

    /// `authorize`, answering the lineage root's row: the session whose id keys the queue, the
    /// event log and the counters of every id of a rotated lineage (SPEC R6.4).
    pub async fn authorize_lineage(
        &self,
        principal: &Principal,
        session: SessionId,
    ) -> Result<Session, GatewayError> {
        let named = self.authorize(principal, session).await?;
        self.lineage_root(named).await
    }

    /// The lineage root of `session` (itself unless a rotation made it a child, SPEC R6.4).
    pub async fn lineage_root(&self, session: Session) -> Result<Session, GatewayError> {
        match session.root_id {
            None => Ok(session),
            Some(root) => self
                .deps
                .store
                .get_session(root)
                .await?
                .ok_or_else(|| GatewayError::NotFound(format!("session {root}"))),
        }
    }

    /// Creates a session; its system prompt is built first, so the row never holds a NULL
    /// prompt (SPEC R5.1).
    pub async fn create_session(
        &self,
        principal: &Principal,
        req: NewSessionRequest,
    ) -> Result<Session, GatewayError> {
        let new = self.new_session(principal, req)?;
        Ok(self.deps.store.create_session(new).await?)
    }

    /// The session `principal` reaches through `door` under `key` (e.g. the OpenAI endpoint's
    /// `user`), created from `req` on first use; concurrent first uses end in one session.
    /// Answers the session and whether this call created it.
    pub async fn keyed_session(
        &self,
        principal: &Principal,
        door: &str,
        key: &str,
        req: NewSessionRequest,
    ) -> Result<(Session, bool), GatewayError> {
        let key = limits::text_field("key", key, limits::MAX_SESSION_KEY_CHARS)?;
        if let Some(s) = self
            .deps
            .store
            .find_keyed_session(&principal.id, door, &key)
            .await?
        {
            return Ok((s, false));
        }
        let new = self.new_session(principal, req)?;
        Ok(self
            .deps
            .store
            .keyed_session(&principal.id, door, &key, new)
            .await?)
    }

    /// A new session row for `principal`, its request checked against the input limits and
    /// its system prompt built.
    pub(crate) fn new_session(
        &self,
        principal: &Principal,
        req: NewSessionRequest,
    ) -> Result<NewSession, GatewayError> {
        let req = NewSessionRequest {
            title: req
                .title
                .map(|t| limits::text_field("title", &t, limits::MAX_TITLE_CHARS))
                .transpose()?,
            system_message: req
                .system_message
                .map(|m| limits::text_field("system_message", &m, limits::MAX_SYSTEM_MESSAGE_CHARS))
                .transpose()?,
            model: match req.model {
                Some(m) => limits::model(&m).map(|()| Some(m))?,
                None => None,
            },
            ..req
        };
        let built = prompt::build_for_new_session(&self.deps.config, &req)?;
        Ok(NewSession {
            id: SessionId::new(),
            owner: principal.id.clone(),
            platform: req.platform,
            chat_key: req.chat_key,
            title: req.title,
            model: req.model,
            system_message: req.system_message,
            system_prompt: built.prompt,
            workspace_snapshot: Some(built.workspace_snapshot),
        })
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

    /// The model a session's turns use: its own, else the primary provider's.
    pub fn model_in_use(&self, session: &Session) -> Option<String> {
        session
            .model
            .clone()
            .or_else(|| self.deps.providers.first().map(|p| p.model().to_owned()))
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

    /// Admits a message from a platform chat (SPEC R1.3): checks the sender against the
    /// platform's `allowed_users`, finds the chat's session (the one a redelivered update went
    /// to before, else the chat's current one, made on first use), and submits under a request
    /// id derived from the platform's update id, so a redelivery runs once.
    pub async fn chat_submit(&self, msg: &ChatMessage) -> Result<ChatAdmission, GatewayError> {
        if !self.chat_allows(msg).await? {
            return Ok(ChatAdmission::Refused);
        }
        let inbound = self.chat_inbound(msg).await?;
        let receipt = self
            .submit(
                &platforms::chat_principal(msg),
                inbound.session_id,
                platforms::chat_submission(msg, None),
            )
            .await?;
        Ok(ChatAdmission::Admitted(receipt))
    }

    /// Whether the sender of `msg` may talk to the agent (the platform's `allowed_users`). A
    /// refused sender is told so once per chat (an outbox `notice`).
    pub async fn chat_allows(&self, msg: &ChatMessage) -> Result<bool, GatewayError> {
        let platform = msg.chat.platform();
        let settings = self
            .deps
            .config
            .platforms
            .settings(platform)
            .ok_or_else(|| GatewayError::NotFound(format!("platform {platform}")))?;
        if settings.allows(&msg.user_id) {
            return Ok(true);
        }
        let chat_key = msg.chat.key();
        // Told once per chat and sender, not once per message.
        self.deps
            .store
            .enqueue_outbox(&NewOutbox {
                platform: platform.into(),
                chat_key: chat_key.clone(),
                session_id: None,
                turn_id: None,
                idempotency_key: format!("refused:{chat_key}:{}", msg.user_id),
                kind: "notice".into(),
                payload: serde_json::json!({
                    "text": format!(
                        "Sorry, you are not allowed to talk to this agent (your {platform} id is {}).",
                        msg.user_id
                    ),
                }),
            })
            .await?;
        self.wake_outbox();
        Ok(false)
    }

    /// Records update `msg` and answers the session it goes to: the one a redelivery went to
    /// before, else the chat's current one, made on first use.
    pub async fn chat_inbound(&self, msg: &ChatMessage) -> Result<Inbound, GatewayError> {
        let platform = msg.chat.platform();
        let chat_key = msg.chat.key();
        let new = self.new_session(
            &platforms::chat_principal(msg),
            NewSessionRequest {
                platform: platform.into(),
                chat_key: Some(chat_key.clone()),
                ..Default::default()
            },
        )?;
        Ok(self
            .deps
            .store
            .inbound_session(platform, &msg.external_id, &chat_key, new)
            .await?)
    }

    /// Runs an `unknown` admission again on request (API.md `POST /v1/admissions/{id}/retry`):
    /// a new admission with the same payload, linked to it, run once however often this is
    /// asked. Anything but `unknown` is a conflict: queued and started ones run anyway, and a
    /// terminal one has its answer.
    pub async fn retry(
        &self,
        principal: &Principal,
        id: AdmissionId,
    ) -> Result<Receipt, GatewayError> {
        let not_found = || GatewayError::NotFound(format!("admission {id}"));
        let unknown = self
            .deps
            .store
            .get_admission(id)
            .await?
            .ok_or_else(not_found)?;
        match self.authorize(principal, unknown.session_id).await {
            Err(GatewayError::NotFound(_)) => return Err(not_found()),
            other => other?,
        };
        if unknown.status != AdmissionStatus::Unknown {
            return Err(GatewayError::NotUnknown {
                id,
                status: unknown.status,
            });
        }
        self.check_admitting()?;
        self.admission
            .send(RetryUnknown { unknown })
            .await
            .map_err(|_| GatewayError::ShuttingDown)?
    }

    /// A person's answer to a pending approval (SPEC R9.7, R13.2). Committed with
    /// `approval.resolved`, then the waiting turn is woken: in this process at once, on another
    /// replica by the notice the commit sends.
    pub async fn decide_approval(
        &self,
        principal: &Principal,
        session: SessionId,
        id: ApprovalId,
        decision: ApprovalDecision,
    ) -> Result<Approval, GatewayError> {
        // Any id of a rotated lineage acts on the lineage (SPEC R6.4).
        let session = self.authorize(principal, session).await?.lineage();
        let (approval, event) = self
            .deps
            .store
            .decide_approval(session, id, decision, &principal.id)
            .await
            .map_err(|e| match e {
                StoreError::WrongState(_) => GatewayError::Conflict {
                    code: "approval_closed",
                    message: format!("approval {id} was already decided or has expired"),
                },
                other => other.into(),
            })?;
        self.deps.hub.publish(event);
        self.deps.wakeups.wake(session);
        Ok(approval)
    }

    /// A person's decision on a tool run a crash left `unknown` (SPEC R13.1): `retry` runs it
    /// again, `skip` gives the model a skipped result. Only while its turn waits for it.
    pub async fn decide_tool_run(
        &self,
        principal: &Principal,
        session: SessionId,
        call_id: &str,
        decision: ToolRunDecision,
    ) -> Result<ToolRun, GatewayError> {
        // Any id of a rotated lineage acts on the lineage (SPEC R6.4).
        let session = self.authorize(principal, session).await?.lineage();
        let not_unknown = || GatewayError::Conflict {
            code: "not_unknown",
            message: format!(
                "tool run {call_id} is not waiting for a decision (it is not unknown, or it \
                 was already decided, or its turn has ended)"
            ),
        };
        let runs = self.deps.store.unknown_tool_runs(session).await?;
        let Some(run) = runs.iter().find(|r| r.call_id == call_id) else {
            return match self
                .deps
                .store
                .tool_run_in_session(session, call_id)
                .await?
            {
                Some(_) => Err(not_unknown()),
                None => Err(GatewayError::NotFound(format!("tool run {call_id}"))),
            };
        };
        let live = match run.admission_id {
            Some(a) => self.deps.store.get_admission(a).await?,
            None => None,
        };
        if !live.is_some_and(|a| a.status == AdmissionStatus::Started) {
            return Err(not_unknown());
        }
        let decided = self
            .deps
            .store
            .decide_tool_run(session, call_id, decision, &principal.id)
            .await
            .map_err(|e| match e {
                StoreError::WrongState(_) => not_unknown(),
                other => other.into(),
            })?;
        self.deps.wakeups.wake(session);
        Ok(decided)
    }

    /// Puts back the files a turn of `session` changed (its checkpoints); refused while a
    /// turn of the session runs, so that a restore never races a tool.
    pub async fn restore_checkpoint(
        &self,
        principal: &Principal,
        session: SessionId,
        turn: TurnId,
    ) -> Result<Vec<String>, GatewayError> {
        // Any id of a rotated lineage acts on the lineage (SPEC R6.4).
        let session = self.authorize(principal, session).await?.lineage();
        let not_found = || GatewayError::NotFound(format!("turn {turn}"));
        let admission = self
            .deps
            .store
            .admission_of_turn(turn)
            .await?
            .filter(|a| a.session_id == session)
            .ok_or_else(not_found)?;
        if self.session_state(admission.session_id).await?.running {
            return Err(GatewayError::Busy(
                "a turn of this session is running; restore when it is idle".into(),
            ));
        }
        let dir = self
            .deps
            .config
            .data_dir
            .join("checkpoints")
            .join(turn.to_string());
        let workspace = self.workspace.clone();
        // File I/O: off the async workers.
        let restored = tokio::task::spawn_blocking(move || {
            turnkey_tools::checkpoint::restore(&dir, &workspace)
        })
        .await
        .map_err(|e| GatewayError::Io(format!("restoring turn {turn}: {e}")))?;
        let restored = match restored {
            Ok(paths) => paths,
            // A turn that changed no file has nothing to put back.
            Err(turnkey_tools::checkpoint::CheckpointError::NotFound(_)) => Vec::new(),
            Err(e) => return Err(GatewayError::Io(format!("restoring turn {turn}: {e}"))),
        };
        tracing::info!(%session, %turn, files = restored.len(), "checkpoint restored");
        Ok(restored
            .into_iter()
            .map(|p| p.display().to_string())
            .collect())
    }

    /// The questions a session waits on: pending approvals and unknown tool runs of a turn
    /// that is still running.
    pub async fn open_questions(
        &self,
        session: SessionId,
    ) -> Result<(Vec<Approval>, Vec<ToolRun>), GatewayError> {
        let approvals = self.deps.store.pending_approvals(session).await?;
        let mut runs = Vec::new();
        for r in self.deps.store.unknown_tool_runs(session).await? {
            if r.decision.is_some() {
                continue;
            }
            let live = match r.admission_id {
                Some(a) => self.deps.store.get_admission(a).await?,
                None => None,
            };
            if live.is_some_and(|a| a.status == AdmissionStatus::Started) {
                runs.push(r);
            }
        }
        Ok((approvals, runs))
    }

    /// Interrupts the running turn of `session`, in this process or on the replica that runs
    /// it (SPEC R13.6). Answers whether a running turn was signalled, and where.
    pub async fn interrupt(
        &self,
        principal: &Principal,
        session: SessionId,
        reason: Option<String>,
    ) -> Result<Interruption, GatewayError> {
        let reason = reason
            .map(|r| limits::text_field("reason", &r, limits::MAX_REASON_CHARS))
            .transpose()?;
        // Any id of a rotated lineage acts on the lineage (SPEC R6.4).
        let session = self.authorize(principal, session).await?.lineage();
        let reason = reason.unwrap_or_else(|| "user_interrupt".into());
        remote_interrupt::interrupt(&self.deps, &self.registry, session, reason).await
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
        // A live lease of a live holder: a dead holder's lease may not have expired yet.
        let running = running_here
            || match self.deps.store.get_lease(session).await? {
                Some(Lease {
                    holder: Some(h),
                    expires_at,
                    ..
                }) => expires_at > now_ms() && !self.deps.instance.is_dead(&h),
                _ => false,
            };
        Ok(SessionState {
            running,
            queue_depth,
        })
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
