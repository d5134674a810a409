//! The gateway's memory and skills API (API.md "Memory and skills"): a principal sees and
//! edits its own memory (someone else's entry is not found); every principal reads the
//! skills, only the operator changes them or decides proposals. A write through here is
//! scanned like the `memory` tool's and recorded as made by the API.
use super::Gateway;
use crate::error::GatewayError;
use crate::memory::{refusal, scan};
use crate::skills::catalog::{Skill, SkillText};
use crate::skills::{document, manage};
use serde_json::json;
use turnkey_storage::*;

/// One of a principal's two stores, as the API shows it.
#[derive(Clone, Debug)]
pub struct StoreView {
    pub entries: Vec<MemoryEntry>,
    pub chars: usize,
    pub limit: usize,
}

fn unprocessable(code: &'static str, message: String) -> GatewayError {
    GatewayError::Unprocessable { code, message }
}

impl Gateway {
    /// `GET /v1/memory`: both of `principal`'s stores.
    pub async fn memory(&self, principal: &Principal) -> Result<[StoreView; 2], GatewayError> {
        let all = self.deps.store.principal_memory(&principal.id).await?;
        let config = &self.deps.config.memory;
        Ok([MemoryTarget::Memory, MemoryTarget::Profile].map(|target| {
            let entries: Vec<MemoryEntry> =
                all.iter().filter(|e| e.target == target).cloned().collect();
            StoreView {
                chars: entries.iter().map(MemoryEntry::chars).sum(),
                entries,
                limit: config.limit(target),
            }
        }))
    }

    /// `POST /v1/memory` and `PATCH /v1/memory/{id}`: scanned, bounded, recorded as the API's.
    pub async fn write_memory(
        &self,
        principal: &Principal,
        target: MemoryTarget,
        edit: MemoryEdit<'_>,
    ) -> Result<MemoryEntry, GatewayError> {
        if let MemoryEdit::Add { text } | MemoryEdit::ReplaceId { text, .. } = edit {
            if text.trim().is_empty() {
                return Err(GatewayError::InvalidInput {
                    code: "empty_input",
                    message: "text is required: a non-empty string".into(),
                });
            }
            scan::check(text).map_err(|r| unprocessable(r.code(), r.to_string()))?;
        }
        let author = Author {
            by: ChangedBy::Api,
            session: None,
        };
        let limit = self.deps.config.memory.limit(target);
        let mut buf = String::new();
        let edit = crate::memory::masked(edit, &self.deps.redactor, &mut buf);
        let written = self
            .deps
            .store
            .edit_memory(&principal.id, target, edit, limit, &author)
            .await?;
        match (refusal(&written, target), written) {
            (_, MemoryWrite::Done { entry, .. }) => {
                let action = match edit {
                    MemoryEdit::Add { .. } => "memory.added",
                    MemoryEdit::ReplaceId { .. } => "memory.replaced",
                    _ => "memory.removed",
                };
                self.audit(
                    &principal.id,
                    action,
                    &entry.id.to_string(),
                    json!({"target": target.as_str()}),
                )
                .await;
                Ok(entry)
            }
            (_, MemoryWrite::NoMatch) => Err(GatewayError::NotFound("memory entry".into())),
            (Some((code, message)), _) => Err(unprocessable(code, message)),
            (None, _) => Err(GatewayError::Io(
                "a memory write ended without an outcome".into(),
            )),
        }
    }

    /// The target of `principal`'s entry `id`; someone else's is not found.
    pub async fn memory_entry_target(
        &self,
        principal: &Principal,
        id: MemoryEntryId,
    ) -> Result<MemoryTarget, GatewayError> {
        self.deps
            .store
            .principal_memory(&principal.id)
            .await?
            .into_iter()
            .find(|e| e.id == id)
            .map(|e| e.target)
            .ok_or_else(|| GatewayError::NotFound("memory entry".into()))
    }

    /// `GET /v1/memory/changes`: `principal`'s changes, newest first.
    pub async fn memory_changes(
        &self,
        principal: &Principal,
        limit: u64,
    ) -> Result<Vec<MemoryChange>, GatewayError> {
        Ok(self.deps.store.memory_changes(&principal.id, limit).await?)
    }

    /// `GET /v1/memory/pending`.
    pub async fn pending_memory(
        &self,
        principal: &Principal,
    ) -> Result<Vec<PendingMemory>, GatewayError> {
        Ok(self.deps.store.pending_memory(&principal.id).await?)
    }

