//! The gateway's admissions: a door's submission and a chat platform's message are admitted
//! through the admission service (SPEC R1, R2); an `unknown` admission is run again on request.
use super::Gateway;
use crate::error::GatewayError;
use crate::input::{NewSessionRequest, Receipt, Submission};
use crate::platforms::{self, ChatAdmission, ChatMessage};
use turnkey_storage::*;

impl Gateway {
    /// Admits one input durably and returns its receipt; the session's actor drains it.
    pub async fn submit(
        &self,
        principal: &Principal,
        session: SessionId,
        mut submission: Submission,
    ) -> Result<Receipt, GatewayError> {
        if self.deps.shutdown.is_cancelled() {
            return Err(GatewayError::ShuttingDown);
        }
        // Attachments become references to stored files before the payload is normalized
        // and digested (SPEC R2.2): a retried inline file is the same file.
        if !submission.attachments.is_empty() {
            crate::limits::attachment_count(&submission.attachments)?;
            submission.attachments = crate::attachments::normalize(
                &self.deps.store,
                &self.deps.config,
                &self.workspace,
                &principal.id,
                &submission.attachments,
            )
            .await?;
        }
        self.admission
            .submit(principal.clone(), session, submission)
            .await
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
        self.admission.retry_unknown(unknown).await
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
        let mut submission = platforms::chat_submission(msg, None);
        if !msg.files.is_empty() {
            // Fetched only for an allowed sender, once the update is recorded. A file that
            // cannot be fetched becomes a line of the text: the message itself is never lost.
            let fetched = platforms::files::fetch(&self.deps.config, &msg.files).await;
            submission.text = fetched.text_with_notes(&submission.text);
            submission.attachments = fetched.attachments;
        }
        let receipt = self
            .submit(
                &platforms::chat_principal(msg),
                inbound.session_id,
                submission,
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
        let store = &self.deps.store;
        if let Some(bound) = store
            .inbound_if_bound(platform, &msg.external_id, &chat_key)
            .await?
        {
            return Ok(bound);
        }
        // The chat's first message: only now is a session's prompt (with the principal's
        // memory and the skills) prepared.
        let new = self
            .new_session(
                &platforms::chat_principal(msg),
                NewSessionRequest {
                    platform: platform.into(),
                    chat_key: Some(chat_key.clone()),
                    history: Vec::new(),
                    ..Default::default()
                },
            )
            .await?;
        Ok(self
            .deps
            .store
            .inbound_session(platform, &msg.external_id, &chat_key, new)
            .await?)
    }
}
