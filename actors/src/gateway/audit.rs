//! The audit log as the gateway writes it (SPEC R13.8): changes the store does not make in
//! one commit with their entry (memory and skills through the API) are recorded right after
//! they committed. Metadata only: an id, a decision, a name; never a text or an argument.
use super::Gateway;
use crate::error::GatewayError;
use turnkey_storage::{AuditEntry, NewAudit};

impl Gateway {
    /// Records that `principal` did `action` to `target`. The change it records has already
    /// committed, so a failure here is logged loudly rather than reported as the change's.
    pub async fn audit(
        &self,
        principal: &str,
        action: &str,
        target: &str,
        detail: serde_json::Value,
    ) {
        let entry = NewAudit {
            principal: principal.to_owned(),
            action: action.to_owned(),
            target: target.to_owned(),
            detail,
        };
        if let Err(e) = self.deps.store.record_audit(&entry).await {
            tracing::error!(%principal, %action, %target, error = %e, "an audit entry was not written");
        }
    }

    /// `GET /v1/audit` (the operator): entries at or after `since` (ms), oldest first.
    pub async fn audit_entries(
        &self,
        since: i64,
        limit: u64,
    ) -> Result<Vec<AuditEntry>, GatewayError> {
        Ok(self.deps.store.audit_entries(since, limit).await?)
    }
}

/// Uploads no admission names are deleted once they are this old (ms): a day to attach them.
pub const UNATTACHED_FILE_MS: i64 = 24 * 3600 * 1000;
/// The most old files one pass looks at.
const FILES_PER_PASS: u64 = 500;

/// One pass of [`spawn_pruner`].
async fn prune_once(deps: &crate::deps::Deps) {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let before = turnkey_storage::now_ms().saturating_sub(UNATTACHED_FILE_MS);
    let pruned = match deps
        .store
        .files_created_before(before, FILES_PER_PASS)
        .await
    {
        Ok(old) => deps.store.delete_unreferenced_files(&old).await,
        Err(e) => Err(e),
    };
    match pruned {
        Ok(0) => {}
        Ok(n) => tracing::info!(deleted = n, "uploads never attached deleted after a day"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot prune unattached uploads; trying again in an hour")
        }
    }
    let days = i64::from(deps.config.security.audit_retention_days);
    let before = turnkey_storage::now_ms().saturating_sub(days.saturating_mul(DAY_MS));
    match deps.store.prune_audit(before).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(deleted = n, days, "old audit entries deleted"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot prune the audit log; trying again in an hour")
        }
    }
}

/// Deletes audit entries older than `security.audit_retention_days`, and uploads older than a
/// day that no admission names, at start and hourly.
pub(super) fn spawn_pruner(deps: std::sync::Arc<crate::deps::Deps>) {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
    actix::spawn(async move {
        loop {
            // A pass stops where it is when the process begins to stop: its store calls are
            // dropped here, on the runtime, never left to the end of the process.
            tokio::select! {
                _ = deps.shutdown.cancelled() => return,
                () = prune_once(&deps) => {}
            }
            tokio::select! {
                _ = deps.shutdown.cancelled() => return,
                _ = tokio::time::sleep(EVERY) => {}
            }
        }
    });
}
