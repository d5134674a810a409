//! The gateway's session operations: who may act on a session (a stranger's looks like a
//! missing one), creating one (its system prompt built first, SPEC R5.1), a door's keyed
//! session, the lineage root of a rotated one (SPEC R6.4), its live state, the questions it
//! waits on a person for, interrupting its turn, and restoring a turn's checkpoint.
use super::Gateway;
use crate::error::GatewayError;
use crate::input::NewSessionRequest;
use crate::limits;
use crate::remote_interrupt::{self, Interruption};
use crate::session::{SessionState, Status};
use crate::skills::catalog::index;
use crate::turn::prompt;
use turnkey_storage::*;

impl Gateway {
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
        let new = self.new_session(principal, req).await?;
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
        let new = self.new_session(principal, req).await?;
        Ok(self
            .deps
            .store
            .keyed_session(&principal.id, door, &key, new)
            .await?)
    }

    /// A new session row for `principal`, its request checked against the input limits and
    /// its system prompt built (with what the principal's memory holds now).
    pub(crate) async fn new_session(
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
        crate::input::check_history(&req.history)?;
        let remembered = self.remembered(&principal.id).await?;
        let built = prompt::build_for_new_session(&self.deps.config, &req, &remembered)?;
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
            seed: req.history.iter().map(crate::SeedMessage::row).collect(),
        })
    }

    /// What `scope`'s memory holds now, for a new session's prompt; nothing with `[memory]`
    /// off.
    async fn remembered(&self, scope: &str) -> Result<prompt::Remembered, GatewayError> {
        let catalog = &self.deps.skills;
        let skills = if catalog.enabled() {
            index(&catalog.list().await?, catalog.index_chars())
        } else {
            String::new()
        };
        let config = &self.deps.config.memory;
        if !config.enabled {
            return Ok(prompt::Remembered {
                skills,
                ..Default::default()
            });
        }
        // One read for both stores: a platform chat's inbound messages come through here.
        let (memory, profile): (Vec<_>, Vec<_>) = self
            .deps
            .store
            .principal_memory(scope)
            .await?
            .into_iter()
            .partition(|e| e.target == MemoryTarget::Memory);
        let texts = |entries: Vec<MemoryEntry>| entries.into_iter().map(|e| e.text).collect();
        Ok(prompt::Remembered {
            skills,
            memory: texts(memory),
            profile: texts(profile),
            memory_limit: config.memory_chars,
            profile_limit: config.profile_chars,
        })
    }

    /// The model a session's turns use: its own, else the primary provider's.
    pub fn model_in_use(&self, session: &Session) -> Option<String> {
        session.model.clone().or_else(|| {
            let set = self.deps.providers.snapshot();
            set.primary().map(|p| p.model().to_owned())
        })
    }

    /// The models a session can be switched to, in the set's order: each model once by its
    /// name, and `NAME/MODEL` for a later provider of a model already listed
    /// (`GET /v1/models`, `PATCH /v1/sessions/{id}`, `/model`).
    pub fn models(&self) -> Vec<String> {
        self.deps.providers.snapshot().models()
    }

    /// [`Self::models`], each with the name of the provider serving it.
    pub fn served_models(&self) -> Vec<(String, String)> {
        self.deps.providers.snapshot().served()
    }

    /// Switches the lineage of `session` to `model` (`None`: back to the primary provider's)
    /// from its next turn, which starts at preflight on the provider it picks (SPEC R8.4): a
    /// model's name, or `NAME/MODEL` for provider NAME. One that picks no provider is refused
    /// with `invalid_model`.
    pub async fn set_model(
        &self,
        session: &Session,
        model: Option<String>,
    ) -> Result<Session, GatewayError> {
        if let Some(m) = &model {
            let known = self.models();
            if self.deps.providers.snapshot().serving(m).is_none() {
                return Err(GatewayError::InvalidInput {
                    code: "invalid_model",
                    message: if known.is_empty() {
                        format!("no provider is configured, so {m:?} cannot be chosen")
                    } else {
                        format!(
                            "{m:?} is not served here; choose one of {}",
                            known.join(", ")
                        )
                    },
                });
            }
        }
        let lineage = session.lineage();
        let change = SessionUpdate {
            model: Some(model),
            ..Default::default()
        };
        self.deps
            .store
            .update_session(lineage, change)
            .await?
            .ok_or_else(|| GatewayError::NotFound(format!("session {lineage}")))
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
        let done = remote_interrupt::interrupt(&self.deps, &self.registry, session, reason).await?;
        // Its sub-agents stop with it, and report `interrupted` (SPEC R1.5).
        crate::work::subagent::interrupt_children(
            &self.deps,
            &self.registry,
            session,
            "interrupted",
        )
        .await;
        Ok(done)
    }

    /// Cancels one input of `session`: settled `cancelled` if it is still queued, else its
    /// running turn is interrupted (it settles `interrupted`). Answers whether anything was
    /// cancelled or signalled; an input that already ended is left as it is.
    pub async fn cancel_input(
        &self,
        principal: &Principal,
        session: SessionId,
        admission: AdmissionId,
    ) -> Result<bool, GatewayError> {
        let session = self.authorize(principal, session).await?.lineage();
        let store = &self.deps.store;
        if let Some(events) = store
            .cancel_queued_admission(session, admission, "cancelled")
            .await?
        {
            for ev in events {
                self.deps.hub.publish(ev);
            }
            return Ok(true);
        }
        let running = store
            .get_admission(admission)
            .await?
            .is_some_and(|a| a.status == AdmissionStatus::Started);
        if !running {
            return Ok(false);
        }
        // Inputs of a session run one at a time, in order: a started one is the running turn.
        let done = self
            .interrupt(principal, session, Some("cancelled".into()))
            .await?;
        Ok(done.interrupted)
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
        let row = self.authorize(principal, session).await?;
        let session = row.lineage();
        // Its files are in its owner's workspace (`tools.isolation`).
        let (workspace, _) = self
            .deps
            .config
            .tools
            .workspace_of(&self.workspace, &row.owner);
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
}
