//! A person's say before a call runs (SPEC R9.7, R13.1, R13.2): the decision on a run whose
//! outcome a crash made unknown, or an approval when `tools.approval` asks for one. Both are
//! durable requests; a resumed turn waits on the one it made before the crash.
use super::{NotPersisted, PendingCall, Round};
use crate::config::ApprovalMode;
use crate::wakeups;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use turnkey_storage::*;
use turnkey_tools::Tool;

/// What a call may do once a person had their say.
pub(super) enum Cleared {
    Run,
    /// Answered without running: the outcome and the text the model gets.
    Answer(ToolOutcome, String),
    /// The turn stopped while it waited on a person.
    Stopped,
}

/// Asks whoever must be asked before `call` runs, and waits for the answer.
pub(super) async fn clearance(
    round: &Round,
    call: &PendingCall,
    tool: &dyn Tool,
    args: &Value,
) -> Result<Cleared, NotPersisted> {
    if call.status == ToolRunStatus::Unknown {
        return Ok(match wait_decision(round, call).await? {
            Some(ToolRunDecision::Retry) => Cleared::Run,
            Some(ToolRunDecision::Skip) => Cleared::Answer(
                ToolOutcome::Skipped,
                "skipped by a person: the call may or may not have run before the gateway \
                 stopped, and it was not run again"
                    .into(),
            ),
            None => Cleared::Stopped,
        });
    }
    if !needs_approval(round.inner.config.approval, tool) {
        return Ok(Cleared::Run);
    }
    Ok(match ask_approval(round, call, args).await? {
        Approval::Approved => Cleared::Run,
        Approval::Denied => Cleared::Answer(
            ToolOutcome::Denied,
            "denied: a person refused to let this call run".into(),
        ),
        Approval::TimedOut => Cleared::Answer(
            ToolOutcome::Denied,
            format!(
                "denied: nobody approved this call within {} s",
                round.inner.config.approval_timeout_s
            ),
        ),
        Approval::Stopped => Cleared::Stopped,
    })
}

fn needs_approval(mode: ApprovalMode, tool: &dyn Tool) -> bool {
    match mode {
        ApprovalMode::Off => false,
        ApprovalMode::Dangerous => tool.dangerous(),
        ApprovalMode::Always => true,
    }
}

enum Approval {
    Approved,
    Denied,
    TimedOut,
    Stopped,
}

/// Asks a person (SPEC R9.7, R13.2): a durable request announced by `approval.requested`, then
/// waits for the decision, the expiry, or the turn's stop. A resumed turn waits on the request
/// it made before the crash.
async fn ask_approval(
    round: &Round,
    call: &PendingCall,
    args: &Value,
) -> Result<Approval, NotPersisted> {
    let inner = &round.inner;
    let timeout_ms =
        i64::try_from(inner.config.approval_timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX);
    let request = json!({
        "name": call.name,
        "args": args,
        "reason": approval_reason(inner.config.approval, &call.name),
    });
    let (approval, events) = inner
        .store
        .request_approval(
            &round.batch.fence,
            &round.batch.turn,
            &call.call_id,
            &request,
            now_ms().saturating_add(timeout_ms),
        )
        .await
        .map_err(|e| NotPersisted(e.to_string()))?;
    for ev in events {
        inner.hub.publish(ev);
    }
    // Subscribed before the first read: a decision committed in between still wakes us.
    let mut woken = inner.wakeups.subscribe(round.batch.turn.session_id);
    loop {
        let current = inner
            .store
            .get_approval(approval.id)
            .await
            .map_err(|e| NotPersisted(e.to_string()))?
            .unwrap_or_else(|| approval.clone());
        match current.status {
            ApprovalStatus::Approved => return Ok(Approval::Approved),
            ApprovalStatus::Denied => return Ok(Approval::Denied),
            ApprovalStatus::TimedOut => return Ok(Approval::TimedOut),
            ApprovalStatus::Pending => {}
        }
        let left = current.expires_at - now_ms();
        if left <= 0 {
            let expired = inner
                .store
                .expire_approval(&round.batch.fence, approval.id)
                .await
                .map_err(|e| NotPersisted(e.to_string()))?;
            if let Some((_, events)) = expired {
                for ev in events {
                    inner.hub.publish(ev);
                }
                return Ok(Approval::TimedOut);
            }
            // Decided in the same instant: read it again.
            continue;
        }
        if round.stop.is_cancelled() {
            return Ok(Approval::Stopped);
        }
        let wait = wakeups::SAFETY_NET.min(Duration::from_millis(left.unsigned_abs()));
        tokio::select! {
            _ = wait_on_person(&mut woken, wait, &round.batch.activity) => {}
            _ = round.stop.cancelled() => return Ok(Approval::Stopped),
        }
    }
}

fn approval_reason(mode: ApprovalMode, name: &str) -> String {
    match mode {
        ApprovalMode::Always => format!("tools.approval is \"always\": every call ({name}) waits"),
        _ => format!("{name} can change files, run commands or reach the network"),
    }
}

/// Waits for a person's decision on an `unknown` run (SPEC R13.1). `None` when the turn stops.
async fn wait_decision(
    round: &Round,
    call: &PendingCall,
) -> Result<Option<ToolRunDecision>, NotPersisted> {
    if call.decision.is_some() {
        return Ok(call.decision);
    }
    let inner = &round.inner;
    let mut woken = inner.wakeups.subscribe(round.batch.turn.session_id);
    loop {
        let run = inner
            .store
            .get_tool_run(round.batch.turn.turn_id, &call.call_id)
            .await
            .map_err(|e| NotPersisted(e.to_string()))?;
        if let Some(decision) = run.and_then(|r| r.decision) {
            return Ok(Some(decision));
        }
        tokio::select! {
            _ = wait_on_person(&mut woken, wakeups::SAFETY_NET, &round.batch.activity) => {}
            _ = round.stop.cancelled() => return Ok(None),
        }
    }
}

/// Waits for a wake-up (a decision committed here or announced by another replica's notice)
/// for at most `at_most`. Waiting on a person is a sign of life: the turn's liveness watchdog
/// is told so every second, so it never takes a patient turn for a stuck one.
async fn wait_on_person(
    woken: &mut wakeups::Woken,
    at_most: Duration,
    activity: &Arc<dyn Fn() + Send + Sync>,
) {
    const ALIVE_EVERY: Duration = Duration::from_secs(1);
    let deadline = tokio::time::Instant::now() + at_most;
    loop {
        activity();
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() || woken.wait(left.min(ALIVE_EVERY)).await {
            return;
        }
    }
}