    /// `POST /v1/memory/pending/{id}`: approve (written now, scanned again) or deny. Answers
    /// the status it now has; an approval the store refuses as it is now stays pending (422).
    pub async fn decide_pending_memory(
        &self,
        principal: &Principal,
        id: MemoryPendingId,
        approve: bool,
    ) -> Result<&'static str, GatewayError> {
        let config = self.deps.config.memory.clone();
        let decided = self
            .deps
            .store
            .decide_pending_memory(&principal.id, id, approve, |t| config.limit(t))
            .await?;
        match decided {
            PendingDecided::Applied(MemoryWrite::Done { event, .. }) => {
                if let Some(ev) = event {
                    self.deps.hub.publish(*ev);
                }
                self.audit_pending(principal, id, "approve").await;
                Ok("approved")
            }
            PendingDecided::Applied(_) => {
                self.audit_pending(principal, id, "approve").await;
                Ok("approved")
            }
            PendingDecided::Denied => {
                self.audit_pending(principal, id, "deny").await;
                Ok("denied")
            }
            PendingDecided::Refused(w, target) => {
                let (code, message) = refusal(&w, target)
                    .unwrap_or(("memory_full", "the store refused the write".into()));
                Err(unprocessable(code, message))
            }
            PendingDecided::AlreadyDecided(status) => Err(GatewayError::Conflict {
                code: "already_decided",
                message: format!("this write was {status} already"),
            }),
        }
    }

    async fn audit_pending(&self, principal: &Principal, id: MemoryPendingId, decision: &str) {
        self.audit(
            &principal.id,
            "memory.pending_decided",
            &id.to_string(),
            json!({"decision": decision}),
        )
        .await;
    }

    /// `GET /v1/skills`.
    pub async fn skills(&self) -> Result<Vec<Skill>, GatewayError> {
        Ok(self.deps.skills.list().await?)
    }

    /// `GET /v1/skills/{name}`.
    pub async fn skill(&self, name: &str) -> Result<SkillText, GatewayError> {
        self.deps
            .skills
            .get(name)
            .await?
            .ok_or_else(|| GatewayError::NotFound(format!("skill {name:?}")))
    }

    /// `PUT /v1/skills/{name}` (the operator): a SKILL.md whose front matter names `name`.
    pub async fn put_skill(&self, name: &str, content: &str) -> Result<SkillText, GatewayError> {
        let invalid = |message: String| GatewayError::InvalidInput {
            code: "invalid_skill",
            message,
        };
        document::check_name(name).map_err(invalid)?;
        let doc = document::parse(content).map_err(invalid)?;
        if doc.name != name {
            return Err(invalid(format!(
                "the front matter names {:?}, but the path names {name:?}",
                doc.name
            )));
        }
        if self.deps.skills.is_folder(name).await {
            return Err(folder_conflict(name));
        }
        self.deps
            .store
            .put_skill(name, &doc.description, content)
            .await?;
        self.skill(name).await
    }

    /// `DELETE /v1/skills/{name}` (the operator).
    pub async fn delete_skill(&self, name: &str) -> Result<(), GatewayError> {
        if self.deps.skills.is_folder(name).await {
            return Err(folder_conflict(name));
        }
        if self.deps.store.delete_skill(name).await? {
            Ok(())
        } else {
            Err(GatewayError::NotFound(format!("skill {name:?}")))
        }
    }

    /// `GET /v1/skills/proposals`: those waiting for a decision.
    pub async fn skill_proposals(&self) -> Result<Vec<SkillProposal>, GatewayError> {
        Ok(self.deps.store.pending_skill_proposals().await?)
    }

    /// `POST /v1/skills/proposals/{id}` (the operator): an approval makes the change against
    /// the skills as they are now, in the commit that records the decision.
    pub async fn decide_skill_proposal(
        &self,
        id: SkillProposalId,
        approve: bool,
    ) -> Result<&'static str, GatewayError> {
        let p = self.deps.store.skill_proposal(id).await?;
        if p.status != "pending" {
            return Err(already(&p.status));
        }
        let change = if approve {
            let change = manage::change_of(&self.deps.skills, &p.proposal)
                .await
                .map_err(|e| GatewayError::Conflict {
                    code: e.code(),
                    message: e.to_string(),
                })?;
            Some(change)
        } else {
            None
        };
        match self
            .deps
            .store
            .decide_skill_proposal(id, approve, change.as_ref())
            .await?
        {
            ProposalDecided::Decided => Ok(if approve { "approved" } else { "denied" }),
            ProposalDecided::AlreadyDecided(status) => Err(already(&status)),
        }
    }
}

fn already(status: &str) -> GatewayError {
    GatewayError::Conflict {
        code: "already_decided",
        message: format!("this proposal was {status} already"),
    }
}

fn folder_conflict(name: &str) -> GatewayError {
    GatewayError::Conflict {
        code: "dir_skill",
        message: format!(
            "skill {name:?} is installed as a folder under [skills] dir; change its files instead"
        ),
    }
}
