//! The gateway's answers to the questions a turn waits on a person for: an approval
//! (SPEC R9.7) and the retry-or-skip decision for a tool run a crash left `unknown` (R13.1).
use super::Gateway;
use crate::error::GatewayError;
use turnkey_storage::*;

impl Gateway {
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
        // A sub-agent's approval may be decided through the session that delegated it, whose
        // log relays it (SPEC R1.5).
        let session = match self.deps.store.get_approval(id).await? {
            Some(a)
                if a.session_id != session
                    && self.deps.store.delegating_session(a.session_id).await? == Some(session) =>
            {
                a.session_id
            }
            _ => session,
        };
        let (approval, events) = self
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
        for ev in events {
            self.deps.hub.publish(ev);
        }
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
}
