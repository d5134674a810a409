//! `DELETE /v1/sessions/{id}` (SPEC R13.8): a session goes with its sub-agents' sessions, its
//! transcript, events, outbox rows, background processes and files. A running turn is
//! interrupted first and waited for (bounded); the store refuses the deletion while any turn
//! of them still runs, so a deletion never races a turn's writes.
use super::Gateway;
use crate::error::GatewayError;
use std::time::Duration;
use turnkey_storage::{Deleted, Principal, SessionId, StoreError};

/// How long a deletion waits for interrupted turns to end before it answers 409.
const SETTLE: Duration = Duration::from_secs(15);
const LOOK_EVERY: Duration = Duration::from_millis(100);

impl Gateway {
    pub async fn delete_session(
        &self,
        principal: &Principal,
        session: SessionId,
    ) -> Result<(), GatewayError> {
        // Any id of a rotated lineage deletes the lineage (SPEC R6.4).
        let root = self.authorize(principal, session).await?.lineage();
        // Every sub-agent it ever had, finished ones included.
        let sessions = self.with_subagents(root, false, 1024).await?;
        for s in &sessions {
            crate::remote_interrupt::interrupt(&self.deps, &self.registry, *s, "deleted".into())
                .await?;
            crate::work::process::kill_session(&self.work, *s).await?;
        }
        let deadline = tokio::time::Instant::now() + SETTLE;
        let deleted = loop {
            match self
                .deps
                .store
                .delete_sessions(&sessions, &principal.id)
                .await
            {
                Ok(d) => break d,
                Err(StoreError::WrongState(why)) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%root, %why, "waiting for the session's turns to end");
                    tokio::time::sleep(LOOK_EVERY).await;
                }
                Err(StoreError::WrongState(why)) => {
                    return Err(GatewayError::Busy(format!(
                        "the session cannot be deleted yet: {why}; try again"
                    )))
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.remove_files(&deleted);
        // The rows are gone: a failure here leaves files nothing names (logged), never a
        // half-deleted session.
        match self
            .deps
            .store
            .delete_unreferenced_files(&deleted.files)
            .await
        {
            Ok(n) if n > 0 => tracing::debug!(session = %root, files = n, "attached files deleted"),
            Ok(_) => {}
            Err(e) => tracing::warn!(session = %root, error = %e, "attached files not deleted"),
        }
        tracing::info!(session = %root, sessions = deleted.sessions.len(), "session deleted");
        Ok(())
    }

    /// `root` and, breadth first, the sessions its sub-agents ran in (only those still
    /// running, with `running_only`), at most `max` of them: depth is bounded by
    /// `delegation.max_depth`, so `max` only guards against a corrupt tree.
    pub(super) async fn with_subagents(
        &self,
        root: SessionId,
        running_only: bool,
        max: usize,
    ) -> Result<Vec<SessionId>, GatewayError> {
        let mut all = vec![root];
        let mut at = 0;
        while at < all.len() && all.len() < max {
            for task in self.deps.store.subagent_tasks(all[at]).await? {
                if !running_only || task.status == "running" {
                    all.push(task.child_session_id);
                }
            }
            at += 1;
        }
        Ok(all)
    }

    /// The files kept per turn and per process outside the database. A file that cannot be
    /// removed is logged: the rows are gone, and nothing reads these files without them.
    fn remove_files(&self, deleted: &Deleted) {
        let data = &self.deps.config.data_dir;
        let dirs = deleted
            .turns
            .iter()
            .flat_map(|t| {
                let t = t.to_string();
                [
                    data.join("spill").join(&t),
                    data.join("checkpoints").join(t),
                ]
            })
            .chain(
                deleted
                    .processes
                    .iter()
                    .map(|p| data.join("processes").join(p.to_string())),
            );
        for dir in dirs {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a deleted session's files")
                }
            }
        }
    }
}
