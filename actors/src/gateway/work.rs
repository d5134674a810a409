//! What a session's work outside its turns looks like from the doors (SPEC R1.5): the tasks it
//! delegated and the background processes it started.
use super::Gateway;
use crate::error::GatewayError;
use turnkey_storage::{BackgroundProcess, Principal, SessionId, SubagentTask};

impl Gateway {
    /// The sub-agents `session` started, oldest first (any id of a rotated lineage).
    pub async fn subagents(
        &self,
        principal: &Principal,
        session: SessionId,
    ) -> Result<Vec<SubagentTask>, GatewayError> {
        let root = self.authorize_lineage(principal, session).await?;
        crate::work::subagent::list(&self.deps, root.id).await
    }

    /// The background processes `session` started, oldest first.
    pub async fn processes(
        &self,
        principal: &Principal,
        session: SessionId,
    ) -> Result<Vec<BackgroundProcess>, GatewayError> {
        let root = self.authorize_lineage(principal, session).await?;
        crate::work::process::list(&self.deps, root.id).await
    }
}
